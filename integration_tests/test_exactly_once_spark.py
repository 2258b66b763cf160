"""The Spark example against a real broker, killed abruptly at every failpoint (SIGKILL of the
whole job: driver JVM and Python workers) and restarted from its checkpointLocation; also with
executor task failures. Output: zero duplicates, zero losses, nothing of aborted input.

Each runs on Spark ``local[2,4]`` and on a standalone cluster (``spark_master``), whose executors
outlive a killed driver for a while (zombies) and whose failpoints fire in executor processes."""

from __future__ import annotations

import pytest

from connectors.kafka.sink.internal.transactional_ids import TransactionalIdPool
from connectors.tools.jobs.task_failures import TASK_FAILURE_RATE_ENV, TASK_FAILURE_SEED_ENV
from kafka_io import (
    assert_exactly_once,
    copied_id,
    partitions_of,
    read_committed_values,
    topics_with_orders,
    wait_until_stable,
)
from spark_job import DEFAULT_PREFIX, KILLED, run_spark_job
from twophase import failpoints

pytestmark = pytest.mark.spark

RECORDS = 3000

# Executor-side points fire in write tasks; the others in the driver-side commit, whose Python
# worker kills the whole job. during_restore needs a stored but unconfirmed batch to recover.
SCENARIOS = {
    "before_pre_commit": [["before_pre_commit:exit@2"]],
    "after_pre_commit": [["after_pre_commit:exit@2"]],
    "after_checkpoint_stored": [["after_checkpoint_stored:exit@2"]],
    "before_commit": [["before_commit:exit@2"]],
    "mid_commit": [["mid_commit:exit@2"]],
    "after_commit": [["after_commit:exit@2"]],
    "during_restore": [["after_checkpoint_stored:exit@2"], ["during_restore:exit"]],
}


def test_every_failpoint_has_a_scenario():
    assert set(SCENARIOS) == set(failpoints.ALL)


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_spark_job_killed_at_failpoint_and_restarted_is_exactly_once(kafka_bootstrap, kafka_clients, unique_name,
                                                                     tmp_path, scenario, spark_master):
    source, sink, ids = topics_with_orders(kafka_clients, unique_name, RECORDS)
    for specs in SCENARIOS[scenario]:
        crashed = run_spark_job(kafka_bootstrap, source, sink, tmp_path / "chk", *specs, master=spark_master)
        assert crashed.returncode == KILLED, f"{specs}: exit {crashed.returncode}\n{crashed.stderr[-4000:]}"
        assert len(read_committed_values(kafka_clients, sink)) < RECORDS, f"{specs}: crashed after finishing"
    finished = run_spark_job(kafka_bootstrap, source, sink, tmp_path / "chk", master=spark_master)
    assert finished.returncode == 0, finished.stderr[-4000:]
    wait_until_stable(kafka_clients, sink)
    assert_exactly_once(read_committed_values(kafka_clients, sink), ids, copied_id)
    assert kafka_clients.txn_control().list_open_transactions(DEFAULT_PREFIX) == []


def test_one_batch_killed_mid_commit_and_restarted_is_exactly_once(kafka_bootstrap, kafka_clients, unique_name,
                                                                   tmp_path):
    """format("kafka-eos") both ways without read limits, as Spark 4.0 and 4.1 run the kit's source
    (they give a Python source none): the whole input is one batch, killed between its EndTxns,
    then replayed by the restarted job. The version matrix runs it on every Spark 4 line."""
    source, sink, ids = topics_with_orders(kafka_clients, unique_name, RECORDS)
    job = dict(batch_records=0, extra=("--source-format", "kafka-eos", "--sink-format", "kafka-eos"))
    crashed = run_spark_job(kafka_bootstrap, source, sink, tmp_path / "chk", "mid_commit:exit@1", **job)
    assert crashed.returncode == KILLED, f"exit {crashed.returncode}\n{crashed.stderr[-4000:]}"
    assert len(read_committed_values(kafka_clients, sink)) < RECORDS, "crashed after finishing"
    finished = run_spark_job(kafka_bootstrap, source, sink, tmp_path / "chk", **job)
    assert finished.returncode == 0, finished.stderr[-4000:]
    wait_until_stable(kafka_clients, sink)
    assert_exactly_once(read_committed_values(kafka_clients, sink), ids, copied_id)
    assert kafka_clients.txn_control().list_open_transactions(DEFAULT_PREFIX) == []


@pytest.mark.parametrize("sink_format", ["kafka-eos", "kafka-eos-foreach-batch"])
def test_spark_job_with_executor_task_failures_is_exactly_once(kafka_bootstrap, kafka_clients, unique_name, tmp_path,
                                                              spark_master, sink_format):
    source, sink, ids = topics_with_orders(kafka_clients, unique_name, RECORDS)
    prefix = unique_name("retries")
    finished = run_spark_job(kafka_bootstrap, source, sink, tmp_path / "chk", master=spark_master,
                             env={TASK_FAILURE_RATE_ENV: "0.5", TASK_FAILURE_SEED_ENV: "11"},
                             extra=("--sink-format", sink_format, "--transactional-id-prefix", prefix))
    assert finished.returncode == 0, finished.stderr[-4000:]
    # Spark's report of the failed attempt (a cluster's executors log the failure in their own stderr).
    assert "InjectedTaskFailure: injected failure of task" in finished.stderr
    wait_until_stable(kafka_clients, sink)
    assert_exactly_once(read_committed_values(kafka_clients, sink), ids, copied_id)
    # Each retry wrote under an id of its own, which the pool's sweep still finds.
    listed = [t.transactional_id for t in kafka_clients.txn_control().list_transactions(f"{prefix}-")]
    pool = TransactionalIdPool(prefix)
    assert all(pool.slot_of(i) is not None for i in listed), listed
    assert any(i.rsplit("-", 1)[-1].startswith("t") for i in listed), listed
    assert kafka_clients.txn_control().list_open_transactions(f"{prefix}-") == []


def test_transactional_ids_stay_within_the_pool_over_300_micro_batches(kafka_bootstrap, kafka_clients, unique_name,
                                                                      tmp_path):
    """The broker's transaction state does not grow with the number of batches: after 300
    micro-batches of 3 write tasks, ListTransactions (any state) shows at most 2 ids per task."""
    source, sink, ids = topics_with_orders(kafka_clients, unique_name, 3000)
    prefix = unique_name("pool")
    finished = run_spark_job(kafka_bootstrap, source, sink, tmp_path / "chk", batch_records=10,
                             extra=("--transactional-id-prefix", prefix))
    assert finished.returncode == 0, finished.stderr[-4000:]
    # Spark keeps the last 100 commit-log entries (spark.sql.streaming.minBatchesToRetain): the
    # newest batch id tells how many ran.
    last = max(int(p.name) for p in (tmp_path / "chk" / "commits").iterdir() if p.name.isdigit())
    assert last + 1 >= 300, f"only {last + 1} micro-batches"
    wait_until_stable(kafka_clients, sink)
    assert_exactly_once(read_committed_values(kafka_clients, sink), ids, copied_id)
    listed = [t.transactional_id for t in kafka_clients.txn_control().list_transactions(f"{prefix}-")]
    tasks = len(partitions_of(kafka_clients, source))
    assert 0 < len(listed) <= 2 * tasks, listed
    assert kafka_clients.txn_control().list_open_transactions(f"{prefix}-") == []
