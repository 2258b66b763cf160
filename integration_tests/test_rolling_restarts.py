"""A streaming query on a 3-node cluster (RF 3, ``min.insync.replicas=2``) whose nodes are
hard-bounced (SIGKILL, then started again) one at a time while it runs.

- Bounces alone never fail the query, including the node that hosts the sink's transaction
  coordinator, killed while a commit is held in flight (a failpoint sleep at ``mid_commit``, the
  process then SIGSTOPped until the kill has landed; the coordinator found with FindCoordinator):
  the output is exactly-once.
- Bounces plus two driver kills and two Python worker kills: restarted until done, exactly-once,
  no transaction of the sink left open.
- Two of three nodes down for longer than the retry bound: the query fails with one line saying
  what was unreachable; once the nodes are back, a restart finishes exactly-once.

Faults that matter land by construction, while the job is held in a failpoint's sleep it announces
(with its pid); only the background cadence of bounces is wall-clock, and no verdict depends on it.
The Spark job is small (``local[2,4]``, batches of 500 records) because it shares two cores with
three brokers.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading

import pytest

from cluster_faults import Fired, WatchedJob, find_coordinator, python_workers
from connectors.kafka.clients.broker_retry import BrokerRetryPolicy
from connectors.kafka.clients.factory import clients_for
from kafka_testkit.node_bouncer import Bouncer
from kafka_io import assert_exactly_once, copied_id, read_committed_values, topics_with_orders, wait_until_stable
from spark_job import KILLED, kit_lines, spark_job_command

pytestmark = pytest.mark.spark

log = logging.getLogger(__name__)

RECORDS = 6000
BATCH = 500
#: How long the failpoint holds the commit on its own: only long enough for the test to SIGSTOP the
#: process that announced it. The SIGSTOP then holds the commit for as long as the kill takes to land
#: (behind a bounce under way, which the kill waits for, however slow the machine).
HOLD_MS = 30_000
#: Keeps the coordinator's node down past the held commit's end, so that the commit resumes
#: against a coordinator Kafka still names and then moves.
COORDINATOR_DOWNTIME_S = 25.0
RETRY_BOUND_MS = 15_000

# Listings for the test itself ride through bounces like the kit's own.
_RETRY = BrokerRetryPolicy(timeout_ms=120_000)


@pytest.fixture
def cluster(kafka_cluster):
    if not kafka_cluster.can_bounce:
        pytest.skip(kafka_cluster.skip_reason)
    local = kafka_cluster.local
    local.wait_until_healthy()
    yield kafka_cluster
    for node_id in sorted(local.nodes):
        if not local.nodes[node_id].running:
            local.revive(node_id)
    local.wait_until_healthy()


def _command(bootstrap, source, sink, checkpoint, prefix, *specs, options=()):
    extra = ("--transactional-id-prefix", prefix, *(arg for option in options for arg in ("--option", option)))
    return spark_job_command(bootstrap, source, sink, checkpoint, *specs, batch_records=BATCH, extra=extra)


def _open_transactions(clients, prefix):
    return _RETRY.call(lambda: clients.txn_control().list_open_transactions(f"{prefix}-"),
                       f"listing open transactions of {prefix}-*")


def test_bounces_and_a_coordinator_killed_mid_commit_never_fail_the_query(cluster, unique_name, tmp_path):
    bootstrap = cluster.bootstrap_servers
    clients = clients_for(bootstrap)
    source, sink, ids = topics_with_orders(clients, unique_name, RECORDS)
    prefix = unique_name("bounce")
    bouncer = Bouncer(cluster.local, period_s=20.0)
    coordinator_kills: list[str] = []

    def on_fired(fired: Fired) -> None:
        if fired.name != "mid_commit":
            return
        # The commit is held after its first EndTxn: the batch's other transactions are open. The
        # process holding it is stopped until the coordinator's node is down, so the kill lands
        # inside the commit by construction, not by the failpoint's sleep outlasting a bounce.
        def release() -> None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(fired.pid, signal.SIGCONT)

        os.kill(fired.pid, signal.SIGSTOP)
        try:
            held = _open_transactions(clients, prefix)
            assert held, f"nothing open while the commit is held: {fired.line}"
            transactional_id = held[0].transactional_id
            node_id = find_coordinator(bootstrap, transactional_id)

            def still_held() -> bool:
                return any(t.transactional_id == transactional_id for t in _open_transactions(clients, prefix))

            if bouncer.kill_now(node_id, COORDINATOR_DOWNTIME_S, before_kill=still_held, after_kill=release):
                coordinator_kills.append(f"node {node_id}, coordinator of {transactional_id}")
        finally:
            release()  # also when no kill landed, or the listing failed

    job = WatchedJob(_command(bootstrap, source, sink, tmp_path / "chk", prefix, f"mid_commit:sleep({HOLD_MS})@2"),
                     on_fired=on_fired)
    bouncer.start()
    try:
        code = job.start().wait()
    finally:
        bouncer.stop()
    assert not bouncer.errors, bouncer.errors
    assert not job.callback_errors, job.callback_errors
    assert code == 0, f"the query failed (exit {code}): {kit_lines(job.stderr)}\n{job.stderr[-4000:]}"
    assert "mid_commit" in [f.name for f in job.fired], job.fired
    assert coordinator_kills, "the held commit ended before its coordinator's node was killed"
    log.info("bounces: %s; coordinator killed mid-commit: %s",
             [(b.node_id, b.requested) for b in bouncer.bounces], coordinator_kills)
    wait_until_stable(clients, sink)
    assert_exactly_once(read_committed_values(clients, sink), ids, copied_id)
    assert _open_transactions(clients, prefix) == []


def test_bounces_with_driver_and_python_worker_kills_are_exactly_once(cluster, unique_name, tmp_path):
    bootstrap = cluster.bootstrap_servers
    clients = clients_for(bootstrap)
    source, sink, ids = topics_with_orders(clients, unique_name, RECORDS)
    prefix = unique_name("kills")
    # Runs 1 and 2: the driver-side commit SIGKILLs the whole job (driver JVM and Python workers).
    # Then a write task is held before its pre-commit, and the Python worker holding it is SIGKILLed,
    # twice; Spark retries the task.
    plan = [["after_checkpoint_stored:exit@2"], ["mid_commit:exit@2"]]
    worker_kills: list[int] = []
    lock = threading.Lock()

    def on_fired(fired: Fired) -> None:
        if fired.name != "before_pre_commit":
            return
        with lock:
            if len(worker_kills) >= 2:
                return
            assert fired.pid in python_workers(job.process.pid), f"{fired.pid} is no Python worker of the job"
            os.kill(fired.pid, signal.SIGKILL)
            worker_kills.append(fired.pid)

    bouncer = Bouncer(cluster.local, period_s=20.0, seed=23)
    bouncer.start()
    outcomes = []
    try:
        for run in range(8):
            if run < len(plan):
                specs = plan[run]
            elif len(worker_kills) < 2:
                specs = ["before_pre_commit:sleep(20000)@1"]
            else:
                specs = []
            job = WatchedJob(_command(bootstrap, source, sink, tmp_path / "chk", prefix, *specs), on_fired=on_fired)
            code = job.start().wait()
            outcomes.append((specs, code, kit_lines(job.stderr)[-1:]))
            assert not job.callback_errors, job.callback_errors
            if run < len(plan):
                assert code == KILLED, f"{specs}: exit {code}\n{job.stderr[-4000:]}"
            elif code == 0 and len(worker_kills) >= 2:
                break
    finally:
        bouncer.stop()
    assert not bouncer.errors, bouncer.errors
    assert len(worker_kills) == 2, outcomes
    assert outcomes[-1][1] == 0, outcomes
    log.info("runs: %s; bounces: %s", outcomes, [b.node_id for b in bouncer.bounces])
    wait_until_stable(clients, sink)
    assert_exactly_once(read_committed_values(clients, sink), ids, copied_id)
    assert _open_transactions(clients, prefix) == []


def test_two_nodes_down_longer_than_the_bound_fail_the_query_with_one_line(cluster, unique_name, tmp_path):
    bootstrap = cluster.bootstrap_servers
    local = cluster.local
    clients = clients_for(bootstrap)
    source, sink, ids = topics_with_orders(clients, unique_name, RECORDS)
    prefix = unique_name("outage")
    options = [f"eos.brokerRetryTimeoutMs={RETRY_BOUND_MS}"]
    down: list[int] = []

    def on_fired(fired: Fired) -> None:
        # The second batch is committed and the job is held just after: two nodes go down, and
        # stay down until the job has ended.
        if fired.name == "after_commit" and not down:
            for node_id in sorted(local.nodes)[:2]:
                local.kill(node_id)
                down.append(node_id)

    job = WatchedJob(_command(bootstrap, source, sink, tmp_path / "chk", prefix, "after_commit:sleep(3000)@2",
                              options=options), on_fired=on_fired)
    code = job.start().wait()
    for node_id in down:
        local.revive(node_id)
    local.wait_until_healthy()
    lines = kit_lines(job.stderr)
    assert down, "the after_commit failpoint never fired"
    assert code not in (0, KILLED), f"exit {code}\n{job.stderr[-4000:]}"
    # The committed batch stays committed (its failing sweep is housekeeping); the first request
    # past its bound fails the query, with one line.
    assert len(lines) == 1 and lines[0].startswith("Kafka unreachable: "), lines or job.stderr[-4000:]
    assert f"eos.brokerRetryTimeoutMs={RETRY_BOUND_MS}" in lines[0]
    log.info("the query failed with: %s", lines)

    finished = WatchedJob(_command(bootstrap, source, sink, tmp_path / "chk", prefix, options=options))
    code = finished.start().wait()
    assert code == 0, f"exit {code}: {kit_lines(finished.stderr)}\n{finished.stderr[-4000:]}"
    wait_until_stable(clients, sink)
    assert_exactly_once(read_committed_values(clients, sink), ids, copied_id)
    assert _open_transactions(clients, prefix) == []
