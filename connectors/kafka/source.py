"""Resettable Kafka source: offsets are its checkpointed state, rewound exactly on restore.

Offsets are ``{topic: {partition: next_offset}}`` (partition keys are strings in JSON, as in
Spark's Kafka offset log). ``KafkaOffsetPlanner`` decides which partitions to read and up to where;
``KafkaSource`` is the in-process participant that reads those ranges. The Spark adapter plans with
the same planner and keeps the offsets in Spark's own offset log instead.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from connectors.kafka.clients.broker_retry import BrokerRetryPolicy, RetryingClusterAdmin
from connectors.kafka.clients import ClusterAdmin, ConsumedRecord, KafkaClients, RecordReader, TopicPartition
from connectors.kafka.clients.factory import clients_for
from connectors.kafka.kafka_errors import DataLossError, UnknownTopicError
from twophase.participants import ResettableSource
from twophase.errors import InvalidValueError

log = logging.getLogger(__name__)

Offsets = dict[str, dict[str, int]]

# Spark's special values in per-partition JSON offsets.
EARLIEST = -2
LATEST = -1

#: startingOffsetsByTimestampStrategy: what a starting timestamp no offset matches does (Spark's).
NO_MATCH_STRATEGIES = ("error", "latest")
#: groupIdPrefix's defaults, as Spark's: streaming queries, and batch reads (KafkaSourceProvider).
STREAMING_GROUP_ID_PREFIX = "spark-kafka-source"
BATCH_GROUP_ID_PREFIX = "spark-kafka-relation"


def unique_group_id(prefix: str) -> str:
    """The consumer group id of one query's readers, as Spark names its executors' consumers
    (``<prefix>-<uuid>-executor``): no two queries share a group, so none interferes with another."""
    return f"{prefix}-{uuid.uuid4()}-executor"


def reader_client_config(client_config: Mapping[str, str], group_id: str) -> dict[str, str]:
    """The client settings of a reader: ``group_id`` as its ``group.id``, unless the user set
    ``kafka.group.id``, which wins (Spark ignores groupIdPrefix then)."""
    if "group.id" in client_config:
        return dict(client_config)
    return {**client_config, "group.id": group_id}


def to_offsets(positions: Mapping[TopicPartition, int]) -> Offsets:
    result: Offsets = {}
    for tp in sorted(positions):
        result.setdefault(tp.topic, {})[str(tp.partition)] = int(positions[tp])
    return result


def from_offsets(offsets: Mapping[str, Mapping[str, int]] | None) -> dict[TopicPartition, int]:
    if not offsets:
        return {}
    return {TopicPartition(topic, int(p)): int(o) for topic, parts in offsets.items() for p, o in parts.items()}


def parse_offsets_json(value: str, option: str) -> dict[TopicPartition, int]:
    """Parse Spark-style ``{"topic":{"0":23,"1":-2}}``; the error names the option."""
    try:
        parsed = json.loads(value)
        if not isinstance(parsed, dict) or not all(isinstance(v, dict) for v in parsed.values()):
            raise InvalidValueError("expected an object of objects")
        return {TopicPartition(t, int(p)): int(o) for t, parts in parsed.items() for p, o in parts.items()}
    except (ValueError, TypeError) as exc:
        raise InvalidValueError(
            f"{option} must be 'earliest', 'latest' or JSON like "
            f'{{"topicA":{{"0":23,"1":-2}}}} (-2 = earliest, -1 = latest); got {value!r}: {exc}'
        ) from exc


@dataclass(frozen=True)
class KafkaSourceConfig:
    bootstrap_servers: str
    #: Exactly one of subscribe, subscribe_pattern, assign.
    subscribe: Sequence[str] = ()
    subscribe_pattern: str | None = None
    assign: Mapping[str, Sequence[int]] | None = None
    #: "earliest", "latest", or explicit per-partition offsets (EARLIEST / LATEST allowed as values).
    starting_offsets: str | Mapping[TopicPartition, int] = "latest"
    #: startingOffsetsByTimestamp: per-partition start timestamps (ms), every partition named;
    #: takes precedence over starting_offsets.
    starting_timestamps: Mapping[TopicPartition, int] | None = None
    #: startingTimestamp: one start timestamp (ms) for every partition; takes precedence over both.
    starting_timestamp: int | None = None
    #: startingOffsetsByTimestampStrategy: a start timestamp that no offset matches fails the
    #: query ("error") or starts at the latest offset ("latest").
    starting_timestamp_strategy: str = "error"
    #: For bounded reads: "latest" or explicit per-partition offsets. None: unbounded.
    ending_offsets: str | Mapping[TopicPartition, int] | None = None
    #: endingOffsetsByTimestamp (per partition) and endingTimestamp (all partitions), bounded
    #: reads only, in the same precedence; an end timestamp no offset matches ends at the latest.
    ending_timestamps: Mapping[TopicPartition, int] | None = None
    ending_timestamp: int | None = None
    fail_on_data_loss: bool = True
    read_committed: bool = True
    #: Consumer group to which completed checkpoints' offsets are committed, for lag monitoring only.
    commit_offsets_to_group: str | None = None
    client_config: Mapping[str, str] = field(default_factory=dict)
    #: How planning requests (offsets, partitions) ride through a broker restart.
    broker_retry: BrokerRetryPolicy = field(default_factory=BrokerRetryPolicy)
    #: groupIdPrefix: the prefix of the consumer group id of the source's readers.
    group_id_prefix: str = STREAMING_GROUP_ID_PREFIX

    def __post_init__(self) -> None:
        chosen = [name for name, value in (("subscribe", self.subscribe),
                                           ("subscribePattern", self.subscribe_pattern),
                                           ("assign", self.assign)) if value]
        if len(chosen) != 1:
            raise InvalidValueError(
                "exactly one of subscribe, subscribePattern, assign must be given; "
                f"got {chosen or 'none'}"
            )
        if self.subscribe_pattern:
            try:
                re.compile(self.subscribe_pattern)
            except re.error as exc:
                raise InvalidValueError(f"subscribePattern {self.subscribe_pattern!r} is not a valid regex: {exc}") from exc
        for option, value in (("startingOffsets", self.starting_offsets), ("endingOffsets", self.ending_offsets)):
            if isinstance(value, str) and value not in ("earliest", "latest"):
                raise InvalidValueError(f"{option} must be 'earliest', 'latest' or per-partition JSON, got {value!r}")
        if self.ending_offsets == "earliest":
            raise InvalidValueError("endingOffsets must be 'latest' or per-partition JSON, not 'earliest'")
        if self.starting_timestamp_strategy not in NO_MATCH_STRATEGIES:
            raise InvalidValueError(f"startingOffsetsByTimestampStrategy must be one of "
                                    f"{', '.join(NO_MATCH_STRATEGIES)}, got {self.starting_timestamp_strategy!r}")


class KafkaOffsetPlanner:
    """Works out partitions, starting offsets, and the end of the next range to read."""

    def __init__(self, config: KafkaSourceConfig, admin: ClusterAdmin) -> None:
        self.config = config
        self.admin = admin

    def partitions(self) -> list[TopicPartition]:
        if self.config.assign:
            return sorted(TopicPartition(t, int(p)) for t, ps in self.config.assign.items() for p in ps)
        if self.config.subscribe_pattern:
            pattern = re.compile(self.config.subscribe_pattern)
            topics = [t for t in self.admin.list_topics() if pattern.fullmatch(t) and not t.startswith("__")]
        else:
            topics = list(self.config.subscribe)
        result = []
        for topic in topics:
            try:
                result.extend(TopicPartition(topic, p) for p in self.admin.partitions(topic))
            except UnknownTopicError:
                if not self.config.subscribe_pattern:
                    raise
        return sorted(result)

    def initial_offsets(self) -> dict[TopicPartition, int]:
        """Where a query without a checkpoint starts."""
        partitions = self.partitions()
        if not partitions:
            return {}
        # Spark's precedence: startingTimestamp, then startingOffsetsByTimestamp, then startingOffsets.
        if self.config.starting_timestamp is not None:
            return self._offsets_for_times({tp: self.config.starting_timestamp for tp in partitions},
                                           "startingTimestamp", starting=True)
        if self.config.starting_timestamps is not None:
            return self._offsets_for_times(self._named(partitions, self.config.starting_timestamps,
                                                       "startingOffsetsByTimestamp"),
                                           "startingOffsetsByTimestamp", starting=True)
        start = self.config.starting_offsets
        if isinstance(start, str):
            return self.admin.list_offsets(partitions, start, self.config.read_committed)
        return self._resolve_special(partitions, start, "startingOffsets")

    @staticmethod
    def _named(partitions: Sequence[TopicPartition], explicit: Mapping[TopicPartition, int],
               option: str) -> dict[TopicPartition, int]:
        """``explicit``'s values for every partition read; as Spark, every one must be named."""
        missing = [str(tp) for tp in partitions if tp not in explicit]
        if missing:
            raise InvalidValueError(f"{option} does not specify timestamps for partitions {missing}; "
                                    "it must name every partition the query reads")
        return {tp: int(explicit[tp]) for tp in partitions}

    def _offsets_for_times(self, timestamps: Mapping[TopicPartition, int], option: str, *,
                           starting: bool) -> dict[TopicPartition, int]:
        """The first offset of each partition whose record timestamp is >= its timestamp (Kafka's
        offsetsForTimes). Where none is, an end is the latest offset, and a start is as
        startingOffsetsByTimestampStrategy says: the query fails ("error"), or starts at the latest.

        The seam answers "no match" with the latest offset, so the latest offsets are listed after
        the timestamps: an answer at or past them matched nothing. (A record appended between
        the two requests makes a no-match look like a match at the old end, which is where
        the records after the timestamp start anyway.)"""
        by_time: dict[int, list[TopicPartition]] = {}
        for tp, ts in timestamps.items():
            if ts < 0:
                raise InvalidValueError(f"{option}: the timestamp of {tp} must be >= 0 (ms since the epoch), got {ts}")
            by_time.setdefault(int(ts), []).append(tp)
        found: dict[TopicPartition, int] = {}
        for ts, tps in by_time.items():
            found.update(self.admin.list_offsets(tps, ts, self.config.read_committed))
        latest = self.admin.list_offsets(list(timestamps), "latest", self.config.read_committed)
        offsets = {}
        for tp, ts in timestamps.items():
            if found[tp] < latest[tp]:
                offsets[tp] = found[tp]
                continue
            if starting and self.config.starting_timestamp_strategy == "error":
                raise InvalidValueError(
                    f"{option}: no offset of {tp.topic} partition {tp.partition} has a timestamp at or "
                    f"after {ts}; set startingOffsetsByTimestampStrategy=latest to start such "
                    "partitions at their latest offset")
            log.info("%s: no record of %s at or after timestamp %d; %s at the latest offset %d",
                     option, tp, ts, "starting" if starting else "ending", latest[tp])
            offsets[tp] = latest[tp]
        return offsets

    def _resolve_special(self, partitions: Sequence[TopicPartition], explicit: Mapping[TopicPartition, int],
                         option: str) -> dict[TopicPartition, int]:
        missing = [str(tp) for tp in partitions if tp not in explicit]
        if missing:
            raise InvalidValueError(f"{option} does not specify offsets for partitions {missing}")
        earliest = self.admin.list_offsets(partitions, "earliest", self.config.read_committed)
        latest = self.admin.list_offsets(partitions, "latest", self.config.read_committed)
        resolved = {}
        for tp in partitions:
            offset = explicit[tp]
            resolved[tp] = earliest[tp] if offset == EARLIEST else latest[tp] if offset == LATEST else offset
        return resolved

    def ending_offsets(self) -> dict[TopicPartition, int] | None:
        end = self.config.ending_offsets
        if end is None:
            return None
        partitions = self.partitions()
        # Spark's precedence: endingTimestamp, then endingOffsetsByTimestamp, then endingOffsets.
        if self.config.ending_timestamp is not None:
            return self._offsets_for_times({tp: self.config.ending_timestamp for tp in partitions},
                                           "endingTimestamp", starting=False)
        if self.config.ending_timestamps is not None:
            return self._offsets_for_times(self._named(partitions, self.config.ending_timestamps,
                                                       "endingOffsetsByTimestamp"),
                                           "endingOffsetsByTimestamp", starting=False)
        if end == "latest":
            return self.admin.list_offsets(partitions, "latest", self.config.read_committed)
        assert not isinstance(end, str)
        return self._resolve_special(partitions, end, "endingOffsets")

    def latest_offsets(self, partitions: Sequence[TopicPartition] | None = None) -> dict[TopicPartition, int]:
        """The readable end of every partition (of ``partitions``, when the caller just listed
        them): the LSO under read_committed (nothing after an open transaction is decided yet),
        else the high watermark."""
        if partitions is None:
            partitions = self.partitions()
        return self.admin.list_offsets(partitions, "latest", self.config.read_committed) if partitions else {}

    def with_new_partitions(self, positions: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """``positions`` plus every partition that appeared since, from its earliest offset."""
        partitions = self.partitions()
        new = [tp for tp in partitions if tp not in positions]
        result = dict(positions)
        if new:
            earliest = self.admin.list_offsets(new, "earliest", self.config.read_committed)
            for tp in new:
                log.info("new partition %s picked up from its earliest offset %d", tp, earliest[tp])
                result[tp] = earliest[tp]
        return result

    def check_available(self, start: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Starting offsets that still exist. Offsets deleted by retention fail with a message
        naming topic, partition and offsets, or (failOnDataLoss=false) are skipped with a warning."""
        if not start:
            return {}
        earliest = self.admin.list_offsets(list(start), "earliest", self.config.read_committed)
        checked = dict(start)
        for tp, offset in start.items():
            if offset < earliest[tp]:
                message = (f"offsets of {tp.topic} partition {tp.partition} from {offset} are no longer "
                           f"available: the earliest offset is {earliest[tp]} (retention or compaction "
                           f"removed {earliest[tp] - offset} offsets)")
                if self.config.fail_on_data_loss:
                    raise DataLossError(message + "; set failOnDataLoss=false to skip them")
                log.warning("%s; skipping them because failOnDataLoss=false", message)
                checked[tp] = earliest[tp]
        return checked


def plan_ranges(
    start: Mapping[TopicPartition, int],
    end: Mapping[TopicPartition, int],
    max_records: int | None,
) -> dict[TopicPartition, tuple[int, int]]:
    """Ranges [start, end) to read, splitting ``max_records`` across partitions in proportion to
    their backlog (like Spark's maxOffsetsPerTrigger) while always making progress."""
    backlog = {tp: max(0, end.get(tp, s) - s) for tp, s in start.items()}
    total = sum(backlog.values())
    ranges: dict[TopicPartition, tuple[int, int]] = {}
    for tp, s in start.items():
        size = backlog[tp]
        if size == 0:
            continue
        if max_records is not None and total > max_records:
            size = max(1, size * max_records // total)
        ranges[tp] = (s, s + size)
    return ranges


class KafkaSource(ResettableSource[Offsets]):
    """The in-process participant: reads committed records from the checkpointed positions."""

    def __init__(self, config: KafkaSourceConfig, name: str = "kafka-source",
                 clients: KafkaClients | None = None) -> None:
        self.name = name
        self.config = config
        self.clients = clients or clients_for(config.bootstrap_servers, config.client_config)
        self.admin = RetryingClusterAdmin(self.clients.admin, config.broker_retry)
        self.planner = KafkaOffsetPlanner(config, self.admin)
        self.group_id = unique_group_id(config.group_id_prefix)
        self._reader: RecordReader | None = None
        self._positions: dict[TopicPartition, int] = {}
        self._end: dict[TopicPartition, int] | None = None
        self._checkpointed: dict[int, Offsets] = {}

    @property
    def reader(self) -> RecordReader:
        if self._reader is None:
            self._reader = self.clients.reader(read_committed=self.config.read_committed,
                                               config=reader_client_config(self.config.client_config,
                                                                           self.group_id))
        return self._reader

    def positions(self) -> dict[TopicPartition, int]:
        return dict(self._positions)

    def restore_state(self, offsets: Offsets | None) -> None:
        if offsets is None:
            self._positions = self.planner.initial_offsets()
            log.info("source %s starts fresh at %s", self.name, to_offsets(self._positions))
        else:
            self._positions = from_offsets(offsets)
            log.info("source %s rewound to %s", self.name, offsets)
        self._end = self.planner.ending_offsets()
        self._checkpointed.clear()

    def snapshot_state(self, checkpoint_id: int) -> Offsets:
        offsets = to_offsets(self._positions)
        self._checkpointed[checkpoint_id] = offsets
        return offsets

    def poll(self, max_records: int) -> Sequence[ConsumedRecord]:
        """Up to ``max_records`` committed records; empty only once caught up with the LSO (or
        the ending offsets). A range holding only aborted records and markers yields nothing, so
        reading goes on past it rather than looking caught up."""
        self._positions = self.planner.with_new_partitions(self._positions)
        self._positions = self.planner.check_available(self._positions)
        latest = self.planner.latest_offsets(list(self._positions))
        if self._end is not None:
            latest = {tp: min(o, self._end.get(tp, o)) for tp, o in latest.items()}
        while True:
            ranges = plan_ranges(self._positions, latest, max_records)
            if not ranges:
                return []
            records = list(self.reader.read(ranges))
            # The range end, not the last record + 1: markers and aborted records at the end of a
            # range take offsets too, and they must not be read again.
            for tp, (_, end) in ranges.items():
                self._positions[tp] = end
            if records:
                return records

    def end_reached(self) -> bool:
        if self._end is None:
            return False
        return all(self._positions.get(tp, 0) >= end for tp, end in self._end.items())

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        offsets = self._checkpointed.pop(checkpoint_id, None)
        for older in [cid for cid in self._checkpointed if cid < checkpoint_id]:
            del self._checkpointed[older]
        group = self.config.commit_offsets_to_group
        if group and offsets:
            # For lag dashboards only: correctness rests on the checkpointed offsets, never on these.
            try:
                self.admin.commit_group_offsets(group, from_offsets(offsets))
            except Exception as exc:
                log.warning("checkpoint %d: committing offsets to group %s for lag monitoring "
                            "failed: %r", checkpoint_id, group, exc)

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        self._checkpointed.pop(checkpoint_id, None)

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        self.admin.close()
