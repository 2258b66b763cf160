"""Refused requests become one line naming the principal, the operation and the resource; the
sink starts without DescribeConfigs and checks its transaction timeout another way (no broker)."""

from __future__ import annotations

import logging

import pytest
from confluent_kafka import KafkaError

from connectors.kafka.authorization import (
    DESCRIBE_CONFIGS_ACL,
    PREFIXED,
    AclRequirement,
    authorization_error,
    principal_of,
    sink_acls,
    source_acls,
    transactional_id_error,
)
from connectors.kafka.sink.config import KafkaSinkConfig
from connectors.kafka.clients._confluent.producer import _TransactionErrorLog
from connectors.kafka.kafka_errors import KafkaAuthorizationError, TransactionTimeoutRefusedError
from connectors.kafka.sink.guardrails import check_sink, probe_transactional_id
from connectors.kafka.clients._confluent.librdkafka import map_kafka_error
from connectors.kafka.sink.internal.transactional_ids import TransactionalIdPool
from connectors.kafka.clients._kafka_python.transaction_control import _map_error_code
from connectors.simulated_kafka import FakeKafkaClients
from connectors.spark.failures import kit_error_lines

SCRAM = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "app",
         "sasl.password": "secret"}


@pytest.mark.parametrize("config, principal", [
    (SCRAM, "User:app"),
    ({"security.protocol": "sasl_plaintext", "sasl.mechanisms": "PLAIN", "sasl.username": "bob"}, "User:bob"),
    ({}, "User:ANONYMOUS"),
    ({"security.protocol": "SSL"}, "User:ANONYMOUS"),
    ({"security.protocol": "SSL", "ssl.certificate.location": "/c.pem"}, None),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc"}, None),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER", "enable.sasl.oauthbearer.unsecure.jwt": "true",
      "sasl.oauthbearer.config": "principal=svc scope=a"}, "User:svc"),
    ({"security.protocol": "SASL_SSL"}, None),  # GSSAPI, librdkafka's default mechanism
])
def test_principal_from_client_settings(config, principal):
    assert principal_of(config) == principal


def test_the_error_is_one_line_naming_principal_operation_and_resource():
    error = authorization_error(SCRAM, ("READ",), "TOPIC", "orders", error_name="TOPIC_AUTHORIZATION_FAILED",
                                doing="the reader fetched orders-0")
    line = str(error)
    assert "\n" not in line
    assert line.startswith("principal User:app needs READ on topic 'orders' (TOPIC_AUTHORIZATION_FAILED while "
                           "the reader fetched orders-0)")
    assert "--allow-principal User:app --operation READ --topic orders" in line
    assert (error.principal, error.operations, error.resource_type, error.resource_name) == (
        "User:app", ("READ",), "TOPIC", "orders")


def test_a_pool_id_is_named_by_its_prefix_as_a_prefixed_acl():
    prefix = "job-7"
    error = transactional_id_error(SCRAM, TransactionalIdPool(prefix).format(3, 1),
                                   error_name="TRANSACTIONAL_ID_AUTHORIZATION_FAILED", doing="init")
    assert (error.resource_name, error.pattern, error.operations) == (prefix, PREFIXED, ("WRITE", "DESCRIBE"))
    assert "every transactional id starting with 'job-7' (a PREFIXED ACL)" in str(error)
    assert "--transactional-id job-7 --resource-pattern-type prefixed" in str(error)


def test_an_unknown_principal_is_described_not_invented():
    certificate = {"security.protocol": "SSL", "ssl.certificate.location": "/c.pem"}
    line = str(authorization_error(certificate, ("WRITE",), "TOPIC", "t", error_name="X", doing="y"))
    assert line.startswith("the client's principal (its TLS certificate's subject")
    assert "--allow-principal <principal>" in line


def test_the_acl_tables_of_source_and_sink():
    assert source_acls(["a"]) == [AclRequirement("READ", "TOPIC", "a"), AclRequirement("DESCRIBE", "TOPIC", "a")]
    assert source_acls(["a"], "lag")[-1] == AclRequirement("READ", "GROUP", "lag")
    assert sink_acls("out", "p") == [
        AclRequirement("WRITE", "TOPIC", "out"), AclRequirement("DESCRIBE", "TOPIC", "out"),
        AclRequirement("WRITE", "TRANSACTIONAL_ID", "p", PREFIXED),
        AclRequirement("DESCRIBE", "TRANSACTIONAL_ID", "p", PREFIXED)]
    assert sink_acls("out", None) == sink_acls("out", "p")[:2]
    assert str(DESCRIBE_CONFIGS_ACL) == "DESCRIBE_CONFIGS on the cluster (resource kafka-cluster)"


def test_librdkafka_and_kafka_python_refusals_map_to_the_line():
    def denied(error_name: str) -> KafkaAuthorizationError:
        return authorization_error(SCRAM, ("DESCRIBE",), "TOPIC", "t", error_name=error_name, doing="describing t")

    mapped = map_kafka_error(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED), "admin", denied)
    assert isinstance(mapped, KafkaAuthorizationError) and mapped.code == "TOPIC_AUTHORIZATION_FAILED"
    assert isinstance(_map_error_code(53, "EndTxn", denied), KafkaAuthorizationError)
    timeout = map_kafka_error(KafkaError(KafkaError.INVALID_TRANSACTION_TIMEOUT), "producer[x]: init")
    assert isinstance(timeout, TransactionTimeoutRefusedError) and "eos.transactionTimeoutMs" in str(timeout)


def test_the_cause_of_a_failed_transaction_is_read_from_librdkafkas_txnerr_line():
    log = _TransactionErrorLog()
    log.log(3, "%s [%s] %s", "TXNERR", "rdkafka#producer-1", "Current transaction failed in state InTransaction: "
            "Failed to add partition(s) to transaction on broker TxnCoordinator/1: Broker: Topic authorization "
            "failed (after 0 ms) (TOPIC_AUTHORIZATION_FAILED)")
    log.log(7, "%s [%s] %s", "BROKER", "rdkafka#producer-1", "unrelated (ALL_BROKERS_DOWN)")
    assert log.error_name == "TOPIC_AUTHORIZATION_FAILED"


def test_kit_error_lines_are_found_in_spark_exception_text():
    text = ("pyspark.errors.exceptions.captured.StreamingQueryException: [STREAM_FAILED] Query terminated with "
            "exception: [PYTHON_EXCEPTION] An exception was thrown from the Python worker: Traceback (most recent "
            "call last):\n  File \"x.py\", line 1, in f\n"
            "connectors.kafka.kafka_errors.KafkaAuthorizationError: principal User:app needs READ on topic 'in' (...)\n"
            " SQLSTATE: 38000\nTraceback:\nconnectors.kafka.kafka_errors.KafkaAuthorizationError: principal User:app "
            "needs READ on topic 'in' (...)\nValueError: not ours\n")
    assert kit_error_lines(text) == ["principal User:app needs READ on topic 'in' (...)"]
    assert kit_error_lines(RuntimeError("nothing of the kit")) == []
    try:
        raise RuntimeError("wrapped") from TransactionTimeoutRefusedError("eos.transactionTimeoutMs=2 too long")
    except RuntimeError as exc:
        assert kit_error_lines(exc) == ["eos.transactionTimeoutMs=2 too long"]


class _DescribeConfigsDenied:
    """The fake cluster's clients, with DescribeConfigs refused as a least-privilege principal sees it."""

    def __init__(self, fake: FakeKafkaClients) -> None:
        self._fake = fake
        self.bootstrap_servers = fake.bootstrap_servers

    def __getattr__(self, name):
        return getattr(self._fake, name)

    def admin(self):
        admin = self._fake.admin()

        def broker_config(name: str) -> str | None:
            raise authorization_error(SCRAM, ("DESCRIBE_CONFIGS",), "CLUSTER", "kafka-cluster",
                                      error_name="CLUSTER_AUTHORIZATION_FAILED", doing="reading broker 1's config")

        admin.broker_config = broker_config
        return admin


@pytest.fixture
def fake(tmp_path):
    return FakeKafkaClients(tmp_path / "kafka.db")


def sink_config(fake, **overrides):
    return KafkaSinkConfig(**{"bootstrap_servers": fake.bootstrap_servers, "topic": "out",
                              "transactional_id_prefix": "job", "client_config": SCRAM, **overrides})


def test_without_describe_configs_the_sink_starts_with_a_warning_and_probes_the_timeout(fake, caplog):
    with caplog.at_level(logging.WARNING, logger="connectors.kafka.sink.guardrails"):
        check_sink(sink_config(fake), _DescribeConfigsDenied(fake))
    warning, = [r.getMessage() for r in caplog.records]
    assert warning.startswith("optional ACL missing: principal User:app needs DESCRIBE_CONFIGS on the cluster")
    assert "eos.transactionTimeoutMs=900000 is checked by an InitProducerId of transactional id 'job-timeout-probe'" \
        in warning
    listed = [t.transactional_id for t in fake.txn_control().list_transactions("job")]
    assert listed == [probe_transactional_id("job")]
    assert TransactionalIdPool("job").slot_of(listed[0]) is None  # never one of the pool's ids
    assert fake.txn_control().list_open_transactions("job") == []


def test_without_describe_configs_an_over_limit_timeout_is_refused_naming_the_option(fake):
    fake.configure(**{"transaction.max.timeout.ms": 300_000})
    with pytest.raises(TransactionTimeoutRefusedError) as refused:
        check_sink(sink_config(fake), _DescribeConfigsDenied(fake))
    message = str(refused.value)
    assert message.startswith("eos.transactionTimeoutMs=900000 (the producers' transaction.timeout.ms) exceeds the "
                              "brokers' transaction.max.timeout.ms (the brokers refused it at InitProducerId of "
                              "transactional id 'job-timeout-probe' with INVALID_TRANSACTION_TIMEOUT")
    assert "\n" not in message


def test_with_describe_configs_the_limit_is_read_and_named(fake):
    fake.configure(**{"transaction.max.timeout.ms": 300_000})
    with pytest.raises(TransactionTimeoutRefusedError, match=r"transaction.max.timeout.ms=300000 \(read from the "
                                                             r"brokers with DescribeConfigs"):
        check_sink(sink_config(fake), fake)
    assert fake.txn_control().list_transactions("job") == []  # no probe needed


def test_the_checks_skip_sinks_without_transactions(fake):
    check_sink(sink_config(fake, delivery_guarantee="at_least_once", transaction_timeout_ms=10**9),
               _DescribeConfigsDenied(fake))
