"""Kafka sink configuration and its validation."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from enum import Enum
from typing import Mapping
from twophase.errors import InvalidValueError


class DeliveryGuarantee(str, Enum):
    """Flink's three delivery guarantees for the Kafka sink."""

    EXACTLY_ONCE = "exactly_once"
    AT_LEAST_ONCE = "at_least_once"
    NONE = "none"

    @classmethod
    def parse(cls, value: "str | DeliveryGuarantee") -> "DeliveryGuarantee":
        try:
            return cls(value.lower() if isinstance(value, str) else value)
        except ValueError:
            valid = ", ".join(g.value for g in cls)
            raise InvalidValueError(f"delivery guarantee must be one of {valid}; got {value!r}") from None


DEFAULT_TRANSACTION_TIMEOUT_MS = 15 * 60 * 1000
DEFAULT_CHECKPOINT_TIMEOUT_MS = 10 * 60 * 1000
DEFAULT_RESTART_BUDGET_MS = 60 * 1000


def default_transactional_id_prefix(job_identity: str, sink_identity: str) -> str:
    """A prefix unique per job and sink, stable across restarts of that job."""
    digest = hashlib.sha256(f"{job_identity}\0{sink_identity}".encode()).hexdigest()[:16]
    return f"kafka-eos-{digest}"


@dataclass(frozen=True)
class KafkaSinkConfig:
    bootstrap_servers: str
    #: Default topic; a record may name its own.
    topic: str | None = None
    delivery_guarantee: DeliveryGuarantee = DeliveryGuarantee.EXACTLY_ONCE
    #: Prefix of every transactional id of this sink. Two jobs must never share one.
    transactional_id_prefix: str | None = None
    transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS
    #: The longest a checkpoint may take, and the longest a restart may take before recovery
    #: commits: a pre-committed transaction must outlive both.
    checkpoint_timeout_ms: int = DEFAULT_CHECKPOINT_TIMEOUT_MS
    restart_budget_ms: int = DEFAULT_RESTART_BUDGET_MS
    #: The one retry layer's bound (eos.brokerRetryTimeoutMs): seconds to keep retrying the ending
    #: of a transaction that asked to be retried later; a commit past its transaction's timeout is
    #: lost instead.
    commit_retry_timeout_s: float = 60.0
    flush_timeout_s: float = 120.0
    client_config: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "delivery_guarantee", DeliveryGuarantee.parse(self.delivery_guarantee))
        if not self.bootstrap_servers:
            raise InvalidValueError("bootstrap servers must be given (kafka.bootstrap.servers)")
        for name in ("transaction_timeout_ms", "checkpoint_timeout_ms"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise InvalidValueError(f"{name} must be an integer >= 1, got {value!r}")
        if not isinstance(self.restart_budget_ms, int) or self.restart_budget_ms < 0:
            raise InvalidValueError(f"restart_budget_ms must be an integer >= 0, got {self.restart_budget_ms!r}")
        for name in ("commit_retry_timeout_s", "flush_timeout_s"):
            if getattr(self, name) <= 0:
                raise InvalidValueError(f"{name} must be > 0 seconds, got {getattr(self, name)!r}")
        if self.transactional_id_prefix is not None:
            prefix = self.transactional_id_prefix
            if not prefix or any(c.isspace() for c in prefix):
                raise InvalidValueError(f"transactional id prefix must be non-empty without spaces, got {prefix!r}")
        if "transactional.id" in self.client_config:
            raise InvalidValueError("kafka.transactional.id cannot be set: the sink names its transactions "
                                    "itself; set the transactional id prefix instead")

    @property
    def exactly_once(self) -> bool:
        return self.delivery_guarantee is DeliveryGuarantee.EXACTLY_ONCE
