import logging

import pytest

from connectors.kafka.clients import TopicPartition
from connectors.kafka.source import KafkaSource, KafkaSourceConfig, parse_offsets_json, plan_ranges
from connectors.kafka.kafka_errors import DataLossError
from connectors.simulated_kafka import FakeKafkaClients
from kafka_testkit.topic_records import produce_aborted, produce_committed


@pytest.fixture
def fake(tmp_path):
    clients = FakeKafkaClients(tmp_path / "kafka.db")
    clients.admin().create_topic("in", 2)
    return clients


def source_for(fake, **overrides):
    options = dict(bootstrap_servers=fake.bootstrap_servers, subscribe=["in"], starting_offsets="earliest")
    options.update(overrides)
    source = KafkaSource(KafkaSourceConfig(**options), clients=fake)
    return source


def drain(source, max_records=1000):
    out = []
    while True:
        batch = source.poll(max_records)
        if not batch:
            return out
        out.extend(batch)


def test_reads_only_committed_records_across_markers_and_aborted_ones(fake):
    produce_committed(fake, "in", [b"a", b"b"], txn_id="p1")
    produce_aborted(fake, "in", [b"x", b"y", b"z"])
    produce_committed(fake, "in", [b"c"], txn_id="p2")
    source = source_for(fake)
    source.restore_state(None)
    values = sorted(r.value for r in drain(source, max_records=2))
    assert values == [b"a", b"b", b"c"]
    # Positions sit after the markers: reading again yields nothing and loses nothing.
    admin = fake.admin()
    ends = admin.list_offsets([TopicPartition("in", 0), TopicPartition("in", 1)], "latest")
    assert source.positions() == ends
    assert drain(source) == []


def test_open_transaction_stalls_reads_until_it_ends(fake):
    producer = fake.producer("open-one", {})
    identity = producer.init_transactions(10)
    producer.begin_transaction()
    producer.produce("in", b"pending", key=b"k", partition=0)
    producer.flush(10)
    produce_committed(fake, "in", [b"after"], key_of=lambda v: None, txn_id="p3")
    source = source_for(fake, assign={"in": [0]}, subscribe=())
    source.restore_state(None)
    assert [r.value for r in drain(source)] == []  # everything on partition 0 is behind the LSO
    fake.txn_control().end_txn("open-one", identity, True)
    values = [r.value for r in drain(source)]
    assert b"pending" in values


def test_snapshot_and_restore_are_exact(fake):
    produce_committed(fake, "in", [bytes([i]) for i in range(50)])
    source = source_for(fake)
    source.restore_state(None)
    first = source.poll(20)
    state = source.snapshot_state(1)
    rest = drain(source)
    again = source_for(fake)
    again.restore_state(state)
    assert sorted(r.value for r in drain(again)) == sorted(r.value for r in rest)
    assert len(first) + len(rest) == 50
    assert set(state) == {"in"} and set(state["in"]) == {"0", "1"}


def test_starting_offsets_latest_json_and_timestamp(fake):
    produce_committed(fake, "in", [b"old"], key_of=lambda v: None, txn_id="a")
    latest = source_for(fake, starting_offsets="latest")
    latest.restore_state(None)
    produce_committed(fake, "in", [b"new"], key_of=lambda v: None, txn_id="b")
    assert [r.value for r in drain(latest)] == [b"new"]

    explicit = source_for(fake, starting_offsets=parse_offsets_json('{"in":{"0":-2,"1":-1}}', "startingOffsets"))
    explicit.restore_state(None)
    assert explicit.positions()[TopicPartition("in", 1)] == fake.admin().list_offsets(
        [TopicPartition("in", 1)], "latest")[TopicPartition("in", 1)]

    cut = fake.now_ms() + 1000
    fake.advance_time(2000)
    produce_committed(fake, "in", [b"later"], key_of=lambda v: None, txn_id="c")
    by_time = source_for(fake, starting_timestamps={TopicPartition("in", 0): cut, TopicPartition("in", 1): cut},
                         starting_timestamp_strategy="latest")
    by_time.restore_state(None)
    assert [r.value for r in drain(by_time)] == [b"later"]


def produce_at(fake, records, txn_id):
    """Committed records with explicit create timestamps: (partition, value, timestamp_ms)."""
    producer = fake.producer(txn_id, {})
    identity = producer.init_transactions(10)
    producer.begin_transaction()
    for partition, value, ts in records:
        producer.produce("in", value, partition=partition, timestamp_ms=ts)
    producer.flush(10)
    producer.close()
    fake.txn_control().end_txn(txn_id, identity, True)


P0, P1 = TopicPartition("in", 0), TopicPartition("in", 1)


@pytest.fixture
def timed(fake):
    # Partition 0: records at 1000, 2000, 3000; partition 1: one at 1500. Their commit markers
    # carry the cluster's clock (now), far later.
    produce_at(fake, [(0, b"a1000", 1000), (0, b"a2000", 2000), (0, b"a3000", 3000), (1, b"b1500", 1500)], "t")
    return fake


def test_starting_timestamp_takes_precedence_over_by_timestamp_and_offsets(timed):
    # startingTimestamp > startingOffsetsByTimestamp > startingOffsets, as Spark documents.
    source = source_for(timed, starting_offsets="latest", starting_timestamp=1500,
                        starting_timestamps={P0: 3000, P1: 0})
    source.restore_state(None)
    assert source.positions() == {P0: 1, P1: 0}
    assert sorted(r.value for r in drain(source)) == [b"a2000", b"a3000", b"b1500"]
    by_partition = source_for(timed, starting_offsets="latest", starting_timestamps={P0: 3000, P1: 0})
    by_partition.restore_state(None)
    assert by_partition.positions() == {P0: 2, P1: 0}


def test_a_starting_timestamp_no_offset_matches_fails_naming_partition_and_timestamp(timed):
    # Past the cluster's clock: after every record and commit marker of partition 1.
    late = timed.now_ms() + 1
    source = source_for(timed, starting_timestamps={P0: 1000, P1: late})
    with pytest.raises(ValueError, match=rf"startingOffsetsByTimestamp: no offset of in partition 1 has a "
                                         rf"timestamp at or after {late}; set startingOffsetsByTimestampStrategy"
                                         "=latest"):
        source.restore_state(None)
    lenient = source_for(timed, starting_timestamps={P0: 1000, P1: late}, starting_timestamp_strategy="latest")
    lenient.restore_state(None)
    end1 = timed.admin().list_offsets([P1], "latest")[P1]
    assert lenient.positions() == {P0: 0, P1: end1}


def test_starting_offsets_by_timestamp_must_name_every_partition(timed):
    source = source_for(timed, starting_timestamps={P0: 1000})
    with pytest.raises(ValueError, match=r"startingOffsetsByTimestamp does not specify timestamps for "
                                         r"partitions \[.*1.*\]; it must name every partition"):
        source.restore_state(None)


def test_ending_timestamp_bounds_a_read_and_no_match_ends_at_latest(timed):
    # endingTimestamp > endingOffsetsByTimestamp > endingOffsets; the end is exclusive: the first
    # offset at or after the timestamp is not read.
    source = source_for(timed, ending_offsets="latest", ending_timestamp=2500, ending_timestamps={P0: 0, P1: 0})
    source.restore_state(None)
    assert sorted(r.value for r in drain(source)) == [b"a1000", b"a2000", b"b1500"]
    late = timed.now_ms() + 1
    per_partition = source_for(timed, ending_offsets="latest", ending_timestamps={P0: 2000, P1: late})
    per_partition.restore_state(None)
    assert sorted(r.value for r in drain(per_partition)) == [b"a1000", b"b1500"]
    assert per_partition.end_reached()


def test_fake_cluster_offsets_for_times_follow_kafka(timed):
    admin = timed.admin()
    assert admin.list_offsets([P0], 0) == {P0: 0}
    assert admin.list_offsets([P0], 2000) == {P0: 1}
    assert admin.list_offsets([P0], 2001) == {P0: 2}
    # Past the last record, the commit marker (timestamped by the coordinator's clock) still
    # matches, as in Kafka, whose search goes through control batches too.
    assert admin.list_offsets([P0], 3001) == {P0: 3}
    # Nothing at or after the timestamp: the latest offset (the seam's "no match").
    end = admin.list_offsets([P0], "latest")[P0]
    assert admin.list_offsets([P0], timed.now_ms() + 1) == {P0: end}


def test_readers_get_a_group_id_from_the_prefix_unless_kafka_group_id_is_set(fake):
    from connectors.kafka.source import reader_client_config, unique_group_id

    group = unique_group_id("my-prefix")
    assert group.startswith("my-prefix-") and group.endswith("-executor") and group != unique_group_id("my-prefix")
    assert reader_client_config({"linger.ms": "5"}, group) == {"linger.ms": "5", "group.id": group}
    assert reader_client_config({"group.id": "mine"}, group) == {"group.id": "mine"}
    source = source_for(fake, group_id_prefix="jobs")
    assert source.group_id.startswith("jobs-")


def test_bounded_read_ends_at_ending_offsets(fake):
    produce_committed(fake, "in", [b"1", b"2", b"3"], txn_id="a")
    source = source_for(fake, ending_offsets="latest")
    source.restore_state(None)
    produce_committed(fake, "in", [b"4"], txn_id="b")
    assert sorted(r.value for r in drain(source)) == [b"1", b"2", b"3"]
    assert source.end_reached()


def test_new_topics_matching_a_pattern_are_picked_up_from_earliest(fake):
    source = source_for(fake, subscribe=(), subscribe_pattern="in.*", starting_offsets="latest")
    source.restore_state(None)
    fake.admin().create_topic("in-2", 1)
    produce_committed(fake, "in-2", [b"fresh"], txn_id="n")
    assert [r.value for r in drain(source)] == [b"fresh"]


def test_data_loss_fails_naming_topic_partition_and_offsets(fake, caplog):
    produce_committed(fake, "in", [b"a", b"b", b"c", b"d"], key_of=lambda v: None, txn_id="a")
    source = source_for(fake, assign={"in": [0, 1]}, subscribe=())
    source.restore_state({"in": {"0": 0, "1": 0}})
    end0 = fake.admin().list_offsets([TopicPartition("in", 0)], "latest")[TopicPartition("in", 0)]
    fake.delete_records_before(TopicPartition("in", 0), end0)
    with pytest.raises(DataLossError, match=rf"in partition 0 from 0 .* earliest offset is {end0}"):
        source.poll(10)

    lenient = source_for(fake, assign={"in": [0, 1]}, subscribe=(), fail_on_data_loss=False)
    lenient.restore_state({"in": {"0": 0, "1": 0}})
    with caplog.at_level(logging.WARNING):
        drain(lenient)
    assert "failOnDataLoss=false" in caplog.text
    assert lenient.positions()[TopicPartition("in", 0)] == end0


def test_checkpointed_offsets_go_to_a_group_for_lag_monitoring(fake):
    produce_committed(fake, "in", [b"a"])
    source = source_for(fake, commit_offsets_to_group="lag-group")
    source.restore_state(None)
    drain(source)
    state = source.snapshot_state(1)
    source.notify_checkpoint_complete(1)
    committed = fake.committed_group_offsets("lag-group")
    assert {tp.partition: o for tp, o in committed.items()} == {int(p): o for p, o in state["in"].items()}


@pytest.mark.parametrize("options, fragment", [
    (dict(subscribe=()), "exactly one of subscribe, subscribePattern, assign"),
    (dict(subscribe_pattern="in"), "exactly one of"),
    (dict(starting_offsets="beginning"), "startingOffsets must be 'earliest', 'latest'"),
    (dict(ending_offsets="earliest"), "endingOffsets"),
    (dict(subscribe=(), subscribe_pattern="(unclosed"), "not a valid regex"),
])
def test_bad_options_are_named(fake, options, fragment):
    base = dict(bootstrap_servers=fake.bootstrap_servers, subscribe=["in"])
    base.update(options)
    with pytest.raises(ValueError, match=fragment):
        KafkaSourceConfig(**base)


def test_bad_offsets_json_names_option():
    with pytest.raises(ValueError, match="startingOffsets must be"):
        parse_offsets_json("{not json", "startingOffsets")


def test_plan_ranges_caps_total_and_always_progresses():
    a, b = TopicPartition("t", 0), TopicPartition("t", 1)
    ranges = plan_ranges({a: 0, b: 0}, {a: 900, b: 100}, max_records=100)
    assert ranges == {a: (0, 90), b: (0, 10)}
    assert plan_ranges({a: 0, b: 0}, {a: 1000, b: 1}, max_records=10)[b] == (0, 1)
    assert plan_ranges({a: 5}, {a: 5}, None) == {}
