"""What the installed Spark release offers, on that release (connectors/spark/spark_versions.py):
``format("kafka-eos")`` on Spark 4 (a batch read on real Kafka), one refusing line on Spark 3.5,
which leaves Spark's own formats working, the example job's defaults on each, and, on Spark 4,
the commit runner of Spark's streaming sinks where the format looks for it.

The version matrix of ``.ci/run`` runs this file, with the compact set of ``VERSION_SET``
(integration_tests/conftest.py), in a venv of each pyspark line; the other tests there show
exactly-once on each line under faults."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Callable, Iterator

import pyspark
import pytest
from pyspark.sql import SparkSession

from connectors.spark import register
from connectors.spark.spark_errors import UnsupportedSparkError
from connectors.spark.spark_versions import has_python_data_source_api, has_stream_admission_control
from connectors.tools.jobs.spark_pipeline import parse_args
from kafka_io import topics_with_orders

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    warehouse = tmp_path_factory.mktemp("warehouse")
    session = (SparkSession.builder.master("local[2]").appName("kafka-eos spark versions")
               .config("spark.ui.enabled", "false").config("spark.driver.host", "127.0.0.1")
               .config("spark.sql.warehouse.dir", str(warehouse)).getOrCreate())
    yield session
    session.stop()


def test_the_format_is_registered_on_spark_4_and_refused_in_one_line_on_spark_3_5(
        spark: SparkSession, kafka_bootstrap: str, kafka_clients, unique_name: Callable[[str], str],  # type: ignore[no-untyped-def]
        tmp_path: Path) -> None:
    if has_python_data_source_api():
        register(spark, warm_up=False)
        source, _, ids = topics_with_orders(kafka_clients, unique_name, 100)
        rows = (spark.read.format("kafka-eos").option("kafka.bootstrap.servers", kafka_bootstrap)
                .option("subscribe", source).load().selectExpr("CAST(key AS STRING) AS key").collect())
        assert sorted(row.key for row in rows) == sorted(ids)
        return
    with pytest.raises(UnsupportedSparkError) as refused:
        register(spark)
    line = str(refused.value)
    assert "\n" not in line
    assert f"this is Spark {pyspark.__version__}" in line and "exactly_once_foreach_batch" in line, line
    # Refused before the kit's JVM provider (built for Spark 4) was put into the driver: every data
    # source lookup of the session would otherwise fail on it.
    spark.range(3).write.format("json").mode("overwrite").save(str(tmp_path / "still-works"))
    assert spark.read.format("json").load(str(tmp_path / "still-works")).count() == 3


def test_the_example_job_defaults_to_what_this_spark_runs() -> None:
    args = parse_args(["--bootstrap", "localhost:9092", "--input", "in", "--output", "out",
                       "--checkpoint-dir", "/tmp/chk"])
    assert args.source_format == ("kafka-eos" if has_stream_admission_control() else "kafka")
    assert args.sink_format == ("kafka-eos" if has_python_data_source_api() else "kafka-eos-foreach-batch")


def test_the_format_tells_sparks_commit_runner_from_its_write_planning_on_this_spark() -> None:
    """Spark calls the format's ``streamWriter()`` in two processes of every micro-batch, the
    write planning and the commit runner, and only the planning may prepare (a recovery in the
    commit runner would sweep the batch's own transactions). Nothing but the calling module tells
    them apart (``datasource._called_to_commit``): this fails on a Spark that renames its runner or
    stops calling ``streamWriter()`` there, or plans writes in that same module."""
    if not has_python_data_source_api():
        pytest.skip("Spark 3.5 has no Python data source API, so no streaming sink of one to commit")
    from connectors.spark import datasource

    runner = importlib.util.find_spec(datasource.COMMIT_RUNNER_MODULE)
    planning = importlib.util.find_spec(datasource.WRITE_PLANNING_MODULE)
    assert runner is not None and runner.origin is not None, \
        f"pyspark {pyspark.__version__} has no {datasource.COMMIT_RUNNER_MODULE}: datasource.py must learn its new name"
    assert planning is not None and planning.origin is not None, datasource.WRITE_PLANNING_MODULE
    assert Path(runner.origin).name != Path(planning.origin).name
    runner_source = Path(runner.origin).read_text()
    planning_source = Path(planning.origin).read_text()
    # The runner makes the stream writer and commits or aborts with it; the planning makes one too.
    for call in ("streamWriter(", "writer.commit(", "writer.abort("):
        assert call in runner_source, f"{runner.origin} no longer calls {call}"
    assert "streamWriter(" in planning_source and "writer.commit(" not in planning_source

    def called_from(origin: str) -> bool:
        # A frame of Spark's module, as it is when that module calls streamWriter().
        scope = {"called_to_commit": datasource._called_to_commit}
        exec(compile("answer = called_to_commit()", origin, "exec"), scope)
        return bool(scope["answer"])

    assert called_from(runner.origin)
    assert not called_from(planning.origin)
    assert not datasource._called_to_commit()
