"""What the checkpoint store holds, read-only: the view the commit lifecycle
(``twophase/lifecycle.py``) judges the store through, and the one it hands to those that only look
(the state and downgrade guards, the statistics).

The store's reads that make up a decision (which checkpoints are stored, the newest readable one,
whether it is confirmed committed) happen here and nowhere else; what they mean (commit, replay,
abort) is the lifecycle's to say. Nothing here writes.
"""

from __future__ import annotations

from twophase.checkpoint import CompletedCheckpoint
from twophase.checkpoint_store import FileCheckpointStore


class StoredCheckpoints:
    """A read-only view of ``store``: every call reads the store's current listing."""

    def __init__(self, store: FileCheckpointStore) -> None:
        self._store = store

    def ids(self) -> list[int]:
        """Ids of every stored checkpoint (its ``_metadata`` exists, readable or not), ascending.
        Reads the legacy counter too, where one is left (a newer kit's refuses)."""
        return self._store.checkpoint_ids()

    def is_listed(self, checkpoint_id: int) -> bool:
        """Whether ``checkpoint_id`` is stored (listed, readable or not): once it is, its
        transactions are committed, never aborted."""
        return checkpoint_id in self._store.checkpoint_ids()

    def newest_listed_id(self) -> int | None:
        """The newest listed checkpoint id, readable or not (None: nothing stored): what a guard
        compares an engine's own log against. :meth:`newest_readable` may be older."""
        ids = self._store.checkpoint_ids()
        return ids[-1] if ids else None

    def newest_readable(self) -> tuple[CompletedCheckpoint | None, bool]:
        """The newest checkpoint that can be read (None: none) and whether the store confirms its
        commit. Corrupt or vanished newer ones are logged and skipped by the store."""
        newest = self._store.latest()
        return newest, newest is not None and self._store.is_committed(newest.checkpoint_id)

    def is_committed(self, checkpoint_id: int) -> bool:
        """Whether the store confirms the commit of ``checkpoint_id``."""
        return self._store.is_committed(checkpoint_id)
