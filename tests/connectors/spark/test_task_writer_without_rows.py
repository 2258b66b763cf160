"""A write task with no row opens no transaction: its producer, made and connected while the task
waits for rows, is closed without an InitProducerId, so its transactional id never reaches the
broker (at 200 shuffle partitions most of a stateful
query's tasks have no row). A task with rows still initialises its producer once, at its first
non-empty Arrow batch, and writes every row."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("pyspark")

import pyarrow as pa  # noqa: E402

from connectors.simulated_kafka import FakeKafkaClients  # noqa: E402
from connectors.simulated_kafka.clients import FakeProducer  # noqa: E402
from connectors.spark import task_writer as task_writer_module  # noqa: E402
from connectors.spark.options import parse_sink_options  # noqa: E402
from connectors.spark.task_writer import first_rows, write_task  # noqa: E402

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
    monkeypatch.setattr(task_writer_module, "TaskContext", SimpleNamespace(get=lambda: context))
    return options, write_task(options, iter(batches), 0, None)


def test_a_task_without_rows_initialises_no_producer_and_leaves_no_transactional_id(fake, tmp_path, monkeypatch):
    initialised: list[str] = []
    real = FakeProducer.init_transactions

    def init_transactions(self, timeout_s):
        initialised.append(self._transactional_id)
        return real(self, timeout_s)

    monkeypatch.setattr(FakeProducer, "init_transactions", init_transactions)
    for partition_id, batches in enumerate([[], [batch()], [batch(), batch()]]):
        _, message = run_task(fake, tmp_path, monkeypatch, partition_id, batches)
        assert (message.committable, message.record_count) == (None, 0)
    # Their producers were made and connected while the tasks waited for rows, then closed.
    assert initialised == []
    options, message = run_task(fake, tmp_path, monkeypatch, 7, [batch(), batch(b"a", b"b"), batch(b"c")])
    assert message.record_count == 3
    prefix = options.config.transactional_id_prefix
    assert initialised == [f"{prefix}-7-0"]
    # The broker knows the id of the task that wrote, and no other.
    assert [t.transactional_id for t in fake.txn_control().list_transactions(prefix + "-")] == [f"{prefix}-7-0"]


def test_a_task_whose_input_fails_before_its_first_row_initialises_nothing(fake, tmp_path, monkeypatch):
    def failing():
        yield batch()
        raise RuntimeError("upstream task failed")

    with pytest.raises(RuntimeError, match="upstream"):
        run_task(fake, tmp_path, monkeypatch, 3, failing())
    assert fake.txn_control().list_transactions("") == []


def test_the_first_rows_are_found_without_losing_a_batch():
    empty, first, second = batch(), batch(b"1", b"2"), batch(b"3")
    batches, found = first_rows(iter([empty, first, second]))
    assert found is first
    assert list(batches) == [empty, first, second]
    none, found = first_rows(iter([empty]))
    assert found is None and list(none) == [empty]


def test_a_task_connects_its_producer_while_it_waits_for_its_first_rows(fake, tmp_path, monkeypatch):
    import threading

    looked_up = threading.Event()
    real = FakeProducer.look_up

    def look_up(self, topic, timeout_s):
        real(self, topic, timeout_s)
        looked_up.set()

    monkeypatch.setattr(FakeProducer, "look_up", look_up)

    def rows_after_the_look_up():
        # The task's input is not ready until its producer has looked its topic up.
        assert looked_up.wait(10), "the producer was not connected before the task's first rows"
        yield batch(b"a")

    _, message = run_task(fake, tmp_path, monkeypatch, 0, rows_after_the_look_up())
    assert message.record_count == 1
