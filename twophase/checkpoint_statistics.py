"""Per-checkpoint statistics kept with the checkpoint: ``chk-<id>/_statistics``, written once.

Flink keeps checkpoint statistics in the JobManager's memory and loses them with it; an operator
of a Spark query asks "how are the commits going?" of a stopped query too, from any machine. So
each checkpoint's figures are a write-once file next to its ``_metadata``, subsumed with it (the
store deletes a checkpoint's whole folder), and read by ``kafka-eos status`` without the query.

What the file holds (:class:`CheckpointStatistics`): the batch's records and transactions, the
commit's steps (prepare, store, commit, mark, lingering sweep: :class:`CommitTimings`), how the
checkpoint ended (committed by its own batch, committed by a recovery after a crash, or
transactions lost, each listed with its records), the lingering transactions aborted, and a
``sink`` section the sink fills with what ``status`` needs to find its transactions without the
query's options (the Kafka sink's: ``connectors/kafka/sink/statistics.py``). The commit lifecycle
(``twophase/lifecycle.py``) writes it in its record step, from the participants' figures
(:class:`CommitFigures`). It also carries running totals over the query's life
(:class:`StatisticsTotals`, the previous record's totals plus this checkpoint), so counters and
the commit-duration histogram survive retention, which keeps only a few checkpoints. Lost
transactions and their records are counted apart from committed ones.

The ``_metadata`` and ``_committed`` files stay the only source of truth about a checkpoint: a
missing or unreadable statistics file means "no figures", never "not committed". Recording is
best effort (:func:`record_statistics` logs and returns on any error) so that figures can never
fail or hold up a commit.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, field, replace
from enum import Enum
from typing import Any, Mapping, Sequence

from twophase.checkpoint_store import METADATA_FILE, FileCheckpointStore
from twophase.errors import CorruptStatisticsError, InvalidValueError
from twophase.state_versions import check_format_version
from twophase.stored_checkpoints import StoredCheckpoints

log = logging.getLogger(__name__)

STATISTICS_FILE = "_statistics"
#: 2: every lost transaction is recorded with its records (``lost``), and the totals count lost
#: records and keep lost ones out of the committed figures. 3: the sink's own settings are one
#: opaque ``sink`` section (they were top-level Kafka fields), and the commit step is ``commit_ms``
#: (it was ``end_txn_ms``). Versions 1 and 2 are still read.
FORMAT_VERSION = 3
READABLE_VERSIONS = (1, 2, 3)
#: The version-1/2 top-level fields that now live in the ``sink`` section.
_LEGACY_SINK_FIELDS = ("transactional_id_prefix", "transaction_timeout_ms", "restart_budget_ms")
#: Upper bounds (seconds) of the commit-duration histogram; fixed, because totals are cumulative
#: across processes and versions and buckets must line up.
COMMIT_DURATION_BUCKETS_S: tuple[float, ...] = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                                                 10.0, 30.0, 60.0, 120.0, 300.0)


class CheckpointOutcome(str, Enum):
    #: Committed by the batch that stored it.
    COMMITTED = "committed"
    #: Stored by a run that crashed before confirming the commit; a later run committed it.
    RECOVERED = "recovered"
    #: At least one transaction could not be committed: its records are lost.
    LOST = "lost"


@dataclass(frozen=True)
class LostTransactionRecord:
    """One transaction of the checkpoint that could not be committed."""

    transactional_id: str
    #: Its records; None in a version-1 record, which kept only the id.
    records: int | None
    producer_id: int | None = None
    producer_epoch: int | None = None
    partitions: tuple[str, ...] = ()


@dataclass(frozen=True)
class CommitTimings:
    """Where a commit's time went, in milliseconds: the steps of ``twophase/lifecycle.py``. The one
    timings type of the kit: the lifecycle returns it, this record keeps it, the logs print it."""

    total_ms: float
    #: The engine's work before the store step (Spark: reading its tasks' messages).
    prepare_ms: float = 0.0
    store_ms: float = 0.0
    #: The sinks' commits (Kafka: EndTxn).
    commit_ms: float = 0.0
    mark_ms: float = 0.0
    sweep_ms: float = 0.0

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "CommitTimings":
        fields = {k: float(v) for k, v in data.items()}
        if "end_txn_ms" in fields:  # versions 1 and 2 named the commit step after Kafka's EndTxn
            fields["commit_ms"] = fields.pop("end_txn_ms")
        return cls(**fields)


@dataclass(frozen=True)
class CommitFigures:
    """What a committing participant tells the record about its part of one checkpoint."""

    records: int
    transactions: int
    oldest_transaction_begin_ms: int | None = None
    lost: tuple["LostTransactionRecord", ...] = ()
    #: The sink's own settings that ``status`` needs without the query's options (opaque here:
    #: the sink defines and reads them, e.g. ``connectors/kafka/sink/statistics.py``).
    sink: Mapping[str, Any] = field(default_factory=dict)

    @staticmethod
    def sum(parts: Sequence["CommitFigures"]) -> "CommitFigures":
        begins = [p.oldest_transaction_begin_ms for p in parts if p.oldest_transaction_begin_ms is not None]
        sink: dict[str, Any] = {}
        for part in parts:
            sink.update(part.sink)
        return CommitFigures(records=sum(p.records for p in parts), transactions=sum(p.transactions for p in parts),
                             oldest_transaction_begin_ms=min(begins, default=None),
                             lost=tuple(t for p in parts for t in p.lost), sink=sink)


@dataclass(frozen=True)
class StatisticsTotals:
    """Running totals over the life of the state, up to and including one checkpoint."""

    checkpoints: int = 0
    records: int = 0
    transactions: int = 0
    recoveries: int = 0
    lingering_aborted: int = 0
    lost_transactions: int = 0
    #: Records of the lost transactions (``records`` and ``transactions`` count committed ones only).
    lost_records: int = 0
    #: Commits with timings, their summed duration, and how many took at most each bound of
    #: COMMIT_DURATION_BUCKETS_S (cumulative, as Prometheus histograms count).
    commit_count: int = 0
    commit_seconds_sum: float = 0.0
    commit_duration_buckets: tuple[int, ...] = field(
        default_factory=lambda: (0,) * len(COMMIT_DURATION_BUCKETS_S))

    def plus(self, stats: "CheckpointStatistics") -> "StatisticsTotals":
        buckets = self.commit_duration_buckets
        commit_count, seconds = self.commit_count, self.commit_seconds_sum
        if stats.timings is not None:
            duration_s = stats.timings.total_ms / 1000
            buckets = tuple(count + (duration_s <= bound)
                            for count, bound in zip(buckets, COMMIT_DURATION_BUCKETS_S))
            commit_count, seconds = commit_count + 1, seconds + duration_s
        return StatisticsTotals(
            checkpoints=self.checkpoints + 1,
            # Lost records were never committed: they count as lost, not as committed.
            records=self.records + max(0, stats.records - stats.lost_records),
            transactions=self.transactions + max(0, stats.transactions - len(stats.lost)),
            recoveries=self.recoveries + (stats.outcome is CheckpointOutcome.RECOVERED),
            lingering_aborted=self.lingering_aborted + len(stats.lingering_aborted),
            lost_transactions=self.lost_transactions + len(stats.lost),
            lost_records=self.lost_records + stats.lost_records,
            commit_count=commit_count,
            commit_seconds_sum=seconds,
            commit_duration_buckets=buckets,
        )


@dataclass(frozen=True)
class CheckpointStatistics:
    checkpoint_id: int
    #: Wall-clock milliseconds when the record was written (just after the commit it describes).
    written_at_ms: int
    outcome: CheckpointOutcome
    #: Records and transactions the checkpoint holds (committed or lost).
    records: int
    transactions: int
    timings: CommitTimings | None = None
    lingering_aborted: tuple[str, ...] = ()
    #: Every transaction of the checkpoint that could not be committed (outcome ``lost``).
    lost: tuple[LostTransactionRecord, ...] = ()
    #: How long the checkpoint's oldest transaction had been open when its commit was confirmed:
    #: the figure to hold against the transaction timeout (a recovery shows the restart's delay).
    oldest_transaction_age_ms: int | None = None
    #: The sink's own settings, so ``status`` needs none of the query's options (the sink
    #: defines them: ``connectors/kafka/sink/statistics.py``).
    sink: Mapping[str, Any] = field(default_factory=dict)
    totals: StatisticsTotals = field(default_factory=StatisticsTotals)

    @property
    def lost_transactions(self) -> tuple[str, ...]:
        """The lost transactions' ids."""
        return tuple(t.transactional_id for t in self.lost)

    @property
    def lost_records(self) -> int:
        """Records of the lost transactions (those of a version-1 record are unknown: not counted)."""
        return sum(t.records or 0 for t in self.lost)


def encode_statistics(stats: CheckpointStatistics) -> bytes:
    body = asdict(stats)
    body["outcome"] = stats.outcome.value
    return json.dumps({"format_version": FORMAT_VERSION, "statistics": body}, sort_keys=True,
                      indent=1).encode("utf-8")


def decode_statistics(data: bytes, location: str | None = None) -> CheckpointStatistics:
    """Parse ``_statistics`` bytes of any version in READABLE_VERSIONS; NewerStateFormatError
    (naming ``location``) for a newer one, CorruptStatisticsError for anything else."""
    try:
        document = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptStatisticsError(f"not valid JSON ({exc})") from exc
    version = check_format_version(document.get("format_version") if isinstance(document, dict) else None,
                                   READABLE_VERSIONS, "checkpoint statistics", location, CorruptStatisticsError)
    body: Any = document.get("statistics")
    try:
        timings = body.get("timings")
        totals = dict(body.get("totals") or {})
        buckets = tuple(int(n) for n in totals.pop("commit_duration_buckets", ()))
        if buckets and len(buckets) != len(COMMIT_DURATION_BUCKETS_S):
            raise InvalidValueError(f"{len(buckets)} histogram buckets, expected {len(COMMIT_DURATION_BUCKETS_S)}")
        return CheckpointStatistics(
            checkpoint_id=int(body["checkpoint_id"]),
            written_at_ms=int(body["written_at_ms"]),
            outcome=CheckpointOutcome(body["outcome"]),
            records=int(body["records"]),
            transactions=int(body["transactions"]),
            timings=None if timings is None else CommitTimings.from_json(timings),
            lingering_aborted=tuple(str(t) for t in body.get("lingering_aborted", ())),
            lost=_lost_of(version, body),
            oldest_transaction_age_ms=_optional_int(body.get("oldest_transaction_age_ms")),
            sink=dict(body.get("sink") or {}) if version >= 3 else
            {k: body[k] for k in _LEGACY_SINK_FIELDS if body.get(k) is not None},
            totals=StatisticsTotals(**{k: (float(v) if k == "commit_seconds_sum" else int(v))
                                       for k, v in totals.items()},
                                    **({"commit_duration_buckets": buckets} if buckets else {})),
        )
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise CorruptStatisticsError(f"malformed statistics fields ({exc})") from exc


def _lost_of(version: int, body: Any) -> tuple[LostTransactionRecord, ...]:
    if version == 1:  # ids only: how many records they held was not recorded
        return tuple(LostTransactionRecord(str(t), None) for t in body.get("lost_transactions", ()))
    return tuple(LostTransactionRecord(
        transactional_id=str(t["transactional_id"]), records=_optional_int(t.get("records")),
        producer_id=_optional_int(t.get("producer_id")), producer_epoch=_optional_int(t.get("producer_epoch")),
        partitions=tuple(str(p) for p in t.get("partitions", ()))) for t in body.get("lost", ()))


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


# -- with the store ----------------------------------------------------------------------------------

def statistics_ids(store: FileCheckpointStore) -> list[int]:
    """Ids of the stored checkpoints that have a statistics file, ascending."""
    return sorted(set(StoredCheckpoints(store).ids()) & set(store.ids_with_file(STATISTICS_FILE)))


def read_statistics(store: FileCheckpointStore, checkpoint_id: int) -> CheckpointStatistics | None:
    """The statistics of ``checkpoint_id``, or None when it has none (or they are unreadable,
    which is logged: figures never decide anything). A record of a newer format version raises
    NewerStateFormatError: a newer kit wrote this state, which this one must not carry on."""
    try:
        stats = decode_statistics(store.read_checkpoint_file(checkpoint_id, STATISTICS_FILE),
                                  store.location(checkpoint_id, STATISTICS_FILE))
    except FileNotFoundError:
        return None
    except (CorruptStatisticsError, OSError) as exc:
        log.warning("checkpoint %d: ignoring unreadable statistics %s (%s)", checkpoint_id,
                    store.location(checkpoint_id, STATISTICS_FILE), exc)
        return None
    if stats.checkpoint_id != checkpoint_id:
        log.warning("checkpoint %d: ignoring statistics of checkpoint %d found in its folder",
                    checkpoint_id, stats.checkpoint_id)
        return None
    return stats


def retained_statistics(store: FileCheckpointStore) -> list[CheckpointStatistics]:
    """The statistics of every retained checkpoint that has them, oldest first."""
    found = (read_statistics(store, cid) for cid in statistics_ids(store))
    return [stats for stats in found if stats is not None]


def record_statistics(store: FileCheckpointStore, checkpoint_id: int, *, outcome: CheckpointOutcome,
                      figures: CommitFigures, timings: CommitTimings | None = None,
                      lingering_aborted: Sequence[str] = ()) -> CheckpointStatistics | None:
    """Write checkpoint ``checkpoint_id``'s statistics once; never raises.

    The running totals are those of the newest older record plus this one: the lifecycle records
    before it subsumes older checkpoints, so that record is still there. Costs that read and one
    conditional create. Returns what was written, or None when nothing was (already recorded,
    checkpoint not stored, or an error, which is logged)."""
    try:
        now_ms = int(time.time() * 1000)
        begin_ms = figures.oldest_transaction_begin_ms
        stats = CheckpointStatistics(
            checkpoint_id=checkpoint_id, written_at_ms=now_ms, outcome=outcome,
            records=figures.records, transactions=figures.transactions, timings=timings,
            lingering_aborted=tuple(lingering_aborted), lost=tuple(figures.lost),
            oldest_transaction_age_ms=None if begin_ms is None else max(0, now_ms - begin_ms),
            sink=dict(figures.sink))
        if checkpoint_id not in store.ids_with_file(METADATA_FILE):
            log.warning("checkpoint %d: not stored in %s; its statistics are not recorded",
                        checkpoint_id, store.directory)
            return None
        stats = replace(stats, totals=totals_before_checkpoint(store, checkpoint_id).plus(stats))
        store.add_checkpoint_file(checkpoint_id, STATISTICS_FILE, encode_statistics(stats))
        return stats
    except FileExistsError:
        log.info("checkpoint %d: statistics were already recorded (by an earlier attempt)", checkpoint_id)
    except Exception as exc:  # noqa: BLE001 - figures must never fail a commit
        log.warning("checkpoint %d: recording its statistics in %s failed (%r); the commit is not "
                    "affected", checkpoint_id, store.directory, exc)
    return None


def totals_before_checkpoint(store: FileCheckpointStore, checkpoint_id: int) -> StatisticsTotals:
    """The running totals of the newest record older than ``checkpoint_id``; never raises (zero
    totals when there is none or it cannot be read)."""
    return read_totals(store, earlier_statistics_ids(store, checkpoint_id), checkpoint_id)


def earlier_statistics_ids(store: FileCheckpointStore, checkpoint_id: int) -> list[int]:
    """Ids older than ``checkpoint_id`` with statistics, newest first: from the store's listing,
    so call it from the thread that writes through the store."""
    try:
        return [cid for cid in reversed(statistics_ids(store)) if cid < checkpoint_id]
    except Exception as exc:  # noqa: BLE001 - figures must never fail a commit
        log.warning("checkpoint %d: listing the previous statistics in %s failed (%r)", checkpoint_id,
                    store.directory, exc)
        return []


def read_totals(store: FileCheckpointStore, newest_first: Sequence[int], checkpoint_id: int) -> StatisticsTotals:
    """The totals of the first readable record of ``newest_first``; only reads files, so it may
    run in another thread while the store writes."""
    try:
        for earlier in newest_first:
            stats = read_statistics(store, earlier)
            if stats is not None:
                return stats.totals
    except Exception as exc:  # noqa: BLE001 - figures must never fail a commit
        log.warning("checkpoint %d: reading the previous statistics in %s failed (%r)", checkpoint_id,
                    store.directory, exc)
    return StatisticsTotals()
