"""Kafka readers of the ``kafka-eos`` format, the ones Spark's Data Source API calls (beside
``datasource_writers.py``): streaming (offsets in Spark's offset log) and batch.

Spark plans offset ranges on the driver (``latestOffset``/``partitions``) and reads them on
executors (``read``). Under read_committed a planned range never ends past the last stable
offset, so every record in it is decided: reading it again after a failure yields the same
records, which is what makes the source replayable.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition

from connectors.kafka.clients.broker_retry import RetryingClusterAdmin
from connectors.kafka.clients import KafkaClients, RecordReader, TopicPartition
from connectors.kafka.clients.factory import clients_for
from connectors.kafka.kafka_errors import DataLossError, OffsetOutOfRangeError
from connectors.kafka.reader_pool import READERS
from connectors.kafka.source import KafkaOffsetPlanner, from_offsets, plan_ranges, reader_client_config, to_offsets
from connectors.spark.gc_pause import gc_paused
from connectors.spark.options import RECORDS_PER_SLOT_TASK, SourceOptions
from connectors.spark.arrow_batches import batches_to_arrow
from connectors.spark.spark_versions import has_stream_admission_control
from twophase.errors import InvalidValueError

log = logging.getLogger(__name__)

if has_stream_admission_control():
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )

    _AVAILABLE_NOW: tuple[type, ...] = (SupportsTriggerAvailableNow,)
else:
    # Spark 4.0 and 4.1: no read limits for a Python source (options.py refuses the options that
    # need them), and Spark runs Trigger.AvailableNow as one batch up to the offsets it saw first.
    _AVAILABLE_NOW = ()


@dataclass(frozen=True, order=True)
class OffsetRange:
    """The offsets [start, end) of one Kafka partition (or a slice of it, for minPartitions)."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


@dataclass
class KafkaReadPartition(InputPartition):
    """One read task: its offset ranges, read together by the worker's reader.

    One range per task by default, as Spark's own Kafka source plans; more under
    eos.maxPartitions. Planned and read by the same kit version in one run: Spark keeps the
    offsets in its offset log, never these objects."""

    ranges: tuple[OffsetRange, ...]


def _split_evenly(tp: TopicPartition, start: int, end: int, parts: int) -> list[tuple[TopicPartition, int, int]]:
    """[start, end) in ``parts`` consecutive pieces whose sizes differ by one at most (the last
    ones take the remainder, as Spark's getDividedPartition)."""
    pieces = []
    remaining = end - start
    for part in range(parts):
        size = remaining // (parts - part)
        remaining -= size
        pieces.append((tp, start, start + size))
        start += size
    return [p for p in pieces if p[2] > p[1]]


def plan_read_tasks(ranges: dict[TopicPartition, tuple[int, int]], min_partitions: int | None,
                    max_partitions: int | None = None,
                    max_records_per_partition: int | None = None,
                    min_records_per_task: int = 0,
                    task_slots: int | None = None) -> list[KafkaReadPartition]:
    """The read tasks of one batch.

    1. One range per Kafka partition with records to read. With ``max_records_per_partition``
       (Spark's maxRecordsPerPartition), a larger range is cut into ceil(size / max) even pieces,
       as Spark's KafkaOffsetRangeCalculator does.
    2. Pieces are split further (largest first, in offset order) until there are at least
       ``min_partitions`` (Spark's minPartitions).
    3. With ``max_partitions`` (eos.maxPartitions) and more pieces than that, the pieces share
       tasks, largest first into the least loaded task. Every task of a batch is a write task
       too when the query writes to the kit's sink, and each one pays a producer's set-up and a
       transaction: tasks beyond the executors' cores run in a second wave and add that fixed
       cost to the batch's latency (bench/README.md, issue 30). maxRecordsPerPartition bounds
       what one task reads, so a task takes another piece only while it stays within it: where
       both cannot hold, there are more tasks than eos.maxPartitions.
    4. With ``min_records_per_task`` (eos.minRecordsPerTask, on by default), at most one task per
       that many records, and never fewer than ``min_partitions``: a batch of a few thousand
       records is one task, one producer and one transaction, where one task per Kafka partition
       would pay a producer's set-up and a transaction per partition, and a wave per executor core
       short (bench/README.md, issue 38). Pieces then share tasks as in step 3.
    5. With ``task_slots`` too (eos.taskSlots: how many tasks Spark runs at once, which the kit's
       JVM provider hands the source), a batch of at least ``min_records_per_task`` records follows
       the cluster: one task per ``RECORDS_PER_SLOT_TASK`` records, up to one per slot, so a batch
       of ``task_slots x RECORDS_PER_SLOT_TASK`` records or more is read and transformed by
       ``min(pieces, task_slots)`` tasks, however few ``min_records_per_task`` would give it; and
       never more tasks than slots (more would run in a second wave, each with its own producer
       set-up, and, with the kit's sink, one more transaction marker per output partition each).
       ``minPartitions`` and ``maxRecordsPerPartition`` still win. A smaller batch keeps its one
       task and one transaction.
    """
    pieces = []
    for tp, (s, e) in sorted(ranges.items()):
        if e <= s:
            continue
        parts = -(-(e - s) // max_records_per_partition) if max_records_per_partition else 1
        pieces.extend(_split_evenly(tp, s, e, parts))
    target = min_partitions or 0
    while len(pieces) < target:
        index = max(range(len(pieces)), key=lambda i: pieces[i][2] - pieces[i][1], default=None)
        if index is None:
            break
        tp, s, e = pieces[index]
        if e - s < 2:
            break
        middle = s + (e - s) // 2
        pieces[index:index + 1] = [(tp, s, middle), (tp, middle, e)]
    offset_ranges = [OffsetRange(tp.topic, tp.partition, s, e) for tp, s, e in pieces]
    if min_records_per_task:
        total = sum(r.size for r in offset_ranges)
        by_records = max(1, -(-total // min_records_per_task))
        if task_slots and total >= min_records_per_task:
            by_records = min(max(by_records, total // RECORDS_PER_SLOT_TASK), task_slots)
        by_records = max(by_records, min_partitions or 0)
        max_partitions = by_records if max_partitions is None else min(max_partitions, by_records)
    if not max_partitions or len(offset_ranges) <= max_partitions:
        return [KafkaReadPartition((r,)) for r in offset_ranges]
    tasks: list[list[OffsetRange]] = [[] for _ in range(max_partitions)]
    loads = [0] * max_partitions
    for r in sorted(offset_ranges, key=lambda r: r.size, reverse=True):
        lightest = min(range(len(tasks)), key=loads.__getitem__)
        if max_records_per_partition and tasks[lightest] and loads[lightest] + r.size > max_records_per_partition:
            tasks.append([])
            loads.append(0)
            lightest = len(tasks) - 1
        tasks[lightest].append(r)
        loads[lightest] += r.size
    # In topic-partition order within a task, as without the option.
    return [KafkaReadPartition(tuple(sorted(task, key=lambda r: (r.topic, r.partition, r.start))))
            for task in tasks]


class _KafkaReading:
    """What the streaming and batch readers share: clients made lazily in each process."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._clients: KafkaClients | None = None
        self._planner: KafkaOffsetPlanner | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Readers are pickled to executors; connections are not picklable and are made there.
        state = dict(self.__dict__)
        state["_clients"] = None
        state["_planner"] = None
        return state

    @property
    def clients(self) -> KafkaClients:
        if self._clients is None:
            config = self.options.config
            self._clients = clients_for(config.bootstrap_servers, config.client_config)
            # kafkaConsumer.pollTimeoutMs: the real clients' reader gives up a read that makes no
            # progress this long (the test cluster's readers never stall, and have no such setting).
            if hasattr(self._clients, "reader_stall_timeout_s"):
                self._clients.reader_stall_timeout_s = self.options.poll_timeout_ms / 1000
        return self._clients

    @property
    def planner(self) -> KafkaOffsetPlanner:
        if self._planner is None:
            config = self.options.config
            self._planner = KafkaOffsetPlanner(config, RetryingClusterAdmin(self.clients.admin, config.broker_retry))
        return self._planner

    def _read_task(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, KafkaReadPartition) and getattr(partition, "value", 0) is None:
            # A batch read that plans no task (every range empty, e.g. every partition started at
            # its latest offset) gets one task with pyspark's InputPartition(None): nothing to read.
            return
        assert isinstance(partition, KafkaReadPartition)
        # The worker's warm reader, kept between tasks (connectors/kafka/reader_pool.py).
        config = self.options.config
        with READERS.reader(self.clients, config.read_committed,
                            reader_client_config(config.client_config, self.options.group_id)) as reader, \
                gc_paused():
            for ranges in _together(partition.ranges):
                yield from self._read_batches(reader, ranges)

    def _read_batches(self, reader: RecordReader,
                      ranges: dict[TopicPartition, tuple[int, int]]) -> Iterator[pa.RecordBatch]:
        # Streamed, not collected: a task holds one Arrow batch at a time, whatever its ranges.
        include_headers = self.options.include_headers

        def arrow_from(ranges: dict[TopicPartition, tuple[int, int]]) -> Iterator[pa.RecordBatch]:
            return batches_to_arrow(reader.read_batches(ranges, include_headers), include_headers)

        try:
            batches = arrow_from(ranges)
            first = next(batches, None)
        except OffsetOutOfRangeError:
            # Retention removed offsets between planning and reading. Nothing has reached Spark
            # yet; should it happen later, the task fails, and its retry lands here.
            available = self.planner.check_available({tp: start for tp, (start, _) in ranges.items()})
            ranges = {tp: (available[tp], end) for tp, (_, end) in ranges.items() if end > available[tp]}
            if not ranges:
                return
            batches = arrow_from(ranges)
            first = next(batches, None)
        if first is None:
            return
        yield first
        yield from batches


def _together(ranges: Sequence[OffsetRange]) -> list[dict[TopicPartition, tuple[int, int]]]:
    """A task's ranges as few reads as possible, each at most one range per Kafka partition.

    Read together, the partitions' fetches overlap, and ranges that end in a commit marker,
    which the reader finds complete only after a consume that returned nothing, wait for it
    once for all of them."""
    reads: list[dict[TopicPartition, tuple[int, int]]] = []
    for r in ranges:
        tp = TopicPartition(r.topic, r.partition)
        free = next((read for read in reads if tp not in read), None)
        if free is None:
            free = {}
            reads.append(free)
        free[tp] = (r.start, r.end)
    return reads


def _monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


class KafkaEosStreamReader(_KafkaReading, DataSourceStreamReader, *_AVAILABLE_NOW):  # type: ignore[misc]
    def __init__(self, options: SourceOptions, clock: Callable[[], int] = _monotonic_ms) -> None:
        super().__init__(options)
        # Trigger.AvailableNow: the LSOs when the query started; nothing past them is read.
        self._target: dict[TopicPartition, int] | None = None
        #: Milliseconds for minOffsetsPerTrigger's maxTriggerDelay; tests pass their own.
        self.clock = clock
        # When a trigger last went ahead under minOffsetsPerTrigger; None: none yet in this run.
        self._last_trigger_ms: int | None = None
        # The run's initial offsets, once looked up: Spark asks for them more than once at a
        # query's first start (once under Trigger.AvailableNow's wrapper), and the answer must
        # not move between the two (Spark's KafkaMicroBatchStream keeps them in a lazy val).
        self._initial: dict[TopicPartition, int] | None = None

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self.planner.latest_offsets()
        log.info("kafka-eos source: Trigger.AvailableNow reads up to %s", to_offsets(self._target))

    def initialOffset(self) -> dict:
        if self._initial is None:
            self._initial = dict(self.planner.initial_offsets())
            log.info("kafka-eos source: initial offsets %s", to_offsets(self._initial))
        return to_offsets(self._initial)

    def getDefaultReadLimit(self) -> ReadLimit:
        # pyspark has no composite read limit: minOffsetsPerTrigger is applied in latestOffset.
        if self.options.max_offsets_per_trigger:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict | None = None, limit: ReadLimit | None = None) -> dict:
        # Spark 4.0 and 4.1 call latestOffset() without a start or a limit: every partition's end.
        if start is None:
            return to_offsets(self.planner.latest_offsets())
        positions = self.planner.with_new_partitions(from_offsets(start))
        latest = self.planner.latest_offsets(list(positions))
        if self._target is not None:
            # Partitions that appeared after the target was taken are not read in this run.
            latest = {tp: min(o, self._target.get(tp, positions.get(tp, o))) for tp, o in latest.items()}
        if self._delay_batch(positions, latest):
            # The start itself: Spark sees no new data and runs no batch this trigger.
            return start
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        ranges = plan_ranges(positions, latest, max_rows)
        end = dict(positions)
        for tp, (_, range_end) in ranges.items():
            end[tp] = range_end
        return to_offsets(end)

    def _delay_batch(self, positions: dict[TopicPartition, int], latest: dict[TopicPartition, int]) -> bool:
        """minOffsetsPerTrigger and maxTriggerDelay, as Spark's KafkaMicroBatchStream.delayBatch:
        a trigger goes ahead once maxTriggerDelay has passed since the last one that went ahead
        (the first of a run always does), else only with at least minOffsetsPerTrigger new
        offsets. Spark applies it under Trigger.AvailableNow too, whose run then ends at the first
        trigger that is held back; the next run reads what was left."""
        minimum = self.options.min_offsets_per_trigger
        if minimum is None:
            return False
        now = self.clock()
        if self._last_trigger_ms is None or now - self._last_trigger_ms >= self.options.max_trigger_delay_ms:
            self._last_trigger_ms = now
            return False
        available = sum(max(0, end - positions.get(tp, 0)) for tp, end in latest.items())
        if available < minimum:
            log.debug("kafka-eos source: %d new offsets, fewer than minOffsetsPerTrigger=%d; no batch yet",
                      available, minimum)
            return True
        self._last_trigger_ms = now
        return False

    def reportLatestOffset(self) -> dict | None:
        latest = self.planner.latest_offsets()
        return to_offsets(latest) if latest else None

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        end_positions = from_offsets(end)
        start_positions = from_offsets(start)
        new = [tp for tp in end_positions if tp not in start_positions]
        if new:
            earliest = self.planner.admin.list_offsets(new, "earliest", self.options.config.read_committed)
            start_positions.update({tp: earliest[tp] for tp in new})
        start_positions = self.planner.check_available(start_positions)
        ranges = {tp: (start_positions[tp], e) for tp, e in end_positions.items() if e > start_positions.get(tp, e)}
        return plan_read_tasks(ranges, self.options.min_partitions, self.options.max_partitions,
                               self.options.max_records_per_partition, self.options.min_records_per_task,
                               self.options.task_slots)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return self._read_task(partition)

    def commit(self, end: dict) -> None:
        group = self.options.config.commit_offsets_to_group
        if group:
            # Lag monitoring only: Spark's offset log is the source of truth.
            try:
                self.planner.admin.commit_group_offsets(group, from_offsets(end))
            except Exception as exc:
                log.warning("committing offsets to group %s for lag monitoring failed: %s", group, exc)

    def stop(self) -> None:
        if self._planner is not None:
            self._planner.admin.close()


class KafkaEosBatchReader(_KafkaReading, DataSourceReader):
    def partitions(self) -> Sequence[InputPartition]:
        start = self.planner.initial_offsets()
        end = self.planner.ending_offsets() or {}
        for tp, offset in end.items():
            if tp in start and offset < start[tp]:
                raise InvalidValueError(f"endingOffsets {offset} of {tp} is before its startingOffsets {start[tp]}")
        start = self.planner.check_available(start)
        ranges = {tp: (s, end.get(tp, s)) for tp, s in start.items()}
        return plan_read_tasks(ranges, self.options.min_partitions, self.options.max_partitions,
                               self.options.max_records_per_partition, self.options.min_records_per_task,
                               self.options.task_slots)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return self._read_task(partition)


__all__ = ["DataLossError", "KafkaEosBatchReader", "KafkaEosStreamReader", "KafkaReadPartition", "OffsetRange",
           "plan_read_tasks"]
