"""What each Spark release offers the kit (connectors/spark/spark_versions.py): the one-line
refusals, on a fake session and fake package metadata. The refusals on a real Spark 3.5, and each
release's features on real Kafka, are the version matrix's (integration_tests/test_format_by_spark_version.py,
which .ci/run runs in a venv of each pyspark line)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from connectors.spark import spark_versions
from connectors.spark.spark_errors import UnsupportedSparkError


def test_a_spark_connect_server_older_than_4_0_is_refused_in_one_line_naming_the_foreach_batch_sink(monkeypatch):
    monkeypatch.setattr(spark_versions, "has_python_data_source_api", lambda: True)
    with pytest.raises(UnsupportedSparkError) as refused:
        spark_versions.require_python_data_source(SimpleNamespace(version="3.5.4"))
    message = str(refused.value)
    assert "\n" not in message
    assert "this is Spark 3.5.4" in message and "exactly_once_foreach_batch" in message
    assert 'format("kafka")' in message and "read_committed" in message


def test_a_pyspark_without_the_data_source_api_is_refused_whatever_the_server(monkeypatch):
    import pyspark

    monkeypatch.setattr(spark_versions, "has_python_data_source_api", lambda: False)
    with pytest.raises(UnsupportedSparkError, match=f"this is Spark {pyspark.__version__}"):
        spark_versions.require_python_data_source(SimpleNamespace(version="4.3.0"))


def test_a_spark_4_session_is_accepted():
    spark_versions.require_python_data_source(SimpleNamespace(version="4.0.5"))


@pytest.mark.parametrize(("pyarrow", "numpy", "refused"), [
    ("26.0.1", "1.26.4", True),
    ("25.0.1", "1.26.4", False),
    ("26.0.1", "2.4.6", False),
    (None, "1.26.4", False),
])
def test_pyarrow_that_needs_numpy_2_beside_numpy_1_is_refused_naming_both_and_the_fix(monkeypatch, pyarrow, numpy,
                                                                                       refused):
    versions = {"pyarrow": pyarrow, "numpy": numpy, "pyspark": "3.5.9"}
    monkeypatch.setattr(spark_versions, "_installed", versions.get)
    if not refused:
        spark_versions.check_installed_packages()
        return
    with pytest.raises(UnsupportedSparkError) as error:
        spark_versions.check_installed_packages()
    assert str(error.value) == ("pyarrow 26.0.1 needs NumPy 2 or later, and NumPy 1.26.4 is installed (pyspark 3.5.9's "
                                "extras keep numpy below 2 on Spark 3.5): pip install 'pyarrow<26', or numpy>=2 where "
                                "nothing pins it")


@pytest.mark.parametrize("option", ["maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay"])
def test_read_limits_are_refused_where_a_python_source_cannot_limit_its_batches(monkeypatch, option):
    from connectors.spark.options import parse_source_options
    from connectors.spark.spark_errors import KafkaEosOptionError

    options = {"kafka.bootstrap.servers": "localhost:9092", "subscribe": "in", option: "10"}
    monkeypatch.setattr(spark_versions, "has_stream_admission_control", lambda: False)
    with pytest.raises(KafkaEosOptionError, match=f"option {option} needs Spark 4.2 or later"):
        parse_source_options(options, streaming=True)
    parse_source_options(options, streaming=False)  # a batch read ignores them, with a warning, as Spark's
    monkeypatch.setattr(spark_versions, "has_stream_admission_control", lambda: True)
    parse_source_options(options, streaming=True)


def test_release_numbers():
    assert spark_versions.release("3.5.9") == (3, 5)
    assert spark_versions.release("4.1.0.dev2") == (4, 1)
    with pytest.raises(UnsupportedSparkError, match="not a release number"):
        spark_versions.release("master")


def test_the_scala_of_each_spark_lines_jars():
    assert spark_versions.scala_binary_version("3.5.9") == "2.12"
    assert spark_versions.scala_binary_version("4.0.5") == "2.13"
