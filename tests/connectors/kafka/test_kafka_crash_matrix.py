"""Every failpoint, with the Kafka source and sinks over the fake cluster: the example job runs as
a real subprocess, dies by os._exit at the failpoint (no cleanup, like kill -9), is restarted from
its checkpoint directory, and the output must hold every input record exactly once."""

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from connectors.simulated_kafka import FakeKafkaClients
from connectors.tools import jobs
from kafka_testkit.topic_records import produce_aborted, produce_committed, read_all
from twophase import failpoints

JOB = Path(jobs.__file__).resolve().parent / "copy_pipeline.py"
RECORDS = 600


@pytest.fixture
def cluster(tmp_path):
    fake = FakeKafkaClients(tmp_path / "kafka.db")
    fake.admin().create_topic("in", 3)
    fake.admin().create_topic("out", 3)
    values = [f"v{i}".encode() for i in range(RECORDS)]
    produce_committed(fake, "in", values[:300], txn_id="loader-1")
    produce_aborted(fake, "in", [b"junk-1", b"junk-2"])  # must never reach the output
    produce_committed(fake, "in", values[300:], txn_id="loader-2")
    return fake


def run_job(fake, checkpoint_dir, *failpoint_specs):
    command = [sys.executable, str(JOB), "--bootstrap", fake.bootstrap_servers, "--input", "in",
               "--output", "out", "--checkpoint-dir", str(checkpoint_dir), "--bounded",
               "--checkpoint-interval", "3600", "--checkpoint-every-records", "50", "--log-level", "WARNING"]
    for spec in failpoint_specs:
        command += ["--failpoint", spec]
    env = {k: v for k, v in os.environ.items() if k != failpoints.ENV_VAR}
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)


SCENARIOS = {
    "before_pre_commit": [["before_pre_commit:exit@5"]],
    "after_pre_commit": [["after_pre_commit:exit@5"]],
    "after_checkpoint_stored": [["after_checkpoint_stored:exit@3"]],
    "before_commit": [["before_commit:exit@6"]],
    "mid_commit": [["mid_commit:exit@3"]],
    "after_commit": [["after_commit:exit@3"]],
    "during_restore": [["after_pre_commit:exit@5"], ["during_restore:exit"]],
}


# Between pre-commit (flush) and commit. Before pre-commit records may still sit in the producer's
# buffer; after commit everything is visible.
IN_FLIGHT_WINDOWS = {"after_pre_commit", "after_checkpoint_stored", "before_commit", "mid_commit"}


def test_every_failpoint_has_a_scenario():
    assert set(SCENARIOS) == set(failpoints.ALL)


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_killed_at_failpoint_then_restarted_is_exactly_once(cluster, tmp_path, scenario):
    checkpoint_dir = tmp_path / "chk"
    for specs in SCENARIOS[scenario]:
        crashed = run_job(cluster, checkpoint_dir, *specs)
        assert crashed.returncode == failpoints.EXIT_CODE, (
            f"expected a crash at {specs}, got exit {crashed.returncode}:\n{crashed.stderr[-3000:]}")
        assert "fired" in crashed.stderr
        # The crash must come mid-stream, and in the windows between flush and commit it must
        # catch flushed but uncommitted records, or the scenario proves nothing.
        committed = len(read_all(cluster, "out"))
        in_flight = len(read_all(cluster, "out", read_committed=False)) - committed
        assert committed < RECORDS, f"{specs}: the job had finished before the crash"
        if specs[0].split(":")[0] in IN_FLIGHT_WINDOWS:
            assert in_flight > 0, f"{specs}: no uncommitted output at the crash"
    finished = run_job(cluster, checkpoint_dir)
    assert finished.returncode == 0, finished.stderr[-3000:]

    output = Counter(r.value for r in read_all(cluster, "out"))
    expected = Counter(f"v{i}|copied".encode() for i in range(RECORDS))
    duplicates = {v: n for v, n in output.items() if n > 1}
    lost = set(expected) - set(output)
    assert not duplicates, f"{scenario}: duplicates {list(duplicates)[:5]}"
    assert not lost, f"{scenario}: lost {sorted(lost)[:5]}"
    assert set(output) == set(expected), f"{scenario}: unexpected records {set(output) - set(expected)}"
    assert cluster.txn_control().list_open_transactions("") == [], "a transaction was left open"
    # The crash left something behind that read_committed must not show: aborted or re-written data.
    uncommitted = Counter(r.value for r in read_all(cluster, "out", read_committed=False))
    assert sum(uncommitted.values()) >= sum(output.values())
