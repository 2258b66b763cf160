"""The data path's warm clients: the source's reader kept between tasks of a worker, and the sink's
producer of a slot's next batch prepared while the slot's task of this batch writes."""

from __future__ import annotations

import threading

import pytest

from connectors.kafka.clients import TopicPartition
from connectors.kafka.reader_pool import ReaderPool
from connectors.kafka.sink.internal.producer_pool import ProducerPool
from kafka_testkit.fake_cluster import FakeKafkaClients
from kafka_testkit.topic_records import produce_committed


class CountingClients:
    """Fake clients that count the readers and producers they make."""

    def __init__(self, fake: FakeKafkaClients) -> None:
        self.fake = fake
        self.bootstrap_servers = fake.bootstrap_servers
        self.readers: list = []
        self.producers: list[str | None] = []

    def reader(self, read_committed: bool = True, config=None):
        reader = self.fake.reader(read_committed=read_committed, config=config)
        self.readers.append(reader)
        return reader

    def producer(self, transactional_id, config=None):
        self.producers.append(transactional_id)
        return self.fake.producer(transactional_id, config)


@pytest.fixture
def clients(tmp_path):
    fake = FakeKafkaClients(tmp_path / "kafka.db")
    fake.admin().create_topic("in", 2)
    produce_committed(fake, "in", [b"v%d" % i for i in range(20)])
    return CountingClients(fake)


def read_all_of(reader, partition: int) -> int:
    tp = TopicPartition("in", partition)
    end = 10  # produce_committed spreads 20 records over 2 partitions
    return sum(1 for _ in reader.read({tp: (0, end)}))


def test_tasks_of_a_worker_read_with_one_reader_and_a_failed_read_gives_it_up(clients):
    pool = ReaderPool()
    for partition in (0, 1, 0):
        with pool.reader(clients, True, {}) as reader:
            read_all_of(reader, partition)
    assert len(clients.readers) == 1, "each task made a consumer of its own"
    with pytest.raises(RuntimeError):
        with pool.reader(clients, True, {}) as reader:
            raise RuntimeError("the task failed mid-read")
    with pool.reader(clients, True, {}) as reader:
        assert read_all_of(reader, 1) > 0
    assert len(clients.readers) == 2, "a reader whose read failed was reused"
    # Other settings, another reader.
    with pool.reader(clients, False, {}) as reader:
        pass
    assert len(clients.readers) == 3
    pool.close()


def test_the_next_batchs_producer_is_taken_only_for_its_id_and_batch(clients):
    pool = ProducerPool()
    ahead = pool.prepare_ahead(clients, "p-0-1", 8, {}, 10)
    ahead.wait(10)
    assert pool.take_ahead("p-0-1", 9) is None, "prepared for batch 8, not 9"
    assert pool.take_ahead("p-0-1", 8) is None, "a mismatch discards it"
    again = pool.prepare_ahead(clients, "p-0-1", 10, {}, 10)
    assert pool.take_ahead("p-0-0", 10) is None
    taken = pool.take_ahead("p-0-1", 10)
    assert taken is again and taken.take(10) is not None
    assert pool.take_ahead("p-0-1", 10) is None, "taken once"
    assert clients.producers == ["p-0-1", "p-0-1"]


def test_a_task_returns_only_once_the_next_batchs_init_is_answered(clients, tmp_path, monkeypatch):
    """The early InitProducerId of batch N+1's id must be over before batch N ends: else it could
    fence a producer of N+1 that already writes (and abort its transaction)."""

    pytest.importorskip("pyspark")
    import pyarrow as pa

    from connectors.kafka.sink.internal import producer_pool
    from connectors.spark import write_task as write_task_module
    from connectors.spark.options import parse_sink_options

    clients.fake.admin().create_topic("out", 2)
    options = parse_sink_options({"kafka.bootstrap.servers": clients.bootstrap_servers, "topic": "out",
                                  "eos.statedir": str(tmp_path / "state")}, streaming=False)
    released = threading.Event()
    answered = []
    real_ready = producer_pool.ProducerPool._ready

    def slow_ready(clients_, transactional_id, config, timeout_s):
        if transactional_id.endswith("-1"):  # the next batch's id (batch 4 -> parity 1)
            released.wait(10)
            answered.append(transactional_id)
        return real_ready(clients_, transactional_id, config, timeout_s)

    monkeypatch.setattr(producer_pool.ProducerPool, "_ready", staticmethod(slow_ready))
    monkeypatch.setattr(write_task_module, "PRODUCERS", producer_pool.ProducerPool())
    monkeypatch.setattr(write_task_module, "clients_for", lambda *a, **k: clients)
    rows = pa.RecordBatch.from_pydict({"value": [b"a", b"b"]})
    result: list = []
    task = threading.Thread(target=lambda: result.append(
        write_task_module.write_task(options, iter([rows]), 4, -1, next_checkpoint_id=5)))
    task.start()
    task.join(1.0)
    assert task.is_alive() and not answered, "the task returned before the next batch's init was answered"
    released.set()
    task.join(10)
    assert not task.is_alive() and answered and result[0].record_count == 2
