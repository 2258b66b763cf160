"""The sink's transactional ids stay within a pool of two per write slot (plus one id, used once,
per retried task), for as long as a query runs: hundreds of batches with task retries, zombie
attempts, driver crashes at every point of the commit, replays, and a task count that changes
between runs. Output stays exactly-once."""

import itertools
import random
import re
from collections import Counter

import pytest

pytest.importorskip("pyspark")

from connectors.kafka.kafka_errors import TransactionLostError  # noqa: E402
from connectors.kafka.sink.kafka_sink import KafkaSink  # noqa: E402
from connectors.kafka.source import KafkaSource, KafkaSourceConfig  # noqa: E402
from connectors.kafka.sink.config import KafkaSinkConfig  # noqa: E402
from connectors.kafka.sink.internal.transactional_ids import POOL_SIZE, TransactionalIdPool  # noqa: E402
from connectors.kafka.sink.writer import KafkaTransactionWriter, ProducerRecord  # noqa: E402
from connectors.spark.sink_driver import SINK_PARTICIPANT, BatchContext, SparkSinkDriver  # noqa: E402
from connectors.spark.options import parse_sink_options  # noqa: E402
from connectors.spark.datasource_writers import KafkaCommitMessage  # noqa: E402
from kafka_testkit.topic_records import produce_committed, read_all  # noqa: E402
from connectors.simulated_kafka import FakeKafkaClients  # noqa: E402
from twophase import failpoints  # noqa: E402
from twophase.checkpoint import CompletedCheckpoint  # noqa: E402
from twophase.checkpoint_store import FileCheckpointStore  # noqa: E402
from twophase.coordinator import CheckpointConfig, CheckpointCoordinator  # noqa: E402
from twophase.pipeline import LocalPipeline  # noqa: E402


@pytest.fixture(autouse=True)
def _clean_failpoints():
    failpoints.disable()
    yield
    failpoints.disable()


# -- naming -------------------------------------------------------------------------------------

def test_consecutive_checkpoints_of_a_slot_alternate_between_two_ids():
    pool = TransactionalIdPool("job")
    assert [pool.transactional_id(3, n) for n in range(5)] == ["job-3-0", "job-3-1", "job-3-0", "job-3-1", "job-3-0"]
    assert pool.pool_ids(2) == ["job-0-0", "job-0-1", "job-1-0", "job-1-1"]


def test_an_id_still_awaiting_its_commit_is_never_handed_out_again():
    pool = TransactionalIdPool("job")
    assert pool.transactional_id(0, 2, in_use={"job-0-0"}) == "job-0-1"
    assert pool.transactional_id(0, 2, in_use={"job-0-0", "job-0-1"}) == "job-0-2"


def test_the_pattern_claims_only_this_sinks_ids():
    pool = TransactionalIdPool("job-1")
    assert pool.slot_of("job-1-4-1") == 4
    assert pool.slot_of("job-1-4-1907") == 4  # named by checkpoint, as before the pool
    assert pool.slot_of("job-10-4-1") is None and pool.slot_of("job-1-x-1") is None
    with pytest.raises(ValueError, match="prefix"):
        TransactionalIdPool("has space")


def test_a_retried_attempt_gets_an_id_of_its_own_that_the_pattern_still_claims():
    pool = TransactionalIdPool("job")
    assert pool.transactional_id(3, 1, task_attempt=42) == "job-3-1-t42"
    assert pool.transactional_id(3, 2, task_attempt=43) == "job-3-0-t43"
    assert pool.slot_of("job-3-1-t42") == 3
    # "job-1-0-1" is slot 0 of the sink "job-1", not a retry of sink "job"
    assert pool.slot_of("job-1-0-1") is None and TransactionalIdPool("job-1").slot_of("job-1-0-1") == 0
    assert pool.slot_of("job-3-1-42") is None and pool.slot_of("job-3-1-tx") is None
    assert TransactionalIdPool.prefix_of("kafka-eos-ab12-3-1") == "kafka-eos-ab12"
    assert TransactionalIdPool.prefix_of("kafka-eos-ab12-3-1-t9") == "kafka-eos-ab12"
    assert TransactionalIdPool.prefix_of("kafka-eos-ab12-timeout-probe") is None
    with pytest.raises(ValueError, match="task attempt"):
        pool.transactional_id(0, 0, task_attempt=-1)


# -- the Spark sink's driver protocol over hundreds of batches -----------------------------------


def _or_none(decided_through):
    """The newest stored checkpoint id, -1 for none (what the batch arithmetic below compares)."""
    return -1 if decided_through is None else decided_through

class Query:
    """A query's batches as Spark runs them, without Spark: tasks open their transactions with the
    executor-side naming, the driver side is the real commit protocol. ``crash()`` stands for a
    driver that died; the next ``restart()`` recovers as ``streamWriter()`` does."""

    def __init__(self, fake, tmp_path):
        self.fake = fake
        self.options = parse_sink_options({"kafka.bootstrap.servers": fake.bootstrap_servers, "topic": "out",
                                           "checkpointlocation": str(tmp_path / "chk")}, streaming=True)
        self.pool = TransactionalIdPool(self.options.config.transactional_id_prefix)
        self.decided_through = _or_none(SparkSinkDriver(self.options).recover())
        self.expected: list[str] = []
        # Spark's task attempt ids: unique in the application
        self.task_attempt_ids = itertools.count(1000)
        self.retries = 0

    def restart(self):
        self.decided_through = _or_none(SparkSinkDriver(self.options).recover())

    def task(self, slot, batch, rows, task_attempt=None):
        transactional_id = self.pool.transactional_id(slot, batch, task_attempt=task_attempt)
        writer = KafkaTransactionWriter(self.fake, self.options.config, transactional_id, batch)
        for value in rows:
            writer.write({"value": value, "partition": slot % 3})
        return writer

    def run_batch(self, batch, tasks, rng, fail_rate=0.0, zombie=None):
        messages = []
        for slot in range(tasks):
            # Slots 0 and 1 always write, so every batch has two transactions to commit (mid_commit).
            rows = [f"b{batch}-t{slot}-{i}" for i in range(rng.randint(1 if slot < 2 else 0, 3))]
            if batch <= self.decided_through:
                messages.append(KafkaCommitMessage(batch, slot, 0, None, 0, skipped=True))
                continue
            retry = None
            if rows and rng.random() < fail_rate:
                self.task(slot, batch, rows)  # attempt 0 dies after writing, leaving its transaction open
                retry = next(self.task_attempt_ids)
                self.retries += 1
            committable = self.task(slot, batch, rows, task_attempt=retry).pre_commit() if rows else None
            messages.append(KafkaCommitMessage(batch, slot, 0 if retry is None else 1,
                                               committable.to_json() if committable else None, len(rows)))
            if batch > self.decided_through:
                self.expected.extend(rows)
        SparkSinkDriver(self.options).commit(BatchContext(batch), messages)
        self.decided_through = max(self.decided_through, batch)
        if zombie is not None:
            # An attempt of this batch that Spark gave up on starts writing after the commit.
            self.task(zombie, batch, [f"zombie-{batch}"])


def test_ids_stay_within_the_pool_over_hundreds_of_batches(tmp_path):
    fake = FakeKafkaClients(tmp_path / "kafka.db")
    fake.admin().create_topic("out", 3)
    query = Query(fake, tmp_path)
    rng = random.Random(11)
    task_counts = [3] * 100 + [5] * 100 + [2] * 100  # the task count changes between runs
    crash_points = ["after_checkpoint_stored", "before_commit", "mid_commit", "after_commit"]
    batch = 0
    crashes = 0
    crashed: set[int] = set()
    while batch < len(task_counts):
        tasks = task_counts[batch]
        zombie = rng.randrange(tasks) if rng.random() < 0.1 else None
        crash = crash_points[crashes % len(crash_points)] if batch % 25 == 7 and batch not in crashed else None
        if crash is not None:
            crashed.add(batch)
            failpoints.enable(crash, "raise")
            with pytest.raises(failpoints.FailpointCrash):
                query.run_batch(batch, tasks, rng, fail_rate=0.2)
            failpoints.disable()
            crashes += 1
            query.restart()  # a new driver: recovery commits a stored batch before any task runs
            if query.decided_through < batch:
                query.expected = [v for v in query.expected if not v.startswith(f"b{batch}-")]
            continue  # Spark replays the batch: written again if it was not stored, else skipped
        query.run_batch(batch, tasks, rng, fail_rate=0.2, zombie=zombie)
        batch += 1
    SparkSinkDriver(query.options).lifecycle.sweep(None)  # the sweep of the next batch's commit

    listed = {t.transactional_id for t in fake.txn_control().list_transactions(f"{query.pool.prefix}-")}
    retried = {i for i in listed if re.search(r"-t\d+$", i)}
    assert listed - retried <= set(query.pool.pool_ids(5)), sorted(listed - retried - set(query.pool.pool_ids(5)))
    assert len(retried) == query.retries > 0, "one id per retried task, used once"
    assert len(listed - retried) == POOL_SIZE * 5
    assert crashes == 12
    output = Counter(r.value.decode() for r in read_all(fake, "out"))
    assert {v: n for v, n in output.items() if n > 1} == {}, "duplicates"
    assert sorted(output) == sorted(query.expected), "lost or unexpected records (a zombie's leaked?)"
    assert fake.txn_control().list_open_transactions("") == []


def test_a_stale_handle_of_a_reused_id_is_lost_never_committed_in_place_of_the_new_one(tmp_path):
    fake = FakeKafkaClients(tmp_path / "kafka.db")
    fake.admin().create_topic("out", 3)
    query = Query(fake, tmp_path)
    old = query.task(0, 2, ["old"]).pre_commit()
    new = query.task(0, 4, ["new"]).pre_commit()  # same id, batch 4: the init aborted "old"
    assert old.transactional_id == new.transactional_id and old.identity != new.identity
    protocol = SparkSinkDriver(query.options)
    with pytest.raises(TransactionLostError) as lost:
        protocol.lifecycle.complete(CompletedCheckpoint(2, 0, 0, {SINK_PARTICIPANT: [old.to_json()]}))
    assert lost.value.transactional_id == old.transactional_id
    assert read_all(fake, "out") == []  # "new" was not committed by the stale handle
    # A state of its own: this one's stored checkpoint 2 is lost, and stays what a commit meets first.
    elsewhere = SparkSinkDriver(query.options, store=FileCheckpointStore(tmp_path / "elsewhere"))
    elsewhere.lifecycle.complete(CompletedCheckpoint(4, 0, 0, {SINK_PARTICIPANT: [new.to_json()]}))
    assert [r.value for r in read_all(fake, "out")] == [b"new"]


def test_a_zombie_of_the_previous_batch_cannot_fence_the_batch_being_committed(tmp_path):
    """Why two ids per slot: a zombie attempt of batch N that only starts writing while batch N+1
    waits for its commit re-initialises N's id, not N+1's."""
    fake = FakeKafkaClients(tmp_path / "kafka.db")
    fake.admin().create_topic("out", 3)
    query = Query(fake, tmp_path)
    query.run_batch(0, 2, random.Random(1))
    pre_committed = [query.task(slot, 1, [f"b1-{slot}"]).pre_commit() for slot in range(2)]
    zombie = query.task(0, 0, ["zombie of batch 0"])  # Spark gave up on it, but it runs on
    SparkSinkDriver(query.options).commit(BatchContext(1), [KafkaCommitMessage(1, slot, 0, c.to_json(), 1) for slot, c in enumerate(pre_committed)])
    assert sorted(r.value for r in read_all(fake, "out"))[-2:] == [b"b1-0", b"b1-1"]
    assert zombie.transactional_id not in {c.transactional_id for c in pre_committed}
    assert fake.txn_control().list_open_transactions("") == []  # the commit's sweep ended the zombie's


def test_a_failed_attempt_that_initialises_late_cannot_fence_its_retry(tmp_path):
    """Spark may start a task's retry while a Python worker of the failed attempt still runs; that
    attempt's InitProducerId can land after the retry pre-committed. Sharing the id, it aborts the
    retry's transaction (the first half shows the loss); with the retry's own id it cannot."""
    fake = FakeKafkaClients(tmp_path / "kafka.db")
    fake.admin().create_topic("out", 3)
    query = Query(fake, tmp_path)
    shared = query.task(0, 0, ["retry, shared id"]).pre_commit()
    query.task(0, 0, ["failed attempt, late"])  # its initialisation lands now
    with pytest.raises(TransactionLostError, match="1 transaction with 1 record was lost"):
        SparkSinkDriver(query.options).commit(BatchContext(0), [KafkaCommitMessage(0, 0, 1, shared.to_json(), 1)])

    query = Query(FakeKafkaClients(tmp_path / "kafka2.db"), tmp_path / "second")
    query.fake.admin().create_topic("out", 3)
    own = query.task(0, 0, ["retry, own id"], task_attempt=7).pre_commit()
    late = query.task(0, 0, ["failed attempt, late"])
    SparkSinkDriver(query.options).commit(BatchContext(0), [KafkaCommitMessage(0, 0, 1, own.to_json(), 1)])
    assert [r.value for r in read_all(query.fake, "out")] == [b"retry, own id"]
    assert late.transactional_id != own.transactional_id
    assert query.fake.txn_control().list_open_transactions("") == []  # the commit's sweep ended the late one


# -- the in-process sink -------------------------------------------------------------------------

def test_in_process_sinks_reuse_their_pool_across_checkpoints_and_failovers(tmp_path):
    fake = FakeKafkaClients(tmp_path / "kafka.db")
    fake.admin().create_topic("in", 2)
    fake.admin().create_topic("out", 2)
    values = [f"v{i}".encode() for i in range(600)]
    produce_committed(fake, "in", values, txn_id="loader")
    prefix = "copy-job"
    for life, crash in enumerate(["after_pre_commit:raise@13", "mid_commit:raise@20", None]):
        if crash:
            name, action = crash.split(":")
            failpoints.enable(name, action)
        coordinator = CheckpointCoordinator(FileCheckpointStore(tmp_path / "chk"),
                                            CheckpointConfig(checkpoint_interval=None, tolerable_failed_checkpoints=5))
        source = KafkaSource(KafkaSourceConfig(bootstrap_servers=fake.bootstrap_servers, subscribe=["in"],
                                               starting_offsets="earliest", ending_offsets="latest"), clients=fake)
        config = KafkaSinkConfig(bootstrap_servers=fake.bootstrap_servers, topic="out", transactional_id_prefix=prefix)
        sinks = [KafkaSink(config, name=f"sink-{w}", slot=w, clients=fake) for w in range(2)]
        pipeline = LocalPipeline(coordinator, source, lambda r: [ProducerRecord(value=r.value, key=r.key)], sinks,
                                 route=lambda v: int(v.value[1:]) % 2, max_poll_records=10,
                                 checkpoint_every_records=10)
        try:
            pipeline.run()
        except failpoints.FailpointCrash:
            assert crash is not None, f"life {life} crashed without a failpoint"
        finally:
            failpoints.disable()
    listed = {t.transactional_id for t in fake.txn_control().list_transactions(f"{prefix}-")}
    assert listed == set(TransactionalIdPool(prefix).pool_ids(2))
    output = Counter(r.value for r in read_all(fake, "out"))
    assert sorted(output) == sorted(values) and max(output.values()) == 1
