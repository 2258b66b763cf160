"""The handle of a pre-committed Kafka transaction: what any process needs to end it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from connectors.kafka.clients import ProducerIdentity, TopicPartition
from twophase.errors import InvalidValueError

COMMITTABLE_VERSION = 1


@dataclass(frozen=True)
class KafkaCommittable:
    """Everything any process needs to commit or abort the transaction (EndTxn), and to say
    what was lost if it cannot. ``transactional_id`` is None for at-least-once writes.

    ``partitions`` lists the partitions records were explicitly addressed to; where librdkafka's
    partitioner chose, the client learns the partition only from per-record delivery reports,
    which the data path turns off for speed (the broker knows them: DescribeTransactions)."""

    transactional_id: str | None
    producer_id: int
    producer_epoch: int
    partitions: tuple[TopicPartition, ...]
    record_count: int
    checkpoint_id: int
    begin_timestamp_ms: int
    transaction_timeout_ms: int

    @property
    def identity(self) -> ProducerIdentity:
        return ProducerIdentity(self.producer_id, self.producer_epoch)

    @property
    def expires_at_ms(self) -> int:
        """When the broker aborts the transaction on its own (transaction.timeout.ms)."""
        return self.begin_timestamp_ms + self.transaction_timeout_ms

    def to_json(self) -> dict[str, Any]:
        return {
            "v": COMMITTABLE_VERSION,
            "transactional_id": self.transactional_id,
            "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch,
            "partitions": [[tp.topic, tp.partition] for tp in self.partitions],
            "record_count": self.record_count,
            "checkpoint_id": self.checkpoint_id,
            "begin_timestamp_ms": self.begin_timestamp_ms,
            "transaction_timeout_ms": self.transaction_timeout_ms,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "KafkaCommittable":
        version = data.get("v")
        if version != COMMITTABLE_VERSION:
            raise InvalidValueError(f"Kafka committable version {version!r} is not supported "
                                    f"(this version reads {COMMITTABLE_VERSION})")
        return cls(
            transactional_id=data["transactional_id"],
            producer_id=int(data["producer_id"]),
            producer_epoch=int(data["producer_epoch"]),
            partitions=tuple(TopicPartition(t, int(p)) for t, p in data["partitions"]),
            record_count=int(data["record_count"]),
            checkpoint_id=int(data["checkpoint_id"]),
            begin_timestamp_ms=int(data["begin_timestamp_ms"]),
            transaction_timeout_ms=int(data["transaction_timeout_ms"]),
        )
