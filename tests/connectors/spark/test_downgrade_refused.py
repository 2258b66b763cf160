"""A downgrade at the Spark level: a query whose sink state's newest checkpoint was written in a
newer format (as a newer kit would leave it) fails at start with one line naming the file, its
version, the versions this kit reads and "upgrade", and its state is left byte for byte as it was
(local Spark over the kit's embedded cluster)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

try:
    from connectors.simulated_kafka import FakeKafkaClients  # noqa: E402
except ImportError:  # before the embedded cluster moved into the product
    from connectors.simulated_kafka import FakeKafkaClients  # noqa: E402

from connectors.spark.failures import kit_error_lines  # noqa: E402
from kafka_testkit.topic_records import produce_committed  # noqa: E402

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def spark(tmp_path_factory):
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from connectors.spark import register

    session = (SparkSession.builder.master("local[2]").appName("kafka-eos-downgrade")
               .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
               .config("spark.local.dir", str(tmp_path_factory.mktemp("spark-local"))).getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()


def start_copy(spark, clients, checkpoint: Path):
    source = (spark.readStream.format("kafka-eos").option("kafka.bootstrap.servers", clients.bootstrap_servers)
              .option("subscribe", "in").option("startingOffsets", "earliest").load())
    return (source.selectExpr("key", "value").writeStream.format("kafka-eos")
            .option("kafka.bootstrap.servers", clients.bootstrap_servers).option("topic", "out")
            .option("checkpointLocation", str(checkpoint)).start())


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_query_on_state_of_a_newer_format_fails_at_start_in_one_line_and_leaves_it(spark, tmp_path):
    clients = FakeKafkaClients(tmp_path / "kafka.db")
    clients.admin().create_topic("in", 2)
    clients.admin().create_topic("out", 2)
    produce_committed(clients, "in", [f"r{i}".encode() for i in range(20)], txn_id="load-1")
    checkpoint = tmp_path / "chk"
    query = start_copy(spark, clients, checkpoint)
    query.processAllAvailable()
    query.stop()
    state = checkpoint / "kafka-eos"
    newest = max(int(p.name[4:]) for p in state.glob("chk-*") if (p / "_metadata").exists())
    metadata = state / f"chk-{newest}" / "_metadata"
    document = json.loads(metadata.read_text())
    assert document["format_version"] == 1
    # What a newer kit with a format 2 would have stored (the checksum covers the body only).
    metadata.write_text(metadata.read_text().replace('"format_version": 1', '"format_version": 2'))
    produce_committed(clients, "in", [f"s{i}".encode() for i in range(5)], txn_id="load-2")
    before = snapshot(state)

    query = start_copy(spark, clients, checkpoint)
    with pytest.raises(Exception) as failed:
        query.awaitTermination(120)
    lines = kit_error_lines(failed.value)
    assert len(lines) == 1, lines
    assert str(metadata) in lines[0] and "checkpoint metadata format_version 2" in lines[0], lines[0]
    assert "this version reads format_version 1 only" in lines[0] and "Upgrade pyspark-kafka-eos" in lines[0]
    assert snapshot(state) == before, "the newer state was changed, or something was written beside it"
