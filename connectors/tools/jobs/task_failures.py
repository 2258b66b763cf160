"""Executor task failures for failure replay: fail the first attempt of a seeded random share of
a query's tasks, which Spark then retries (``KAFKA_EOS_TASK_FAILURE_RATE`` between 0 and 1,
``KAFKA_EOS_TASK_FAILURE_SEED``).

A job puts :func:`with_task_failures` in front of its sink; each task passes its rows on, then
fails at the end of its input, after the sink has written them into its transaction, so the
failed attempt leaves written, unflushed records for the retry to fence.
"""

from __future__ import annotations

import logging
import os
import random
from typing import TYPE_CHECKING, Iterator

from connectors.spark.batch_context import BATCH_ID_PROPERTY
from twophase.errors import InvalidValueError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)

TASK_FAILURE_RATE_ENV = "KAFKA_EOS_TASK_FAILURE_RATE"
TASK_FAILURE_SEED_ENV = "KAFKA_EOS_TASK_FAILURE_SEED"


class InjectedTaskFailure(RuntimeError):
    """A task failure injected by KAFKA_EOS_TASK_FAILURE_RATE, for failure replay."""


def task_failure_rate() -> float:
    raw = os.environ.get(TASK_FAILURE_RATE_ENV, "0") or "0"
    try:
        rate = float(raw)
    except ValueError:
        raise InvalidValueError(f"{TASK_FAILURE_RATE_ENV} must be a number between 0 and 1, got {raw!r}") from None
    if not 0 <= rate <= 1:
        raise InvalidValueError(f"{TASK_FAILURE_RATE_ENV} must be a number between 0 and 1, got {raw!r}")
    return rate


def maybe_fail_task(checkpoint_id: int, partition_id: int, attempt: int) -> None:
    """Fail the first attempt of a seeded random share of tasks."""
    rate = task_failure_rate()
    if rate <= 0 or attempt > 0:
        return
    seed = os.environ.get(TASK_FAILURE_SEED_ENV, "0")
    if random.Random(f"{seed}:{checkpoint_id}:{partition_id}").random() < rate:
        log.warning("injected task failure: checkpoint %d partition %d", checkpoint_id, partition_id)
        raise InjectedTaskFailure(f"injected failure of task {partition_id} of checkpoint {checkpoint_id}")


def _failing_tasks(batches: Iterator["pa.RecordBatch"]) -> Iterator["pa.RecordBatch"]:
    from pyspark import TaskContext

    yield from batches
    context = TaskContext.get()
    if context is None:
        return
    raw = context.getLocalProperty(BATCH_ID_PROPERTY)
    maybe_fail_task(int(raw) if raw is not None else 0, context.partitionId(), context.attemptNumber())


def with_task_failures(frame: "DataFrame") -> "DataFrame":
    """``frame`` with the seeded task failures in its tasks (unchanged when the rate is 0)."""
    if task_failure_rate() <= 0:
        return frame
    return frame.mapInArrow(_failing_tasks, frame.schema)
