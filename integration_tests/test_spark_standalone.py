"""The Spark example on a standalone cluster (executors are JVMs of their own, launched by Workers):
an executor SIGKILLed in the middle of a batch, and the kit shipped to executors with the job
(``--py-files``) instead of installed on them. The driver-kill matrix runs on this cluster too
(``test_exactly_once_spark.py``, parametrized by ``spark_master``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

from kafka_io import assert_exactly_once, copied_id, read_committed_values, topics_with_orders, wait_until_stable
from spark_job import run_spark_job, start_spark_job

pytestmark = pytest.mark.spark

REPO_ROOT = Path(__file__).resolve().parents[1]
RECORDS = 3000
# Each Python worker's first write task waits here with its transaction open: the executor is killed
# inside this hold, which the test confirms before the kill (open transactions, batch not committed).
HOLD_MS = 30_000


def _wait_for(condition, what: str, job: subprocess.Popen[str], timeout_s: float = 300.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if job.poll() is not None:
            raise AssertionError(f"the job ended (exit {job.returncode}) before {what}")
        found = condition()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"no {what} after {timeout_s:.0f} s")


def test_an_executor_killed_mid_batch_is_exactly_once(kafka_bootstrap, kafka_clients, unique_name, tmp_path,
                                                      spark_cluster):
    if spark_cluster.launcher is None:
        pytest.skip("the executors of KAFKA_EOS_SPARK_MASTER are not this machine's processes")
    source, sink, ids = topics_with_orders(kafka_clients, unique_name, RECORDS)
    prefix, checkpoint = unique_name("txn"), tmp_path / "chk"
    earlier = set(spark_cluster.launcher.executor_pids())  # a killed driver's executors may linger
    job = start_spark_job(kafka_bootstrap, source, sink, checkpoint, f"before_pre_commit:sleep({HOLD_MS})@1",
                          master=spark_cluster.master_url,
                          # One write task per Kafka partition, so that both executors hold one.
                          extra=("--transactional-id-prefix", prefix, "--min-records-per-task", "0"))
    try:
        control = kafka_clients.txn_control()
        # Both executors (one core each) run a write task of batch 0, held with its transaction open.
        _wait_for(lambda: len(control.list_open_transactions(f"{prefix}-")) >= 2, "two open transactions", job)
        executors = _wait_for(lambda: [p for p in spark_cluster.launcher.executor_pids() if p not in earlier],
                              "executors of the job", job)
        assert not (checkpoint / "commits" / "0").exists(), "batch 0 committed before the kill"
        os.kill(executors[0], signal.SIGKILL)
        stdout, stderr = job.communicate(timeout=900)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.communicate()
    assert job.returncode == 0, stderr[-4000:]
    assert "Lost executor" in stderr, stderr[-4000:]
    wait_until_stable(kafka_clients, sink)
    assert_exactly_once(read_committed_values(kafka_clients, sink), ids, copied_id)
    assert control.list_open_transactions(f"{prefix}-") == []


def _python_with_dependencies_only(where: Path) -> str:
    """A Python environment holding the kit's dependencies but not the kit, like a cluster node
    prepared with ``pip install`` of the dependencies: a venv whose path includes this one's
    site-packages without running its .pth files (which is where the editable install of the kit
    lives)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    python = where / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "kafka_eos_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return str(python)


def test_the_kit_shipped_with_py_files_to_executors_without_it(kafka_bootstrap, kafka_clients, unique_name,
                                                               tmp_path, spark_cluster):
    python = _python_with_dependencies_only(tmp_path / "node-python")
    missing = subprocess.run([python, "-c", "import pyspark, confluent_kafka, kafka, tenacity, connectors"],
                             capture_output=True, text=True, cwd=tmp_path)
    assert "No module named 'connectors'" in missing.stderr, missing.stderr
    # The README's recipe: the kit's packages in one zip.
    kit = tmp_path / "kafka-eos.zip"
    subprocess.run([sys.executable, "-m", "zipfile", "-c", str(kit), "twophase", "connectors"], cwd=REPO_ROOT,
                   check=True)
    source, sink, ids = topics_with_orders(kafka_clients, unique_name, RECORDS)
    finished = run_spark_job(kafka_bootstrap, source, sink, tmp_path / "chk", master=spark_cluster.master_url,
                             python=python, extra=("--py-files", str(kit)),
                             # The driver imports the kit from the zip as well; executors get it from Spark.
                             env={"PYTHONPATH": str(kit), "PYSPARK_PYTHON": python})
    assert finished.returncode == 0, finished.stderr[-4000:]
    wait_until_stable(kafka_clients, sink)
    assert_exactly_once(read_committed_values(kafka_clients, sink), ids, copied_id)
