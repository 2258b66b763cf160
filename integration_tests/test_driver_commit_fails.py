"""The driver-side commit of the Spark sink fails in its Python process while Spark's JVM lives
(the failpoint raises, or exits only that Python process), at each point between storing a
batch's checkpoint and Spark's commit log. Spark then calls the writer's abort(), which must
commit the stored batch, never abort its transactions; the query fails, is restarted from the
same checkpoint, and the output is exactly-once with no transaction of the sink left open."""

from __future__ import annotations

import pytest

from kafka_io import assert_exactly_once, copied_id, read_committed_values, topics_with_orders, wait_until_stable
from spark_job import DEFAULT_PREFIX, KILLED, run_spark_job

pytestmark = pytest.mark.spark

RECORDS = 3000
#: Failpoints of the driver-side commit, after the batch's checkpoint is stored.
STORED_WINDOWS = ("after_checkpoint_stored", "before_commit", "mid_commit", "after_commit")


@pytest.mark.parametrize("action", ["raise", "exit"])
@pytest.mark.parametrize("point", STORED_WINDOWS)
def test_driver_commit_fails_while_the_jvm_lives_and_the_restart_is_exactly_once(
        kafka_bootstrap, kafka_clients, unique_name, tmp_path, point, action):
    source, sink, ids = topics_with_orders(kafka_clients, unique_name, RECORDS)
    failed = run_spark_job(kafka_bootstrap, source, sink, tmp_path / "chk", f"{point}:{action}@2",
                           extra=("--failpoint-exit", "process"))
    log = failed.stderr
    assert failed.returncode not in (0, KILLED), f"the query did not fail: exit {failed.returncode}\n{log[-4000:]}"
    assert f"failpoint {point} fired" in log, log[-4000:]
    # Spark's abort of the failed batch completed its commit and said so.
    assert "are committed, not aborted" in log, log[-4000:]
    assert "INVALID_TXN_STATE" not in log and "failed to abort" not in log, log[-6000:]
    assert kafka_clients.txn_control().list_open_transactions(DEFAULT_PREFIX) == []
    assert len(read_committed_values(kafka_clients, sink)) < RECORDS, "the query failed after finishing"

    finished = run_spark_job(kafka_bootstrap, source, sink, tmp_path / "chk")
    assert finished.returncode == 0, finished.stderr[-4000:]
    assert "INVALID_TXN_STATE" not in finished.stderr and "failed to abort" not in finished.stderr
    wait_until_stable(kafka_clients, sink)
    assert_exactly_once(read_committed_values(kafka_clients, sink), ids, copied_id)
    assert kafka_clients.txn_control().list_open_transactions(DEFAULT_PREFIX) == []
