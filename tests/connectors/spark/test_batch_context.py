"""Which batch a write belongs to, learned in one place (``connectors/spark/batch_context.py``)."""

import logging
import time
from types import SimpleNamespace

import pyspark

from connectors.spark.batch_context import BATCH_ID_PROPERTY, BatchContext


def _task_with(properties, monkeypatch):
    context = SimpleNamespace(getLocalProperty=lambda name: properties.get(name))
    monkeypatch.setattr(pyspark.TaskContext, "get", staticmethod(lambda: context))


def test_a_streaming_task_takes_its_batch_id_from_sparks_local_property(monkeypatch):
    _task_with({BATCH_ID_PROPERTY: "12"}, monkeypatch)
    assert BatchContext.of_streaming_task(decided_through=3).checkpoint_id == 12


def test_without_the_property_the_batch_after_the_newest_stored_one_is_guessed_with_a_warning(monkeypatch, caplog):
    _task_with({}, monkeypatch)
    with caplog.at_level(logging.WARNING):
        assert BatchContext.of_streaming_task(decided_through=3).checkpoint_id == 4
        assert BatchContext.of_streaming_task(decided_through=None).checkpoint_id == 0
    assert "is missing; assuming batch 4 (checked at commit)" in caplog.text


def test_a_plain_batch_write_gets_an_id_above_every_stored_one_that_spark_never_replays():
    context = BatchContext.of_batch_write(decided_through=None)
    assert not context.replayable and context.checkpoint_id >= int(time.time() * 1000) - 60_000
    far_ahead = 10 ** 15
    assert BatchContext.of_batch_write(decided_through=far_ahead).checkpoint_id == far_ahead + 1
