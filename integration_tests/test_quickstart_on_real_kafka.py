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
