"""The one lifecycle (trigger -> acknowledgements -> store -> commit all -> mark -> sweep, and the
one recovery), driven by both adapters over the fake cluster: the in-process engine (LocalPipeline
with KafkaSinks) and the Spark adapter (the executors' write task and the driver's commit
protocol, without Spark). A crash is injected between every two steps; then the job restarts as
its engine would, and the output must hold every record exactly once with no transaction left
open. Each commit-window failpoint is reached at exactly one site per checkpoint."""

from __future__ import annotations

import logging
from collections import Counter
from types import SimpleNamespace

import pytest

pytest.importorskip("pyspark")

import pyarrow as pa  # noqa: E402

from connectors.kafka.sink.config import KafkaSinkConfig  # noqa: E402
from connectors.kafka.kafka_errors import BrokerUnavailableError, InvalidTxnStateError, KafkaConnectorError  # noqa: E402
from connectors.kafka.sink.kafka_sink import KafkaSink  # noqa: E402
from connectors.spark import task_writer as task_writer_module  # noqa: E402
from connectors.spark.sink_driver import SINK_PARTICIPANT, BatchContext, SparkSinkDriver  # noqa: E402
from connectors.spark.options import parse_sink_options  # noqa: E402
from connectors.spark.task_writer import write_task  # noqa: E402
from kafka_testkit.topic_records import read_all  # noqa: E402
from connectors.simulated_kafka import FakeKafkaClients  # noqa: E402
from kafka_testkit.memory_system import ListSource, StepClock  # noqa: E402
from twophase import failpoints  # noqa: E402
from twophase.checkpoint_store import FileCheckpointStore  # noqa: E402
from twophase.coordinator import CheckpointConfig, CheckpointCoordinator  # noqa: E402
from twophase.pipeline import LocalPipeline  # noqa: E402

BATCHES = 4
TASKS = 3
ROWS = 5
RECORDS = BATCHES * TASKS * ROWS
COMMIT_WINDOWS = (failpoints.AFTER_CHECKPOINT_STORED, failpoints.BEFORE_COMMIT, failpoints.MID_COMMIT,
                  failpoints.AFTER_COMMIT)
CRASHES = ("before_pre_commit", "after_pre_commit", *COMMIT_WINDOWS, "during_restore")


@pytest.fixture(autouse=True)
def _clean_failpoints():
    failpoints.disable()
    yield
    failpoints.disable()


@pytest.fixture
def fake(tmp_path):
    clients = FakeKafkaClients(tmp_path / "kafka.db")
    clients.admin().create_topic("out", TASKS)
    return clients


@pytest.fixture
def hits(monkeypatch):
    """Every failpoint reached, as (name, checkpoint id), in order."""
    seen: list[tuple[str, object]] = []
    real = failpoints.hit

    def record(name, **context):
        seen.append((name, context.get("checkpoint_id")))
        real(name, **context)

    monkeypatch.setattr(failpoints, "hit", record)
    return seen


# -- the in-process engine ---------------------------------------------------------------------


class InProcess:
    """One process lifetime per run(): fresh coordinator, source and sinks over the surviving
    cluster and checkpoint directory."""

    def __init__(self, fake, tmp_path):
        self.fake = fake
        self.tmp_path = tmp_path

    def run(self) -> None:
        coordinator = CheckpointCoordinator(
            FileCheckpointStore(self.tmp_path / "chk", retained_checkpoints=2),
            CheckpointConfig(checkpoint_interval=None, tolerable_failed_checkpoints=10), clock=StepClock(0.1))
        config = KafkaSinkConfig(bootstrap_servers=self.fake.bootstrap_servers, topic="out",
                                 transactional_id_prefix="inproc")
        sinks = [KafkaSink(config, name=f"sink-{i}", slot=i, clients=self.fake) for i in range(2)]
        LocalPipeline(coordinator, ListSource(list(range(RECORDS))),
                      lambda r: [{"value": f"r{r}".encode(), "partition": r % TASKS}], sinks,
                      route=lambda v: int(v["value"][1:]) % 2, max_poll_records=TASKS * ROWS,
                      checkpoint_every_records=TASKS * ROWS).run()

    def expected(self) -> list[bytes]:
        return sorted(f"r{r}".encode() for r in range(RECORDS))

    def prefix(self) -> str:
        return "inproc-"


# -- the Spark adapter, without Spark ----------------------------------------------------------


class SparkWithoutSpark:
    """What Spark does with the sink, step by step: the sink driver's recovery, then each write
    task (the executors' code), then the driver's commit; a failed commit is followed by Spark's
    abort of the batch when the JVM lives. A crash kills the query, which restarts from Spark's
    commit log (the batches whose commit returned)."""

    def __init__(self, fake, tmp_path, monkeypatch, jvm_lives: bool = False):
        self.fake = fake
        self.options = parse_sink_options({"kafka.bootstrap.servers": fake.bootstrap_servers, "topic": "out",
                                           "checkpointlocation": str(tmp_path / "chk")}, streaming=True)
        self.commit_log: set[int] = set()
        self.jvm_lives = jvm_lives
        self.aborts = 0
        self._monkeypatch = monkeypatch

    def _task(self, partition_id: int, batch_id: int, decided_through: int | None):
        context = SimpleNamespace(partitionId=lambda: partition_id, attemptNumber=lambda: 0)
        self._monkeypatch.setattr(task_writer_module, "TaskContext", SimpleNamespace(get=lambda: context))
        rows = pa.RecordBatch.from_pydict({
            "value": [f"b{batch_id}-t{partition_id}-{i}".encode() for i in range(ROWS)],
            "partition": pa.array([partition_id] * ROWS, pa.int32())})
        return write_task(self.options, iter([rows]), batch_id, decided_through)

    def run(self) -> None:
        decided_through = SparkSinkDriver(self.options).recover()
        for batch_id in range(max(self.commit_log, default=-1) + 1, BATCHES):
            messages = [self._task(t, batch_id, decided_through) for t in range(TASKS)]
            try:
                SparkSinkDriver(self.options).commit(BatchContext(batch_id), messages)
            except failpoints.FailpointCrash:
                if self.jvm_lives:
                    self.aborts += 1
                    SparkSinkDriver(self.options).fail(BatchContext(batch_id), messages)
                raise
            self.commit_log.add(batch_id)

    def expected(self) -> list[bytes]:
        return sorted(f"b{b}-t{t}-{i}".encode() for b in range(BATCHES) for t in range(TASKS) for i in range(ROWS))

    def prefix(self) -> str:
        return self.options.config.transactional_id_prefix + "-"


@pytest.fixture(params=["in-process", "spark"])
def engine(request, fake, tmp_path, monkeypatch):
    if request.param == "in-process":
        return InProcess(fake, tmp_path)
    return SparkWithoutSpark(fake, tmp_path, monkeypatch)


def run_until_done(engine, after_first_crash=None, lives=5) -> list[str]:
    crashes = []
    for _ in range(lives):
        try:
            engine.run()
            return crashes
        except failpoints.FailpointCrash as crash:
            crashes.append(crash.name)
            if after_first_crash and len(crashes) == 1:
                after_first_crash()
    raise AssertionError(f"not done in {lives} lives: {crashes}")


def assert_exactly_once(fake, engine):
    output = Counter(r.value for r in read_all(fake, "out"))
    assert {v: n for v, n in output.items() if n > 1} == {}, "duplicates"
    assert sorted(output) == engine.expected(), "lost or foreign records"
    assert fake.txn_control().list_open_transactions(engine.prefix()) == [], "a transaction was left open"


def test_each_commit_window_failpoint_is_reached_at_one_site_per_checkpoint(fake, engine, hits):
    engine.run()
    assert_exactly_once(fake, engine)
    windows = [(name, cid) for name, cid in hits if name in COMMIT_WINDOWS]
    checkpoints = sorted({cid for _, cid in windows})
    assert len(checkpoints) >= BATCHES
    for cid in checkpoints:
        assert [name for name, c in windows if c == cid] == list(COMMIT_WINDOWS), cid
    # One recovery per process start, and none inside a commit.
    assert [name for name, _ in hits].count(failpoints.DURING_RESTORE) == 1


@pytest.mark.parametrize("crash", CRASHES)
def test_crash_between_any_two_steps_then_restart_is_exactly_once(fake, engine, crash):
    if crash == "during_restore":
        # A crash while recovering from a crash: the restart's recovery dies too.
        failpoints.enable("after_checkpoint_stored", "raise@2")
        crashes = run_until_done(engine, after_first_crash=lambda: failpoints.enable("during_restore", "raise@1"))
        assert crashes == ["after_checkpoint_stored", "during_restore"]
    else:
        failpoints.enable(crash, "raise@2")
        assert run_until_done(engine) == [crash]
    assert_exactly_once(fake, engine)


@pytest.mark.parametrize("crash", COMMIT_WINDOWS)
def test_spark_abort_of_a_stored_batch_commits_it(fake, tmp_path, monkeypatch, caplog, crash):
    """The driver-side commit fails in its Python process while Spark's JVM lives: Spark calls
    abort(), which must complete the stored batch's commit, never abort its transactions."""
    engine = SparkWithoutSpark(fake, tmp_path, monkeypatch, jvm_lives=True)
    failpoints.enable(crash, "raise@2")
    with caplog.at_level(logging.INFO):
        assert run_until_done(engine) == [crash]
    assert engine.aborts == 1
    assert_exactly_once(fake, engine)
    decided = [r.getMessage() for r in caplog.records if "are committed, not aborted" in r.getMessage()]
    assert len(decided) == 1 and decided[0].startswith("checkpoint 1 failed after it was stored"), decided
    assert "INVALID_TXN_STATE" not in caplog.text
    assert "checkpoint 1 failed: aborting" not in caplog.text


def test_spark_abort_of_a_batch_never_stored_aborts_every_transaction(fake, tmp_path, monkeypatch):
    engine = SparkWithoutSpark(fake, tmp_path, monkeypatch)
    messages = [engine._task(t, 0, -1) for t in range(TASKS)]
    SparkSinkDriver(engine.options).fail(BatchContext(0), messages)
    assert fake.txn_control().list_open_transactions("") == []
    assert read_all(fake, "out") == []


def test_abort_goes_on_past_a_failure_and_already_committed_is_no_error(fake, tmp_path, monkeypatch):
    engine = SparkWithoutSpark(fake, tmp_path, monkeypatch)
    messages = [engine._task(t, 0, -1) for t in range(TASKS)]
    protocol = SparkSinkDriver(engine.options)
    from connectors.kafka.sink.committable import KafkaCommittable

    handles = [KafkaCommittable.from_json(m.committable) for m in messages]
    fake.txn_control().end_txn(handles[0].transactional_id, handles[0].identity, True)  # committed meanwhile
    control = protocol.committer.control()
    real_end = control.end_txn_round
    calls = []

    def end(transactions, commit):
        calls.extend(tid for tid, _ in transactions)
        results = real_end([t for t in transactions if t[0] != handles[1].transactional_id], commit)
        return {**results, handles[1].transactional_id: KafkaConnectorError("EndTxn: refused")}

    monkeypatch.setattr(control, "end_txn_round", end)
    states = {SINK_PARTICIPANT: [m.committable for m in messages]}
    with pytest.raises(KafkaConnectorError, match="refused"):
        protocol.lifecycle.abort_transactions(0, states)
    assert calls == [h.transactional_id for h in handles], "abort stopped at the first error"
    open_ids = {t.transactional_id for t in fake.txn_control().list_open_transactions("")}
    assert open_ids == {handles[1].transactional_id}
    assert sorted(r.value for r in read_all(fake, "out", read_committed=False))  # data was written
    # Aborting the committed one again is still no error.
    monkeypatch.setattr(control, "end_txn_round", real_end)
    protocol.lifecycle.abort_transactions(0, {SINK_PARTICIPANT: [messages[0].committable]})


def test_a_failed_sweep_after_the_commit_does_not_fail_the_batch(fake, tmp_path, monkeypatch, caplog):
    engine = SparkWithoutSpark(fake, tmp_path, monkeypatch)
    messages = [engine._task(t, 0, -1) for t in range(TASKS)]
    protocol = SparkSinkDriver(engine.options)

    def down(prefix):
        # Not retriable: what a bounced broker's unknown id gives.
        raise KafkaConnectorError("list open transactions: UnknownBrokerIdError: 3")

    monkeypatch.setattr(protocol.committer.control(), "list_open_transactions", down)
    with caplog.at_level(logging.WARNING):
        timings = protocol.commit(BatchContext(0), messages)
    assert timings is not None
    assert protocol.lifecycle.store.is_committed(0)
    assert sorted(r.value for r in read_all(fake, "out")) == sorted(
        f"b0-t{t}-{i}".encode() for t in range(TASKS) for i in range(ROWS))
    assert "checkpoint 0: aborting lingering transactions failed" in caplog.text


def test_abort_of_a_transaction_found_committed_is_not_an_error(fake, tmp_path, monkeypatch):
    engine = SparkWithoutSpark(fake, tmp_path, monkeypatch)
    messages = [engine._task(t, 0, -1) for t in range(TASKS)]
    protocol = SparkSinkDriver(engine.options)
    protocol.commit(BatchContext(0), messages)
    from connectors.kafka.sink.committable import KafkaCommittable

    handle = KafkaCommittable.from_json(messages[0].committable)
    with pytest.raises(InvalidTxnStateError):  # what the broker answers, which abort() takes as done
        protocol.committer.control().end_txn(handle.transactional_id, handle.identity, False)
    protocol.lifecycle.abort_transactions(0, {SINK_PARTICIPANT: [messages[0].committable]})
    assert len(read_all(fake, "out")) == TASKS * ROWS
