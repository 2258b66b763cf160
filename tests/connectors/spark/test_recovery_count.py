"""Recovery runs once per replayed batch, whichever entry point wrote it and however many Python
processes Spark starts around the batch (planning, tasks, the commit runner).

Every run of the lifecycle's recovery passes its ``during_restore`` failpoint. Enabled with a
no-op action (``sleep(0)``) and ``KAFKA_EOS_FAILPOINT_LOG``, each one appends a line to a file, from
whichever process runs it: Spark's Python workers (through ``spark.executorEnv``, which Spark hands
to the data source's processes) and this process (where a foreachBatch function runs)."""

from __future__ import annotations

import os
import sys
from collections import Counter
from pathlib import Path

import pytest

pyspark = pytest.importorskip("pyspark")

from connectors.simulated_kafka import FakeKafkaClients  # noqa: E402
from kafka_testkit.topic_records import produce_committed, read_all  # noqa: E402
from twophase import failpoints  # noqa: E402

pytestmark = pytest.mark.spark

COUNTED = f"{failpoints.DURING_RESTORE}:sleep(0)"


@pytest.fixture(scope="module")
def recoveries_log(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("recoveries") / "failpoints.log"


@pytest.fixture(scope="module")
def spark(tmp_path_factory, recoveries_log):
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from connectors.spark import register

    session = (SparkSession.builder.master("local[2]").appName("kafka-eos-recovery-count")
               .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
               .config("spark.local.dir", str(tmp_path_factory.mktemp("spark-local")))
               .config(f"spark.executorEnv.{failpoints.ENV_VAR}", COUNTED)
               .config(f"spark.executorEnv.{failpoints.LOG_FILE_ENV}", str(recoveries_log))
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()


@pytest.fixture
def counted(recoveries_log, monkeypatch):
    """This process counts too (a foreachBatch function runs here); returns the log to read."""
    monkeypatch.setenv(failpoints.LOG_FILE_ENV, str(recoveries_log))
    recoveries_log.write_text("")
    failpoints.enable(failpoints.DURING_RESTORE, "sleep(0)")
    yield recoveries_log
    failpoints.disable()


def recoveries(log: Path) -> int:
    lines = log.read_text().splitlines() if log.exists() else []
    return sum(1 for line in lines if line.startswith(f"failpoint {failpoints.DURING_RESTORE} fired"))


@pytest.fixture
def fake(tmp_path):
    clients = FakeKafkaClients(tmp_path / "kafka.db")
    clients.admin().create_topic("in", 2)
    clients.admin().create_topic("out", 2)
    return clients


def start(spark, fake, checkpoint: Path, entry: str):
    from connectors.spark.foreach_batch import exactly_once_foreach_batch

    source = (spark.readStream.format("kafka-eos").option("kafka.bootstrap.servers", fake.bootstrap_servers)
              .option("subscribe", "in").option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", "100").load().selectExpr("key", "value"))
    sink = {"kafka.bootstrap.servers": fake.bootstrap_servers, "topic": "out"}
    if entry == "format":
        writer = source.writeStream.format("kafka-eos").options(**sink)
    else:
        writer = source.writeStream.foreachBatch(exactly_once_foreach_batch(**sink, checkpointLocation=str(checkpoint)))
    return writer.option("checkpointLocation", str(checkpoint)).start()


@pytest.mark.parametrize("stored", ["committed", "stored, not confirmed"])
@pytest.mark.parametrize("entry", ["format", "foreachBatch"])
def test_a_replayed_batch_is_recovered_once(spark, fake, tmp_path, counted, entry, stored):
    values = [b"r%d" % i for i in range(300)]
    produce_committed(fake, "in", values)
    checkpoint = tmp_path / "chk"
    query = start(spark, fake, checkpoint, entry)
    query.processAllAvailable()
    query.stop()
    # A fresh state has nothing to recover; the foreachBatch helper knows the first call of its run
    # and recovers there (sweeping what a crashed run left), Spark's planning of a data source
    # write cannot tell the first batch of a run from the others.
    assert recoveries(counted) == (1 if entry == "foreachBatch" else 0)

    # What a driver crash after the sink's commit (or only after storing the checkpoint) and
    # before Spark's commit-log entry leaves: Spark replays that batch.
    last = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    (checkpoint / "commits" / str(last)).unlink()
    (checkpoint / "commits" / f".{last}.crc").unlink(missing_ok=True)
    if stored != "committed":
        (checkpoint / "kafka-eos" / f"chk-{last}" / "_committed").unlink()
    counted.write_text("")

    query = start(spark, fake, checkpoint, entry)
    query.processAllAvailable()
    query.stop()
    assert (checkpoint / "commits" / str(last)).exists(), "the batch was not replayed"
    assert recoveries(counted) == 1
    assert (checkpoint / "kafka-eos" / f"chk-{last}" / "_committed").exists()
    output = Counter(r.value for r in read_all(fake, "out"))
    assert output == Counter(values), "not exactly once"
    assert fake.txn_control().list_open_transactions("") == []
