"""One writer's records of one checkpoint: a Kafka transaction, or plain produce for the weaker
guarantees. Runs wherever records are produced (the in-process sink, a Spark task)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from connectors.kafka.clients import KafkaClients, ProduceBatch, ProducerClient, ProducerIdentity, TopicPartition
from connectors.kafka.sink.committable import KafkaCommittable
from connectors.kafka.sink.config import DeliveryGuarantee, KafkaSinkConfig
from connectors.kafka.kafka_errors import KafkaConnectorError
from connectors.kafka.sink.internal.producer_pool import PRODUCERS, InitialisingProducer
from twophase.checkpoint import wall_clock_ms
from twophase.errors import InvalidTypeError, InvalidValueError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProducerRecord:
    value: bytes | str | None
    key: bytes | str | None = None
    topic: str | None = None
    partition: int | None = None
    headers: Sequence[tuple[str, bytes | str | None]] | Mapping[str, bytes | str | None] | None = None
    timestamp_ms: int | None = None


def _as_bytes(field_name: str, value: Any) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise InvalidTypeError(f"record {field_name} must be bytes, str or None, got {type(value).__name__}")


def _headers(value: Any) -> list[tuple[str, bytes | None]] | None:
    if value is None:
        return None
    items: Iterable[Any] = value.items() if isinstance(value, Mapping) else value
    result = []
    for item in items:
        if isinstance(item, Mapping):  # Spark's headers column: array<struct<key, value>>
            item = (item.get("key"), item.get("value"))
        try:
            key, header_value = item
        except (TypeError, ValueError):
            raise InvalidTypeError(f"record headers must be (str, bytes) pairs, got {item!r}") from None
        if not isinstance(key, str):
            raise InvalidTypeError(f"record header key must be str, got {type(key).__name__}")
        result.append((key, _as_bytes(f"header {key!r} value", header_value)))
    return result


def coerce_record(record: ProducerRecord | Mapping[str, Any], default_topic: str | None) -> dict[str, Any]:
    """Validate one record into produce() arguments; raise TypeError/ValueError before producing."""
    fields = record if isinstance(record, Mapping) else record.__dict__
    unknown = set(fields) - {"value", "key", "topic", "partition", "headers", "timestamp_ms"}
    if unknown:
        raise InvalidTypeError(f"unknown record fields {sorted(unknown)}; valid: value, key, topic, "
                               "partition, headers, timestamp_ms")
    topic = fields.get("topic") or default_topic
    if not topic:
        raise InvalidValueError("record has no topic and the sink has no default topic (option 'topic')")
    if not isinstance(topic, str):
        raise InvalidTypeError(f"record topic must be str, got {type(topic).__name__}")
    partition = fields.get("partition")
    if partition is not None and (isinstance(partition, bool) or not isinstance(partition, int) or partition < 0):
        raise InvalidTypeError(f"record partition must be an int >= 0 or None, got {partition!r}")
    timestamp = fields.get("timestamp_ms")
    if timestamp is not None and (isinstance(timestamp, bool) or not isinstance(timestamp, int)):
        raise InvalidTypeError(f"record timestamp_ms must be an int or None, got {timestamp!r}")
    return {
        "topic": topic,
        "value": _as_bytes("value", fields.get("value")),
        "key": _as_bytes("key", fields.get("key")),
        "partition": partition,
        "headers": _headers(fields.get("headers")),
        "timestamp_ms": timestamp,
    }


class KafkaTransactionWriter:
    """Writes one checkpoint's records of one writer.

    exactly_once: a transactional producer of ``transactional_id`` (the id pool's choice, see
    ``sink/internal/transactional_ids.py``), taken at the first record from ``initialising`` (made ready by the
    producer pool while the caller computed its rows) or else created then; its initialisation
    fences any earlier producer of the id (a zombie attempt) and aborts its transaction.
    at_least_once / none: a plain producer, reusable across checkpoints.
    """

    def __init__(
        self,
        clients: KafkaClients,
        config: KafkaSinkConfig,
        transactional_id: str | None,
        checkpoint_id: int,
        producer: ProducerClient | None = None,
        initialising: InitialisingProducer | None = None,
    ) -> None:
        self.config = config
        self.checkpoint_id = checkpoint_id
        self.record_count = 0
        self.partitions: set[TopicPartition] = set()
        self.begin_timestamp_ms = wall_clock_ms()
        self._clients = clients
        self.identity: ProducerIdentity | None = None
        self._producer: ProducerClient | None = producer
        self._owns_producer = producer is None
        self._initialising = initialising
        if config.exactly_once and not transactional_id:
            raise InvalidValueError("an exactly_once writer needs a transactional id")
        self.transactional_id = transactional_id if config.exactly_once else None

    @property
    def producer(self) -> ProducerClient:
        """Made at the first record: a transaction nothing was written to needs no producer, and
        Kafka refuses to end one the broker never saw begin (INVALID_TXN_STATE)."""
        if self._producer is None:
            if self.transactional_id is not None:
                initialising, self._initialising = self._initialising, None
                if initialising is None:
                    initialising = PRODUCERS.initialise(self._clients, self.transactional_id,
                                                        self.producer_config(self.config),
                                                        self.config.flush_timeout_s, self.config.topic)
                # Initialising fenced any earlier producer of this id (a zombie attempt) and
                # aborted its transaction. The identity is read at pre-commit, when it costs no wait.
                self._producer = initialising.take(self.config.flush_timeout_s)
                self.begin_timestamp_ms = wall_clock_ms()
                log.debug("transaction %s begun for checkpoint %d", self.transactional_id, self.checkpoint_id)
            else:
                self._producer = self._clients.producer(None, dict(self.config.client_config))
        return self._producer

    @staticmethod
    def producer_config(config: KafkaSinkConfig) -> dict[str, str]:
        """The client configuration of the sink's transactional producers."""
        producer_config = dict(config.client_config)
        producer_config["transaction.timeout.ms"] = str(config.transaction_timeout_ms)
        return producer_config

    def discard(self) -> None:
        """Release what the writer holds without writing: a initialising producer no record needed."""
        if self._initialising is not None:
            self._initialising.discard()
            self._initialising = None

    def write(self, record: ProducerRecord | Mapping[str, Any]) -> None:
        args = coerce_record(record, self.config.topic)
        self.producer.produce(**args)
        self.record_count += 1
        if args["partition"] is not None:
            self.partitions.add(TopicPartition(args["topic"], args["partition"]))

    def write_batch(self, batch: ProduceBatch) -> None:
        """Write records given column by column; their types were checked by the caller."""
        if len(batch) == 0:
            return
        self.producer.produce_batch(batch)
        self.record_count += len(batch)
        if batch.partitions is not None:
            topics = batch.topics if batch.topics is not None else [batch.topic] * len(batch)
            self.partitions.update(TopicPartition(t, p) for t, p in zip(topics, batch.partitions)
                                   if p is not None and t is not None)

    def pre_commit(self) -> KafkaCommittable:
        """Flush, so every record is on the broker (invisible under read_committed until commit)."""
        if self._producer is not None and self.config.delivery_guarantee is not DeliveryGuarantee.NONE:
            self._producer.flush(self.config.flush_timeout_s)
        if self._producer is not None and self.transactional_id is not None and self.identity is None:
            self.identity = self._producer.identity()
            log.debug("transaction %s pre-committed: pid %d, epoch %d, %d records", self.transactional_id,
                      self.identity.producer_id, self.identity.producer_epoch, self.record_count)
        committable = KafkaCommittable(
            transactional_id=self.transactional_id,
            producer_id=self.identity.producer_id if self.identity else -1,
            producer_epoch=self.identity.producer_epoch if self.identity else -1,
            partitions=tuple(sorted(self.partitions)),
            record_count=self.record_count,
            checkpoint_id=self.checkpoint_id,
            begin_timestamp_ms=self.begin_timestamp_ms,
            transaction_timeout_ms=self.config.transaction_timeout_ms,
        )
        if self._owns_producer and self._producer is not None:
            # Drop the client without ending the transaction: the coordinator's commit ends it via
            # EndTxn, from whichever process that happens in.
            self._producer.close()
        return committable

    def abort(self) -> None:
        """Abort a transaction that was not pre-committed (a failed write)."""
        self.discard()
        if self.transactional_id is None or self._producer is None:
            return
        try:
            self._producer.abort_transaction(self.config.flush_timeout_s)
        except KafkaConnectorError as exc:
            # Whoever restarts the job aborts it as a lingering transaction.
            log.warning("aborting transaction %s failed: %r", self.transactional_id, exc)
        finally:
            self._producer.close()
