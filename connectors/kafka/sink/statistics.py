"""What the Kafka sink puts in a checkpoint's statistics record (``twophase/checkpoint_statistics``):
the figures of its transactions and the sink's
own settings that ``kafka-eos status`` needs to find its transactions on the brokers without the
query's options. The record keeps the settings as its opaque ``sink`` section; this module alone
writes and reads it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from connectors.kafka.sink.committable import KafkaCommittable
from connectors.kafka.sink.config import KafkaSinkConfig
from twophase.checkpoint_statistics import CheckpointStatistics, CommitFigures


@dataclass(frozen=True)
class KafkaSinkSettings:
    """The ``sink`` section of a statistics record (its version is the record's)."""

    transactional_id_prefix: str | None = None
    transaction_timeout_ms: int | None = None
    restart_budget_ms: int | None = None

    @classmethod
    def of(cls, config: KafkaSinkConfig) -> "KafkaSinkSettings":
        return cls(config.transactional_id_prefix if config.exactly_once else None,
                   config.transaction_timeout_ms, config.restart_budget_ms)

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in (("transactional_id_prefix", self.transactional_id_prefix),
                                  ("transaction_timeout_ms", self.transaction_timeout_ms),
                                  ("restart_budget_ms", self.restart_budget_ms)) if v is not None}

    @classmethod
    def from_json(cls, section: Mapping[str, Any]) -> "KafkaSinkSettings":
        def number(name: str) -> int | None:
            value = section.get(name)
            return None if value is None else int(value)

        prefix = section.get("transactional_id_prefix")
        return cls(None if prefix is None else str(prefix), number("transaction_timeout_ms"),
                   number("restart_budget_ms"))

    @classmethod
    def of_record(cls, stats: CheckpointStatistics) -> "KafkaSinkSettings":
        return cls.from_json(stats.sink)


def commit_figures(config: KafkaSinkConfig, committables: Sequence[KafkaCommittable]) -> CommitFigures:
    """The record's figures of ``committables``: records, transactions (those that hold records)
    and the oldest one's begin (the lifecycle adds the lost ones, from their endings)."""
    transactional = [c for c in committables if c.transactional_id is not None and c.record_count]
    return CommitFigures(
        records=sum(c.record_count for c in committables),
        transactions=len(transactional),
        oldest_transaction_begin_ms=min((c.begin_timestamp_ms for c in transactional), default=None),
        sink=KafkaSinkSettings.of(config).to_json(),
    )
