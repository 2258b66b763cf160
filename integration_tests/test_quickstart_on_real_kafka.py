"""The README's quick-start scripts (examples/quickstart_*.py) as a user runs them, on a real broker:
each loads its input, creates its output topic, runs bounded and is verified exactly-once.
Spark's own source takes Spark's Kafka connector from the tests' ``spark_kafka_connector`` (the
user's ``KAFKA_EOS_SPARK_KAFKA_JARS``, else Maven Central), handed to the script as its
``SPARK_KAFKA_JARS``."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest
from quickstart_runs import run_quickstart

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("variant", ["kafka-eos", "spark-source", "foreach-batch"])
def test_a_quickstart_script_is_exactly_once_on_real_kafka(variant: str, kafka_bootstrap: str, tmp_path: Path,
                                                          unique_name: Callable[[str], str],
                                                          request: pytest.FixtureRequest) -> None:
    env = {}
    if variant == "spark-source":
        env["SPARK_KAFKA_JARS"] = request.getfixturevalue("spark_kafka_jars")
    data = run_quickstart(variant, kafka_bootstrap, tmp_path, (unique_name("in"), unique_name("out")), env)
    assert data["exactly_once"] is True, data


def test_the_windowed_aggregation_example_is_exactly_once_on_real_kafka(kafka_bootstrap: str, tmp_path: Path,
                                                                       unique_name: Callable[[str], str]) -> None:
    """examples/windowed_aggregation.py as a user runs it, then ``kafka-eos verify --shape windowed-count``:
    each (group, window) once, with its count."""
    data = run_quickstart("windowed-aggregation", kafka_bootstrap, tmp_path, (unique_name("in"), unique_name("out")),
                          verify_args=("--shape", "windowed-count", "--id-field", "json:group",
                                       "--event-time-field", "json:seq"))
    assert data["exactly_once"] is True and data["shape"] == "windowed-count", data
    # 2,000 records in 500-second windows, the last two still open under the 300-second watermark.
    assert data["counts"]["output_records"] >= 200, data
