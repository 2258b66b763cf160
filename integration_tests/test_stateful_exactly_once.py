"""Exactly-once for stateful queries (issue 45): a running count (update and complete mode), a
windowed count with a watermark, dropDuplicates with a watermark, a stream-stream join and a count
in Python state (applyInPandasWithState), on a real broker, killed by SIGKILL of the whole job at
every commit failpoint and restarted from the checkpointLocation, and through executor task
failures, on both sinks where the output mode allows. The output is checked by its shape
(``kafka-eos verify --shape``): a running count rises strictly per key and ends at the key's
number of inputs, each (key, window) once with its count, each deduplicated id once, each pair
once. A batch written twice, or a state store restored to another batch than the one replayed,
breaks those; the running count's state store is also read back (Spark's statestore data source)
and compared with the input.

Update mode on ``format("kafka-eos")`` goes through the JVM provider (connectors/spark/jvm/), which
only adds Spark's update marker: it commits as append does.

CI runs a compact set (integration_tests/conftest.py CI_SET); ``KAFKA_EOS_INTEGRATION=all`` runs
every query, sink and failpoint, and one query at Spark's default 200 shuffle partitions."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from connectors.tools.loader import GROUPS, group_of
from connectors.tools.jobs.task_failures import TASK_FAILURE_RATE_ENV, TASK_FAILURE_SEED_ENV
from kafka_io import wait_until_stable
from spark_job import KILLED
# The map-only crash matrix's scenarios, one per failpoint (that module checks it has them all):
# executor-side points fire in write tasks, the others in the driver-side commit.
from test_exactly_once_spark import SCENARIOS
from stateful_runs import QUERIES, RECORDS, check_shape, run_query, state_counts, stateful_topics

pytestmark = pytest.mark.spark

SINKS = ("kafka-eos", "kafka-eos-foreach-batch")


def crash_and_finish(kafka_bootstrap, kafka_clients, unique_name, tmp_path, query_name, sink_format, scenario,
                     shuffle_partitions=None):
    query = QUERIES[query_name]
    topics = stateful_topics(kafka_clients, unique_name, query)
    kwargs = {"shuffle_partitions": shuffle_partitions} if shuffle_partitions else {}
    for specs in SCENARIOS[scenario]:
        crashed = run_query(kafka_bootstrap, query, topics, tmp_path / "chk", sink_format, *specs, **kwargs)
        assert crashed.returncode == KILLED, f"{specs}: exit {crashed.returncode}\n{crashed.stderr[-4000:]}"
    # The crash came before the input's last batch: batches were left for the restart to run.
    committed = [p for p in (tmp_path / "chk" / "commits").iterdir() if p.name.isdigit()]
    assert len(committed) < RECORDS // 500, f"{scenario}: crashed after the last batch ({len(committed)} committed)"
    state_file = tmp_path / "state.jsonl"
    finished = run_query(kafka_bootstrap, query, topics, tmp_path / "chk", sink_format,
                         extra=("--state-file", str(state_file)) if query.transform == "running-count" else (),
                         **kwargs)
    assert finished.returncode == 0, finished.stderr[-4000:]
    report = check_shape(kafka_clients, query, topics)
    if query.transform == "running-count":
        # The state store came back to the batch being replayed: had the replayed batch been
        # applied to a state that already held it, its counts would be above the input's.
        assert state_counts(state_file) == {group_of(seq): RECORDS // GROUPS for seq in range(GROUPS)}
    return report


def matrix():
    for query_name, query in QUERIES.items():
        for sink_format in SINKS:
            for scenario in sorted(SCENARIOS):
                yield pytest.param(query_name, sink_format, scenario, id=f"{query_name}-{sink_format}-{scenario}")


@pytest.mark.parametrize("query_name, sink_format, scenario", list(matrix()))
def test_stateful_query_killed_at_failpoint_and_restarted_is_exactly_once(kafka_bootstrap, kafka_clients, unique_name,
                                                                           tmp_path, query_name, sink_format,
                                                                           scenario):
    crash_and_finish(kafka_bootstrap, kafka_clients, unique_name, tmp_path, query_name, sink_format, scenario)


def test_running_count_at_spark_default_200_shuffle_partitions_killed_mid_commit_is_exactly_once(
        kafka_bootstrap, kafka_clients, unique_name, tmp_path):
    crash_and_finish(kafka_bootstrap, kafka_clients, unique_name, tmp_path, "running-count-update",
                     "kafka-eos-foreach-batch", "mid_commit", shuffle_partitions=200)


@pytest.mark.parametrize("query_name", list(QUERIES))
@pytest.mark.parametrize("sink_format", SINKS)
def test_stateful_query_with_executor_task_failures_is_exactly_once(kafka_bootstrap, kafka_clients, unique_name,
                                                                   tmp_path, query_name, sink_format):
    query = QUERIES[query_name]
    topics = stateful_topics(kafka_clients, unique_name, query)
    finished = run_query(kafka_bootstrap, query, topics, tmp_path / "chk", sink_format,
                         env={TASK_FAILURE_RATE_ENV: "0.5", TASK_FAILURE_SEED_ENV: "11"})
    assert finished.returncode == 0, finished.stderr[-4000:]
    assert "InjectedTaskFailure: injected failure of task" in finished.stderr
    wait_until_stable(kafka_clients, topics.sink)
    check_shape(kafka_clients, query, topics)


@pytest.mark.parametrize("shape", ["windowed-count", "dedup", "complete-count", "running-count"])
def test_replay_runs_a_stateful_query_through_a_broker_restart_and_verifies_it_by_shape(tmp_path, shape):
    """``kafka-eos replay --shape`` as a user runs it: the kit's Spark job writes the shape's query,
    the broker (one the replay started, from Maven Central) goes down and comes back while the job
    runs (held at the end of its input until the fault is over), and the output is verified by the
    shape's invariant. ``running-count`` is update mode on
    ``format("kafka-eos")``: it needs the JVM provider of issue 45."""
    env = {name: value for name, value in os.environ.items() if name not in ("KAFKA_BOOTSTRAP_SERVERS", "KAFKA_HOME")}
    env["DOCKER_HOST"] = f"unix://{tmp_path / 'no-docker.sock'}"  # no Docker: Kafka from Maven Central
    reports = tmp_path / "reports"
    command = [sys.executable, "-m", "connectors.tools.cli", "replay", "--input", "stateful-in", "--load", str(RECORDS),
               "--engine", "spark", "--shape", shape, "--scenarios", "broker_restart",
               "--batch-records", "500", "--reports-dir", str(reports)]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1500)
    assert result.returncode == 0, (result.stdout + result.stderr)[-6000:]
    (folder,) = [p for p in reports.iterdir() if p.name != "work"]
    data = json.loads((folder / "report.json").read_text())
    scenarios = {s["name"]: s for s in data["scenarios"]}
    assert {name: s["status"] for name, s in scenarios.items()} == {"broker_restart": "passed"}, data
    for scenario in scenarios.values():
        assert scenario["verify"]["shape"] == shape and scenario["verify"]["counts"]["output_records"] > 0
    assert scenarios["broker_restart"]["runs"][0]["fault_start_ms"] is not None
