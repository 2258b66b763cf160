"""Errors of the monitoring package."""

from __future__ import annotations

from twophase.errors import KafkaEosError


class StatusUnavailableError(KafkaEosError, RuntimeError):
    """A query's status cannot be read: Spark's checkpoint or the sink's state is missing or
    unreadable. ``kafka-eos status`` prints it as one line and exits 2."""
