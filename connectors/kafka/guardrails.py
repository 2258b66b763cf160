"""Checks made before an exactly-once sink writes anything, against the broker's own limits."""

from __future__ import annotations

import logging

from connectors.kafka.clients import ClusterAdmin
from connectors.kafka.config import KafkaSinkConfig

log = logging.getLogger(__name__)


def check_transaction_timeout(config: KafkaSinkConfig, admin: ClusterAdmin) -> None:
    """Refuse a transaction.timeout.ms the broker would reject, or one so short that a transaction
    could be aborted by the broker between its pre-commit and its commit (silent data loss)."""
    if not config.exactly_once:
        return
    timeout = config.transaction_timeout_ms
    raw_max = admin.broker_config("transaction.max.timeout.ms")
    if raw_max is None:
        log.warning("the broker did not report transaction.max.timeout.ms; cannot check "
                    "transaction.timeout.ms=%d against it", timeout)
    elif timeout > int(raw_max):
        raise ValueError(
            f"transaction.timeout.ms={timeout} exceeds the broker's transaction.max.timeout.ms="
            f"{raw_max}; the broker would refuse every transaction. Use a value <= {raw_max}, or "
            "raise transaction.max.timeout.ms on the brokers."
        )
    needed = config.checkpoint_timeout_ms + config.restart_budget_ms
    if timeout < needed:
        raise ValueError(
            f"transaction.timeout.ms={timeout} is shorter than the checkpoint timeout "
            f"({config.checkpoint_timeout_ms} ms) plus the restart budget ({config.restart_budget_ms} ms) "
            f"= {needed} ms. A transaction pre-committed for a checkpoint must survive until that "
            "checkpoint completes and, after a crash, until the restarted job commits it; otherwise "
            "the broker aborts it and its records are lost. Raise transaction.timeout.ms or lower "
            "the checkpoint timeout / restart budget."
        )
