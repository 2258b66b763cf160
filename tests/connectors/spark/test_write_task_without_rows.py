"""A write task with no row opens no transaction: no producer is initialising, so no InitProducerId
registers its transactional id on the broker (at 200 shuffle partitions most of a stateful
query's tasks have no row). A task with rows still initialises its producer once, at its first
non-empty Arrow batch, and writes every row."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("pyspark")

import pyarrow as pa  # noqa: E402

from connectors.simulated_kafka import FakeKafkaClients  # noqa: E402
from connectors.spark import write_task as write_task_module  # noqa: E402
from connectors.spark.options import parse_sink_options  # noqa: E402
from connectors.spark.write_task import first_rows, write_task  # noqa: E402

SCHEMA = pa.schema([("value", pa.binary())])


def batch(*values: bytes) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"value": list(values)}, schema=SCHEMA)


@pytest.fixture
def fake(tmp_path):
    clients = FakeKafkaClients(tmp_path / "kafka.db")
    clients.admin().create_topic("out", 1)
    return clients


def run_task(fake, tmp_path, monkeypatch, partition_id: int, batches: list[pa.RecordBatch]):
    options = parse_sink_options({"kafka.bootstrap.servers": fake.bootstrap_servers, "topic": "out",
                                  "checkpointlocation": str(tmp_path / "chk")}, streaming=True)
    context = SimpleNamespace(partitionId=lambda: partition_id, attemptNumber=lambda: 0)
    monkeypatch.setattr(write_task_module, "TaskContext", SimpleNamespace(get=lambda: context))
    return options, write_task(options, iter(batches), 0, None)


def test_a_task_without_rows_initialises_no_producer_and_leaves_no_transactional_id(fake, tmp_path, monkeypatch):
    initialising: list[str] = []
    real = write_task_module.PRODUCERS.initialise

    def initialise(clients, transactional_id, *args, **kwargs):
        initialising.append(transactional_id)
        return real(clients, transactional_id, *args, **kwargs)

    monkeypatch.setattr(write_task_module.PRODUCERS, "initialise", initialise)
    for partition_id, batches in enumerate([[], [batch()], [batch(), batch()]]):
        _, message = run_task(fake, tmp_path, monkeypatch, partition_id, batches)
        assert (message.committable, message.record_count) == (None, 0)
    assert initialising == []
    options, message = run_task(fake, tmp_path, monkeypatch, 7, [batch(), batch(b"a", b"b"), batch(b"c")])
    assert message.record_count == 3
    prefix = options.config.transactional_id_prefix
    assert initialising == [f"{prefix}-7-0"]
    # The broker knows the id of the task that wrote, and no other.
    assert [t.transactional_id for t in fake.txn_control().list_transactions(prefix + "-")] == [f"{prefix}-7-0"]


def test_the_first_rows_are_found_without_losing_a_batch():
    empty, first, second = batch(), batch(b"1", b"2"), batch(b"3")
    batches, found = first_rows(iter([empty, first, second]))
    assert found is first
    assert list(batches) == [empty, first, second]
    none, found = first_rows(iter([empty]))
    assert found is None and list(none) == [empty]
