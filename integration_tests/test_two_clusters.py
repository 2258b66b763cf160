"""Two clusters: the source reads one real broker (the plain ``kafka_bootstrap`` one) and the sink
writes another with other security (``secured_kafka``: SASL_SSL, SCRAM-SHA-512, ACLs that deny by
default), each with its own ``kafka.*`` settings (the example's ``--kafka-option`` and
``--output-bootstrap``/``--output-kafka-option``). The driver is SIGKILLed in the commit window
(``mid_commit``), then restarted: the output holds every input record exactly once, nothing of the
input's aborted transaction, and no transaction is left open on the sink's cluster.
"""

from __future__ import annotations

import pytest

from connectors.kafka.authorization import sink_acls
from connectors.kafka.clients.broker_retry import BrokerRetryPolicy, RetryingClusterAdmin
from kafka_io import assert_exactly_once, copied_id, load_orders, read_committed_values, wait_until_stable
from spark_job import KILLED, run_spark_job
from twophase.checkpoint_store import FileCheckpointStore

pytestmark = pytest.mark.spark

RECORDS = 3000


def test_source_on_one_cluster_sink_on_another_is_exactly_once_through_a_driver_kill(
        kafka_bootstrap, kafka_clients, secured_kafka, unique_name, tmp_path):
    source, sink, prefix = unique_name("in"), unique_name("out"), unique_name("txn")
    RetryingClusterAdmin(kafka_clients.admin, BrokerRetryPolicy()).create_topic(source, 3)
    output_clients = secured_kafka.admin_clients
    RetryingClusterAdmin(output_clients.admin, BrokerRetryPolicy()).create_topic(sink, 3)
    ids = load_orders(kafka_clients, source, RECORDS, unique_name("loader"))
    # The application may write its output and its transactions on the sink's cluster, nothing else.
    app = secured_kafka.application(unique_name("app"))
    secured_kafka.acl.grant(app.principal, sink_acls(sink, prefix))
    # The input cluster's own settings (a client id of its own: anything but the sink's security).
    options = ["--output-bootstrap", secured_kafka.bootstrap_servers, "--transactional-id-prefix", prefix]
    for name, value in app.config.items():
        options += ["--output-kafka-option", f"{name}={value}"]
    run = dict(kafka_config={"client.id": "two-clusters-input"}, extra=tuple(options))

    crashed = run_spark_job(kafka_bootstrap, source, sink, tmp_path / "chk", "mid_commit:exit@2", **run)
    assert crashed.returncode == KILLED, f"exit {crashed.returncode}\n{crashed.stderr[-4000:]}"
    assert len(read_committed_values(output_clients, sink)) < RECORDS, "crashed after finishing"
    stored = FileCheckpointStore(str(tmp_path / "chk" / "kafka-eos"), check_writable=False)
    assert stored.checkpoint_ids() and not stored.is_committed(stored.checkpoint_ids()[-1]), \
        "the kill did not hit the commit window"

    finished = run_spark_job(kafka_bootstrap, source, sink, tmp_path / "chk", **run)
    assert finished.returncode == 0, finished.stderr[-4000:]
    wait_until_stable(output_clients, sink)
    assert_exactly_once(read_committed_values(output_clients, sink), ids, copied_id)
    control = output_clients.txn_control()
    assert control.list_open_transactions(prefix) == []
    assert control.list_transactions(prefix), "no transaction of the sink on the output cluster"
    # Nothing was written to the input's cluster: the output topic does not exist there.
    assert sink not in kafka_clients.admin().list_topics()
