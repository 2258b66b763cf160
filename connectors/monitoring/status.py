"""``kafka-eos status``: an exactly-once query as an operator needs it, from its files and the broker.

It reads three things, none of which needs the query to run:

- Spark's checkpoint folder: the query id (``metadata``), the last committed batch (``commits/``)
  and the source offsets of that batch (``offsets/<batch>``);
- the sink's state (``<checkpointLocation>/kafka-eos`` or ``eos.stateDir``): the newest checkpoint,
  whether its commit was confirmed, and the statistics kept with each retained checkpoint
  (:mod:`twophase.checkpoint_statistics`), which also record the sink's transactional id prefix
  and transaction timeout;
- the broker: the sink's open transactions (ListTransactions + DescribeTransactions) and the end
  offsets of the source partitions.

:func:`attention_reasons` turns that into the reasons an operator must look, one line each: a
pending checkpoint older than the restart budget, a transaction open longer than half its
timeout, lost transactions among the retained checkpoints (all of a checkpoint's, with their
records, and the source offsets its input began and ended at: a restart cannot bring them back).
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

from connectors.kafka.clients import KafkaClients, OpenTransaction, TopicPartition
from connectors.kafka.sink.committable import KafkaCommittable
from connectors.kafka.sink.config import DEFAULT_RESTART_BUDGET_MS, DEFAULT_TRANSACTION_TIMEOUT_MS
from connectors.kafka.source import from_offsets, to_offsets
from connectors.kafka.sink.internal.transactional_ids import TransactionalIdPool
from connectors.spark.spark_errors import QueryCheckpointError
from connectors.spark.options import state_dir_under
from connectors.kafka.sink.statistics import KafkaSinkSettings
from connectors.spark.sink_driver import SINK_PARTICIPANT
from connectors.spark.query_checkpoint import OFFSET_LOG, read_query_checkpoint
from connectors.monitoring.monitoring_errors import StatusUnavailableError
from twophase.checkpoint import wall_clock_ms
from twophase.checkpoint_statistics import CheckpointStatistics, retained_statistics
from twophase.checkpoint_store import FileCheckpointStore
from twophase.errors import CorruptCheckpointError, UnsupportedStateLocationError
from twophase.storage.state_storage import canonical_location, open_state_storage

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PendingCheckpoint:
    id: int
    stored_at_ms: int
    age_ms: int


@dataclass(frozen=True)
class OpenTransactionStatus:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    age_ms: int
    timeout_ms: int
    partitions: list[str]


@dataclass(frozen=True)
class PartitionLag:
    topic: str
    partition: int
    committed_offset: int
    end_offset: int

    @property
    def lag(self) -> int:
        return max(0, self.end_offset - self.committed_offset)


@dataclass(frozen=True)
class LostInput:
    """The input of a checkpoint whose transactions were lost, from Spark's offset log: what must be
    read again to re-produce their records. Offsets are Spark's ``startingOffsets`` JSON."""

    checkpoint_id: int
    #: Where the batch began (offsets of batch N-1); None for batch 0, which began at the
    #: query's startingOffsets, or when that entry is gone.
    from_offsets: dict[str, dict[str, int]] | None
    #: Where it ended (offsets of batch N); None when Spark's entry is gone.
    to_offsets: dict[str, dict[str, int]] | None


@dataclass
class QueryStatus:
    checkpoint_location: str
    state_dir: str
    query_id: str
    observed_at_ms: int
    last_committed_batch: int | None
    latest_checkpoint_id: int | None = None
    latest_checkpoint_stored_at_ms: int | None = None
    latest_checkpoint_committed: bool | None = None
    pending: PendingCheckpoint | None = None
    transactional_id_prefix: str | None = None
    transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS
    restart_budget_ms: int = DEFAULT_RESTART_BUDGET_MS
    #: Where prefix and timeouts came from: "statistics", "checkpoint" or "defaults".
    settings_from: str = "defaults"
    open_transactions: list[OpenTransactionStatus] = field(default_factory=list)
    lag: list[PartitionLag] = field(default_factory=list)
    history: list[CheckpointStatistics] = field(default_factory=list)
    #: The input of each retained checkpoint that lost transactions, by checkpoint id.
    lost_inputs: dict[int, LostInput] = field(default_factory=dict)

    @property
    def lost_checkpoints(self) -> list[CheckpointStatistics]:
        return [s for s in self.history if s.lost]

    @property
    def newest_statistics(self) -> CheckpointStatistics | None:
        return self.history[-1] if self.history else None

    def to_json(self) -> dict[str, Any]:
        return {
            "query_id": self.query_id,
            "checkpoint_location": self.checkpoint_location,
            "state_dir": self.state_dir,
            "observed_at_ms": self.observed_at_ms,
            "last_committed_batch": self.last_committed_batch,
            "latest_checkpoint": None if self.latest_checkpoint_id is None else {
                "id": self.latest_checkpoint_id, "stored_at_ms": self.latest_checkpoint_stored_at_ms,
                "committed": self.latest_checkpoint_committed},
            "pending_checkpoint": None if self.pending is None else {
                "id": self.pending.id, "stored_at_ms": self.pending.stored_at_ms, "age_ms": self.pending.age_ms},
            "sink": {"transactional_id_prefix": self.transactional_id_prefix,
                     "transaction_timeout_ms": self.transaction_timeout_ms,
                     "restart_budget_ms": self.restart_budget_ms, "settings_from": self.settings_from},
            "open_transactions": [asdict(t) for t in self.open_transactions],
            "lag": [{"topic": p.topic, "partition": p.partition, "committed_offset": p.committed_offset,
                     "end_offset": p.end_offset, "lag": p.lag} for p in self.lag],
            "totals": asdict(self.newest_statistics.totals) if self.newest_statistics else None,
            "history": [_history_entry(s, self.lost_inputs.get(s.checkpoint_id)) for s in self.history],
            "attention": attention_reasons(self),
        }


def _history_entry(stats: CheckpointStatistics, lost_input: LostInput | None = None) -> dict[str, Any]:
    entry = {
        "id": stats.checkpoint_id, "written_at_ms": stats.written_at_ms, "outcome": stats.outcome.value,
        "records": stats.records, "transactions": stats.transactions,
        "commit_ms": None if stats.timings is None else round(stats.timings.total_ms, 1),
        "commit_parts_ms": None if stats.timings is None else {
            "prepare": round(stats.timings.prepare_ms, 1), "store": round(stats.timings.store_ms, 1),
            "end_txn": round(stats.timings.commit_ms, 1), "mark": round(stats.timings.mark_ms, 1),
            "sweep": round(stats.timings.sweep_ms, 1)},
        "oldest_transaction_age_ms": stats.oldest_transaction_age_ms,
        "lingering_aborted": list(stats.lingering_aborted),
        "lost_transactions": list(stats.lost_transactions),
        "lost_records": stats.lost_records,
        "lost": [asdict(t) for t in stats.lost],
    }
    if lost_input is not None:
        entry["lost_input"] = {"from_offsets": lost_input.from_offsets, "to_offsets": lost_input.to_offsets}
    return entry


def attention_reasons(status: QueryStatus) -> list[str]:
    """Why the query needs attention, one line each; empty when it is healthy."""
    reasons = []
    lost_ids = {s.checkpoint_id for s in status.lost_checkpoints}
    # A pending checkpoint that lost transactions is not waiting for a restart: the restart
    # commits it again and fails the same way. Its own reason below says what to do.
    if (status.pending is not None and status.pending.id not in lost_ids
            and status.pending.age_ms > status.restart_budget_ms):
        reasons.append(
            f"checkpoint {status.pending.id} was stored {status.pending.age_ms / 1000:.0f} s ago and its commit "
            f"is not confirmed (more than the restart budget of {status.restart_budget_ms / 1000:.0f} s): "
            "restart the query so that it commits it, before its transactions reach their timeout of "
            f"{status.transaction_timeout_ms / 1000:.0f} s")
    for txn in status.open_transactions:
        if txn.age_ms > txn.timeout_ms / 2:
            reasons.append(
                f"transaction {txn.transactional_id} has been open {txn.age_ms / 1000:.0f} s, more than half of "
                f"its timeout of {txn.timeout_ms / 1000:.0f} s; read_committed consumers of "
                f"{', '.join(txn.partitions) or 'its partitions'} are stalled behind it")
    for stats in status.lost_checkpoints:
        reasons.append(lost_reason(stats, status.lost_inputs.get(stats.checkpoint_id), status.transaction_timeout_ms))
    return reasons


def lost_reason(stats: CheckpointStatistics, lost_input: LostInput | None, transaction_timeout_ms: int) -> str:
    """One line: every lost transaction of the checkpoint with its records, why a restart cannot
    help, and what the kit offers instead."""
    count, records = len(stats.lost), stats.lost_records
    unknown = sum(1 for t in stats.lost if t.records is None)
    listed = ", ".join(t.transactional_id + ("" if t.records is None else f" ({t.records:,} records)")
                       for t in stats.lost)
    n = stats.checkpoint_id
    total = f"{records:,} records" + (f" (and the records of {unknown} recorded without a count)" if unknown else "")
    if lost_input is not None and lost_input.from_offsets is not None:
        rewind = (f"rewind the query to where batch {n} began: start it on a new checkpointLocation (and a "
                  f"fresh eos.stateDir, if set) with startingOffsets={json.dumps(lost_input.from_offsets)} "
                  f"(Spark's offset log, batch {n - 1})")
    else:
        rewind = (f"rewind the query to where batch {n} began: start it on a new checkpointLocation (and a "
                  "fresh eos.stateDir, if set) with startingOffsets set to "
                  + ("the offsets the query first started at (Spark's offset log holds where batches end, "
                     "not where batch 0 began)" if n == 0 else f"the offsets of Spark's offset log entry {n - 1}"))
    if lost_input is not None and lost_input.to_offsets is not None:
        rewind += f"; batch {n} read up to {json.dumps(lost_input.to_offsets)}"
    committed = stats.transactions - count
    partial = (f" ({committed} other transaction{'s' if committed != 1 else ''} of checkpoint {n} did commit: a "
               "rewind writes their records again, so replay only the lost ones' records then)"
               if committed > 0 else "")
    return (f"checkpoint {n} lost {count} transaction{'s' if count != 1 else ''} with {total}, aborted by the "
            f"broker before commit: {listed}. A restart cannot recover a lost transaction (it commits checkpoint "
            f"{n} again and fails the same way). Re-produce the records from the source: {rewind}, or replay them "
            f"by hand{partial}; then keep commits and restarts within the transaction timeout of "
            f"{transaction_timeout_ms / 1000:.0f} s, or raise eos.transactionTimeoutMs (at most the brokers' "
            "transaction.max.timeout.ms)")


def state_dir_for(checkpoint_location: str, state_dir: str | None) -> str:
    """The sink's state as the sink locates it: ``eos.stateDir`` or ``<checkpointLocation>/kafka-eos``."""
    try:
        if state_dir:
            return canonical_location(state_dir)
        location = canonical_location(checkpoint_location)
    except UnsupportedStateLocationError as exc:
        raise StatusUnavailableError(str(exc)) from None
    return state_dir_under(location)


def committed_source_offsets(checkpoint_location: str, batch_id: int) -> dict[TopicPartition, int]:
    """The source offsets Spark recorded for ``batch_id`` (``offsets/<batch>``): where the query
    resumes once that batch is committed. Lines of other sources' formats are skipped."""
    storage = open_state_storage(checkpoint_location, read_only=True)
    try:
        lines = storage.read(f"{OFFSET_LOG}/{batch_id}").decode("utf-8").splitlines()
    except FileNotFoundError:
        raise StatusUnavailableError(
            f"Spark's offset log has no entry {storage.location(f'{OFFSET_LOG}/{batch_id}')} for committed "
            f"batch {batch_id}") from None
    offsets: dict[TopicPartition, int] = {}
    for line in lines[2:]:  # "v1", the batch's metadata, then one line per source
        try:
            offsets.update(from_offsets(json.loads(line)))
        except (ValueError, TypeError, AttributeError):
            continue  # "-" (no offset) or another source's format
    return offsets


def _settings(status: QueryStatus, store: FileCheckpointStore) -> None:
    """The sink's prefix and timeouts: recorded with the statistics, or else read off the
    transactional ids of the newest checkpoint (the first batch's statistics may be missing)."""
    recorded = (KafkaSinkSettings.of_record(s) for s in reversed(status.history))
    newest = next((settings for settings in recorded if settings.transactional_id_prefix), None)
    if newest is not None:
        status.transactional_id_prefix = newest.transactional_id_prefix
        if newest.transaction_timeout_ms is not None:
            status.transaction_timeout_ms = newest.transaction_timeout_ms
        if newest.restart_budget_ms is not None:  # 0 is a budget too
            status.restart_budget_ms = newest.restart_budget_ms
        status.settings_from = "statistics"
        return
    latest = store.latest()
    for raw in (latest.state_of(SINK_PARTICIPANT) or []) if latest else []:
        committable = KafkaCommittable.from_json(raw)
        prefix = TransactionalIdPool.prefix_of(committable.transactional_id or "")
        if prefix is not None:
            status.transactional_id_prefix = prefix
            status.transaction_timeout_ms = committable.transaction_timeout_ms
            status.settings_from = "checkpoint"
            return


def read_status(checkpoint_location: str, clients: KafkaClients | None, *, state_dir: str | None = None,
                now_ms: int | None = None) -> QueryStatus:
    """Everything ``status`` reports. ``clients`` None: files only (no open transactions, no lag)."""
    try:
        query = read_query_checkpoint(checkpoint_location)
        last_batch = query.last_committed_batch()
    except (QueryCheckpointError, OSError) as exc:
        raise StatusUnavailableError(f"cannot read the query's checkpoint {checkpoint_location}: {exc}") from exc
    directory = state_dir_for(checkpoint_location, state_dir)
    now = wall_clock_ms() if now_ms is None else now_ms
    status = QueryStatus(checkpoint_location=checkpoint_location, state_dir=directory, query_id=query.query_id,
                         observed_at_ms=now, last_committed_batch=last_batch)
    try:
        store = FileCheckpointStore(open_state_storage(directory, read_only=True), check_writable=False)
        if store.is_empty() and last_batch is not None:
            raise StatusUnavailableError(
                f"the sink's state {directory} holds no checkpoint although Spark committed batch {last_batch}: "
                "pass --state-dir when the sink sets eos.stateDir")
        latest = store.latest()
        if latest is None and store.checkpoint_ids():
            raise StatusUnavailableError(f"no checkpoint in {directory} is readable (see the log)")
        status.history = retained_statistics(store)
        _settings(status, store)
        status.lost_inputs = {s.checkpoint_id: _lost_input(checkpoint_location, s.checkpoint_id)
                              for s in status.lost_checkpoints}
    except (OSError, CorruptCheckpointError) as exc:
        raise StatusUnavailableError(f"cannot read the sink's state {directory}: {exc}") from exc
    if latest is not None:
        committed = store.is_committed(latest.checkpoint_id)
        status.latest_checkpoint_id = latest.checkpoint_id
        status.latest_checkpoint_stored_at_ms = latest.completion_timestamp_ms
        status.latest_checkpoint_committed = committed
        if not committed:
            status.pending = PendingCheckpoint(latest.checkpoint_id, latest.completion_timestamp_ms,
                                               max(0, now - latest.completion_timestamp_ms))
    if clients is not None:
        if status.transactional_id_prefix is not None:
            status.open_transactions = _open_transactions(clients, status.transactional_id_prefix, now)
        if last_batch is not None:
            status.lag = _lag(clients, committed_source_offsets(checkpoint_location, last_batch))
    return status


def _lost_input(checkpoint_location: str, batch_id: int) -> LostInput:
    """Where lost batch ``batch_id``'s input began and ended, from Spark's offset log; an entry
    that is gone (Spark keeps a bounded number) is None."""
    def offsets_of(batch: int) -> dict[str, dict[str, int]] | None:
        if batch < 0:
            return None
        try:
            return to_offsets(committed_source_offsets(checkpoint_location, batch)) or None
        except (StatusUnavailableError, OSError) as exc:
            log.info("batch %d: its source offsets are not in Spark's offset log (%s)", batch, exc)
            return None

    return LostInput(batch_id, offsets_of(batch_id - 1), offsets_of(batch_id))


def _open_transactions(clients: KafkaClients, prefix: str, now_ms: int) -> list[OpenTransactionStatus]:
    control = clients.txn_control()
    try:
        found: list[OpenTransaction] = control.list_open_transactions(f"{prefix}-")
    finally:
        control.close()
    return [OpenTransactionStatus(t.transactional_id, t.producer_id, t.producer_epoch,
                                  max(0, now_ms - t.start_time_ms), t.timeout_ms,
                                  sorted(str(tp) for tp in t.partitions))
            for t in sorted(found, key=lambda t: t.transactional_id)]


def _lag(clients: KafkaClients, committed: Mapping[TopicPartition, int]) -> list[PartitionLag]:
    if not committed:
        return []
    admin = clients.admin()
    try:
        # Under read_committed the end is the last stable offset: what the query can read next.
        ends = admin.list_offsets(list(committed), "latest", read_committed=True)
    finally:
        admin.close()
    return [PartitionLag(tp.topic, tp.partition, offset, ends.get(tp, offset))
            for tp, offset in sorted(committed.items(), key=lambda item: (item[0].topic, item[0].partition))]
