"""A read task of the kafka-eos source over several Kafka partitions (eos.maxPartitions), read
in-process on the fake cluster: every offset of the task once, retention between planning and
reading honoured as failOnDataLoss says."""

import pytest

pytest.importorskip("pyspark")

from connectors.kafka.clients import TopicPartition  # noqa: E402
from connectors.kafka.errors import DataLossError  # noqa: E402
from connectors.spark.options import parse_source_options  # noqa: E402
from connectors.spark.reader import KafkaEosBatchReader, OffsetRange, _together  # noqa: E402
from kafka_testkit.fake_cluster import FakeKafkaClients  # noqa: E402
from kafka_testkit.topic_records import produce_committed  # noqa: E402


@pytest.fixture
def fake(tmp_path):
    clients = FakeKafkaClients(tmp_path / "kafka.db")
    clients.admin().create_topic("in", 3)
    produce_committed(clients, "in", [f"v{i}".encode() for i in range(60)], key_of=lambda v: v)
    return clients


def batch_reader(fake, **options):
    return KafkaEosBatchReader(parse_source_options(
        {"kafka.bootstrap.servers": fake.bootstrap_servers, "subscribe": "in", "eos.maxpartitions": "1",
         **{k.lower(): v for k, v in options.items()}}, streaming=False))


def offsets_read(reader, task):
    rows = [row for batch in reader.read(task) for row in batch.select(["partition", "offset"]).to_pylist()]
    return [(row["partition"], row["offset"]) for row in rows]


def latest(fake):
    admin = fake.admin()
    tps = [TopicPartition("in", p) for p in admin.partitions("in")]
    return admin.list_offsets(tps, "latest", True)


def test_one_task_reads_every_offset_of_its_partitions_once(fake):
    reader = batch_reader(fake)
    [task] = reader.partitions()
    assert len(task.ranges) == 3
    got = offsets_read(reader, task)
    assert len(got) == len(set(got)) == 60
    # The end offsets count the transaction's commit markers; every record before them was read.
    assert {p: max(o for q, o in got if q == p) for p, _ in got} == {tp.partition: end - 2 for tp, end in
                                                                    latest(fake).items()}


def test_retention_between_planning_and_reading_skips_or_fails_as_fail_on_data_loss_says(fake):
    lenient = batch_reader(fake, failOnDataLoss="false")
    [task] = lenient.partitions()
    zero = TopicPartition("in", 0)
    fake.delete_records_before(zero, 5)
    got = offsets_read(lenient, task)
    assert len(got) == len(set(got)) == 55
    assert min(o for p, o in got if p == 0) == 5

    strict = batch_reader(fake)
    with pytest.raises(DataLossError, match="in partition 0 from 0"):
        offsets_read(strict, task)


def test_ranges_of_one_partition_are_read_apart_and_others_together():
    ranges = [OffsetRange("t", 0, 0, 10), OffsetRange("t", 0, 10, 20), OffsetRange("t", 1, 0, 5)]
    assert _together(ranges) == [{TopicPartition("t", 0): (0, 10), TopicPartition("t", 1): (0, 5)},
                                 {TopicPartition("t", 0): (10, 20)}]
