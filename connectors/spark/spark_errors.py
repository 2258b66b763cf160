"""Errors raised by the Spark adapters: bad options, a wrong DataFrame, state that is not the
query's. Each names what to change."""

from __future__ import annotations

from twophase.errors import InvalidValueError, KafkaEosError


class KafkaEosOptionError(InvalidValueError):
    """An option is missing, unknown or malformed. The message names it and its valid values."""


class SinkSchemaError(KafkaEosError, ValueError):
    """The DataFrame written to the sink lacks a column or has one of the wrong type
    (Spark's Kafka sink raises an AnalysisException for the same cases)."""


class SpeculationNotSupportedError(KafkaEosError, RuntimeError):
    """``spark.speculation`` is on, which the kit's two-phase commit has not been tested with."""


class ForeignStateError(KafkaEosError, RuntimeError):
    """The state directory belongs to another query (or to batch writes)."""


class LostStateError(KafkaEosError, RuntimeError):
    """The query committed batches that its state directory knows nothing of."""


class QueryCheckpointError(KafkaEosError, RuntimeError):
    """Spark's checkpoint folder does not hold what every started query has there."""


class ClassArchiveError(KafkaEosError, RuntimeError):
    """The driver JVM's class-data-sharing archive could not be recorded."""


class WorkerPythonError(KafkaEosError, RuntimeError):
    """Spark's Python workers cannot import the kit (or a package it needs): the Python they run,
    ``PYSPARK_PYTHON`` / ``spark.pyspark.python``, lacks it. The message says how to give it to them."""


class UnsupportedSparkError(KafkaEosError, RuntimeError):
    """The Spark release in use lacks what the asked-for feature needs (spark_versions.py); the
    message names the release and what works on it instead."""
