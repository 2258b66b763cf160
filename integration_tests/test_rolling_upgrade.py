"""A rolling upgrade of the brokers from Kafka 3.9 to 4.x while the query runs, as Kafka's upgrade
notes describe it for KRaft clusters: restart the nodes one at a time on the new version (each
only once the cluster is back in sync), then finalise the new version's features
(``kafka-features.sh upgrade``; here the same UpdateFeatures request, through kafka-python).

A 3-node 3.9 cluster (RF 3, ``min.insync.replicas=2``) from Maven Central, and the 4.x nodes from
Maven Central too. The query runs unbounded (a processing-time trigger) all along, and new input
is produced before each step, so every step lands on a running query with work to do by
construction. The query must never end by itself; once the output holds every input record it is
stopped, a bounded run from its checkpoint recovers what the stop left open, and the output must
be exactly-once with no transaction of the sink left open.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable, Iterator

import pytest
from kafka.admin import KafkaAdminClient

from cluster_faults import RunningQuery, produce_chunk
from connectors.kafka.clients.broker_retry import BrokerRetryPolicy
from connectors.kafka.clients.factory import clients_for
from kafka_io import assert_exactly_once, copied_id, read_committed_values, topics_with_orders, wait_until_stable
from spark_job import kit_lines, run_spark_job, spark_job_command

pytestmark = pytest.mark.spark

log = logging.getLogger(__name__)

CHUNK = 400
_RETRY = BrokerRetryPolicy(timeout_ms=120_000)


@pytest.fixture(scope="module")
def cluster_39(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    from connectors.servers.server_errors import BrokerStartError
    from connectors.servers.kafka_distribution import MavenKafka
    from connectors.servers.local_cluster import LocalKafkaCluster

    cluster = LocalKafkaCluster(MavenKafka("3.9"), tmp_path_factory.mktemp("upgrade-cluster"))
    try:
        cluster.start()
    except BrokerStartError as exc:
        pytest.skip(f"a 3-node Kafka 3.9 cluster is started here from Maven Central: {str(exc).splitlines()[0]}")
    try:
        yield cluster
    finally:
        cluster.stop()


def finalize_features(bootstrap: str) -> dict[str, tuple[int, int]]:
    """What ``kafka-features.sh upgrade`` does at the end of an upgrade: every feature the nodes
    all support is finalised at its highest level. Returns the finalised levels."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        features = admin.describe_features()
        updates = {name: info["supported"][1] for name, info in features.items()
                   if info.get("supported") and info["supported"][1] > (info.get("finalized") or (0, 0))[1]}
        log.info("finalising %s", updates)
        if updates:
            admin.update_features(updates)
        return {name: info.get("finalized") for name, info in admin.describe_features().items()}
    finally:
        admin.close()


def test_a_rolling_upgrade_from_3_9_to_4_never_fails_the_query(cluster_39, unique_name: Callable[[str], str],
                                                                 tmp_path: Path) -> None:
    from connectors.servers.kafka_distribution import MavenKafka

    bootstrap = cluster_39.bootstrap_servers
    clients = clients_for(bootstrap)
    source, sink, ids = topics_with_orders(clients, unique_name, CHUNK)
    prefix = unique_name("upgrade")
    extra = ("--transactional-id-prefix", prefix, "--trigger-interval", "1 second")
    command = [arg for arg in spark_job_command(bootstrap, source, sink, tmp_path / "chk", batch_records=CHUNK,
                                                extra=extra) if arg != "--bounded"]
    query = RunningQuery(command, tmp_path)
    new_version = MavenKafka("4")
    done: list[str] = []
    query.start()
    try:
        for node_id in sorted(cluster_39.nodes):
            ids += produce_chunk(clients, source, f"before-node-{node_id}", CHUNK)
            cluster_39.upgrade(node_id, new_version)
            done.append(f"node {node_id} on {new_version.description}")
            query.check()
        ids += produce_chunk(clients, source, "before-finalize", CHUNK)
        done.append(f"finalised {finalize_features(bootstrap)}")
        ids += produce_chunk(clients, source, "after-finalize", CHUNK)
        query.wait_for_output(clients, sink, len(ids))
    finally:
        query.stop()
    log.info("upgrade steps: %s; query runs %d, failures %s", done, query.runs, query.failures)
    assert not query.failures, query.failures
    final = run_spark_job(bootstrap, source, sink, tmp_path / "chk", batch_records=CHUNK, extra=extra)
    assert final.returncode == 0, f"{kit_lines(final.stderr)}\n{final.stderr[-4000:]}"
    wait_until_stable(clients, sink)
    assert_exactly_once(read_committed_values(clients, sink), ids, copied_id)
    assert _RETRY.call(lambda: clients.txn_control().list_open_transactions(f"{prefix}-"), "open transactions") == []
