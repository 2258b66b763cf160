"""Cluster administration through librdkafka's AdminClient, behind the ``ClusterAdmin`` seam:
topics, offsets, broker configuration and consumer-group offsets.

Nothing here retries on its own: a transient condition surfaces as ``RetriableKafkaError`` and the
caller decides whether to try again. The one wait is bounded: for a created topic's partitions to
have leaders.
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
from typing import Any, Iterable, Mapping

from confluent_kafka import ConsumerGroupTopicPartitions, IsolationLevel, KafkaError, KafkaException, TopicCollection
from confluent_kafka import TopicPartition as _CkTopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, OffsetSpec as _CkOffsetSpec
from confluent_kafka.admin import ResourceType

from connectors.kafka.authorization import CLUSTER, CLUSTER_NAME, GROUP, TOPIC, Denied, authorization_error
from connectors.kafka.clients import OffsetSpec, TopicPartition
from connectors.kafka.kafka_errors import (
    BrokerUnavailableError,
    KafkaAuthorizationError,
    KafkaConnectorError,
    RetriableKafkaError,
)
from connectors.kafka.clients._confluent.librdkafka import base_config, map_exception, map_kafka_error
from twophase.errors import InvalidValueError

log = logging.getLogger(__name__)

# Kafka's internal topics, which the Java admin's listTopics() leaves out too.
_INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
_ADMIN_TIMEOUT_S = 30.0
# Reads a query makes at every batch (metadata, offsets, configs). A request queued for a node that
# went down waits out its whole timeout even after the cluster moved its partitions, so these are
# short and retried by the caller (broker_retry.py) with a new client.
_READ_TIMEOUT_S = 10.0


class ConfluentClusterAdmin:
    """Cluster administration through librdkafka's AdminClient."""

    def __init__(self, bootstrap_servers: str, config: Mapping[str, Any]) -> None:
        # Its log lines go through Python logging as every handle's do (base_config); they are
        # served by poll(), which each use of the handle calls first (_client), so that the lines of
        # an admin that lives as long as its query never pile up in its queue.
        conf = base_config(bootstrap_servers)
        conf.update(config)
        self._config = dict(config)
        try:
            self._admin: AdminClient | None = AdminClient(conf)
        except KafkaException as exc:
            raise map_exception(exc, "admin: create") from exc
        self._broker_configs: dict[str, str | None] | None = None

    def _client(self) -> AdminClient:
        if self._admin is None:
            raise KafkaConnectorError("admin: used after close()")
        self._admin.poll(0)  # the log lines since the last use
        return self._admin

    def list_topics(self) -> list[str]:
        try:
            metadata = self._client().list_topics(timeout=_READ_TIMEOUT_S)
        except KafkaException as exc:
            raise map_exception(exc, "admin: list topics") from exc
        return sorted(name for name in metadata.topics if name not in _INTERNAL_TOPICS)

    def partitions(self, topic: str) -> list[int]:
        # DescribeTopics, not a metadata request for the topic: the latter may auto-create it.
        future = self._client().describe_topics(
            TopicCollection([topic]), request_timeout=_READ_TIMEOUT_S
        )[topic]
        try:
            description = future.result()
        except KafkaException as exc:
            raise map_exception(exc, f"admin: describe topic {topic}",
                                 self._denied(("DESCRIBE",), TOPIC, topic, f"describing topic {topic}")) from exc
        return sorted(p.id for p in description.partitions)

    def create_topic(
        self, topic: str, partitions: int, config: Mapping[str, str] | None = None
    ) -> None:
        new_topic = NewTopic(
            topic,
            num_partitions=partitions,
            replication_factor=-1,  # the broker's default.replication.factor
            config=dict(config or {}),
        )
        future = self._client().create_topics(
            [new_topic], operation_timeout=_ADMIN_TIMEOUT_S, request_timeout=_ADMIN_TIMEOUT_S
        )[topic]
        try:
            future.result()
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if not (isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_ALREADY_EXISTS):
                raise map_exception(exc, f"admin: create topic {topic}",
                                     self._denied(("CREATE",), TOPIC, topic, f"creating topic {topic}")) from exc
            # Creating is idempotent: setup code re-runs after crashes.
            log.info("admin: topic %s already exists", topic)
        self._wait_for_leaders(topic, partitions)

    def _wait_for_leaders(self, topic: str, partitions: int) -> None:
        # CreateTopics returns before every broker's metadata shows the topic; a producer that
        # looks it up at once could see UNKNOWN_TOPIC_OR_PART.
        deadline = time.monotonic() + _ADMIN_TIMEOUT_S
        while True:
            metadata = self._client().list_topics(topic=topic, timeout=_ADMIN_TIMEOUT_S)
            found = metadata.topics.get(topic)
            if (
                found is not None
                and found.error is None
                and len(found.partitions) >= partitions
                and all(p.leader >= 0 for p in found.partitions.values())
            ):
                return
            if time.monotonic() >= deadline:
                raise BrokerUnavailableError(
                    f"admin: topic {topic} created but its partitions have no leader after "
                    f"{_ADMIN_TIMEOUT_S:.0f} s",
                    code="LEADER_NOT_AVAILABLE",
                )
            time.sleep(0.05)

    def list_offsets(
        self,
        partitions: Iterable[TopicPartition],
        spec: OffsetSpec,
        read_committed: bool = True,
    ) -> dict[TopicPartition, int]:
        parts = list(dict.fromkeys(partitions))
        if not parts:
            return {}
        if spec == "earliest":
            ck_spec = _CkOffsetSpec.earliest()
        elif spec == "latest":
            ck_spec = _CkOffsetSpec.latest()
        elif isinstance(spec, int) and not isinstance(spec, bool):
            ck_spec = _CkOffsetSpec.for_timestamp(spec)
        else:
            raise InvalidValueError(f"offset spec must be 'earliest', 'latest' or a timestamp: {spec!r}")
        result = self._list_offsets(parts, ck_spec, read_committed)
        if isinstance(spec, int):
            # No record at or after the timestamp: Kafka answers -1, the seam promises the end.
            missing = [tp for tp, offset in result.items() if offset < 0]
            if missing:
                result.update(self._list_offsets(missing, _CkOffsetSpec.latest(), read_committed))
        # librdkafka reports a partition whose leader just went down as a success with offset -1001
        # (OFFSET_INVALID) now and then: never hand that on as a position.
        invalid = sorted(str(tp) for tp, offset in result.items() if offset < 0)
        if invalid:
            raise RetriableKafkaError(f"admin: list offsets of {', '.join(invalid)}: no valid offset (a leader "
                                      "moving?)", code="LEADER_NOT_AVAILABLE")
        return result

    def _list_offsets(
        self, parts: list[TopicPartition], ck_spec: Any, read_committed: bool
    ) -> dict[TopicPartition, int]:
        isolation = IsolationLevel.READ_COMMITTED if read_committed else IsolationLevel.READ_UNCOMMITTED
        request = {_CkTopicPartition(tp.topic, tp.partition): ck_spec for tp in parts}
        try:
            futures = self._client().list_offsets(
                request, isolation_level=isolation, request_timeout=_READ_TIMEOUT_S
            )
        except KafkaException as exc:
            raise map_exception(exc, "admin: list offsets") from exc
        result: dict[TopicPartition, int] = {}
        for ck_tp, future in futures.items():
            tp = TopicPartition(ck_tp.topic, ck_tp.partition)
            try:
                result[tp] = future.result().offset
            except KafkaException as exc:
                err = exc.args[0] if exc.args else None
                if isinstance(err, KafkaError) and err.code() == KafkaError._NOENT:
                    # "No leaders found": a missing topic, or a partition without a leader.
                    self.partitions(tp.topic)  # raises UnknownTopicError for the former
                    raise RetriableKafkaError(
                        f"admin: list offsets of {tp}: no leader", code="LEADER_NOT_AVAILABLE"
                    ) from exc
                raise map_exception(exc, f"admin: list offsets of {tp}",
                                     self._denied(("DESCRIBE",), TOPIC, tp.topic, f"listing offsets of {tp}")) from exc
        return result

    def broker_config(self, name: str) -> str | None:
        if self._broker_configs is None:
            self._broker_configs = self._describe_broker_configs()
        return self._broker_configs.get(name)

    def _describe_broker_configs(self) -> dict[str, str | None]:
        # Any live broker will do: every broker of a cluster has the limits that matter here. All
        # are asked at once and the first answer wins, because the metadata still names a node for
        # a few seconds after it went down, and a request to it waits for the whole timeout.
        admin = self._client()
        try:
            brokers = sorted(admin.list_topics(timeout=_READ_TIMEOUT_S).brokers)
        except KafkaException as exc:
            raise map_exception(exc, "admin: cluster metadata") from exc
        if not brokers:
            raise BrokerUnavailableError("admin: cluster metadata lists no broker")
        # librdkafka takes one BROKER resource per call: one call per broker, all in flight at once.
        by_future = {}
        for broker in brokers:
            resource = ConfigResource(ResourceType.BROKER, str(broker))
            by_future[admin.describe_configs([resource], request_timeout=_READ_TIMEOUT_S)[resource]] = broker
        failures: list[str] = []
        for future in concurrent.futures.as_completed(by_future):
            broker = by_future[future]
            try:
                entries = future.result()
            except KafkaException as exc:
                mapped = map_exception(exc, f"admin: describe configs of broker {broker}",
                                       self._denied(("DESCRIBE_CONFIGS",), CLUSTER, CLUSTER_NAME,
                                                    f"reading the configuration of broker {broker}"))
                if not isinstance(mapped, RetriableKafkaError):
                    raise mapped from exc
                failures.append(str(mapped))
                continue
            return {entry_name: entry.value for entry_name, entry in entries.items()}
        raise BrokerUnavailableError(f"admin: describe configs: no broker of {brokers} answered: "
                                     + "; ".join(failures), code="BROKER_NOT_AVAILABLE")

    def commit_group_offsets(self, group_id: str, offsets: Mapping[TopicPartition, int]) -> None:
        if not offsets:
            return
        request = ConsumerGroupTopicPartitions(
            group_id,
            [_CkTopicPartition(tp.topic, tp.partition, offset) for tp, offset in offsets.items()],
        )
        future = self._client().alter_consumer_group_offsets(
            [request], request_timeout=_ADMIN_TIMEOUT_S
        )[group_id]
        doing = f"committing offsets to consumer group {group_id}"
        try:
            result = future.result()
        except KafkaException as exc:
            raise map_exception(exc, f"admin: commit offsets of group {group_id}",
                                 self._denied(("READ",), GROUP, group_id, doing)) from exc
        for ck_tp in result.topic_partitions or []:
            if ck_tp.error is not None:
                raise map_kafka_error(
                    ck_tp.error,
                    f"admin: commit offset of group {group_id} for {ck_tp.topic}-{ck_tp.partition}",
                    self._denied(("READ",), TOPIC, ck_tp.topic, doing),
                )

    def _denied(self, operations: tuple[str, ...], resource_type: str, name: str, doing: str) -> Denied:
        """What a refused admin request needed, for ``map_kafka_error``."""
        def denied(error_name: str) -> KafkaAuthorizationError:
            return authorization_error(self._config, operations, resource_type, name, error_name=error_name,
                                       doing=doing)
        return denied

    def close(self) -> None:
        # AdminClient has no close(); dropping it destroys the handle, after its last log lines.
        if self._admin is not None:
            self._admin.poll(0)
        self._admin = None
