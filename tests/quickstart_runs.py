"""Runs the README's quick-start scripts (examples/quickstart_*.py) as a user would, in a process of
their own, and checks the output with ``kafka-eos verify``: shared by the test on the embedded
cluster (tests/test_quickstart.py) and the one on a real broker
(integration_tests/test_quickstart_on_real_kafka.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Mapping

from kafka_testkit.job_python import assert_quiet, job_python

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = {
    "kafka-eos": REPO / "examples" / "quickstart_kafka_eos.py",
    "spark-source": REPO / "examples" / "quickstart_spark_source.py",
    "foreach-batch": REPO / "examples" / "quickstart_foreach_batch.py",
    "windowed-aggregation": REPO / "examples" / "windowed_aggregation.py",
}
RECORDS = 2000


def kafka_eos(*argv: str, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "connectors.tools.cli", *argv], capture_output=True, text=True,
                          timeout=300, env=dict(env or os.environ))


def run_quickstart(variant: str, bootstrap: str, work: Path, names: tuple[str, str],
                   extra_env: Mapping[str, str] | None = None, verify_args: tuple[str, ...] = ()) -> dict[str, object]:
    """Load the input, create the output, run the script bounded (``--available-now``) with the
    interpreter alone, not an activated venv (PATH and PYSPARK_PYTHON as a user's shell may have
    them), and verify (with ``verify_args``, e.g. a stateful script's --shape). Returns verify's JSON report."""
    source, sink = names
    loaded = kafka_eos("load", "--bootstrap", bootstrap, "--topic", source, "--records", str(RECORDS))
    assert loaded.returncode == 0, loaded.stderr
    created = kafka_eos("create-topic", "--bootstrap", bootstrap, "--topic", sink)
    assert created.returncode == 0, created.stderr
    env = {name: value for name, value in os.environ.items() if name not in ("PYSPARK_PYTHON", "VIRTUAL_ENV")}
    env.update(extra_env or {})
    job = subprocess.run([job_python(), str(SCRIPTS[variant]), bootstrap, source, sink, str(work / "checkpoint"),
                          "--available-now"], capture_output=True, text=True, timeout=900, env=env, cwd=work)
    assert job.returncode == 0, job.stderr[-6000:]
    assert_quiet(job.stdout + job.stderr, f"the quick start {variant}")
    report = work / "verify.json"
    verified = kafka_eos("verify", "--bootstrap", bootstrap, "--input", source, "--output", sink,
                         "--json-report", str(report), *verify_args)
    data = json.loads(report.read_text())
    assert verified.returncode == 0, f"{verified.stdout}\n{verified.stderr}\n{data}"
    return data


def readme_block(script: Path) -> str:
    """The script as the README shows it: its code without the module docstring."""
    text = script.read_text()
    return text[text.index('"""', 3) + 3:].strip()
