"""The kafka-eos format on Spark local[2,4] over the fake cluster (shared across Spark's Python
worker processes through its state file). Every write task of this module's copies fails its
first attempt with a seeded probability (connectors.tools.jobs.task_failures, after the sink has written
the task's rows), so each test also shows that retried tasks are fenced."""

from __future__ import annotations

import json
import os
import re
import sys
from collections import Counter
from pathlib import Path

import pytest

pyspark = pytest.importorskip("pyspark")

from connectors.simulated_kafka import FakeKafkaClients  # noqa: E402
from connectors.tools.jobs.task_failures import TASK_FAILURE_RATE_ENV, TASK_FAILURE_SEED_ENV, with_task_failures  # noqa: E402
from kafka_testkit.topic_records import produce_aborted, produce_committed, read_all  # noqa: E402

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def spark(tmp_path_factory):
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ[TASK_FAILURE_RATE_ENV] = "0.3"
    os.environ[TASK_FAILURE_SEED_ENV] = "7"
    from pyspark.sql import SparkSession

    from connectors.spark import register

    session = (SparkSession.builder.master("local[2,4]").appName("kafka-eos-tests")
               .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
               .config("spark.local.dir", str(tmp_path_factory.mktemp("spark-local")))
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()
    os.environ.pop(TASK_FAILURE_RATE_ENV, None)


@pytest.fixture
def fake(tmp_path):
    clients = FakeKafkaClients(tmp_path / "kafka.db")
    clients.admin().create_topic("in", 3)
    clients.admin().create_topic("out", 3)
    return clients


def load(fake, n, topic="in"):
    values = [json.dumps({"id": f"r{i}", "n": i}).encode() for i in range(n)]
    produce_committed(fake, topic, values[: n // 2], key_of=lambda v: json.loads(v)["id"].encode(), txn_id="l1")
    produce_aborted(fake, topic, [b"aborted-1", b"aborted-2"])
    produce_committed(fake, topic, values[n // 2:], key_of=lambda v: json.loads(v)["id"].encode(), txn_id="l2")
    return values


def start_copy(spark, fake, checkpoint, **extra):
    source = (spark.readStream.format("kafka-eos").option("kafka.bootstrap.servers", fake.bootstrap_servers)
              .option("subscribe", "in").option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", "300").load())
    writer = (with_task_failures(source.selectExpr("key", "value")).writeStream.format("kafka-eos")
              .option("kafka.bootstrap.servers", fake.bootstrap_servers).option("topic", "out")
              .option("checkpointLocation", str(checkpoint)))
    for key, value in extra.items():
        writer = writer.option(key, value)
    return writer.start()


def drop_commit_log_entry(checkpoint: Path, batch_id: int) -> None:
    """What a driver crash after our commit and before Spark's commit-log write leaves behind."""
    (checkpoint / "commits" / str(batch_id)).unlink()
    (checkpoint / "commits" / f".{batch_id}.crc").unlink(missing_ok=True)


def assert_exactly_once(fake, values):
    output = Counter(r.value for r in read_all(fake, "out"))
    assert {v: n for v, n in output.items() if n > 1} == {}, "duplicates"
    assert set(values) - set(output) == set(), "lost records"
    assert set(output) == set(values), "unexpected records (aborted input leaked?)"
    assert fake.txn_control().list_open_transactions("") == []


def test_streaming_copy_is_exactly_once_and_stores_each_batch(spark, fake, tmp_path):
    values = load(fake, 1500)
    query = start_copy(spark, fake, tmp_path / "chk")
    query.processAllAvailable()
    batches = [p["batchId"] for p in query.recentProgress if p["numInputRows"]]
    query.stop()
    assert len(batches) >= 5, "maxOffsetsPerTrigger was not honoured"
    assert_exactly_once(fake, values)
    store = tmp_path / "chk" / "kafka-eos"
    stored = sorted(int(p.name[4:]) for p in store.glob("chk-*"))
    assert stored == batches[-3:]
    for chk in stored:
        assert (store / f"chk-{chk}" / "_committed").exists()
        metadata = json.loads((store / f"chk-{chk}" / "_metadata").read_text())
        committables = metadata["checkpoint"]["operator_states"]["kafka-sink"]
        # The pool's id of the batch: {prefix}-{task}-{batch id % 2}, with -t{task attempt id} for a retry.
        assert committables and all(re.search(rf"-\d+-{chk % 2}(-t\d+)?$", c["transactional_id"])
                                    for c in committables), [c["transactional_id"] for c in committables]


def test_replayed_batch_that_was_committed_writes_nothing(spark, fake, tmp_path):
    values = load(fake, 900)
    checkpoint = tmp_path / "chk"
    query = start_copy(spark, fake, checkpoint)
    query.processAllAvailable()
    query.stop()
    last = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    drop_commit_log_entry(checkpoint, last)
    query = start_copy(spark, fake, checkpoint)
    query.processAllAvailable()
    query.stop()
    assert (checkpoint / "commits" / str(last)).exists(), "the batch was not replayed"
    assert_exactly_once(fake, values)


def test_stored_but_unconfirmed_batch_is_recommitted_before_the_replay(spark, fake, tmp_path):
    values = load(fake, 600)
    checkpoint = tmp_path / "chk"
    query = start_copy(spark, fake, checkpoint)
    query.processAllAvailable()
    query.stop()
    store = checkpoint / "kafka-eos"
    last = max(int(p.name[4:]) for p in store.glob("chk-*"))
    (store / f"chk-{last}" / "_committed").unlink()
    drop_commit_log_entry(checkpoint, last)
    query = start_copy(spark, fake, checkpoint)
    query.processAllAvailable()
    query.stop()
    assert (store / f"chk-{last}" / "_committed").exists()
    assert_exactly_once(fake, values)


def test_a_restart_on_an_empty_state_fails_instead_of_replaying(spark, fake, tmp_path):
    # The driver moved and its eos.stateDir (a local disk) stayed behind: run 2 has state B.
    values = load(fake, 900)
    checkpoint = tmp_path / "chk"
    query = start_copy(spark, fake, checkpoint, **{"eos.stateDir": str(tmp_path / "state-a")})
    query.processAllAvailable()
    query.stop()
    last = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    drop_commit_log_entry(checkpoint, last)  # died after the sink's commit, before Spark's log
    query = start_copy(spark, fake, checkpoint, **{"eos.stateDir": str(tmp_path / "state-b")})
    with pytest.raises(Exception, match=r"lost state.*committed batches up to"):
        query.processAllAvailable()
    query.stop()
    assert_exactly_once(fake, values)


def test_a_reset_checkpoint_with_its_state_kept_is_refused(spark, fake, tmp_path):
    import shutil

    values = load(fake, 600)
    state = {"eos.stateDir": str(tmp_path / "state")}
    query = start_copy(spark, fake, tmp_path / "chk", **state)
    query.processAllAvailable()
    query.stop()
    written = len(read_all(fake, "out"))
    shutil.rmtree(tmp_path / "chk")
    query = start_copy(spark, fake, tmp_path / "chk", **state)
    with pytest.raises(Exception, match=r"belongs to spark-streaming-query .*not to spark-streaming-query"):
        query.processAllAvailable()
    query.stop()
    assert len(read_all(fake, "out")) == written
    assert_exactly_once(fake, values)


def test_batch_write_and_bounded_batch_read(spark, fake, tmp_path):
    rows = [(f"k{i}".encode(), f"v{i}".encode()) for i in range(200)]
    df = with_task_failures(spark.createDataFrame(rows, "key binary, value binary").repartition(3))
    (df.write.format("kafka-eos").option("kafka.bootstrap.servers", fake.bootstrap_servers)
     .option("topic", "out").option("eos.stateDir", str(tmp_path / "state")).mode("append").save())
    assert sorted(r.value for r in read_all(fake, "out")) == sorted(v for _, v in rows)
    assert fake.txn_control().list_open_transactions("") == []

    read = (spark.read.format("kafka-eos").option("kafka.bootstrap.servers", fake.bootstrap_servers)
            .option("subscribe", "out").option("startingOffsets", "earliest")
            .option("endingOffsets", "latest").option("minPartitions", "6").load())
    assert read.rdd.getNumPartitions() >= 6
    got = read.select("key", "value", "topic", "partition", "offset", "timestamp", "timestampType").collect()
    assert sorted(r.value for r in got) == sorted(v for _, v in rows)
    assert {r.topic for r in got} == {"out"}

    # eos.maxPartitions: the topic's partitions share one task, each offset read once.
    partitions = len({r.partition for r in got})
    assert partitions > 1
    grouped = (spark.read.format("kafka-eos").option("kafka.bootstrap.servers", fake.bootstrap_servers)
               .option("subscribe", "out").option("eos.maxPartitions", "1").load())
    assert grouped.rdd.getNumPartitions() == 1
    records = grouped.select("partition", "offset", "value").collect()
    assert len({(r.partition, r.offset) for r in records}) == len(records) == len(rows)
    assert sorted(r.value for r in records) == sorted(v for _, v in rows)


def test_headers_round_trip(spark, fake, tmp_path):
    df = spark.sql("SELECT CAST('k' AS BINARY) AS key, 'v' AS value, "
                   "array(named_struct('key', 'h1', 'value', CAST('x' AS BINARY))) AS headers")
    (df.write.format("kafka-eos").option("kafka.bootstrap.servers", fake.bootstrap_servers)
     .option("topic", "out").option("eos.stateDir", str(tmp_path / "state")).mode("append").save())
    read = (spark.read.format("kafka-eos").option("kafka.bootstrap.servers", fake.bootstrap_servers)
            .option("subscribe", "out").option("includeHeaders", "true").load().collect())
    assert [(r.key, r.value, [(h.key, h.value) for h in r.headers]) for r in read] == [(b"k", b"v", [("h1", b"x")])]


@pytest.mark.parametrize("binding", ["eos.stateDir", "checkpointLocation"])
def test_foreach_batch_helper_is_exactly_once_across_replays(spark, fake, tmp_path, binding):
    # eos.stateDir alone: bound by Spark's local property; checkpointLocation (what Spark Connect
    # needs): by the query id in its metadata, checked against the local property here.
    from connectors.spark.foreach_batch import exactly_once_foreach_batch

    values = load(fake, 600)
    calls = []

    def transform(batch_df, batch_id):
        calls.append(batch_id)
        return with_task_failures(batch_df.selectExpr("key", "value"))

    def start():
        source = (spark.readStream.format("kafka-eos").option("kafka.bootstrap.servers", fake.bootstrap_servers)
                  .option("subscribe", "in").option("startingOffsets", "earliest")
                  .option("maxOffsetsPerTrigger", "250").load())
        bound = ({"eos.stateDir": str(tmp_path / "chk" / "kafka-eos")} if binding == "eos.stateDir"
                 else {"checkpointLocation": str(tmp_path / "chk")})
        handler = exactly_once_foreach_batch(transform, **{
            "kafka.bootstrap.servers": fake.bootstrap_servers, "topic": "out", **bound})
        return source.writeStream.foreachBatch(handler).option("checkpointLocation", str(tmp_path / "chk")).start()

    query = start()
    query.processAllAvailable()
    query.stop()
    last = max(calls)
    drop_commit_log_entry(tmp_path / "chk", last)
    query = start()
    query.processAllAvailable()
    query.stop()
    assert calls.count(last) == 2, "the last batch was not replayed"
    assert_exactly_once(fake, values)


def test_foreach_batch_helper_ends_the_transactions_of_a_failed_batch(spark, fake, tmp_path, caplog):
    # Spark hands a foreachBatch function no message of the tasks that pre-committed before the
    # batch failed: the helper aborts what they left open, and the restart writes everything once.
    from connectors.spark.foreach_batch import exactly_once_foreach_batch

    values = load(fake, 300)
    failing = json.loads(values[-1])["id"]

    def start(fail: bool):
        source = (spark.readStream.format("kafka-eos").option("kafka.bootstrap.servers", fake.bootstrap_servers)
                  .option("subscribe", "in").option("startingOffsets", "earliest").load())
        value = f"CASE WHEN CAST(key AS STRING) = '{failing}' THEN raise_error('boom') ELSE value END" \
            if fail else "value"
        handler = exactly_once_foreach_batch(lambda df, _: df.selectExpr("key", f"{value} AS value"), **{
            "kafka.bootstrap.servers": fake.bootstrap_servers, "topic": "out",
            "checkpointLocation": str(tmp_path / "chk")})
        return source.writeStream.foreachBatch(handler).option("checkpointLocation", str(tmp_path / "chk")).start()

    query = start(fail=True)
    with caplog.at_level("WARNING", logger="connectors.spark.sink_driver"):
        with pytest.raises(Exception, match="boom"):
            query.awaitTermination(120)
    assert "checkpoint 0 failed: aborted" in caplog.text
    assert read_all(fake, "out") == [], "nothing of the failed batch is visible"
    query = start(fail=False)
    query.processAllAvailable()
    query.stop()
    assert_exactly_once(fake, values)


def test_foreach_batch_helper_ends_a_crashed_runs_open_transactions_before_its_first_tasks(spark, fake, tmp_path,
                                                                                           caplog):
    # Open, a task's transaction of a run that died mid-batch would make the first tasks' InitProducerId
    # of the same id wait for the brokers to abort it.
    from connectors.kafka.sink.internal.transactional_ids import TransactionalIdPool
    from connectors.kafka.sink.writer import KafkaTransactionWriter
    from connectors.spark.foreach_batch import exactly_once_foreach_batch
    from connectors.spark.options import parse_sink_options

    values = load(fake, 300)
    options = {"kafka.bootstrap.servers": fake.bootstrap_servers, "topic": "out",
               "checkpointLocation": str(tmp_path / "chk"), "eos.transactionalIdPrefix": "fb-sweep"}
    config = parse_sink_options({k.lower(): v for k, v in options.items()}, streaming=False).config
    crashed = KafkaTransactionWriter(fake, config, TransactionalIdPool("fb-sweep").transactional_id(0, 1), 1)
    crashed.write({"value": b"of the run that died", "partition": 0})
    assert fake.txn_control().list_open_transactions("fb-sweep-")
    source = (spark.readStream.format("kafka-eos").option("kafka.bootstrap.servers", fake.bootstrap_servers)
              .option("subscribe", "in").option("startingOffsets", "earliest").load())
    with caplog.at_level("INFO"):
        query = (source.selectExpr("key", "value").writeStream
                 .foreachBatch(exactly_once_foreach_batch(**options))
                 .option("checkpointLocation", str(tmp_path / "chk")).start())
        query.processAllAvailable()
        query.stop()
    lines = [r.getMessage() for r in caplog.records]
    swept = next(i for i, line in enumerate(lines) if line.startswith("aborting lingering transaction fb-sweep-0-1"))
    stored = next(i for i, line in enumerate(lines) if line.startswith("checkpoint 0 stored"))
    assert swept < stored, "ended only after the first batch's tasks"
    assert_exactly_once(fake, values)


def test_task_workers_start_in_the_background(spark, caplog, monkeypatch):
    from connectors.spark import worker_warmup
    from connectors.spark.worker_warmup import start_task_workers

    monkeypatch.setattr(worker_warmup, "_started", {})  # register() warmed this session's already
    with caplog.at_level("INFO", logger="connectors.spark.worker_warmup"):
        thread = start_task_workers(spark)
        assert thread is not None
        thread.join(120)
    assert not thread.is_alive()
    assert "failed" not in caplog.text


def test_task_workers_are_started_once_per_session_and_python(spark, monkeypatch):
    """A job reading with the kit's source and writing with its foreachBatch sink calls register()
    and the helper: the second warm-up of the same workers is not planned again."""
    from connectors.spark import worker_warmup
    from connectors.spark.worker_warmup import start_task_workers

    monkeypatch.setattr(worker_warmup, "_started", {})
    first = start_task_workers(spark)
    planned = []
    monkeypatch.setattr(type(spark.range(1)), "mapInArrow", lambda *args, **kwargs: planned.append(args))
    assert start_task_workers(spark) is first
    assert planned == []
    first.join(120)


def test_task_workers_start_with_the_python_of_the_tasks_they_are_for(spark, caplog, tmp_path):
    """register() warms the workers of the data source's Python (its tasks' Python), not the
    session's: a Python that does not exist fails the warm-up (logged, not raised), and the
    session keeps its own Python."""
    from connectors.spark.worker_warmup import start_task_workers

    session_python = spark.sparkContext.pythonExec
    with caplog.at_level("INFO", logger="connectors.spark.worker_warmup"):
        thread = start_task_workers(spark, str(tmp_path / "no-such-python"))
        assert spark.sparkContext.pythonExec == session_python
        thread.join(120)
    assert "starting the Python task workers ahead of the query failed" in caplog.text


def test_no_task_workers_to_start_without_a_spark_context():
    from connectors.spark.worker_warmup import start_task_workers

    class ConnectSession:  # what a Spark Connect client's session answers
        @property
        def sparkContext(self):  # noqa: N802 (Spark's name)
            raise RuntimeError("[NOT_IMPLEMENTED] sparkContext() is not implemented.")

    assert start_task_workers(ConnectSession()) is None


def test_register_does_not_fail_when_the_warm_up_cannot_be_planned(spark, caplog, monkeypatch):
    """pyspark plans mapInArrow only where the driver's Python has pandas: a driver in a YARN
    container running a packed venv without it (test_spark_on_yarn.py) must still register. The
    warm-up itself skips what it cannot plan, for register() and the foreachBatch sink alike."""
    from connectors.spark import register, worker_warmup

    def unplannable(*args, **kwargs):
        raise ImportError("Pandas >= 2.2.0 must be installed; however, it was not found.")

    monkeypatch.setattr(type(spark.range(1)), "mapInArrow", unplannable)
    monkeypatch.setattr(worker_warmup, "_started", {})  # the fixture's register() warmed this session's
    session_python = spark.sparkContext.pythonExec
    with caplog.at_level("INFO", logger="connectors.spark"):
        register(spark)
    assert "not starting the Python task workers ahead of the query" in caplog.text
    assert spark.sparkContext.pythonExec == session_python


def test_register_plans_the_warm_up_while_spark_registers_the_data_source(spark, monkeypatch):
    """Spark's first registration waits about a second on its lookup of installed Python data
    sources; the warm-up's planning overlaps it (issue 38). The registration here waits for the
    warm-up to be planned: done one after the other, it would find it not planned (after the
    bound, which only keeps a broken implementation from hanging the test)."""
    import threading

    from pyspark.sql.datasource import DataSourceRegistration

    from connectors.spark import register, worker_warmup
    from connectors.worker_python import for_data_source

    planned = threading.Event()
    seen: dict[str, object] = {}
    original_register = DataSourceRegistration.register
    original_plan = type(spark.range(1)).mapInArrow

    def registering(self, data_source):
        seen["planned while registering"] = planned.wait(timeout=60)
        seen["registering thread"] = threading.current_thread().name
        seen["python"] = self.sparkSession.sparkContext.pythonExec
        return original_register(self, data_source)

    def planning(self, *args, **kwargs):
        planned.set()
        return original_plan(self, *args, **kwargs)

    monkeypatch.setattr(DataSourceRegistration, "register", registering)
    monkeypatch.setattr(type(spark.range(1)), "mapInArrow", planning)
    monkeypatch.setattr(worker_warmup, "_started", {})  # the fixture's register() warmed this session's
    session_python = spark.sparkContext.pythonExec
    register(spark)
    assert seen["planned while registering"] is True
    assert seen["registering thread"] != threading.current_thread().name
    # The data source's Python (the launcher beside this interpreter, on a local master), as
    # registered one after the other.
    assert seen["python"] == (for_data_source(session_python, spark.sparkContext.master) or session_python)
    assert spark.sparkContext.pythonExec == session_python


def test_register_without_warm_up_registers_on_the_callers_thread(spark, monkeypatch):
    import threading

    from pyspark.sql.datasource import DataSourceRegistration

    from connectors.spark import register, worker_warmup

    threads: list[str] = []
    original_register = DataSourceRegistration.register

    def registering(self, data_source):
        threads.append(threading.current_thread().name)
        return original_register(self, data_source)

    monkeypatch.setattr(DataSourceRegistration, "register", registering)
    monkeypatch.setattr(worker_warmup, "_started", {})
    register(spark, warm_up=False)
    assert threads == [threading.current_thread().name]
    assert worker_warmup._started == {}


def test_sink_without_value_column_names_the_column(spark, fake, tmp_path):
    source = (spark.readStream.format("kafka-eos").option("kafka.bootstrap.servers", fake.bootstrap_servers)
              .option("subscribe", "in").load())
    query = (source.selectExpr("key").writeStream.format("kafka-eos")
             .option("kafka.bootstrap.servers", fake.bootstrap_servers).option("topic", "out")
             .option("checkpointLocation", str(tmp_path / "chk")).start())
    load(fake, 10)
    with pytest.raises(Exception, match="Required attribute 'value' not found"):
        query.processAllAvailable()


def test_unknown_option_lists_the_valid_ones(spark, fake):
    with pytest.raises(Exception, match=r"unknown kafka-eos source option 'subscrbe' \(did you mean 'subscribe'\?\) "
                                        r"\(name as Spark passes it, lower-cased\); valid source options: .*subscribePattern"):
        (spark.read.format("kafka-eos").option("kafka.bootstrap.servers", fake.bootstrap_servers)
         .option("subscrbe", "in").load().collect())


def test_speculation_is_refused_at_registration():
    from types import SimpleNamespace

    from connectors.spark import register
    from connectors.spark.spark_errors import SpeculationNotSupportedError

    registered = []
    session = SimpleNamespace(version="4.3.0", conf=SimpleNamespace(get=lambda key, default=None: "true"),
                              dataSource=SimpleNamespace(register=registered.append))
    with pytest.raises(SpeculationNotSupportedError, match="spark.speculation=false"):
        register(session)
    assert registered == []
