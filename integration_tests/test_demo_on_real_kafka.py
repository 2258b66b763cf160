"""README command 1 as a new user runs it: ``kafka-eos demo`` with no broker given.

No ``KAFKA_BOOTSTRAP_SERVERS``, no ``KAFKA_HOME`` and no Docker engine (this test hides the first
two and any Docker socket; a machine with Docker would start a container first): the demo must
start Apache Kafka from Maven Central itself, say so on the console and in its reports, run every
scenario of the demo on that broker (the driver killed in the commit, a broker restart, a
transaction lost to its timeout) and pass. It never falls back to the embedded cluster here:
``--require-broker`` makes that an exit 2, and the reports must not be labelled simulated.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark

RECORDS = 3000


def test_demo_without_a_broker_starts_kafka_from_maven_central_and_passes(tmp_path: Path) -> None:
    env = {name: value for name, value in os.environ.items()
           if name not in ("KAFKA_BOOTSTRAP_SERVERS", "KAFKA_HOME", "DOCKER_HOST")}
    # Docker's default socket is looked for too; pointing DOCKER_HOST nowhere makes "no Docker" certain.
    env["DOCKER_HOST"] = f"unix://{tmp_path / 'no-docker.sock'}"
    reports = tmp_path / "reports"
    command = [sys.executable, "-m", "connectors.tools.cli", "demo", "--require-broker",
               "--records", str(RECORDS), "--reports-dir", str(reports)]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1500)
    console = result.stdout + result.stderr
    assert result.returncode == 0, console[-6000:]
    # The console names the broker: the version, where it came from, who started it and where.
    named = re.search(r"Apache Kafka (4\.\d+\.\d+) from Maven Central, started by the kit on 127\.0\.0\.1:\d+",
                      console)
    assert named, console[-6000:]
    (folder,) = [p for p in reports.iterdir() if p.name != "work"]
    data = json.loads((folder / "report.json").read_text())
    assert data["simulated"] is False and "notice" not in data
    assert data["broker"].startswith(f"Apache Kafka {named.group(1)} from Maven Central, started by the kit")
    assert f"Apache Kafka {named.group(1)} from Maven Central" in (folder / "report.md").read_text()
    scenarios = {s["name"]: s for s in data["scenarios"]}
    # Every scenario ran on the real broker, the broker restart included, and none was skipped.
    assert {name: s["status"] for name, s in scenarios.items()} == {name: "passed" for name in scenarios}, data
    assert scenarios["broker_restart"]["verdict"] == "exactly-once"
    assert scenarios["mid_commit"]["verdict"] == "exactly-once"
    assert "loss detected and reported" in scenarios["txn_timeout"]["verdict"]
    assert data["passed"] is True
