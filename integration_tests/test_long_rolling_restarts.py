"""Long rolling restarts: tens of hard bounces of a 3-node cluster's nodes under a query that runs
all along, with every sink and both sources, and driver kills on top. The target is zero query
failures (a query that stops by itself while the cluster keeps its quorum), and exactly-once.

Not in the CI set (each combination runs for minutes): ``KAFKA_EOS_INTEGRATION=all``, or name the
file. ``KAFKA_EOS_LONG_BOUNCES`` sets how many bounces each run sees (default 30).

By construction, not by the clock: the query runs unbounded (a processing-time trigger of 1 s); a
new chunk of input is produced after each bounce, so the input outlasts the bounces; the driver is
SIGKILLed (its whole process group) after the 5th and the 15th bounce and started again from its
checkpoint; once the last bounce is done, the query is stopped when the output holds every input
id, and not before, and a bounded run from its checkpoint recovers what the stop left open.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Callable

import pytest

from cluster_faults import RunningQuery, produce_chunk
from connectors.kafka.clients.broker_retry import BrokerRetryPolicy
from connectors.kafka.clients.factory import clients_for
from kafka_testkit.node_bouncer import Bouncer
from kafka_io import assert_exactly_once, copied_id, read_committed_values, topics_with_orders, wait_until_stable
from spark_job import kit_lines, run_spark_job, spark_job_command

pytestmark = pytest.mark.spark

log = logging.getLogger(__name__)

BOUNCES = int(os.environ.get("KAFKA_EOS_LONG_BOUNCES", "30"))
DRIVER_KILLS_AFTER = (5, 15)
CHUNK = 300
_RETRY = BrokerRetryPolicy(timeout_ms=120_000)

COMBINATIONS = {
    "kafka-eos-source-kafka-eos-sink": (),
    "kafka-eos-source-foreach-batch-sink": ("--sink-format", "kafka-eos-foreach-batch"),
    "spark-source-kafka-eos-sink": ("--source-format", "kafka"),
    "spark-source-foreach-batch-sink": ("--source-format", "kafka", "--sink-format", "kafka-eos-foreach-batch"),
}


@pytest.fixture
def cluster(kafka_cluster):
    if not kafka_cluster.can_bounce:
        pytest.skip(kafka_cluster.skip_reason)
    kafka_cluster.local.wait_until_healthy()
    yield kafka_cluster
    kafka_cluster.local.wait_until_healthy()


@pytest.mark.parametrize("combination", list(COMBINATIONS))
def test_tens_of_bounces_with_driver_kills_never_fail_the_query(combination: str, cluster,
                                                                 unique_name: Callable[[str], str], tmp_path: Path,
                                                                 request: pytest.FixtureRequest) -> None:
    bootstrap = cluster.bootstrap_servers
    clients = clients_for(bootstrap)
    source, sink, ids = topics_with_orders(clients, unique_name, CHUNK)
    prefix = unique_name("long")
    extra = ("--transactional-id-prefix", prefix, "--trigger-interval", "1 second", *COMBINATIONS[combination])
    if "--source-format" in extra:
        extra += ("--jars", request.getfixturevalue("spark_kafka_jars"))
    command = [arg for arg in spark_job_command(bootstrap, source, sink, tmp_path / "chk", batch_records=CHUNK,
                                                extra=extra) if arg != "--bounded"]
    query = RunningQuery(command, tmp_path)
    bouncer = Bouncer(cluster.local, period_s=15.0, seed=29)
    query.start()
    bouncer.start()
    seen = 0
    try:
        while seen < BOUNCES:
            assert not bouncer.errors, bouncer.errors
            if len(bouncer.bounces) > seen and bouncer.bounces[seen].revived_at is not None:
                seen += 1
                ids += produce_chunk(clients, source, f"after-bounce-{seen}", CHUNK)
                if seen in DRIVER_KILLS_AFTER:
                    query.kill()
            query.check()
            time.sleep(0.5)
    finally:
        bouncer.stop()
    try:
        query.wait_for_output(clients, sink, len(ids))
    finally:
        query.stop()
    log.info("%s: %d bounces, %d runs, failures %s", combination, len(bouncer.bounces), query.runs, query.failures)
    assert not query.failures, query.failures
    # The query was stopped by SIGKILL: a bounded run from its checkpoint recovers what it left.
    final = run_spark_job(bootstrap, source, sink, tmp_path / "chk", batch_records=CHUNK, extra=extra)
    assert final.returncode == 0, f"{kit_lines(final.stderr)}\n{final.stderr[-4000:]}"
    wait_until_stable(clients, sink)
    assert_exactly_once(read_committed_values(clients, sink), ids, copied_id)
    assert _RETRY.call(lambda: clients.txn_control().list_open_transactions(f"{prefix}-"), "open transactions") == []
