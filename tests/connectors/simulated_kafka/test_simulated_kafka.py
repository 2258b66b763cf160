"""The fake Kafka cluster must behave like Kafka 4.0 (design/exactly-once-protocol.md)."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from connectors.kafka import kafka_errors as errors
from connectors.kafka.clients import TIMESTAMP_LOG_APPEND_TIME, ProducerIdentity, TopicPartition
from connectors.kafka.clients.factory import clients_for
from connectors.simulated_kafka import FakeKafkaClients, FakeProducer

REPO_ROOT = Path(__file__).resolve().parents[3]
TOPIC = "events"
TP0 = TopicPartition(TOPIC, 0)


@pytest.fixture
def kafka(tmp_path: Path) -> FakeKafkaClients:
    clients = FakeKafkaClients(tmp_path / "cluster.db")
    clients.admin().create_topic(TOPIC, 3)
    return clients


def open_txn(kafka: FakeKafkaClients, transactional_id: str, values: list[bytes],
             partition: int = 0, config: dict[str, str] | None = None) -> tuple[FakeProducer, ProducerIdentity]:
    """A producer with an open, flushed transaction holding ``values``."""
    producer = kafka.producer(transactional_id, config)
    identity = producer.init_transactions(5)
    producer.begin_transaction()
    for value in values:
        producer.produce(TOPIC, value, partition=partition)
    producer.flush(5)
    return producer, identity


def produce_plain(kafka: FakeKafkaClients, values: list[bytes], partition: int = 0) -> None:
    producer = kafka.producer(None)
    for value in values:
        producer.produce(TOPIC, value, partition=partition)
    producer.flush(5)
    producer.close()


def latest(kafka: FakeKafkaClients, read_committed: bool, tp: TopicPartition = TP0) -> int:
    return kafka.admin().list_offsets([tp], "latest", read_committed=read_committed)[tp]


def read_all(kafka: FakeKafkaClients, read_committed: bool, tp: TopicPartition = TP0) -> list[tuple[int, bytes | None]]:
    end = latest(kafka, read_committed, tp)
    records = kafka.reader(read_committed=read_committed).read({tp: (0, end)})
    return [(record.offset, record.value) for record in records]


def run_child(kafka: FakeKafkaClients, code: str, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), kafka.bootstrap_servers, *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT, env=env,
    )


def values(n: int, tag: str) -> list[bytes]:
    return [f"{tag}{i}".encode() for i in range(n)]


def test_clients_for_selects_the_fake(tmp_path: Path) -> None:
    clients = clients_for(f"fake-kafka://{tmp_path / 'c.db'}")
    assert isinstance(clients, FakeKafkaClients)
    assert clients.bootstrap_servers == f"fake-kafka://{tmp_path / 'c.db'}"


@pytest.mark.parametrize("commit", [True, False])
def test_open_transaction_stalls_read_committed_until_it_ends(kafka: FakeKafkaClients, commit: bool) -> None:
    produce_plain(kafka, [b"before"])
    _, identity = open_txn(kafka, "stall", [b"t0", b"t1"])
    produce_plain(kafka, [b"after"])

    assert latest(kafka, read_committed=True) == 1
    assert latest(kafka, read_committed=False) == 4
    assert read_all(kafka, read_committed=True) == [(0, b"before")]
    with pytest.raises(ValueError, match="last stable offset"):
        kafka.reader(read_committed=True).read({TP0: (0, 4)})

    kafka.txn_control().end_txn("stall", identity, commit=commit)

    assert latest(kafka, read_committed=True) == 5  # the marker took offset 4
    expected = [(0, b"before"), (1, b"t0"), (2, b"t1"), (3, b"after")] if commit else [(0, b"before"), (3, b"after")]
    assert read_all(kafka, read_committed=True) == expected
    assert read_all(kafka, read_committed=False) == [(0, b"before"), (1, b"t0"), (2, b"t1"), (3, b"after")]


def test_reinit_fences_the_old_producer_and_aborts_its_transaction(kafka: FakeKafkaClients) -> None:
    old, old_identity = open_txn(kafka, "fence-me", [b"old"])
    new = kafka.producer("fence-me")
    new_identity = new.init_transactions(5)

    assert new_identity.producer_id == old_identity.producer_id
    assert new_identity.producer_epoch > old_identity.producer_epoch
    # The old transaction was aborted by the init: a marker, and nothing stalls or shows.
    assert [e.kind for e in kafka.log_entries(TP0)] == ["data", "abort"]
    assert latest(kafka, read_committed=True) == 2
    assert read_all(kafka, read_committed=True) == []
    assert kafka.txn_control().list_open_transactions("fence-me") == []

    with pytest.raises(errors.ProducerFencedError):
        old.produce(TOPIC, b"late", partition=0)
    with pytest.raises(errors.ProducerFencedError):
        old.flush(5)
    with pytest.raises(errors.ProducerFencedError):
        old.abort_transaction(5)
    with pytest.raises(errors.ProducerFencedError):
        kafka.txn_control().end_txn("fence-me", old_identity, commit=True)

    # The new producer is unaffected.
    new.begin_transaction()
    new.produce(TOPIC, b"new", partition=0)
    new.flush(5)
    kafka.txn_control().end_txn("fence-me", new_identity, commit=True)
    assert read_all(kafka, read_committed=True) == [(2, b"new")]


def test_fenced_producer_with_buffered_records_fails_at_flush(kafka: FakeKafkaClients) -> None:
    old = kafka.producer("buffered")
    old.init_transactions(5)
    old.begin_transaction()
    old.produce(TOPIC, b"queued", partition=0)
    kafka.producer("buffered").init_transactions(5)
    with pytest.raises(errors.ProducerFencedError):
        old.flush(5)
    assert read_all(kafka, read_committed=False) == []


def test_producer_is_not_reused_after_end_transaction(kafka: FakeKafkaClients) -> None:
    producer, identity = open_txn(kafka, "once", [b"v"])
    kafka.txn_control().end_txn("once", identity, commit=True)
    with pytest.raises(errors.InvalidTxnStateError, match="ended by EndTxn"):
        producer.begin_transaction()
    with pytest.raises(errors.InvalidTxnStateError, match="ended by EndTxn"):
        producer.produce(TOPIC, b"more", partition=0)
    assert read_all(kafka, read_committed=False) == [(0, b"v")]


def test_in_process_abort_then_next_transaction(kafka: FakeKafkaClients) -> None:
    producer, identity = open_txn(kafka, "again", [b"first"])
    producer.abort_transaction(5)
    assert producer.identity().producer_epoch == identity.producer_epoch + 1
    producer.begin_transaction()
    producer.produce(TOPIC, b"second", partition=0)
    producer.flush(5)
    kafka.txn_control().end_txn("again", producer.identity(), commit=True)
    assert read_all(kafka, read_committed=True) == [(2, b"second")]


def test_close_leaves_the_transaction_open(kafka: FakeKafkaClients) -> None:
    producer, identity = open_txn(kafka, "closed", [b"v"])
    producer.close()
    [txn] = kafka.txn_control().list_open_transactions("closed")
    assert (txn.producer_id, txn.producer_epoch) == (identity.producer_id, identity.producer_epoch)
    assert latest(kafka, read_committed=True) == 0
    with pytest.raises(errors.KafkaConnectorError, match="closed"):
        producer.produce(TOPIC, b"x", partition=0)


def test_transaction_timeout_aborts_and_fences(kafka: FakeKafkaClients) -> None:
    # Half the timeout, then past it: the wall clock between the steps (however slow the
    # machine) cannot decide the outcome.
    producer, identity = open_txn(kafka, "slow", [b"v"], config={"transaction.timeout.ms": "60000"})
    kafka.advance_time(30_000)
    assert len(kafka.txn_control().list_open_transactions("slow")) == 1

    kafka.advance_time(31_000)

    assert kafka.txn_control().list_open_transactions("slow") == []
    assert [e.kind for e in kafka.log_entries(TP0)] == ["data", "abort"]
    assert latest(kafka, read_committed=True) == 2
    with pytest.raises(errors.ProducerFencedError):
        kafka.txn_control().end_txn("slow", identity, commit=True)
    with pytest.raises(errors.ProducerFencedError):
        kafka.txn_control().end_txn("slow", identity, commit=False)
    with pytest.raises(errors.ProducerFencedError):
        producer.produce(TOPIC, b"late", partition=0)
    assert read_all(kafka, read_committed=True) == []


def test_timeout_also_expires_a_transaction_whose_records_are_unflushed(kafka: FakeKafkaClients) -> None:
    producer = kafka.producer("unflushed", {"transaction.timeout.ms": "1000"})
    producer.init_transactions(5)
    producer.begin_transaction()
    producer.produce(TOPIC, b"v", partition=0)
    kafka.advance_time(5_000)
    with pytest.raises(errors.ProducerFencedError):
        producer.flush(5)
    # The registered partition got its abort marker; the data never entered the log.
    assert [e.kind for e in kafka.log_entries(TP0)] == ["abort"]


def test_init_rejects_timeout_above_broker_max(kafka: FakeKafkaClients) -> None:
    kafka.configure(**{"transaction.max.timeout.ms": 5000})
    assert kafka.admin().broker_config("transaction.max.timeout.ms") == "5000"
    too_long = "transaction.timeout.ms=6000.*transaction.max.timeout.ms=5000"
    with pytest.raises(errors.KafkaConnectorError, match=too_long):
        kafka.producer("too-long", {"transaction.timeout.ms": "6000"}).init_transactions(5)
    kafka.producer("ok", {"transaction.timeout.ms": "5000"}).init_transactions(5)


def test_injected_retriable_errors_then_success(kafka: FakeKafkaClients) -> None:
    _, identity = open_txn(kafka, "flaky", [b"v"])
    kafka.inject_errors("end_txn", "COORDINATOR_LOAD_IN_PROGRESS", 2)
    kafka.inject_errors("end_txn", "NOT_COORDINATOR", 1)
    control = kafka.txn_control()

    codes = []
    for _ in range(3):
        with pytest.raises(errors.RetriableKafkaError) as failure:
            control.end_txn("flaky", identity, commit=True)
        codes.append(failure.value.code)
        assert len(control.list_open_transactions("flaky")) == 1  # the failed call did nothing
    assert codes == ["COORDINATOR_LOAD_IN_PROGRESS", "COORDINATOR_LOAD_IN_PROGRESS", "NOT_COORDINATOR"]

    control.end_txn("flaky", identity, commit=True)
    assert read_all(kafka, read_committed=True) == [(0, b"v")]


def test_injected_broker_unavailable_and_produce_errors(kafka: FakeKafkaClients) -> None:
    kafka.inject_errors("list_offsets", "BROKER_UNAVAILABLE", 1)
    with pytest.raises(errors.BrokerUnavailableError):
        latest(kafka, read_committed=True)
    assert latest(kafka, read_committed=True) == 0

    kafka.inject_errors("produce", "CONCURRENT_TRANSACTIONS", 1)
    kafka.inject_errors("flush", "REQUEST_TIMED_OUT", 1)
    producer = kafka.producer(None)
    with pytest.raises(errors.RetriableKafkaError, match="CONCURRENT_TRANSACTIONS"):
        producer.produce(TOPIC, b"a", partition=0)
    producer.produce(TOPIC, b"b", partition=0)
    with pytest.raises(errors.RetriableKafkaError, match="REQUEST_TIMED_OUT"):
        producer.flush(5)
    producer.flush(5)  # the records were kept for the retry
    assert read_all(kafka, read_committed=False) == [(0, b"b")]


def test_inject_errors_rejects_typos(kafka: FakeKafkaClients) -> None:
    with pytest.raises(ValueError):
        kafka.inject_errors("end_transaction", "NOT_COORDINATOR", 1)
    with pytest.raises(ValueError):
        kafka.inject_errors("end_txn", "NOT_A_KAFKA_ERROR", 1)


def test_broker_down_then_up_with_timeouts_meanwhile(kafka: FakeKafkaClients) -> None:
    _, identity = open_txn(kafka, "outage", [b"v"], config={"transaction.timeout.ms": "60000"})
    _, survivor = open_txn(kafka, "outage-short", [b"w"], partition=1, config={"transaction.timeout.ms": "900000"})
    kafka.set_available(False)
    control = kafka.txn_control()
    with pytest.raises(errors.BrokerUnavailableError):
        control.end_txn("outage", identity, commit=True)
    with pytest.raises(errors.BrokerUnavailableError):
        latest(kafka, read_committed=True)
    with pytest.raises(errors.BrokerUnavailableError):
        kafka.producer(None).produce(TOPIC, b"x", partition=0)
    with pytest.raises(errors.BrokerUnavailableError):
        kafka.admin().list_topics()

    kafka.advance_time(120_000)
    kafka.set_available(True)

    with pytest.raises(errors.ProducerFencedError):
        control.end_txn("outage", identity, commit=True)
    control.end_txn("outage-short", survivor, commit=True)
    assert read_all(kafka, read_committed=True) == []
    assert read_all(kafka, read_committed=True, tp=TopicPartition(TOPIC, 1)) == [(0, b"w")]


def test_transaction_survives_its_producer_process_dying(kafka: FakeKafkaClients) -> None:
    child = run_child(kafka, """
        import os, sys
        from connectors.kafka.clients.factory import clients_for
        producer = clients_for(sys.argv[1]).producer("crashy-0")
        identity = producer.init_transactions(5)
        producer.begin_transaction()
        for i in range(3):
            producer.produce("events", f"r{i}".encode(), partition=0)
        producer.flush(5)
        print(identity.producer_id, identity.producer_epoch, flush=True)
        os._exit(137)
        """)
    stdout, stderr = child.communicate(timeout=60)
    assert child.returncode == 137, stderr
    producer_id, epoch = map(int, stdout.split())

    [txn] = kafka.txn_control().list_open_transactions("crashy-")
    assert (txn.producer_id, txn.producer_epoch) == (producer_id, epoch)
    assert latest(kafka, read_committed=True) == 0

    kafka.txn_control().end_txn("crashy-0", ProducerIdentity(producer_id, epoch), commit=True)
    assert read_all(kafka, read_committed=True) == [(0, b"r0"), (1, b"r1"), (2, b"r2")]


def test_record_larger_than_message_max_bytes_is_refused(kafka: FakeKafkaClients) -> None:
    kafka.configure(**{"message.max.bytes": 100})
    producer = kafka.producer(None)
    with pytest.raises(errors.RecordTooLargeError):
        producer.produce(TOPIC, b"v" * 95, key=b"k" * 6, partition=0)
    with pytest.raises(errors.RecordTooLargeError):
        producer.produce(TOPIC, b"v" * 90, partition=0, headers=[("h", b"x" * 10)])
    producer.produce(TOPIC, b"v" * 94, key=b"k" * 6, partition=0)
    producer.flush(5)
    assert [len(v or b"") for _, v in read_all(kafka, read_committed=False)] == [94]


def test_producing_to_a_missing_topic_is_refused(kafka: FakeKafkaClients) -> None:
    # The fake never auto-creates topics (a real broker may, by its auto.create.topics.enable), so
    # this is not in kafka_testkit/kafka_conformance.py; unknown partitions and admin requests are.
    with pytest.raises(errors.UnknownTopicError):
        kafka.producer(None).produce("nope", b"v")
    assert kafka.admin().list_topics() == [TOPIC]


def test_list_open_transactions_filters_by_prefix(kafka: FakeKafkaClients) -> None:
    start = kafka.now_ms()
    _, a0 = open_txn(kafka, "app-a-0", [b"1"], partition=0, config={"transaction.timeout.ms": "30000"})
    _, a1 = open_txn(kafka, "app-a-1", [b"2"], partition=1)
    _, b0 = open_txn(kafka, "app-b-0", [b"3"], partition=2)
    kafka.txn_control().end_txn("app-a-1", a1, commit=True)
    producer, _ = open_txn(kafka, "app-a-2", [b"4"], partition=0)
    producer.produce(TOPIC, b"5", partition=2)

    found = {t.transactional_id: t for t in kafka.txn_control().list_open_transactions("app-a-")}
    assert sorted(found) == ["app-a-0", "app-a-2"]
    assert found["app-a-0"].producer_id == a0.producer_id
    assert found["app-a-0"].producer_epoch == a0.producer_epoch
    assert found["app-a-0"].timeout_ms == 30000
    assert found["app-a-0"].state == "Ongoing"
    assert start <= found["app-a-0"].start_time_ms <= kafka.now_ms()
    assert found["app-a-0"].partitions == frozenset({TP0})
    assert found["app-a-2"].partitions == frozenset({TP0, TopicPartition(TOPIC, 2)})
    assert found["app-a-2"].timeout_ms == 60000
    everything = kafka.txn_control().list_open_transactions("")
    assert {t.transactional_id for t in everything} == {"app-a-0", "app-a-2", "app-b-0"}


def test_offsets_for_timestamps(kafka: FakeKafkaClients) -> None:
    producer = kafka.producer(None)
    for ts in (1000, 2000, 3000):
        producer.produce(TOPIC, str(ts).encode(), partition=0, timestamp_ms=ts)
    producer.flush(5)
    admin = kafka.admin()

    def at(ts: int) -> int:
        return admin.list_offsets([TP0], ts)[TP0]

    assert (at(0), at(1000), at(1500), at(3000), at(3001)) == (0, 0, 1, 2, 3)
    assert [r.timestamp_ms for r in kafka.reader().read({TP0: (0, 3)})] == [1000, 2000, 3000]
    with pytest.raises(ValueError):
        at(-1)


def test_default_timestamp_is_cluster_time_and_log_append_time(kafka: FakeKafkaClients) -> None:
    kafka.admin().create_topic("appended", 1, {"message.timestamp.type": "LogAppendTime"})
    kafka.advance_time(3_600_000)
    before = kafka.now_ms()
    producer = kafka.producer(None)
    producer.produce(TOPIC, b"v", partition=0)
    producer.produce("appended", b"w", timestamp_ms=5)
    producer.flush(5)
    [plain] = kafka.reader().read({TP0: (0, 1)})
    [appended] = kafka.reader().read({TopicPartition("appended", 0): (0, 1)})
    assert before <= plain.timestamp_ms <= kafka.now_ms()
    assert appended.timestamp_type == TIMESTAMP_LOG_APPEND_TIME
    assert before <= appended.timestamp_ms <= kafka.now_ms()


def test_retention_moves_log_start(kafka: FakeKafkaClients) -> None:
    produce_plain(kafka, values(5, "r"))
    kafka.admin().delete_records_before(TP0, 3)
    assert kafka.admin().list_offsets([TP0], "earliest")[TP0] == 3
    with pytest.raises(errors.OffsetOutOfRangeError):
        kafka.reader().read({TP0: (2, 5)})
    assert [r.offset for r in kafka.reader().read({TP0: (3, 5)})] == [3, 4]
    with pytest.raises(errors.OffsetOutOfRangeError):
        kafka.delete_records_before(TP0, 6)


def test_read_checks_ranges(kafka: FakeKafkaClients) -> None:
    produce_plain(kafka, [b"a", b"b"])
    reader = kafka.reader(read_committed=False)
    with pytest.raises(ValueError, match="high watermark"):
        reader.read({TP0: (0, 3)})
    with pytest.raises(ValueError, match="backwards"):
        reader.read({TP0: (2, 1)})
    assert [r.value for r in reader.read({TP0: (1, 2)})] == [b"b"]


def test_read_orders_by_partition_then_offset(kafka: FakeKafkaClients) -> None:
    produce_plain(kafka, [b"p1-a", b"p1-b"], partition=1)
    produce_plain(kafka, [b"p0-a"], partition=0)
    tp1 = TopicPartition(TOPIC, 1)
    records = kafka.reader().read({tp1: (0, 2), TP0: (0, 1)})
    assert [(r.partition, r.offset, r.value) for r in records] == [(0, 0, b"p0-a"), (1, 0, b"p1-a"), (1, 1, b"p1-b")]


def test_keys_headers_and_partitioning(kafka: FakeKafkaClients) -> None:
    producer = kafka.producer(None)
    for i in range(6):
        producer.produce(TOPIC, b"same", key=b"user-42", headers=[("trace", f"{i}".encode()), ("empty", None)])
        producer.produce(TOPIC, f"{i}".encode(), key=None)
    producer.flush(5)
    admin = kafka.admin()
    ends = admin.list_offsets([TopicPartition(TOPIC, p) for p in range(3)], "latest")
    records = list(kafka.reader().read({tp: (0, end) for tp, end in ends.items()}))

    keyed = [r for r in records if r.key == b"user-42"]
    assert len({r.partition for r in keyed}) == 1
    assert sorted(r.headers for r in keyed) == sorted((("trace", f"{i}".encode()), ("empty", None)) for i in range(6))
    unkeyed = [r for r in records if r.key is None]
    assert {r.partition for r in unkeyed} == {0, 1, 2}


def test_group_offsets(kafka: FakeKafkaClients) -> None:
    kafka.admin().commit_group_offsets("lag-monitor", {TP0: 7, TopicPartition(TOPIC, 2): 3})
    kafka.admin().commit_group_offsets("lag-monitor", {TP0: 9})
    assert kafka.committed_group_offsets("lag-monitor") == {TP0: 9, TopicPartition(TOPIC, 2): 3}
    assert kafka.committed_group_offsets("other") == {}


def test_state_is_shared_between_instances_and_survives_pickling(kafka: FakeKafkaClients) -> None:
    produce_plain(kafka, [b"v"])
    clone = pickle.loads(pickle.dumps(kafka))
    assert clone.path == kafka.path
    assert read_all(clone, read_committed=True) == [(0, b"v")]


def test_producer_misuse_is_a_clear_error(kafka: FakeKafkaClients) -> None:
    producer = kafka.producer("misuse")
    with pytest.raises(errors.InvalidTxnStateError, match="init_transactions"):
        producer.begin_transaction()
    producer.init_transactions(5)
    with pytest.raises(errors.InvalidTxnStateError, match="outside of a transaction"):
        producer.produce(TOPIC, b"v", partition=0)
    producer.begin_transaction()
    with pytest.raises(errors.InvalidTxnStateError, match="already in a transaction"):
        producer.begin_transaction()


def test_each_flush_appends_only_new_records(kafka: FakeKafkaClients) -> None:
    producer = kafka.producer(None)
    producer.produce(TOPIC, b"a", partition=0)
    producer.flush(5)
    producer.produce(TOPIC, b"b", partition=0)
    producer.flush(5)
    producer.flush(5)
    assert read_all(kafka, read_committed=False) == [(0, b"a"), (1, b"b")]


def test_records_not_flushed_before_a_crash_are_lost(kafka: FakeKafkaClients) -> None:
    child = run_child(kafka, """
        import os, sys
        from connectors.kafka.clients.factory import clients_for
        producer = clients_for(sys.argv[1]).producer("unacked-0")
        producer.init_transactions(5)
        producer.begin_transaction()
        producer.produce("events", b"never acknowledged", partition=0)
        os._exit(137)
        """)
    _, stderr = child.communicate(timeout=60)
    assert child.returncode == 137, stderr
    # The partition was registered with the transaction, but no record reached the log.
    [txn] = kafka.txn_control().list_open_transactions("unacked-")
    assert txn.partitions == frozenset({TP0})
    assert kafka.log_entries(TP0) == []
    assert latest(kafka, read_committed=True) == 0


def test_concurrent_producer_processes_interleave_into_consecutive_offsets(
    kafka: FakeKafkaClients, tmp_path: Path
) -> None:
    start = tmp_path / "start"
    children = [
        run_child(kafka, """
            import os, sys, time
            from connectors.kafka.clients.factory import clients_for
            clients = clients_for(sys.argv[1])
            name = sys.argv[2]
            while not os.path.exists(sys.argv[3]):  # start together, so the writes interleave
                time.sleep(0.005)
            for txn in range(5):
                producer = clients.producer(f"{name}-{txn}")
                identity = producer.init_transactions(5)
                producer.begin_transaction()
                for i in range(40):
                    time.sleep(0.0005)  # a task's work between records, which lets the others in
                    producer.produce("events", f"{name}-{txn}-{i}".encode(), partition=0)
                    if i % 10 == 9:
                        producer.flush(5)
                clients.txn_control().end_txn(f"{name}-{txn}", identity, commit=txn % 2 == 0)
            """, name, str(start))
        for name in ("w0", "w1", "w2")
    ]
    start.touch()
    for child in children:
        _, stderr = child.communicate(timeout=120)
        assert child.returncode == 0, stderr

    entries = kafka.log_entries(TP0)
    assert [e.offset for e in entries] == list(range(len(entries)))
    assert sum(e.kind == "data" for e in entries) == 3 * 5 * 40
    assert sum(e.kind == "commit" for e in entries) == 3 * 3
    committed = [v for _, v in read_all(kafka, read_committed=True)]
    expected = {f"w{w}-{t}-{i}".encode() for w in range(3) for t in (0, 2, 4) for i in range(40)}
    assert len(committed) == len(expected) and set(committed) == expected


def test_column_batches_hold_what_read_yields_and_skip_aborted_records(kafka: FakeKafkaClients) -> None:
    produce_plain(kafka, [b"a", b"b"], partition=0)
    producer, identity = open_txn(kafka, "aborted", [b"x", b"y"], partition=0)
    producer.abort_transaction(5)
    produce_plain(kafka, [b"c"], partition=0)
    produce_plain(kafka, [b"d"], partition=1)
    ranges = {TP0: (0, latest(kafka, True)), TopicPartition(TOPIC, 1): (0, latest(kafka, True, TopicPartition(TOPIC, 1)))}
    records = list(kafka.reader(read_committed=True).read(ranges))
    batches = list(kafka.reader(read_committed=True).read_batches(ranges))
    assert [r for b in batches for r in b.records()] == records
    assert [v for b in batches for v in b.values] == [b"a", b"b", b"c", b"d"]
    assert all(b.headers == [()] * len(b) for b in batches)
    assert all(b.headers is None for b in kafka.reader(read_committed=True).read_batches(ranges, include_headers=False))


def test_produce_batch_is_produce_record_by_record(kafka: FakeKafkaClients) -> None:
    from connectors.kafka.clients import ProduceBatch

    producer = kafka.producer("batched")
    producer.start_transaction(5)
    producer.produce_batch(ProduceBatch(topic=TOPIC, values=[b"1", b"2"], keys=[b"k", None],
                                        partitions=[0, 0], headers=[[("h", b"v")], None]))
    producer.produce_batch(ProduceBatch(topic=None, values=[b"3"], topics=[TOPIC], partitions=[0]))
    producer.flush(5)
    identity = producer.identity()
    assert latest(kafka, read_committed=True) == 0  # open transaction: nothing decided yet
    kafka.txn_control().end_txn("batched", identity, commit=True)
    records = list(kafka.reader(read_committed=True).read({TP0: (0, latest(kafka, True))}))
    assert [(r.key, r.value, r.headers) for r in records] == [
        (b"k", b"1", (("h", b"v"),)), (None, b"2", ()), (None, b"3", ())]
