"""Keeps the exactly-once sink's state from being lost, or taken for another query's.

Checked on the driver before any task of a query writes (``streamWriter()``/``writer()``):

- **Ownership.** The state directory is bound, at first use, to whoever writes through it (an
  ``_owner`` record, created once with a conditional create): a streaming query by Spark's query
  id, the foreachBatch helper by the id of the query it runs in, plain ``df.write`` batch writes as
  "batch writes" (they have no query id). Another owner is refused with
  :class:`ForeignStateError`: batch 7 of one query is not batch 7 of another, and treating it so
  would skip batches as "already committed".
- **Lost state.** Spark runs batch N only after its commit log holds N-1, and the sink stores
  checkpoint N before Spark logs N. So a commit log newer than every stored checkpoint means the
  state is not the one the query ran with (a local ``eos.stateDir`` on a driver that moved to
  another machine, a deleted folder): replaying from it would write batches again.
  :class:`LostStateError` names the expected location. ``eos.adoptExistingQuery=true`` lets a
  query that committed batches with another sink start an empty state (recorded in ``_owner``).
- **Newer state.** State written by a newer kit (a downgrade: a format version this kit does not
  read) is refused with :class:`NewerStateFormatError` in one line, before anything is written
  beside it (``twophase/state_versions.py``).

A Python worker checks each (state directory, owner) once; later batches in the same worker only
read the query id.
"""

from __future__ import annotations

import logging
import threading
import time

from connectors.spark.batch_context import BatchContext
from connectors.spark.spark_errors import ForeignStateError, LostStateError
from connectors.spark.options import SinkOptions
from connectors.spark.query_checkpoint import COMMIT_LOG, read_query_checkpoint
from connectors.kafka.sink.committable import COMMITTABLE_VERSION
from twophase.checkpoint_store import FileCheckpointStore
from twophase.downgrade_guard import refuse_state_of_a_newer_kit
from twophase.state_owner import StateOwner
from twophase.state_versions import newer_state_error
from twophase.errors import CorruptCheckpointError, InvalidValueError
from twophase.stored_checkpoints import StoredCheckpoints

log = logging.getLogger(__name__)

STREAMING_QUERY = "spark-streaming-query"
BATCH_WRITES = "spark-batch-writes"
ADOPT_OPTION = "eos.adoptExistingQuery"

_verified: set[tuple[str, str, str | None]] = set()
_verified_lock = threading.Lock()


def guard_sink_state(options: SinkOptions, context: BatchContext | None = None) -> None:
    """Bind ``options.state_dir`` to this writer's owner and refuse lost state (see module doc).
    ``context``: the batch the foreachBatch helper is about to write (its query and batch id)."""
    description = ""
    last_committed: int | None = None
    if options.streaming:
        if options.checkpoint_location is None:
            raise InvalidValueError("a streaming kafka-eos sink always has a checkpointLocation (parse_sink_options)")
        checkpoint = read_query_checkpoint(options.checkpoint_location)
        owner_key = (options.state_dir, STREAMING_QUERY, checkpoint.query_id)
        description = f"checkpointLocation {checkpoint.location}"
        if _is_verified(owner_key):
            return
        last_committed = checkpoint.last_committed_batch()
        committed_where = f"Spark's commit log {checkpoint.location}/{COMMIT_LOG}"
    elif context is not None and context.query_id is not None:
        # The foreachBatch helper: Spark calls it for batch N only once N-1 is in its commit log.
        owner_key = (options.state_dir, STREAMING_QUERY, context.query_id)
        if _is_verified(owner_key):
            return
        description = "foreachBatch"
        batch = context.checkpoint_id
        last_committed = batch - 1 if batch > 0 else None
        committed_where = f"Spark, which runs batch {batch} only after committing batch {batch - 1}"
    else:
        owner_key = (options.state_dir, BATCH_WRITES, None)
        if _is_verified(owner_key):
            return
        committed_where = ""
    kind, owner_id = owner_key[1], owner_key[2]
    store = FileCheckpointStore(options.state_dir, options.retained_checkpoints, check_writable=False)
    wanted = StateOwner(kind=kind, owner_id=owner_id, description=description, created_ms=int(time.time() * 1000))
    # Before anything is written (the probe, the owner record): a newer kit's state is refused as it is.
    check_state_readable(store)
    store.check_writable()
    _bind(store, wanted, last_committed, committed_where, options.adopt_existing_query)
    with _verified_lock:
        _verified.add(owner_key)


def check_state_readable(store: FileCheckpointStore) -> None:
    """Raise NewerStateFormatError (one line: the file, its version, the versions this kit reads,
    upgrade) when a newer kit wrote the state: its owner record, newest checkpoint, statistics or
    legacy counter (``twophase.downgrade_guard``), or a Kafka transaction handle of the
    newest checkpoint (its ``v``). Only reads."""
    refuse_state_of_a_newer_kit(store)
    newest = StoredCheckpoints(store).newest_listed_id()
    for checkpoint_id in () if newest is None else (newest,):
        try:
            checkpoint = store.load(checkpoint_id)
        except (CorruptCheckpointError, FileNotFoundError):
            continue
        for state in checkpoint.operator_states.values():
            for handle in state if isinstance(state, list) else ():
                version = handle.get("v") if isinstance(handle, dict) else None
                if isinstance(version, int) and not isinstance(version, bool) and version > COMMITTABLE_VERSION:
                    raise newer_state_error(version, (COMMITTABLE_VERSION,), "Kafka transaction handle",
                                            store.location(checkpoint_id))


def _is_verified(owner_key: tuple[str, str, str | None]) -> bool:
    with _verified_lock:
        return owner_key in _verified


def _refuse_foreign(store: FileCheckpointStore, recorded: StateOwner, wanted: StateOwner) -> ForeignStateError:
    return ForeignStateError(
        f"kafka-eos: the state at {store.directory} belongs to {recorded.describe()}, not to "
        f"{wanted.describe()}. Its checkpoint ids mean nothing to this writer, so it is refused (using "
        "it would skip batches as already committed). If the query's checkpoint was reset (deleted, "
        "or a new checkpointLocation), give the sink a fresh state location: set eos.stateDir to a new "
        "folder, or leave it unset so the state lives inside checkpointLocation; delete the old state "
        "only once its newest checkpoint is committed. If two queries share one state location, give "
        "each its own eos.stateDir.")


def _bind(store: FileCheckpointStore, wanted: StateOwner, last_committed: int | None, committed_where: str,
          adopt: bool) -> None:
    recorded = store.owner()
    if recorded is not None and not recorded.same_owner_as(wanted):
        raise _refuse_foreign(store, recorded, wanted)
    newest = StoredCheckpoints(store).newest_listed_id()
    covered_by = [] if newest is None else [newest]
    if recorded is not None and recorded.adopted_through is not None:
        covered_by.append(recorded.adopted_through)
    covered = max(covered_by, default=None)
    if last_committed is not None and (covered is None or last_committed > covered):
        if adopt and recorded is None and store.is_empty():
            wanted = StateOwner(wanted.kind, wanted.owner_id, wanted.description,
                                adopted_through=last_committed, created_ms=wanted.created_ms)
            log.warning("%s=true: %s committed batches up to %d before using the kafka-eos state at %s; "
                        "starting that state now", ADOPT_OPTION, wanted.describe(), last_committed, store.directory)
        else:
            held = f"holds checkpoints only up to {covered}" if covered is not None else "is empty"
            raise LostStateError(
                f"kafka-eos: lost state. {wanted.describe()} has committed batches up to {last_committed} "
                f"({committed_where}), but the sink's state at {store.directory} {held}. Going on would "
                "write those batches' output again (duplicates), so the query stops. Point the sink at "
                "the state the query ran with: eos.stateDir (or, unset, <checkpointLocation>/kafka-eos) "
                "must be on storage every driver machine reaches (S3, ABFS, GCS, HDFS, DBFS), not a local "
                f"disk. Only if this query never wrote through kafka-eos before, set {ADOPT_OPTION}=true "
                "for its first run.")
    elif adopt and recorded is not None:
        log.warning("%s=true is set, but the state at %s is already in use by %s; remove the option: while "
                    "it is set, a lost (empty) state of this query cannot be told from a new one",
                    ADOPT_OPTION, store.directory, recorded.describe())
    if recorded is None:
        claimed = store.claim_owner(wanted)
        if not claimed.same_owner_as(wanted):  # another writer claimed it first
            raise _refuse_foreign(store, claimed, wanted)
