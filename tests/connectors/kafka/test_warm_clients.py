"""The data path's clients kept warm: a worker's reader kept between tasks, and a producer whose
first InitProducerId goes out at once."""

from __future__ import annotations

import pytest

from connectors.kafka.clients import TopicPartition
from connectors.kafka.reader_pool import ReaderPool
from connectors.simulated_kafka import FakeKafkaClients
from kafka_testkit.topic_records import produce_committed


class CountingClients:
    """Fake clients that count the readers they make."""

    def __init__(self, fake: FakeKafkaClients) -> None:
        self.fake = fake
        self.bootstrap_servers = fake.bootstrap_servers
        self.readers: list = []

    def reader(self, read_committed: bool = True, config=None):
        reader = self.fake.reader(read_committed=read_committed, config=config)
        self.readers.append(reader)
        return reader


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


def test_a_producer_looks_up_its_topic_before_it_asks_for_its_coordinator():
    """librdkafka retries a coordinator lookup made before a broker connection is up only after
    500 ms; the topic's metadata waits for that connection, so the lookup goes out at once."""
    from connectors.kafka.clients._confluent.producer import ConfluentProducer

    calls = []

    class Handle:
        def list_topics(self, topic, timeout):
            calls.append(("metadata", topic))

        def init_transactions(self, timeout):
            calls.append(("init", None))

        def begin_transaction(self):
            calls.append(("begin", None))

        def poll(self, timeout):
            return 0

    producer = ConfluentProducer("127.0.0.1:1", "p-0-0", {})
    producer._producer = Handle()
    producer.start_transaction(5, topic="out")
    assert calls == [("metadata", "out"), ("metadata", "out"), ("init", None), ("begin", None)]
    calls.clear()
    producer.start_transaction(5)  # per-record topics: nothing to look up
    assert calls == [("init", None), ("begin", None)]
