"""A rolling upgrade of the brokers from Kafka 3.9 to 4.x while the query runs, as Kafka's upgrade
notes describe it for KRaft clusters: restart the nodes one at a time on the new version (each
only once the cluster is back in sync), then finalise the new version's features
(``kafka-features.sh upgrade``; here the same UpdateFeatures request, through kafka-python).

A 3-node 3.9 cluster (RF 3, ``min.insync.replicas=2``) from Maven Central, and the 4.x nodes from
Maven Central too. The query is held (a failpoint's sleep it announces) after a committed batch
while each node is upgraded, and once more while the features are finalised, so every step lands
on a running query by construction. The query must never fail, and its output must be
exactly-once, with no transaction of the sink left open.
"""

from __future__ import annotations

import logging
from typing import Callable, Iterator

import pytest
from kafka.admin import KafkaAdminClient

from cluster_faults import Fired, WatchedJob
from connectors.kafka.broker_retry import BrokerRetryPolicy
from connectors.kafka.client_factory import clients_for
from kafka_io import assert_exactly_once, copied_id, read_committed_values, topics_with_orders, wait_until_stable
from spark_job import kit_lines, spark_job_command

pytestmark = pytest.mark.spark

log = logging.getLogger(__name__)

RECORDS = 4000
BATCH = 250
#: The hold of each step: about a node's clean stop, start and catch-up (a longer step goes on
#: while the query runs on, which is the upgrade too).
HOLD_MS = 30_000
_RETRY = BrokerRetryPolicy(timeout_ms=120_000)


@pytest.fixture(scope="module")
def cluster_39(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    from connectors.tools.errors import BrokerStartError
    from kafka_testkit.kafka_distribution import MavenKafka
    from kafka_testkit.local_cluster import LocalKafkaCluster

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
                                                                 tmp_path) -> None:
    from kafka_testkit.kafka_distribution import MavenKafka

    bootstrap = cluster_39.bootstrap_servers
    clients = clients_for(bootstrap)
    source, sink, ids = topics_with_orders(clients, unique_name, RECORDS)
    prefix = unique_name("upgrade")
    new_version = MavenKafka("4")
    steps = [*sorted(cluster_39.nodes), "finalize"]
    done: list[str] = []

    def on_fired(fired: Fired) -> None:
        if fired.name != "after_commit" or len(done) >= len(steps):
            return
        step = steps[len(done)]
        if step == "finalize":
            finalized = finalize_features(bootstrap)
            done.append(f"finalised {finalized}")
        else:
            cluster_39.upgrade(step, new_version)
            done.append(f"node {step} on {new_version.description}")

    holds = [f"after_commit:sleep({HOLD_MS})@{hit}" for hit in (2, 4, 6, 8)]
    job = WatchedJob(spark_job_command(bootstrap, source, sink, tmp_path / "chk", *holds, batch_records=BATCH,
                                       extra=("--transactional-id-prefix", prefix)), on_fired=on_fired)
    code = job.start().wait()
    assert not job.callback_errors, job.callback_errors
    assert done and len(done) == len(steps), done
    assert code == 0, f"the query failed during the upgrade (exit {code}): {kit_lines(job.stderr)}\n{job.stderr[-4000:]}"
    log.info("upgrade steps: %s", done)
    wait_until_stable(clients, sink)
    assert_exactly_once(read_committed_values(clients, sink), ids, copied_id)
    assert _RETRY.call(lambda: clients.txn_control().list_open_transactions(f"{prefix}-"), "open transactions") == []
