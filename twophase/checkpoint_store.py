"""The completed-checkpoint store: write-once files in a state directory on any filesystem.

Like Flink's CompletedCheckpointStore it keeps the newest ``retained_checkpoints`` and subsumes
older ones only once a newer one is durable. The directory (a local path or a URI, see
:mod:`twophase.storage.state_storage`) holds:

- ``chk-<id>/_metadata``: the completed checkpoint (versioned, checksummed; :mod:`twophase.checkpoint`);
- ``chk-<id>/_committed``: written once every participant confirmed the commit of checkpoint
  ``id``; recovery re-commits a checkpoint's transactions only when this marker is missing;
- ``chk-<id>/_reserved``: an id this store's coordinator chose itself, taken before anything is
  done under it, so ids are never reused across restarts, even ids of checkpoints that never
  completed (their transactions may still linger on the broker);
- ``chk-<id>/_statistics``: the checkpoint's figures, for monitoring only
  (:mod:`twophase.checkpoint_statistics`);
- ``_owner``: the job the state belongs to (:mod:`twophase.state_owner`).

Every file is created once, with a conditional create, and never rewritten; the newest state is
found by listing. The design doc (design/exactly-once-protocol.md, "State on any filesystem")
argues why a crash between any two of these writes is safe.

A store instance lists the directory on first use and then keeps that listing up to date with its
own writes, the way Flink's store keeps its checkpoints in memory and reads the storage only when
it is created for a recovery; checkpoints it has read or written are kept too (a file written once
never changes). :meth:`refresh` forgets both. Another writer of the same directory is caught by
the conditional creates, not by the listing.
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass, field

from twophase.checkpoint import CompletedCheckpoint, decode, encode
from twophase.errors import (
    CheckpointExistsError,
    CorruptCheckpointError,
    IllegalStateError,
    InvalidValueError,
    StateFileNotFoundError,
)
from twophase.state_owner import OWNER_FILE, StateOwner, decode_owner, encode_owner
from twophase.state_versions import newer_state_error
from twophase.storage.state_storage import StateStorage, open_state_storage

log = logging.getLogger(__name__)

METADATA_FILE = "_metadata"
COMMITTED_MARKER = "_committed"
RESERVED_MARKER = "_reserved"
#: Written by versions before the write-once layout (``{"format_version": 1, "next_checkpoint_id": N}``);
#: read (never written) so their ids go on.
LEGACY_COUNTER_FILE = "_checkpoint_counter"
LEGACY_COUNTER_READABLE_VERSIONS = (1,)
_CHECKPOINT_KEY = re.compile(r"^chk-(\d+)/(.+)$")


def validate_retained(retained_checkpoints: int) -> None:
    if not isinstance(retained_checkpoints, int) or isinstance(retained_checkpoints, bool) \
            or retained_checkpoints < 1:
        raise InvalidValueError(
            f"retained_checkpoints must be an integer >= 1, got {retained_checkpoints!r}"
        )


def ensure_writable_directory(location: str | os.PathLike[str], what: str) -> None:
    """Fail at start, not at the first checkpoint, when ``location`` cannot take our files."""
    try:
        open_state_storage(location).check_writable()
    except ValueError as exc:
        raise InvalidValueError(f"{what}: {exc}") from exc


def checkpoint_folder(checkpoint_id: int) -> str:
    return f"chk-{checkpoint_id}"


@dataclass
class _Listing:
    """What one listing of the directory says, kept up to date with this store's own writes."""

    keys_by_id: dict[int, set[str]] = field(default_factory=dict)
    legacy_next_id: int | None = None

    def ids_with(self, name: str) -> set[int]:
        return {cid for cid, names in self.keys_by_id.items() if name in names}

    def add(self, checkpoint_id: int, name: str) -> None:
        self.keys_by_id.setdefault(checkpoint_id, set()).add(name)


class FileCheckpointStore:
    def __init__(self, directory: str | os.PathLike[str] | StateStorage, retained_checkpoints: int = 3,
                 *, check_writable: bool = True) -> None:
        """``directory``: a path, a URI (``s3://``, ``gs://``, ``abfss://``, ``hdfs://``, ...) or a
        StateStorage. ``check_writable`` probes it now (a create, a second create that must be
        refused, a delete); callers that open the store for every batch probe once instead."""
        validate_retained(retained_checkpoints)
        self.storage = directory if isinstance(directory, StateStorage) else open_state_storage(directory)
        self.directory = self.storage.uri
        self.retained_checkpoints = retained_checkpoints
        self._listing: _Listing | None = None
        self._loaded: dict[int, CompletedCheckpoint] = {}
        if check_writable:
            self.check_writable()

    def __repr__(self) -> str:
        return f"FileCheckpointStore({self.directory!r})"

    def check_writable(self) -> None:
        self.storage.check_writable()

    def refresh(self) -> None:
        """Forget the listing and the checkpoints read; the next call lists the directory again."""
        self._listing = None
        self._loaded.clear()

    def location(self, checkpoint_id: int, name: str = METADATA_FILE) -> str:
        return self.storage.location(f"{checkpoint_folder(checkpoint_id)}/{name}")

    def _scan(self) -> _Listing:
        if self._listing is not None:
            return self._listing
        listing = _Listing()
        legacy_counter = False
        for key in self.storage.list_keys():
            match = _CHECKPOINT_KEY.match(key)
            if match:
                listing.add(int(match.group(1)), match.group(2))
            elif key == LEGACY_COUNTER_FILE:
                legacy_counter = True
        if legacy_counter:
            listing.legacy_next_id = self._read_legacy_counter()
        self._listing = listing
        return listing

    def _read_legacy_counter(self) -> int | None:
        location = self.storage.location(LEGACY_COUNTER_FILE)
        try:
            document = json.loads(self.storage.read(LEGACY_COUNTER_FILE))
            version = document.get("format_version") if isinstance(document, dict) else None
            if isinstance(version, int) and not isinstance(version, bool) \
                    and version > max(LEGACY_COUNTER_READABLE_VERSIONS):
                raise newer_state_error(version, LEGACY_COUNTER_READABLE_VERSIONS, "checkpoint counter", location)
            return int(document["next_checkpoint_id"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning("ignoring unreadable checkpoint counter %s (%s)", location, exc)
            return None

    # -- checkpoint ids --------------------------------------------------------------------------

    def checkpoint_ids(self) -> list[int]:
        """Ids of every stored checkpoint (its ``_metadata`` exists, valid or not), ascending."""
        return sorted(self._scan().ids_with(METADATA_FILE))

    def next_checkpoint_id(self) -> int:
        """One more than any id this store has handed out or holds."""
        listing = self._scan()
        highest = max(listing.keys_by_id, default=0)
        return max(highest + 1, listing.legacy_next_id or 1)

    def reserve_checkpoint_id(self, checkpoint_id: int) -> None:
        """Durably take ``checkpoint_id`` before anything is done under it (ids this store's
        coordinator numbers itself; an engine that numbers its own epochs keeps them itself)."""
        try:
            self.storage.create(f"{checkpoint_folder(checkpoint_id)}/{RESERVED_MARKER}", b"")
        except FileExistsError:
            raise CheckpointExistsError(
                f"checkpoint id {checkpoint_id} was already taken in {self.directory} by another "
                "coordinator of this state directory; only one may run at a time") from None
        self._scan().add(checkpoint_id, RESERVED_MARKER)

    # -- checkpoints -----------------------------------------------------------------------------

    def add(self, checkpoint: CompletedCheckpoint, *, subsume: bool = True) -> str:
        """Store ``checkpoint`` durably, then (``subsume``) delete checkpoints beyond the retained
        count. Returns its location. The commit lifecycle subsumes later, with :meth:`subsume`,
        once the checkpoint's statistics have read the previous record."""
        checkpoint_id = checkpoint.checkpoint_id
        listing = self._scan()
        try:
            self.storage.create(f"{checkpoint_folder(checkpoint_id)}/{METADATA_FILE}", encode(checkpoint))
        except FileExistsError:
            self.refresh()
            raise CheckpointExistsError(
                f"checkpoint {checkpoint_id} is already stored at {self.location(checkpoint_id)}: "
                "another driver of this job (a second one, or a zombie of a crashed one) stored it "
                "first. Its record stays; make sure only one driver runs, then restart") from None
        listing.add(checkpoint_id, METADATA_FILE)
        self._loaded[checkpoint_id] = checkpoint
        log.info("checkpoint %d stored at %s", checkpoint_id, self.location(checkpoint_id))
        if subsume:
            self.subsume(newest=checkpoint_id)
        return self.location(checkpoint_id)

    def load(self, checkpoint_id: int) -> CompletedCheckpoint:
        """Load one checkpoint; raises CorruptCheckpointError or FileNotFoundError."""
        if checkpoint_id in self._loaded:
            return self._loaded[checkpoint_id]
        checkpoint = decode(self.storage.read(f"{checkpoint_folder(checkpoint_id)}/{METADATA_FILE}"),
                            self.location(checkpoint_id))
        if checkpoint.checkpoint_id != checkpoint_id:
            raise CorruptCheckpointError(
                f"{self.location(checkpoint_id)} holds checkpoint {checkpoint.checkpoint_id}, not {checkpoint_id}"
            )
        self._loaded[checkpoint_id] = checkpoint
        return checkpoint

    def latest(self) -> CompletedCheckpoint | None:
        """The newest valid checkpoint. Corrupt or vanished ones are logged and skipped; one of a
        newer format version raises NewerStateFormatError (it is the newest decision, which an
        older checkpoint must not replace)."""
        for checkpoint_id in reversed(self.checkpoint_ids()):
            try:
                return self.load(checkpoint_id)
            except FileNotFoundError:
                log.warning("checkpoint %s was listed but is gone (deleted meanwhile); skipping it",
                            self.location(checkpoint_id))
            except (CorruptCheckpointError, OSError) as exc:
                log.error("checkpoint metadata %s is unreadable (%s); falling back to an older one",
                          self.location(checkpoint_id), exc)
        return None

    # -- commit markers --------------------------------------------------------------------------

    def mark_committed(self, checkpoint_id: int) -> None:
        listing = self._scan()
        if checkpoint_id not in listing.ids_with(METADATA_FILE):
            raise StateFileNotFoundError(f"checkpoint {checkpoint_id} is not stored in {self.directory}")
        if checkpoint_id in listing.ids_with(COMMITTED_MARKER):
            return
        try:
            self.storage.create(f"{checkpoint_folder(checkpoint_id)}/{COMMITTED_MARKER}", b"")
        except FileExistsError:
            pass  # marked by a restore racing this commit: the same fact, written once
        listing.add(checkpoint_id, COMMITTED_MARKER)

    def is_committed(self, checkpoint_id: int) -> bool:
        return checkpoint_id in self._scan().ids_with(COMMITTED_MARKER)

    # -- other files of a checkpoint ---------------------------------------------------------------

    def ids_with_file(self, name: str) -> list[int]:
        """Ids whose folder holds ``name`` (as listed, plus this store's own writes), ascending."""
        return sorted(self._scan().ids_with(name))

    def add_checkpoint_file(self, checkpoint_id: int, name: str, data: bytes) -> None:
        """Create ``chk-<id>/<name>`` once (FileExistsError if it exists). It is subsumed with the
        checkpoint; it must never be one the store itself writes."""
        if name in (METADATA_FILE, COMMITTED_MARKER, RESERVED_MARKER):
            raise InvalidValueError(f"{name} is written by the checkpoint store itself")
        self.storage.create(f"{checkpoint_folder(checkpoint_id)}/{name}", data)
        self._scan().add(checkpoint_id, name)

    def read_checkpoint_file(self, checkpoint_id: int, name: str) -> bytes:
        return self.storage.read(f"{checkpoint_folder(checkpoint_id)}/{name}")

    # -- owner -----------------------------------------------------------------------------------

    def owner(self) -> StateOwner | None:
        """The recorded owner, or None if no job claimed the directory yet."""
        try:
            return decode_owner(self.storage.read(OWNER_FILE), self.storage.location(OWNER_FILE))
        except FileNotFoundError:
            return None

    def claim_owner(self, owner: StateOwner) -> StateOwner:
        """Record ``owner`` unless someone is recorded already; return whoever is recorded (the
        caller compares). Two jobs claiming at once: exactly one is recorded."""
        try:
            self.storage.create(OWNER_FILE, encode_owner(owner))
            log.info("state directory %s now belongs to %s", self.directory, owner.describe())
            return owner
        except FileExistsError:
            recorded = self.owner()
            if recorded is None:  # deleted between our create and our read: someone is cleaning up
                raise IllegalStateError(f"the owner record {self.storage.location(OWNER_FILE)} vanished "
                                        "while it was being claimed") from None
            return recorded

    def is_empty(self) -> bool:
        """No checkpoint was ever stored here (no ``chk-*`` file at all, legacy counter included)."""
        listing = self._scan()
        return not listing.keys_by_id and listing.legacy_next_id is None

    # -- retention -------------------------------------------------------------------------------

    def subsume(self, newest: int) -> None:
        """Delete every checkpoint older than ``newest`` beyond the newest ``retained`` stored ones,
        and leftovers of ids older than ``newest`` (reservations of checkpoints that never
        completed). Each stored ``_metadata`` was created whole and never rewritten, so the
        listing alone tells which are stored; nothing is read."""
        listing = self._scan()
        keep = set(sorted(listing.ids_with(METADATA_FILE))[-self.retained_checkpoints:])
        doomed = sorted(cid for cid in listing.keys_by_id if cid < newest and cid not in keep)
        if not doomed:
            return
        # _metadata first: a crash part-way leaves markers of a checkpoint that no longer counts.
        keys = [f"{checkpoint_folder(cid)}/{name}" for cid in doomed
                for name in sorted(listing.keys_by_id[cid], key=lambda n: n != METADATA_FILE)]
        self.storage.delete(keys)
        for checkpoint_id in doomed:
            del listing.keys_by_id[checkpoint_id]
            self._loaded.pop(checkpoint_id, None)
        log.info("checkpoints %s subsumed by %d", doomed, newest)
