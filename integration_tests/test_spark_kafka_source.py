"""Spark's own Kafka source (``readStream.format("kafka")``) feeding the kit's exactly-once sink, on
a real broker.

Spark's Kafka connector is not part of pyspark (nor on PyPI). ``KAFKA_EOS_SPARK_KAFKA_JARS`` names
its jars, comma-separated paths or a directory holding them (``spark-sql-kafka-0-10_2.13``,
``spark-token-provider-kafka-0-10_2.13``, ``kafka-clients``, ``commons-pool2`` of the installed
pyspark's Spark version). Without it the official artifacts are resolved from Maven Central with
``mvn`` (``kafka_testkit.spark_kafka_connector``): the installed pyspark's version, else the nearest
one served. Every test names the connector it ran with (the section "spark kafka connector" of its
report, shown by ``-rA``, and the property ``spark_kafka_connector`` of a JUnit XML report). When
neither gives a connector the tests are skipped, naming what was tried.

Why it is exactly-once: the source's state is the offset range of each batch, which Spark writes to
its offset log before the batch runs, so a replayed batch reads the same offsets (with
``kafka.isolation.level=read_committed``, the same records: the input here holds an aborted
transaction). The kit's sink makes the replay write nothing twice. The driver (the whole job) is
SIGKILLed at ``after_checkpoint_stored``, ``mid_commit`` and ``after_commit``, then restarted; and
executor tasks fail and are retried.

The sink is the job's default: ``format("kafka-eos")``, and the foreachBatch sink on Spark 3.5,
which lacks the Python data source API; the version matrix runs these tests on every pyspark line.
"""

from __future__ import annotations

import pytest

from connectors.tools.jobs.task_failures import TASK_FAILURE_RATE_ENV, TASK_FAILURE_SEED_ENV
from kafka_io import assert_exactly_once, copied_id, read_committed_values, topics_with_orders, wait_until_stable
from spark_job import DEFAULT_PREFIX, KILLED, run_spark_job
from twophase.checkpoint_store import FileCheckpointStore

pytestmark = pytest.mark.spark

RECORDS = 3000


def spark_source_job(*args: object, **kwargs: object):  # type: ignore[no-untyped-def]
    jars = kwargs.pop("jars")
    return run_spark_job(*args, extra=("--source-format", "kafka", "--jars", str(jars)), **kwargs)  # type: ignore[arg-type]


def test_spark_kafka_source_into_the_sink_is_exactly_once(kafka_bootstrap, kafka_clients, unique_name, tmp_path,
                                                          spark_kafka_jars):
    source, sink, ids = topics_with_orders(kafka_clients, unique_name, RECORDS)
    finished = spark_source_job(kafka_bootstrap, source, sink, tmp_path / "chk", jars=spark_kafka_jars)
    assert finished.returncode == 0, finished.stderr[-4000:]
    wait_until_stable(kafka_clients, sink)
    assert_exactly_once(read_committed_values(kafka_clients, sink), ids, copied_id)


@pytest.mark.parametrize("failpoint", ["after_checkpoint_stored", "mid_commit", "after_commit"])
def test_spark_kafka_source_driver_killed_and_restarted_is_exactly_once(kafka_bootstrap, kafka_clients, unique_name,
                                                                        tmp_path, spark_kafka_jars, failpoint):
    source, sink, ids = topics_with_orders(kafka_clients, unique_name, RECORDS)
    checkpoint = tmp_path / "chk"
    crashed = spark_source_job(kafka_bootstrap, source, sink, checkpoint, f"{failpoint}:exit@2",
                               jars=spark_kafka_jars)
    assert crashed.returncode == KILLED, f"exit {crashed.returncode}\n{crashed.stderr[-4000:]}"
    assert len(read_committed_values(kafka_clients, sink)) < RECORDS, "crashed after finishing"
    stored = FileCheckpointStore(str(checkpoint / "kafka-eos"), check_writable=False)
    assert stored.checkpoint_ids(), "nothing stored before the kill"
    if failpoint != "after_commit":
        assert not stored.is_committed(stored.checkpoint_ids()[-1]), "the kill did not hit the commit window"

    finished = spark_source_job(kafka_bootstrap, source, sink, checkpoint, jars=spark_kafka_jars)
    assert finished.returncode == 0, finished.stderr[-4000:]
    wait_until_stable(kafka_clients, sink)
    assert_exactly_once(read_committed_values(kafka_clients, sink), ids, copied_id)
    assert kafka_clients.txn_control().list_open_transactions(DEFAULT_PREFIX) == []


def test_spark_kafka_source_with_executor_task_failures_is_exactly_once(kafka_bootstrap, kafka_clients, unique_name,
                                                                       tmp_path, spark_kafka_jars):
    source, sink, ids = topics_with_orders(kafka_clients, unique_name, RECORDS)
    finished = spark_source_job(kafka_bootstrap, source, sink, tmp_path / "chk", jars=spark_kafka_jars,
                                env={TASK_FAILURE_RATE_ENV: "0.5", TASK_FAILURE_SEED_ENV: "11"})
    assert finished.returncode == 0, finished.stderr[-4000:]
    assert "InjectedTaskFailure: injected failure of task" in finished.stderr
    wait_until_stable(kafka_clients, sink)
    assert_exactly_once(read_committed_values(kafka_clients, sink), ids, copied_id)
    assert kafka_clients.txn_control().list_open_transactions(DEFAULT_PREFIX) == []
