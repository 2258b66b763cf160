"""The Spark job that replay and the fault tests run: a mid_commit fault, between a batch's first
EndTxn and the rest, needs two transactions or more in a batch, so the job plans one task per
Kafka partition with it armed (the kit's default plans one per 25,000 records)."""

import pytest

pytest.importorskip("pyspark")

from connectors.tools.jobs import spark_pipeline  # noqa: E402
from twophase import failpoints  # noqa: E402

BASE = ["--bootstrap", "b:9092", "--input", "in", "--output", "out", "--checkpoint-dir", "/tmp/chk"]


@pytest.mark.parametrize("extra, specs, planned", [
    ([], "mid_commit:exit@2", 0),
    ([], "after_checkpoint_stored:exit@2", None),
    ([], "", None),
    (["--min-records-per-task", "100"], "mid_commit:exit@2", 100),
])
def test_a_mid_commit_fault_gets_a_task_per_kafka_partition(extra, specs, planned):
    args = spark_pipeline.parse_args(BASE + extra)
    spark_pipeline.plan_tasks_for_faults(args, failpoints.parse(specs))
    assert args.min_records_per_task == planned
