"""A read task of the kafka-eos source over several Kafka partitions (eos.maxPartitions), read
in-process on the fake cluster: every offset of the task once, retention between planning and
reading honoured as failOnDataLoss says."""

import pytest

pytest.importorskip("pyspark")

from connectors.kafka.clients import TopicPartition  # noqa: E402
from connectors.kafka.kafka_errors import DataLossError  # noqa: E402
from connectors.simulated_kafka import FakeKafkaClients  # noqa: E402
from connectors.spark.options import RECORDS_PER_SLOT_TASK, parse_source_options  # noqa: E402
from connectors.spark.datasource_readers import KafkaEosBatchReader, OffsetRange, _together, plan_read_tasks  # noqa: E402
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


def test_max_records_per_partition_bounds_every_task_and_composes_with_min_and_max_partitions():
    a, b = TopicPartition("t", 0), TopicPartition("t", 1)
    ranges = {a: (0, 100), b: (10, 20)}

    def covered(tasks):
        return sorted((r.partition, o) for task in tasks for r in task.ranges for o in range(r.start, r.end))

    every_offset = sorted([(0, o) for o in range(100)] + [(1, o) for o in range(10, 20)])
    # ceil(100 / 30) = 4 even pieces, as Spark's KafkaOffsetRangeCalculator; 10 offsets stay whole.
    tasks = plan_read_tasks(ranges, None, max_records_per_partition=30)
    assert [(r.partition, r.start, r.end) for t in tasks for r in t.ranges] == [
        (0, 0, 25), (0, 25, 50), (0, 50, 75), (0, 75, 100), (1, 10, 20)]
    assert covered(tasks) == every_offset
    # minPartitions splits further; no task grows.
    tasks = plan_read_tasks(ranges, 8, max_records_per_partition=30)
    assert len(tasks) >= 8 and max(sum(r.size for r in t.ranges) for t in tasks) <= 30
    assert covered(tasks) == every_offset
    # eos.maxPartitions groups pieces, but never past maxRecordsPerPartition: 110 offsets need
    # at least 4 tasks of <= 30, more than eos.maxPartitions=2.
    tasks = plan_read_tasks(ranges, None, max_partitions=2, max_records_per_partition=30)
    assert len(tasks) >= 4 and all(sum(r.size for r in t.ranges) <= 30 for t in tasks)
    assert covered(tasks) == every_offset
    # A bound above every range changes nothing.
    assert plan_read_tasks(ranges, None, max_records_per_partition=1000) == plan_read_tasks(ranges, None)


def test_batch_read_tasks_follow_max_records_per_partition(fake):
    reader = batch_reader(fake, maxRecordsPerPartition="7", **{"eos.maxPartitions": "2"})
    tasks = reader.partitions()
    assert all(sum(r.size for r in task.ranges) <= 7 for task in tasks)
    got = [o for task in tasks for o in offsets_read(reader, task)]
    assert len(got) == len(set(got)) == 60


class FakeClock:
    """Milliseconds that move only when the test says."""

    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def stream_reader(fake, clock, **options):
    from connectors.spark.datasource_readers import KafkaEosStreamReader

    parsed = parse_source_options({"kafka.bootstrap.servers": fake.bootstrap_servers, "subscribe": "in",
                                   "startingoffsets": "earliest",
                                   **{k.lower(): v for k, v in options.items()}}, streaming=True)
    return KafkaEosStreamReader(parsed, clock=clock)


def new_offsets(start, end):
    return sum(o - start["in"][p] for p, o in end["in"].items())


def test_min_offsets_per_trigger_waits_and_max_trigger_delay_releases(fake):
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    clock = FakeClock()
    reader = stream_reader(fake, clock, minOffsetsPerTrigger="50", maxTriggerDelay="10s")
    start = reader.initialOffset()
    # The first trigger of a run always goes ahead (Spark's last trigger time starts at 0).
    first = reader.latestOffset(start, ReadAllAvailable())
    assert new_offsets(start, first) == 60 + 3  # 60 records and a commit marker per partition
    produce_committed(fake, "in", [f"w{i}".encode() for i in range(20)], key_of=lambda v: v, txn_id="w1")
    # 20 + 3 markers < 50: no batch (the start comes back as it is), until the delay is up.
    clock.now += 1_000
    assert reader.latestOffset(first, ReadAllAvailable()) is first
    clock.now += 8_999
    assert reader.latestOffset(first, ReadAllAvailable()) is first
    clock.now += 1  # 10 s since the last batch: maxTriggerDelay releases what there is
    released = reader.latestOffset(first, ReadAllAvailable())
    assert new_offsets(first, released) == 23
    # Enough new offsets go ahead at once, whatever the time.
    produce_committed(fake, "in", [f"x{i}".encode() for i in range(60)], key_of=lambda v: v, txn_id="w2")
    clock.now += 1
    assert new_offsets(released, reader.latestOffset(released, ReadAllAvailable())) == 63


def test_min_offsets_per_trigger_under_available_now_is_sparks(fake):
    from pyspark.sql.streaming.datasource import ReadMaxRows

    clock = FakeClock()
    reader = stream_reader(fake, clock, minOffsetsPerTrigger="30", maxOffsetsPerTrigger="40")
    start = reader.initialOffset()
    reader.prepareForTriggerAvailableNow()
    limit = reader.getDefaultReadLimit()
    assert limit == ReadMaxRows(40)
    first = reader.latestOffset(start, limit)
    taken = new_offsets(start, first)
    assert 30 < taken <= 40
    # 63 - taken offsets are left, fewer than 30, within maxTriggerDelay (15m): held back, which
    # ends a Trigger.AvailableNow run as it does Spark's; the next run (first trigger) reads them.
    clock.now += 1_000
    assert reader.latestOffset(first, limit) is first
    rerun = stream_reader(fake, clock, minOffsetsPerTrigger="30", maxOffsetsPerTrigger="40")
    rerun.prepareForTriggerAvailableNow()
    assert new_offsets(first, rerun.latestOffset(first, limit)) == 63 - taken


def test_min_records_per_task_sizes_a_batch_by_its_records():
    """eos.minRecordsPerTask (on by default): a small batch is one read task, and so one write
    task, one producer and one transaction; a large one one task per Kafka partition; minPartitions,
    eos.maxPartitions and maxRecordsPerPartition keep their meaning."""
    tps = [TopicPartition("t", p) for p in range(4)]

    def plan(per_partition, **kwargs):
        tasks = plan_read_tasks({tp: (0, per_partition) for tp in tps}, kwargs.pop("min_partitions", None), **kwargs)
        assert sorted((r.partition, r.start, r.end) for t in tasks for r in t.ranges) == [
            (p, 0, per_partition) for p in range(4)] or kwargs.get("max_records_per_partition")
        return [sum(r.size for r in t.ranges) for t in tasks]

    # 4 x 250 = 1,000 records: one task; 4 x 10,000: 2 of 20,000; 4 x 100,000: 4 (one per partition).
    assert plan(250, min_records_per_task=25_000) == [1000]
    assert plan(10_000, min_records_per_task=25_000) == [20_000, 20_000]
    assert plan(100_000, min_records_per_task=25_000) == [100_000] * 4
    # 0 is Spark's one task per Kafka partition.
    assert plan(250, min_records_per_task=0) == [250] * 4
    # minPartitions wins over the records; eos.maxPartitions caps them.
    assert plan(250, min_records_per_task=25_000, min_partitions=2) == [500, 500]
    assert plan(100_000, min_records_per_task=25_000, max_partitions=2) == [200_000, 200_000]
    # maxRecordsPerPartition still bounds every task.
    assert max(plan(250, min_records_per_task=25_000, max_records_per_partition=300)) <= 300



def test_a_large_batch_follows_the_task_slots_and_a_small_one_keeps_its_task():
    """eos.taskSlots (the kit's provider gives Spark's defaultParallelism): a batch of at least
    slots x RECORDS_PER_SLOT_TASK records is read by min(partitions, slots) tasks, where
    eos.minRecordsPerTask alone would give it fewer; never more tasks than slots; a batch under
    eos.minRecordsPerTask keeps one task; minPartitions still wins."""
    tps = [TopicPartition("t", p) for p in range(64)]

    def tasks(records, **kwargs):
        per = records // len(tps)
        planned = plan_read_tasks({tp: (0, per) for tp in tps}, kwargs.pop("min_partitions", None),
                                  min_records_per_task=25_000, **kwargs)
        assert sum(r.size for t in planned for r in t.ranges) == per * len(tps)
        return len(planned)

    # 64 slots: 640,000 records (10,000 a slot) get 64 tasks, where the records alone give 26.
    assert tasks(640_000, task_slots=64) == 64
    assert tasks(640_000) == 26
    # 8 slots: 160,000 records get 8 tasks (7 by records); 1,280,000 get 8, not 52 in 7 waves.
    assert tasks(160_000, task_slots=8) == 8
    assert tasks(1_280_000, task_slots=8) == 8
    assert tasks(1_280_000) == 52
    # 64 slots, 128,000 records: one task per RECORDS_PER_SLOT_TASK, 16, more than the records' 6.
    assert tasks(128_000, task_slots=64) == 128_000 // RECORDS_PER_SLOT_TASK
    # A small batch keeps its one transaction however many slots.
    assert tasks(19_200, task_slots=64) == 1
    # minPartitions wins over the slots; eos.maxPartitions caps.
    assert tasks(19_200, task_slots=64, min_partitions=4) == 4
    assert tasks(640_000, task_slots=64, max_partitions=16) == 16
    # Fewer partitions than slots: one task each.
    assert len(plan_read_tasks({tp: (0, 100_000) for tp in tps[:4]}, None, min_records_per_task=25_000,
                               task_slots=64)) == 4


def test_initial_offsets_are_looked_up_once_per_run(fake):
    # Spark asks for them twice at a query's first start; a second answer taken after new records
    # arrived would name another start than the one Spark logged ("latest" moves).
    reader = stream_reader(fake, FakeClock(), startingOffsets="latest")
    first = reader.initialOffset()
    assert {int(p): o for p, o in first["in"].items()} == {tp.partition: o for tp, o in latest(fake).items()}
    produce_committed(fake, "in", [f"n{i}".encode() for i in range(10)], key_of=lambda v: v, txn_id="late")
    assert reader.initialOffset() == first
    # A new run (another reader: a restarted query without offsets in its log) looks again.
    assert stream_reader(fake, FakeClock(), startingOffsets="latest").initialOffset() != first
