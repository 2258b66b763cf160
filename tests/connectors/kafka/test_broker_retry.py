"""Requests of a running query ride through a broker restart: transient errors are retried within a
time bound, and a cluster that stays away fails the query with one line naming what it could not
reach (fake cluster; no broker needed)."""

import pytest
from confluent_kafka import KafkaError

from connectors.kafka.clients.broker_retry import BrokerRetryPolicy, RetryingClusterAdmin
from connectors.kafka.clients import ProducerIdentity, TopicPartition
from connectors.kafka.sink.config import KafkaSinkConfig
from connectors.kafka.clients._confluent.librdkafka import map_kafka_error
from connectors.kafka.kafka_errors import (
    BrokerUnavailableError,
    KafkaUnreachableError,
    UnknownTopicError,
)
from connectors.kafka.sink.guardrails import check_sink
from connectors.kafka.source import KafkaSource, KafkaSourceConfig
from kafka_testkit.topic_records import produce_committed, read_all
from connectors.simulated_kafka import FakeKafkaClients

# Waits between attempts of zero: the tests count attempts, never time.
FAST = BrokerRetryPolicy(timeout_ms=60_000, retry_interval_ms=0)


@pytest.fixture
def fake(tmp_path):
    clients = FakeKafkaClients(tmp_path / "kafka.db")
    clients.admin().create_topic("in", 2)
    return clients


def source_for(fake, policy=FAST):
    config = KafkaSourceConfig(bootstrap_servers=fake.bootstrap_servers, subscribe=["in"],
                               starting_offsets="earliest", broker_retry=policy)
    return KafkaSource(config, clients=fake)


@pytest.mark.parametrize("operation", ["partitions", "list_offsets"])
@pytest.mark.parametrize("error", ["BROKER_UNAVAILABLE", "NOT_LEADER_OR_FOLLOWER", "REQUEST_TIMED_OUT"])
def test_source_planning_rides_through_transient_errors(fake, operation, error):
    produce_committed(fake, "in", [b"a", b"b", b"c"])
    source = source_for(fake)
    source.restore_state(None)
    fake.inject_errors(operation, error, count=3)
    assert sorted(r.value for r in source.poll(100)) == [b"a", b"b", b"c"]
    source.close()


def test_a_cluster_away_longer_than_the_bound_fails_with_one_line_naming_the_request(fake):
    source = source_for(fake, BrokerRetryPolicy(timeout_ms=60_000, retry_interval_ms=0, max_retries=4))
    source.restore_state(None)
    fake.set_available(False)
    with pytest.raises(KafkaUnreachableError) as failed:
        source.poll(100)
    message = str(failed.value)
    assert "\n" not in message
    assert "describing topic in" in message
    assert "failed 5 time(s)" in message
    assert "eos.brokerRetryTimeoutMs=60000" in message and "fetchOffset.numRetries=4" in message
    assert isinstance(failed.value.last_error, BrokerUnavailableError)
    assert failed.value.__cause__ is None and failed.value.__suppress_context__
    fake.set_available(True)
    source.close()


def test_the_time_bound_ends_the_retries(fake):
    # A bound of 0 ms: the first failure is the last one, however many retries would be allowed.
    admin = RetryingClusterAdmin(fake.admin, BrokerRetryPolicy(timeout_ms=0, retry_interval_ms=0))
    fake.inject_errors("list_offsets", "BROKER_UNAVAILABLE", count=1)
    with pytest.raises(KafkaUnreachableError, match=r"failed 1 time\(s\)"):
        admin.list_offsets([TopicPartition("in", 0)], "latest")
    assert admin.list_offsets([TopicPartition("in", 0)], "latest") == {TopicPartition("in", 0): 0}


def test_errors_that_waiting_cannot_fix_are_not_retried(fake):
    made = []

    def make_admin():
        made.append(1)
        return fake.admin()

    admin = RetryingClusterAdmin(make_admin, FAST)
    with pytest.raises(UnknownTopicError):
        admin.partitions("missing")
    assert len(made) == 1


def test_a_failed_attempt_gets_a_new_admin_client(fake):
    made = []

    def make_admin():
        made.append(1)
        return fake.admin()

    admin = RetryingClusterAdmin(make_admin, FAST)
    fake.inject_errors("partitions", "BROKER_UNAVAILABLE", count=2)
    assert admin.partitions("in") == [0, 1]
    assert len(made) == 3
    assert admin.partitions("in") == [0, 1]
    assert len(made) == 3


def test_the_sink_guardrails_ride_through_transient_errors(fake):
    config = KafkaSinkConfig(bootstrap_servers=fake.bootstrap_servers, topic="out",
                             transactional_id_prefix="app", transaction_timeout_ms=15 * 60 * 1000,
                             checkpoint_timeout_ms=60_000, restart_budget_ms=60_000)
    fake.inject_errors("broker_config", "BROKER_UNAVAILABLE", count=2)
    check_sink(config, fake)


def test_policy_refuses_bad_bounds():
    with pytest.raises(ValueError, match="eos.brokerRetryTimeoutMs"):
        BrokerRetryPolicy(timeout_ms=-1)
    with pytest.raises(ValueError, match="fetchOffset.retryIntervalMs"):
        BrokerRetryPolicy(retry_interval_ms=-5)
    with pytest.raises(ValueError, match="fetchOffset.numRetries"):
        BrokerRetryPolicy(max_retries=-1)


@pytest.mark.parametrize("code", [KafkaError._DESTROY_BROKER, KafkaError._TIMED_OUT, KafkaError._TRANSPORT])
def test_librdkafka_errors_of_a_node_going_away_are_transient(code):
    mapped = map_kafka_error(KafkaError(code), "admin: describe topic in")
    assert isinstance(mapped, BrokerUnavailableError)


def test_a_listed_node_gone_from_the_metadata_is_transient():
    import kafka.errors as kafka_errors

    from connectors.kafka.clients._kafka_python.transaction_control import _map_exception

    mapped = _map_exception(kafka_errors.UnknownBrokerIdError(3), "list open transactions with prefix 'p-'")
    assert isinstance(mapped, BrokerUnavailableError)


def test_end_txn_rides_through_a_moving_coordinator(fake):
    """The fake's EndTxn answers NOT_COORDINATOR, then the broker is briefly unreachable; the policy
    retries until the commit is done, and the commit is not repeated after it succeeded."""
    producer = fake.producer("tid-1", {})
    identity: ProducerIdentity = producer.init_transactions(10)
    producer.begin_transaction()
    producer.produce("in", b"x", key=b"x")
    producer.flush(10)
    producer.close()
    control = fake.txn_control()
    fake.inject_errors("end_txn", "NOT_COORDINATOR", count=1)
    fake.inject_errors("end_txn", "BROKER_UNAVAILABLE", count=1)
    FAST.call(lambda: control.end_txn("tid-1", identity, True), "committing tid-1")
    assert [r.value for r in read_all(fake, "in")] == [b"x"]


def test_offsets_for_lag_dashboards_get_one_attempt(fake):
    admin = RetryingClusterAdmin(fake.admin, FAST)
    fake.inject_errors("commit_group_offsets", "BROKER_UNAVAILABLE", count=1)
    with pytest.raises(BrokerUnavailableError):
        admin.commit_group_offsets("lag", {TopicPartition("in", 0): 0})
    admin.commit_group_offsets("lag", {TopicPartition("in", 0): 0})


class _StubAdminClient:
    """librdkafka's AdminClient as ConfluentClusterAdmin uses it for broker configs: node 1 is down
    (its request fails as a timed-out one does), the others answer."""

    def __init__(self, down: set[int]):
        self.down = down
        self.asked: list[str] = []

    def poll(self, timeout=None):  # serves librdkafka's log lines; the stub has none
        return 0

    def list_topics(self, timeout=None):
        class Metadata:
            brokers = {1: None, 2: None, 3: None}
        return Metadata()

    def describe_configs(self, resources, request_timeout=None):
        from concurrent.futures import Future

        from confluent_kafka import KafkaException

        (resource,) = resources  # librdkafka takes one BROKER resource per call
        self.asked.append(resource.name)
        future = Future()
        if int(resource.name) in self.down:
            future.set_exception(KafkaException(KafkaError(KafkaError._TIMED_OUT)))
        else:
            class Entry:
                value = "900000"
            future.set_result({"transaction.max.timeout.ms": Entry()})
        return {resource: future}


def test_broker_configs_come_from_any_live_broker():
    from connectors.kafka.clients._confluent.admin import ConfluentClusterAdmin

    admin = ConfluentClusterAdmin("127.0.0.1:1", {})
    stub = _StubAdminClient(down={1})
    admin._admin = stub
    assert admin.broker_config("transaction.max.timeout.ms") == "900000"
    assert sorted(stub.asked) == ["1", "2", "3"]


def test_broker_configs_with_every_broker_down_are_a_transient_error():
    from connectors.kafka.clients._confluent.admin import ConfluentClusterAdmin

    admin = ConfluentClusterAdmin("127.0.0.1:1", {})
    admin._admin = _StubAdminClient(down={1, 2, 3})
    with pytest.raises(BrokerUnavailableError, match=r"no broker of \[1, 2, 3\] answered"):
        admin.broker_config("transaction.max.timeout.ms")


def test_an_invalid_listed_offset_is_transient_never_a_position():
    from concurrent.futures import Future

    from connectors.kafka.clients._confluent.admin import ConfluentClusterAdmin
    from connectors.kafka.kafka_errors import RetriableKafkaError

    class Listed:
        def __init__(self, offset):
            self.offset = offset

    class Stub:
        def list_offsets(self, request, isolation_level=None, request_timeout=None):
            futures = {}
            for ck_tp in request:
                future = Future()
                # librdkafka's OFFSET_INVALID for a partition whose leader just went down
                future.set_result(Listed(-1001 if ck_tp.partition == 1 else 7))
                futures[ck_tp] = future
            return futures

        def poll(self, timeout=None):
            return 0

    admin = ConfluentClusterAdmin("127.0.0.1:1", {})
    admin._admin = Stub()
    with pytest.raises(RetriableKafkaError, match="in-1: no valid offset"):
        admin.list_offsets([TopicPartition("in", 0), TopicPartition("in", 1)], "latest")
    assert admin.list_offsets([TopicPartition("in", 0)], "latest") == {TopicPartition("in", 0): 7}
