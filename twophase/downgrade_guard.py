"""The refusal of state written by a newer kit, checked before a query writes anything.

A downgrade must leave such state as it is (``docs/compatibility.md``): the readers of each
persisted format refuse a newer ``format_version`` (``twophase.state_versions``), and this check
reads, before anything is written, the files a restart would read first. It sits above the store
and the statistics, which it both reads, so that neither has to reach for the other.
"""

from __future__ import annotations

from twophase.checkpoint_statistics import STATISTICS_FILE, decode_statistics
from twophase.checkpoint_store import FileCheckpointStore
from twophase.errors import CorruptCheckpointError, CorruptOwnerError, CorruptStatisticsError
from twophase.stored_checkpoints import StoredCheckpoints


def refuse_state_of_a_newer_kit(store: FileCheckpointStore) -> None:
    """Raise NewerStateFormatError if a newer kit wrote this state: the owner record, the newest
    stored checkpoint's ``_metadata`` or its ``_statistics``, or the legacy counter has a format
    version this kit does not read. Only reads; call it before writing anything. Corrupt files
    are left to their readers, which refuse or skip them as they always did."""
    try:
        store.owner()
    except CorruptOwnerError:
        pass  # the owner's readers refuse it
    stored = StoredCheckpoints(store).ids()  # reads the legacy counter too, where one is left
    for checkpoint_id in stored[-1:]:
        try:
            store.load(checkpoint_id)
        except (CorruptCheckpointError, FileNotFoundError):
            pass  # latest() logs it and falls back
    # The newest record carries the running totals the next one adds to.
    for checkpoint_id in sorted(set(stored) & set(store.ids_with_file(STATISTICS_FILE)))[-1:]:
        try:
            decode_statistics(store.read_checkpoint_file(checkpoint_id, STATISTICS_FILE),
                              store.location(checkpoint_id, STATISTICS_FILE))
        except (CorruptStatisticsError, FileNotFoundError):
            pass  # figures: an unreadable record is ignored where it is read
