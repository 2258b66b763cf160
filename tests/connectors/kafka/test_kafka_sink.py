import logging
import tempfile
from pathlib import Path

import pytest

from connectors.kafka.sink.committable import KafkaCommittable
from connectors.kafka.sink.config import DeliveryGuarantee, KafkaSinkConfig
from connectors.kafka.kafka_errors import RecordTooLargeError, RetriableKafkaError, TransactionLostError
from connectors.kafka.sink.committer import KafkaCommitter
from connectors.kafka.sink.kafka_sink import KafkaSink
from connectors.kafka.sink.writer import ProducerRecord
from connectors.simulated_kafka import FakeKafkaClients
from kafka_testkit.topic_records import read_all
from twophase.checkpoint import CompletedCheckpoint
from twophase.checkpoint_store import FileCheckpointStore
from twophase import failpoints
from twophase.coordinator import CheckpointConfig, CheckpointCoordinator
from twophase.errors import CheckpointAbortedError, CheckpointCommitError
from twophase.lifecycle import CommitLifecycle
from twophase.participants import ResettableSource, RestoredState


@pytest.fixture
def fake(tmp_path):
    clients = FakeKafkaClients(tmp_path / "kafka.db")
    clients.admin().create_topic("out", 2)
    return clients


def make_sink(fake, prefix="job-a", writer=0, fresh_start=True, **overrides):
    options = dict(bootstrap_servers=fake.bootstrap_servers, topic="out", transactional_id_prefix=prefix,
                   commit_retry_timeout_s=5.0)
    options.update(overrides)
    sink = KafkaSink(KafkaSinkConfig(**options), name=f"sink-{writer}", slot=writer, clients=fake)
    if fresh_start:
        recover(sink, RestoredState(None, None, False))
    return sink


def recover(sink, restored):
    """The coordinator's recovery of ``sink`` alone, from a store holding ``restored``."""
    store = FileCheckpointStore(Path(tempfile.mkdtemp(prefix="kafka-sink-test-")) / "chk")
    if restored.checkpoint_id is not None:
        store.add(CompletedCheckpoint(restored.checkpoint_id, 0, 0, {sink.name: restored.state}))
        if restored.committed:
            store.mark_committed(restored.checkpoint_id)
    coordinator = CheckpointCoordinator(store)
    coordinator.register(sink)
    coordinator.restore()


def job(fake, tmp_path, **overrides):
    """The in-process engine's coordinator with one Kafka sink, restored (a fresh start)."""
    sink = make_sink(fake, fresh_start=False, **overrides)
    coordinator = CheckpointCoordinator(FileCheckpointStore(tmp_path / "chk"),
                                        CheckpointConfig(checkpoint_interval=None))
    coordinator.register(sink)
    coordinator.restore()
    return coordinator, sink


def at_commit(monkeypatch, sink, fault):
    """``fault()`` once the sink pre-committed, when its committer first reaches the brokers."""
    control = sink.committer.control
    faults = [fault]

    def control_after_the_fault():
        while faults:
            faults.pop()()
        return control()

    monkeypatch.setattr(sink.committer, "control", control_after_the_fault)


def visible(fake, topic="out"):
    return sorted(r.value for r in read_all(fake, topic))


def test_records_are_invisible_until_the_checkpoint_completes(fake, tmp_path):
    coordinator, sink = job(fake, tmp_path)
    for i in range(10):
        sink.invoke(ProducerRecord(value=f"v{i}", key=f"k{i}"))
    failpoints.enable(failpoints.BEFORE_COMMIT, "raise")
    try:
        with pytest.raises(failpoints.FailpointCrash):
            coordinator.trigger_checkpoint()
    finally:
        failpoints.disable()
    assert visible(fake) == []
    assert len(read_all(fake, "out", read_committed=False)) == 10
    state = coordinator.store.load(1).state_of(sink.name)
    committable = KafkaCommittable.from_json(state[0]["committables"][0])
    assert committable.transactional_id == "job-a-0-1" and committable.record_count == 10
    restarted, _ = job(fake, tmp_path)  # the recovery commits the stored checkpoint
    assert visible(fake) == sorted(f"v{i}".encode() for i in range(10))
    assert restarted.store.is_committed(1)


def test_commit_is_idempotent(fake, tmp_path):
    coordinator, sink = job(fake, tmp_path)
    sink.invoke({"value": b"x"})
    coordinator.trigger_checkpoint()
    CommitLifecycle(coordinator.store, [sink]).commit_stored(coordinator.store.load(1))  # committed again
    assert visible(fake) == [b"x"]


class FailingSnapshot(ResettableSource):
    """A participant that fails to snapshot checkpoint 1 after the sink pre-committed it."""

    name = "failing"

    def __init__(self) -> None:
        self.snapshots = 0

    def snapshot_state(self, checkpoint_id):
        self.snapshots += 1
        if self.snapshots == 1:
            raise OSError("snapshot failed")
        return 0

    def restore_state(self, offsets):
        pass

    def poll(self, max_records):
        return []


def test_aborted_checkpoint_is_never_visible(fake, tmp_path):
    sink = make_sink(fake, fresh_start=False)
    coordinator = CheckpointCoordinator(FileCheckpointStore(tmp_path / "chk"),
                                        CheckpointConfig(checkpoint_interval=None, tolerable_failed_checkpoints=1))
    coordinator.register(sink)
    coordinator.register(FailingSnapshot())
    coordinator.restore()
    sink.invoke({"value": b"gone"})
    with pytest.raises(CheckpointAbortedError):
        coordinator.trigger_checkpoint()  # the sink pre-committed, the other participant failed
    assert fake.txn_control().list_open_transactions("job-a-") == []  # aborted, not left to linger
    assert sink.pending_checkpoint_ids() == []
    sink.invoke({"value": b"kept"})
    coordinator.trigger_checkpoint()
    assert visible(fake) == [b"kept"]


def test_retriable_commit_errors_are_retried(fake, tmp_path):
    coordinator, sink = job(fake, tmp_path)
    sink.invoke({"value": b"x"})
    fake.inject_errors("end_txn", "COORDINATOR_LOAD_IN_PROGRESS", 2)
    fake.inject_errors("end_txn", "CONCURRENT_TRANSACTIONS", 1)
    coordinator.trigger_checkpoint()
    assert visible(fake) == [b"x"]


def test_broker_down_past_the_retry_budget_keeps_the_transaction_pending(fake, tmp_path, monkeypatch):
    coordinator, sink = job(fake, tmp_path, commit_retry_timeout_s=0.3)
    sink.invoke({"value": b"x"})
    at_commit(monkeypatch, sink, lambda: fake.set_available(False))
    with pytest.raises(CheckpointCommitError) as failed:
        coordinator.trigger_checkpoint()
    assert isinstance(failed.value.__cause__, RetriableKafkaError)
    assert sink.pending_checkpoint_ids() == [1] and not coordinator.store.is_committed(1)
    fake.set_available(True)
    job(fake, tmp_path)  # the restart's recovery commits the stored checkpoint
    assert visible(fake) == [b"x"]


def test_reinitialised_id_surfaces_transaction_lost_error(fake, tmp_path):
    coordinator, sink = job(fake, tmp_path)
    for _ in range(3):
        sink.invoke({"value": b"x"})
    failpoints.enable(failpoints.BEFORE_COMMIT, "raise")
    try:
        with pytest.raises(failpoints.FailpointCrash):
            coordinator.trigger_checkpoint()
    finally:
        failpoints.disable()
    tid = coordinator.store.load(1).state_of(sink.name)[0]["committables"][0]["transactional_id"]
    zombie_hunter = fake.producer(tid, {})
    zombie_hunter.init_transactions(10)
    with pytest.raises(TransactionLostError) as error:
        job(fake, tmp_path)
    assert error.value.checkpoint_id == 1
    assert error.value.transactional_id == tid
    assert error.value.record_count == 3
    assert tid in str(error.value) and "3 records" in str(error.value)
    assert visible(fake) == []


def test_transaction_timeout_surfaces_transaction_lost_error(fake, tmp_path, monkeypatch):
    coordinator, sink = job(fake, tmp_path, transaction_timeout_ms=120_000, checkpoint_timeout_ms=60_000,
                            restart_budget_ms=0)
    sink.invoke({"value": b"x"})
    at_commit(monkeypatch, sink, lambda: fake.advance_time(121_000))
    with pytest.raises(TransactionLostError, match="1 transaction with 1 record was lost"):
        coordinator.trigger_checkpoint()


def test_slow_commit_logs_a_warning(fake, tmp_path, caplog):
    coordinator, sink = job(fake, tmp_path, transaction_timeout_ms=60_000, checkpoint_timeout_ms=1,
                            restart_budget_ms=0)
    sink.invoke({"value": b"x"})
    failpoints.enable(failpoints.BEFORE_COMMIT, "raise")
    try:
        with pytest.raises(failpoints.FailpointCrash):
            coordinator.trigger_checkpoint()
    finally:
        failpoints.disable()
    stored = coordinator.store.load(1)
    state = stored.state_of(sink.name)
    state[0]["committables"][0]["begin_timestamp_ms"] -= 40_000
    with caplog.at_level(logging.WARNING):
        CommitLifecycle(coordinator.store, [make_sink(fake, fresh_start=False)]).commit_stored(stored)
    assert "more than half" in caplog.text and "job-a-0-1" in caplog.text


def test_lingering_transactions_are_aborted_on_restore_and_unblock_readers(fake, tmp_path):
    crashed = make_sink(fake)
    crashed.invoke({"value": b"half-written", "partition": 0})
    crashed.snapshot_state(3)  # pre-committed, then the job died before checkpoint 3 completed
    crashed.invoke({"value": b"open", "partition": 0})  # writing for checkpoint 4
    assert fake.txn_control().list_open_transactions("job-a-")
    coordinator, restarted = job(fake, tmp_path)  # a fresh start: nothing stored for this sink
    assert fake.txn_control().list_open_transactions("job-a-") == []
    restarted.invoke({"value": b"new", "partition": 0})
    coordinator.trigger_checkpoint()
    assert visible(fake) == [b"new"]


def test_restore_recommits_kept_and_aborts_only_own_writer_and_prefix(fake, tmp_path):
    other_job = make_sink(fake, prefix="job-a1")
    other_job.invoke({"value": b"other-job"})
    other_state = other_job.snapshot_state(1)
    sibling = make_sink(fake, writer=1)
    sibling.invoke({"value": b"sibling"})
    sibling_state = sibling.snapshot_state(1)
    mine = make_sink(fake)
    mine.invoke({"value": b"mine"})
    my_state = mine.snapshot_state(1)

    recover(make_sink(fake, fresh_start=False), RestoredState(1, my_state, committed=False))
    open_ids = {t.transactional_id for t in fake.txn_control().list_open_transactions("job-a")}
    assert open_ids == {"job-a1-0-1", "job-a-1-1"}, "another job's or another writer's transaction was touched"
    # The two open transactions hold the LSO back: "mine" is committed but not readable yet.
    assert visible(fake) == []
    recover(make_sink(fake, writer=1, fresh_start=False), RestoredState(1, sibling_state, committed=False))
    # The other job gives up on its checkpoint 1, never stored.
    CommitLifecycle(FileCheckpointStore(tmp_path / "other"), [other_job]).abort_unless_stored(
        1, {other_job.name: other_state})
    assert visible(fake) == [b"mine", b"sibling"]


def test_bad_record_types_raise_before_producing(fake):
    sink = make_sink(fake)
    with pytest.raises(TypeError, match="value must be bytes, str or None"):
        sink.invoke({"value": 42})
    with pytest.raises(TypeError, match="header key must be str"):
        sink.invoke({"value": b"x", "headers": [(1, b"v")]})
    with pytest.raises(TypeError, match="unknown record fields"):
        sink.invoke({"value": b"x", "colour": "red"})
    assert read_all(fake, "out", read_committed=False) == []
    assert fake.txn_control().list_open_transactions("job-a-") == []


def test_record_over_max_size_fails_and_nothing_becomes_visible(fake):
    fake.configure(**{"message.max.bytes": 1000})
    sink = make_sink(fake)
    sink.invoke({"value": b"small"})
    with pytest.raises(RecordTooLargeError):
        sink.invoke({"value": b"x" * 2000})
    assert fake.txn_control().list_open_transactions("job-a-") == []
    assert visible(fake) == []


def test_headers_keys_partitions_and_per_record_topics(fake, tmp_path):
    fake.admin().create_topic("elsewhere", 1)
    coordinator, sink = job(fake, tmp_path)
    sink.invoke(ProducerRecord(value="v", key="k", partition=1, headers={"h": "1"}))
    sink.invoke({"value": b"w", "topic": "elsewhere", "headers": [{"key": "a", "value": None}]})
    coordinator.trigger_checkpoint()
    [record] = read_all(fake, "out")
    assert (record.key, record.value, record.partition, record.headers) == (b"k", b"v", 1, (("h", b"1"),))
    [other] = read_all(fake, "elsewhere")
    assert other.headers == (("a", None),)


def test_at_least_once_writes_without_transactions(fake, tmp_path):
    coordinator, sink = job(fake, tmp_path, delivery_guarantee="at_least_once")
    sink.invoke({"value": b"x"})
    failpoints.enable(failpoints.AFTER_CHECKPOINT_STORED, "raise")
    try:
        with pytest.raises(failpoints.FailpointCrash):
            coordinator.trigger_checkpoint()
    finally:
        failpoints.disable()
    assert visible(fake) == [b"x"]  # flushed at pre-commit, visible at once
    assert fake.txn_control().list_open_transactions("") == []


def test_guardrail_refuses_timeout_above_broker_max(fake):
    fake.configure(**{"transaction.max.timeout.ms": 300_000})
    with pytest.raises(ValueError, match=r"eos.transactionTimeoutMs=900000 .* exceeds the brokers' "
                                         r"transaction.max.timeout.ms=300000"):
        make_sink(fake)


def test_guardrail_refuses_timeout_shorter_than_checkpoint_and_restart(fake):
    with pytest.raises(ValueError, match="shorter than the checkpoint timeout"):
        make_sink(fake, transaction_timeout_ms=60_000, checkpoint_timeout_ms=60_000, restart_budget_ms=30_000)


def test_prefix_required_for_exactly_once(fake):
    config = KafkaSinkConfig(bootstrap_servers=fake.bootstrap_servers, topic="out")
    with pytest.raises(ValueError, match="transactional id prefix"):
        KafkaSink(config, clients=fake)
    derived = KafkaSink(config, clients=fake, job_id="/chk/job-1")
    assert derived.transactional_id_prefix.startswith("kafka-eos-")
    assert derived.transactional_id_prefix != KafkaSink(config, clients=fake, job_id="/chk/job-2").transactional_id_prefix


@pytest.mark.parametrize("options, fragment", [
    (dict(delivery_guarantee="twice"), "delivery guarantee must be one of exactly_once, at_least_once, none"),
    (dict(transaction_timeout_ms=0), "transaction_timeout_ms must be an integer >= 1"),
    (dict(client_config={"transactional.id": "x"}), "transactional.id cannot be set"),
    (dict(transactional_id_prefix="has space"), "prefix"),
])
def test_bad_sink_options(options, fragment):
    base = dict(bootstrap_servers="localhost:9092", topic="out")
    base.update(options)
    with pytest.raises(ValueError, match=fragment):
        KafkaSinkConfig(**base)


def test_delivery_guarantee_parse():
    assert DeliveryGuarantee.parse("EXACTLY_ONCE") is DeliveryGuarantee.EXACTLY_ONCE


def _pre_committed(fake, config, writers, checkpoint_id=1):
    from connectors.kafka.sink.internal.transactional_ids import TransactionalIdPool
    from connectors.kafka.sink.writer import KafkaTransactionWriter

    committables = []
    pool = TransactionalIdPool(config.transactional_id_prefix)
    for writer in writers:
        txn = KafkaTransactionWriter(fake, config, pool.transactional_id(writer, checkpoint_id), checkpoint_id)
        txn.write({"value": f"w{writer}".encode()})
        committables.append(txn.pre_commit())
    return committables


def test_a_commit_retries_the_retriable_and_reports_the_lost_after_trying_every_one(fake, tmp_path):
    """The Spark driver's path: its participant, the lifecycle's complete, the one loop."""
    config = KafkaSinkConfig(bootstrap_servers=fake.bootstrap_servers, topic="out",
                             transactional_id_prefix="job-m", commit_retry_timeout_s=5.0)
    committables = _pre_committed(fake, config, range(4))
    fake.producer("job-m-2-1").init_transactions(5)  # a zombie's re-init aborts writer 2's transaction
    # The first EndTxn (writer 0, committed alone) fails retriably once, and is retried.
    fake.inject_errors("end_txn", "COORDINATOR_LOAD_IN_PROGRESS", 1)
    committer = KafkaCommitter(fake, config, "s")
    lifecycle = CommitLifecycle(FileCheckpointStore(tmp_path / "chk"), [committer])
    checkpoint = CompletedCheckpoint(1, 0, 0, {"s": [c.to_json() for c in committables]})
    with pytest.raises(TransactionLostError) as lost:
        lifecycle.complete(checkpoint)
    assert lost.value.transactional_id == "job-m-2-1" and lost.value.transaction_count == 1
    assert "its other 3 transactions did commit" in str(lost.value)
    assert visible(fake) == [b"w0", b"w1", b"w3"]
    with pytest.raises(TransactionLostError):  # repeatable: the others stay committed, the lost one lost
        lifecycle.commit_stored(checkpoint)
    assert visible(fake) == [b"w0", b"w1", b"w3"]
    committer.close()
