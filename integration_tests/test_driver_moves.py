"""A driver that dies and is restarted on another machine, on real Kafka and a real S3 server.

The Spark example keeps its kafka-eos state on S3 (``--state-dir s3://...``) and is SIGKILLed (the
whole job: driver JVM and Python workers) at a failpoint. It is then restarted on "another
machine": another working directory, HOME, TMPDIR, Spark local dir and JVM temp dir, with the first
machine's directories deleted. Nothing local survives except the query's own checkpointLocation.

Why Spark's checkpointLocation is a directory both "machines" see, not ``s3a://``: Spark reaches
``s3a://`` through hadoop-aws and the AWS SDK bundle, jars that pyspark does not ship and that
cannot be installed here (they come from Maven Central). In production that folder is on S3,
ABFS, GCS or HDFS, which every driver machine reaches; here a directory outside both machines'
folders plays that part. The kit itself reads that folder (the query id in ``metadata``, the
commit log in ``commits/``) through the same filesystem layer as its S3 state.

Also here: the issue's lost-state run (state A, then state B: refused instead of duplicating a
batch) and a reset checkpoint (checkpoint folder deleted, state kept: refused).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from connectors.tools import jobs
from kafka_io import assert_exactly_once, copied_id, read_committed_values, topics_with_orders, wait_until_stable
from twophase import failpoints
from twophase.checkpoint_store import FileCheckpointStore
from kafka_testkit.job_python import job_python

pytestmark = pytest.mark.spark

JOB = Path(jobs.__file__).resolve().parent / "spark_pipeline.py"
RECORDS = 3000
KILLED = -signal.SIGKILL


def run_on_machine(machine: Path, bootstrap: str, source: str, sink: str, checkpoint: Path, state_dir: str,
                   *failpoint_specs: str) -> subprocess.CompletedProcess[str]:
    """Run the example as a driver on ``machine``: every local directory it uses is under it."""
    work, home, tmp = machine / "work", machine / "home", machine / "tmp"
    for folder in (work, home, tmp):
        folder.mkdir(parents=True, exist_ok=True)
    command = [job_python(), str(JOB), "--bootstrap", bootstrap, "--input", source, "--output", sink,
               "--checkpoint-dir", str(checkpoint), "--state-dir", state_dir, "--bounded",
               "--transform", "copy", "--max-offsets-per-trigger", "500"]
    for spec in failpoint_specs:
        command += ["--failpoint", spec]
    environment = {k: v for k, v in os.environ.items() if k != failpoints.ENV_VAR}
    environment.update(HOME=str(home), TMPDIR=str(tmp), SPARK_LOCAL_DIRS=str(tmp),
                       JAVA_TOOL_OPTIONS=f"-Djava.io.tmpdir={tmp}")
    return subprocess.run(command, capture_output=True, text=True, timeout=900, env=environment, cwd=work,
                          start_new_session=True)


def lose_machine(machine: Path) -> None:
    shutil.rmtree(machine)


def killed_and_finished_on_another_machine(bootstrap: str, clients, unique_name, tmp_path: Path,  # type: ignore[no-untyped-def]
                                           checkpoint: Path | str, state: str, failpoint: str) -> None:
    """The job killed at ``failpoint`` (its second hit) on machine A, which is then lost; machine B
    runs it again from the same checkpointLocation and state: exactly-once, no open transaction."""
    source, sink, ids = topics_with_orders(clients, unique_name, RECORDS)
    crashed = run_on_machine(tmp_path / "machine-a", bootstrap, source, sink, checkpoint, state,
                             f"{failpoint}:exit@2")
    assert crashed.returncode == KILLED, f"exit {crashed.returncode}\n{crashed.stderr[-4000:]}"
    assert len(read_committed_values(clients, sink)) < RECORDS, "crashed after finishing"
    stored = FileCheckpointStore(state, check_writable=False)
    assert stored.checkpoint_ids(), f"no state at {state}"
    if failpoint != "after_commit":
        assert not stored.is_committed(stored.checkpoint_ids()[-1]), "the crash did not hit the commit window"
    lose_machine(tmp_path / "machine-a")

    finished = run_on_machine(tmp_path / "machine-b", bootstrap, source, sink, checkpoint, state)
    assert finished.returncode == 0, finished.stderr[-4000:]
    wait_until_stable(clients, sink)
    assert_exactly_once(read_committed_values(clients, sink), ids, copied_id)
    assert clients.txn_control().list_open_transactions("kafka-eos-") == []


@pytest.mark.parametrize("failpoint", ["after_checkpoint_stored", "mid_commit", "after_commit"])
def test_driver_killed_and_restarted_on_another_machine_is_exactly_once(
        kafka_bootstrap, kafka_clients, unique_name, tmp_path, s3_prefix, failpoint):
    checkpoint = tmp_path / "shared-storage" / "checkpoint"
    killed_and_finished_on_another_machine(kafka_bootstrap, kafka_clients, unique_name, tmp_path, checkpoint,
                                           s3_prefix, failpoint)
    assert not (checkpoint / "kafka-eos").exists(), "the kit kept state next to Spark's checkpoint"


def refused_as_lost_state_then_finished(bootstrap: str, clients, unique_name, tmp_path: Path,  # type: ignore[no-untyped-def]
                                        checkpoint: Path | str, state_a: str, state_b: str) -> None:
    """Run 1 with state A dies just after committing batch 3; run 2 starts from the same
    checkpointLocation with state B, as a driver on a new machine with a local eos.stateDir would,
    and is refused as lost state without writing; run 3, with state A, finishes exactly-once."""
    source, sink, ids = topics_with_orders(clients, unique_name, RECORDS)
    crashed = run_on_machine(tmp_path / "machine-a", bootstrap, source, sink, checkpoint, state_a,
                             "after_commit:exit@3")
    assert crashed.returncode == KILLED, crashed.stderr[-4000:]
    written = read_committed_values(clients, sink)
    lose_machine(tmp_path / "machine-a")

    refused = run_on_machine(tmp_path / "machine-b", bootstrap, source, sink, checkpoint, state_b)
    assert refused.returncode not in (0, KILLED), refused.stderr[-4000:]
    assert "lost state" in refused.stderr and state_b in refused.stderr, refused.stderr[-4000:]
    after = read_committed_values(clients, sink)
    assert Counter(after) == Counter(written), "the refused run wrote output"
    assert {v: n for v, n in Counter(after).items() if n > 1} == {}

    finished = run_on_machine(tmp_path / "machine-c", bootstrap, source, sink, checkpoint, state_a)
    assert finished.returncode == 0, finished.stderr[-4000:]
    wait_until_stable(clients, sink)
    assert_exactly_once(read_committed_values(clients, sink), ids, copied_id)


def test_a_restart_with_another_state_location_fails_loudly_instead_of_duplicating(
        kafka_bootstrap, kafka_clients, unique_name, tmp_path, s3_prefix):
    # The measurement: it used to exit 0 with a whole batch duplicated.
    refused_as_lost_state_then_finished(kafka_bootstrap, kafka_clients, unique_name, tmp_path,
                                        tmp_path / "shared-storage" / "checkpoint", f"{s3_prefix}/state-a",
                                        f"{s3_prefix}/state-b")


def test_a_reset_checkpoint_with_its_state_kept_is_refused(kafka_bootstrap, kafka_clients, unique_name, tmp_path,
                                                            s3_prefix):
    source, sink, ids = topics_with_orders(kafka_clients, unique_name, RECORDS)
    checkpoint = tmp_path / "shared-storage" / "checkpoint"
    first = run_on_machine(tmp_path / "machine-a", kafka_bootstrap, source, sink, checkpoint, s3_prefix)
    assert first.returncode == 0, first.stderr[-4000:]
    wait_until_stable(kafka_clients, sink)
    written = read_committed_values(kafka_clients, sink)
    assert_exactly_once(written, ids, copied_id)
    shutil.rmtree(checkpoint)

    refused = run_on_machine(tmp_path / "machine-a", kafka_bootstrap, source, sink, checkpoint, s3_prefix)
    assert refused.returncode not in (0, KILLED), refused.stderr[-4000:]
    assert f"the state at {s3_prefix} belongs to spark-streaming-query" in refused.stderr, refused.stderr[-4000:]
    assert Counter(read_committed_values(kafka_clients, sink)) == Counter(written)
