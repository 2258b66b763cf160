"""``kafka-eos status`` of a real query on real Kafka, with the sink's state on a real S3 server.

The Spark example runs with its state on S3 and is SIGKILLed (its whole process group) at
``after_checkpoint_stored``: a checkpoint is stored, its transactions are open, nothing commits
them. ``status --json`` must then report that pending checkpoint, the open transactions with their
age, the source lag, and exit 1. The query is restarted and runs to the end; ``status`` must then
report no pending checkpoint and no open transaction, and exit 0.

The query runs with ``eos.restartBudgetMs=0``: with no driver running, any pending checkpoint is
then stale, so the exit status does not depend on how long the crash is looked at.

``KAFKA_EOS_TEST_ARTIFACTS=DIR`` keeps the outputs (table, JSON, Prometheus, the plot) in DIR.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kafka_io import assert_exactly_once, copied_id, read_committed_values, topics_with_orders, wait_until_stable
from spark_job import KILLED, run_spark_job
from twophase.checkpoint_store import FileCheckpointStore

pytestmark = pytest.mark.spark

RECORDS = 3000
BATCH = 250


def status(checkpoint: Path, state_dir: str, bootstrap: str, *options: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "connectors.tools.cli", "status", "--checkpoint-location", str(checkpoint),
               "--state-dir", state_dir, "--bootstrap", bootstrap, *options]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


def keep(name: str, text: str) -> None:
    artifacts = os.environ.get("KAFKA_EOS_TEST_ARTIFACTS")
    if artifacts:
        Path(artifacts).mkdir(parents=True, exist_ok=True)
        (Path(artifacts) / name).write_text(text)


def test_status_of_a_crashed_then_finished_query(kafka_bootstrap, kafka_clients, unique_name, tmp_path, s3_prefix):
    source, sink, ids = topics_with_orders(kafka_clients, unique_name, RECORDS)
    checkpoint = tmp_path / "checkpoint"
    job = dict(batch_records=BATCH, extra=("--state-dir", s3_prefix, "--retained-checkpoints", "20",
                                           "--restart-budget-ms", "0"))
    crashed = run_spark_job(kafka_bootstrap, source, sink, checkpoint, "after_checkpoint_stored:exit@5", **job)
    assert crashed.returncode == KILLED, f"exit {crashed.returncode}\n{crashed.stderr[-4000:]}"
    stored = FileCheckpointStore(s3_prefix, check_writable=False)
    pending_id = stored.checkpoint_ids()[-1]
    assert not stored.is_committed(pending_id)

    table = status(checkpoint, s3_prefix, kafka_bootstrap)
    keep("crashed-table.txt", table.stdout + table.stderr)
    assert table.returncode == 1, table.stdout + table.stderr
    assert f"checkpoint {pending_id}" in table.stdout and "ATTENTION: " in table.stdout
    result = status(checkpoint, s3_prefix, kafka_bootstrap, "--json")
    keep("crashed.json", result.stdout)
    keep("crashed-reasons.txt", result.stderr)
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    assert report["pending_checkpoint"]["id"] == pending_id and report["pending_checkpoint"]["stored_at_ms"] > 0
    assert report["latest_checkpoint"] == {"id": pending_id, "stored_at_ms": report["pending_checkpoint"]["stored_at_ms"],
                                           "committed": False}
    assert report["last_committed_batch"] == pending_id - 1
    assert report["open_transactions"], "the pending checkpoint's transactions are not reported open"
    for txn in report["open_transactions"]:
        assert txn["transactional_id"].startswith(report["sink"]["transactional_id_prefix"] + "-")
        assert txn["age_ms"] >= 0 and txn["producer_id"] >= 0 and txn["partitions"]
    assert sum(p["lag"] for p in report["lag"]) > 0
    assert [h["id"] for h in report["history"]] == list(range(pending_id))
    reasons = [line for line in result.stderr.splitlines() if line.startswith("ATTENTION: ")]
    assert any(f"checkpoint {pending_id} " in line and "not confirmed" in line for line in reasons), result.stderr

    finished = run_spark_job(kafka_bootstrap, source, sink, checkpoint, **job)
    assert finished.returncode == 0, finished.stderr[-4000:]
    wait_until_stable(kafka_clients, sink)
    assert_exactly_once(read_committed_values(kafka_clients, sink), ids, copied_id)

    table = status(checkpoint, s3_prefix, kafka_bootstrap, "--plot", str(tmp_path / "status.png"))
    keep("finished-table.txt", table.stdout + table.stderr)
    assert table.returncode == 0, table.stdout + table.stderr
    assert "healthy" in table.stdout
    result = status(checkpoint, s3_prefix, kafka_bootstrap, "--json")
    keep("finished.json", result.stdout)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["pending_checkpoint"] is None and report["open_transactions"] == []
    assert report["latest_checkpoint"]["committed"] and report["attention"] == []
    assert all(p["lag"] == 0 for p in report["lag"])
    outcomes = {h["id"]: h["outcome"] for h in report["history"]}
    assert outcomes[pending_id] == "recovered"
    assert sum(h["records"] for h in report["history"]) == RECORDS
    assert report["totals"]["recoveries"] == 1 and report["totals"]["records"] == RECORDS

    metrics = status(checkpoint, s3_prefix, kafka_bootstrap, "--prometheus")
    keep("finished.prom", metrics.stdout)
    assert metrics.returncode == 0
    families = {f.name: f for f in text_string_to_metric_families(metrics.stdout)}
    assert families["kafka_eos_records_committed"].samples[0].value == RECORDS
    assert families["kafka_eos_recoveries"].samples[0].value == 1
    assert (tmp_path / "status.png").stat().st_size > 0
    artifacts = os.environ.get("KAFKA_EOS_TEST_ARTIFACTS")
    if artifacts:
        shutil.copy(tmp_path / "status.png", Path(artifacts) / "status.png")
