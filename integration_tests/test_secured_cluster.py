"""The Spark example on a secured cluster (SASL_SSL, SCRAM-SHA-512, ACLs that deny by default), as an
application user holding exactly the ACLs the README's table lists, no more:

- the crash matrix (the job SIGKILLed at every failpoint, restarted) stays exactly-once, with
  librdkafka and kafka-python both authenticating from the same ``kafka.*`` options, and the sink
  starts without DescribeConfigs, with its one-line warning;
- each ACL of the table, missing, gives its one-line message, printed last by the example; a
  transaction timeout over the brokers' limit is refused at the start, naming the option;
- SASL/OAUTHBEARER, with tokens of an OIDC endpoint or unsecured JWTs, and TLS client
  certificates work for both client libraries from the same options.
"""

from __future__ import annotations

import pytest

from connectors.kafka.authorization import DESCRIBE_CONFIGS_ACL, PREFIXED, AclRequirement, sink_acls, source_acls
from connectors.kafka.sink.guardrails import probe_transactional_id
from kafka_io import assert_exactly_once, copied_id, read_committed_values, topics_with_orders, wait_until_stable
from kafka_testkit.token_endpoint import TokenEndpoint
from spark_job import KILLED, kit_lines, run_spark_job
from test_exactly_once_spark import RECORDS, SCENARIOS

pytestmark = pytest.mark.spark


@pytest.fixture
def pipeline(secured_kafka, unique_name):
    """Input loaded with orders and an empty output (made by the administrator), an application user
    with no ACL yet, and the job's transactional id prefix."""
    clients = secured_kafka.admin_clients
    source, sink, ids = topics_with_orders(clients, unique_name, RECORDS)
    app = secured_kafka.application(unique_name("app"))
    return clients, app, source, sink, ids, unique_name("txn")


def run_as(app, bootstrap, source, sink, checkpoint, prefix, *failpoint_specs, extra=(), **kwargs):
    return run_spark_job(bootstrap, source, sink, checkpoint, *failpoint_specs, kafka_config=app.config,
                         extra=("--transactional-id-prefix", prefix, *extra), **kwargs)


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_secured_spark_job_killed_at_failpoint_and_restarted_is_exactly_once(secured_kafka, pipeline, tmp_path,
                                                                             scenario):
    clients, app, source, sink, ids, prefix = pipeline
    app.grant_pipeline(source, sink, prefix)
    bootstrap = secured_kafka.bootstrap_servers
    for specs in SCENARIOS[scenario]:
        crashed = run_as(app, bootstrap, source, sink, tmp_path / "chk", prefix, *specs)
        assert crashed.returncode == KILLED, f"{specs}: exit {crashed.returncode}\n{crashed.stderr[-4000:]}"
        assert len(read_committed_values(clients, sink)) < RECORDS, f"{specs}: crashed after finishing"
    finished = run_as(app, bootstrap, source, sink, tmp_path / "chk", prefix)
    assert finished.returncode == 0, finished.stderr[-4000:]
    # Least privilege: no DescribeConfigs, so a warning, and the timeout checked by InitProducerId.
    assert f"optional ACL missing: principal {app.principal} needs DESCRIBE_CONFIGS on the cluster" in finished.stderr
    wait_until_stable(clients, sink)
    assert_exactly_once(read_committed_values(clients, sink), ids, copied_id)
    control = clients.txn_control()
    assert control.list_open_transactions(prefix) == []
    listed = {t.transactional_id for t in control.list_transactions(prefix)}
    assert probe_transactional_id(prefix) in listed and len(listed) <= 2 * 3 + 1, listed


def _without(app_acls, missing):
    return [acl for acl in app_acls if acl != missing]


# Each ACL of the README's table, missing, and the line that names it. An operation that another
# granted operation implies (READ and WRITE imply DESCRIBE) is missing only where it is denied.
MISSING = {
    "source topic READ": ("READ", "TOPIC", "source", False, "needs READ on topic '{source}'"),
    "source topic DESCRIBE": ("DESCRIBE", "TOPIC", "source", True, "needs DESCRIBE on topic '{source}'"),
    "sink topic WRITE": ("WRITE", "TOPIC", "sink", False, "needs WRITE and DESCRIBE on topic '{sink}'"),
    "sink topic DESCRIBE": ("DESCRIBE", "TOPIC", "sink", True, "needs WRITE and DESCRIBE on topic '{sink}'"),
    "transactional id WRITE": ("WRITE", "TRANSACTIONAL_ID", "prefix", False,
                               "needs WRITE and DESCRIBE on every transactional id starting with '{prefix}'"),
    "transactional id DESCRIBE": ("DESCRIBE", "TRANSACTIONAL_ID", "prefix", True,
                                  "needs DESCRIBE on every transactional id starting with '{prefix}'"),
}


@pytest.mark.parametrize("missing", sorted(MISSING))
def test_a_missing_acl_fails_the_job_with_one_line_naming_it(secured_kafka, pipeline, tmp_path, missing):
    clients, app, source, sink, ids, prefix = pipeline
    operation, resource_type, which, denied, expected = MISSING[missing]
    name = {"source": source, "sink": sink, "prefix": prefix}[which]
    acl = AclRequirement(operation, resource_type, name, PREFIXED if which == "prefix" else "LITERAL")

    secured_kafka.acl.grant(app.principal, _without(source_acls([source]) + sink_acls(sink, prefix), acl))
    if denied:
        secured_kafka.acl.deny(app.principal, [acl])
    failed = run_as(app, secured_kafka.bootstrap_servers, source, sink, tmp_path / "chk", prefix)
    assert failed.returncode == 1, f"exit {failed.returncode}\n{failed.stderr[-4000:]}"
    lines = kit_lines(failed.stderr)
    wanted = f"principal {app.principal} " + expected.format(source=source, sink=sink, prefix=prefix)
    assert lines and all(line.startswith(wanted) for line in lines), (wanted, lines, failed.stderr[-3000:])
    assert "grant it: kafka-acls.sh" in lines[-1]
    assert read_committed_values(clients, sink) == []


def test_a_missing_group_acl_for_lag_monitoring_is_a_one_line_warning(secured_kafka, pipeline, tmp_path):
    """eos.commitOffsetsToGroup is for lag dashboards only: without READ on the group the job still
    runs exactly-once, and says what to grant."""
    clients, app, source, sink, ids, prefix = pipeline
    group = f"{prefix}-lag"
    app.grant_pipeline(source, sink, prefix)  # no READ on the group
    finished = run_as(app, secured_kafka.bootstrap_servers, source, sink, tmp_path / "chk", prefix,
                      extra=("--commit-offsets-to-group", group))
    assert finished.returncode == 0, finished.stderr[-4000:]
    assert (f"committing offsets to group {group} for lag monitoring failed: principal {app.principal} needs READ "
            f"on consumer group '{group}' (GROUP_AUTHORIZATION_FAILED") in finished.stderr
    wait_until_stable(clients, sink)
    assert_exactly_once(read_committed_values(clients, sink), ids, copied_id)
    app.cluster.acl.grant(app.principal, [AclRequirement("READ", "GROUP", group)])
    again = run_as(app, secured_kafka.bootstrap_servers, source, sink, tmp_path / "chk2", prefix,
                   extra=("--commit-offsets-to-group", group, "--max-offsets-per-trigger", "1000"))
    assert again.returncode == 0, again.stderr[-4000:]
    assert "for lag monitoring failed" not in again.stderr


@pytest.mark.parametrize("describe_configs", [False, True], ids=["probed", "read"])
def test_a_transaction_timeout_over_the_brokers_limit_is_refused_before_any_task(secured_kafka, pipeline, tmp_path,
                                                                                 describe_configs):
    clients, app, source, sink, ids, prefix = pipeline
    app.grant_pipeline(source, sink, prefix)
    if describe_configs:
        secured_kafka.acl.grant(app.principal, [DESCRIBE_CONFIGS_ACL])
    failed = run_as(app, secured_kafka.bootstrap_servers, source, sink, tmp_path / "chk", prefix,
                    extra=("--transaction-timeout-ms", "1000000"))
    assert failed.returncode == 1, failed.stderr[-4000:]
    line, = set(kit_lines(failed.stderr))
    limit = "=900000 (read from the brokers with DescribeConfigs" if describe_configs else \
        f" (the brokers refused it at InitProducerId of transactional id '{probe_transactional_id(prefix)}'"
    assert line.startswith("eos.transactionTimeoutMs=1000000 (the producers' transaction.timeout.ms) exceeds the "
                           f"brokers' transaction.max.timeout.ms{limit}"), line
    # Refused on the driver at the start: no task initialised any id of the pool.
    listed = {t.transactional_id for t in clients.txn_control().list_transactions(prefix)}
    assert listed <= {probe_transactional_id(prefix)}, listed


@pytest.mark.parametrize("tokens", ["oidc", "unsecured_jwt"])
def test_oauthbearer_from_the_same_options_for_both_client_libraries(secured_kafka, unique_name, tmp_path, tokens):
    """librdkafka (source, tasks) and kafka-python (the driver's EndTxn, ListTransactions,
    DescribeTransactions) authenticate with OAuth tokens configured by kafka.* options only."""
    if secured_kafka.oauth_bootstrap_servers is None:
        pytest.skip("OAUTHBEARER needs the broker the tests start (KAFKA_HOME), with its unsecured-JWT listener")
    clients = secured_kafka.admin_clients
    source, sink, ids = topics_with_orders(clients, unique_name, 1000)
    name, prefix = unique_name("oauth"), unique_name("txn")
    secured_kafka.acl.grant(f"User:{name}", source_acls([source]) + sink_acls(sink, prefix))
    tls = {"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER",
           "ssl.ca.location": secured_kafka.admin_config["ssl.ca.location"]}
    with TokenEndpoint() as endpoint:
        config = {**tls, "sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.client.id": name,
                  "sasl.oauthbearer.client.secret": "secret", "sasl.oauthbearer.token.endpoint.url": endpoint.url} \
            if tokens == "oidc" else {**tls, "enable.sasl.oauthbearer.unsecure.jwt": "true",
                                      "sasl.oauthbearer.config": f"principal={name}"}
        finished = run_spark_job(secured_kafka.oauth_bootstrap_servers, source, sink, tmp_path / "chk",
                                 kafka_config=config, extra=("--transactional-id-prefix", prefix))
    assert finished.returncode == 0, finished.stderr[-4000:]
    if tokens == "oidc":
        assert endpoint.requests and {client for client, _ in endpoint.requests} == {name}
    wait_until_stable(clients, sink)
    assert_exactly_once(read_committed_values(clients, sink), ids, copied_id)
    assert clients.txn_control().list_open_transactions(prefix) == []


def test_tls_client_certificates_from_the_same_options_for_both_client_libraries(secured_kafka, unique_name,
                                                                                 tmp_path):
    if secured_kafka.client_certificate is None:
        pytest.skip("TLS client certificates need the broker the tests start (KAFKA_HOME) and openssl")
    clients = secured_kafka.admin_clients
    source, sink, ids = topics_with_orders(clients, unique_name, 1000)
    name, prefix = unique_name("tls"), unique_name("txn")
    config = secured_kafka.client_certificate(name)
    secured_kafka.acl.grant(f"User:CN={name}", source_acls([source]) + sink_acls(sink, prefix))
    finished = run_spark_job(secured_kafka.tls_bootstrap_servers, source, sink, tmp_path / "chk",
                             kafka_config=config, extra=("--transactional-id-prefix", prefix))
    assert finished.returncode == 0, finished.stderr[-4000:]
    wait_until_stable(clients, sink)
    assert_exactly_once(read_committed_values(clients, sink), ids, copied_id)
    assert clients.txn_control().list_open_transactions(prefix) == []
