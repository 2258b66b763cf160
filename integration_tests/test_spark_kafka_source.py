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
SIGKILLed at ``after_checkpoint_stored``, ``mid_commit`` and ``after_commit``, then restarted.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from kafka_io import assert_exactly_once, copied_id, read_committed_values, topics_with_orders, wait_until_stable
from kafka_testkit.maven_artifacts import MavenUnavailableError
from kafka_testkit.spark_kafka_connector import resolve_connector
from spark_job import DEFAULT_PREFIX, KILLED, run_spark_job
from twophase.checkpoint_store import FileCheckpointStore

log = logging.getLogger(__name__)

pytestmark = pytest.mark.spark

JARS_ENV = "KAFKA_EOS_SPARK_KAFKA_JARS"
RECORDS = 3000


def resolve_jars(value: str) -> list[str]:
    """``KAFKA_EOS_SPARK_KAFKA_JARS``: comma-separated jar paths, or directories of jars."""
    jars: list[str] = []
    for item in (part.strip() for part in value.split(",")):
        if not item:
            continue
        path = Path(item)
        if path.is_dir():
            jars += sorted(str(p) for p in path.glob("*.jar"))
        elif path.is_file():
            jars.append(str(path))
        else:
            raise FileNotFoundError(f"{JARS_ENV}: {item} is neither a jar nor a directory")
    return jars


@dataclass(frozen=True)
class ConnectorJars:
    """The connector's jars for ``--jars``, and where they come from (for the reports)."""

    jars: str
    description: str


def _jars_from_environment(value: str) -> ConnectorJars:
    jars = resolve_jars(value)
    if not any("spark-sql-kafka-0-10" in Path(j).name for j in jars):
        pytest.skip(f"{JARS_ENV}={value} holds no spark-sql-kafka-0-10 jar")
    return ConnectorJars(",".join(jars), f"Spark's Kafka connector from {JARS_ENV}={value}")


@pytest.fixture(scope="module")
def spark_kafka_connector() -> ConnectorJars:
    """``KAFKA_EOS_SPARK_KAFKA_JARS`` when set (the user's jars win), else Maven Central."""
    value = os.environ.get(JARS_ENV, "").strip()
    if value:
        connector = _jars_from_environment(value)
    else:
        try:
            resolved = resolve_connector()
        except MavenUnavailableError as exc:
            pytest.skip(f"Spark's Kafka connector: {JARS_ENV} is not set, and Maven Central gave none: {exc}")
        connector = ConnectorJars(resolved.spark_jars, resolved.description)
    log.info("%s: %s", connector.description, connector.jars)
    return connector


@pytest.fixture
def spark_kafka_jars(spark_kafka_connector: ConnectorJars, record_property: Callable[[str, object], None],
                     request: pytest.FixtureRequest) -> str:
    """The jars for ``--jars``; the test's report names the connector (its version), so that a pass
    on a fallback version is not mistaken for one on pyspark's own."""
    record_property("spark_kafka_connector", spark_kafka_connector.description)
    request.node.add_report_section("setup", "spark kafka connector", spark_kafka_connector.description)
    return spark_kafka_connector.jars


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
