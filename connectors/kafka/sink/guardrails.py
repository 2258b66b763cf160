"""Checks made before an exactly-once sink writes anything, against the brokers' own limits and
the principal's ACLs, so that a misconfiguration fails the query at its start with one clear line
instead of failing its tasks.

- **The transaction timeout.** It must not exceed the brokers' ``transaction.max.timeout.ms``
  (else every InitProducerId is refused) and must outlive a checkpoint plus a restart (else the
  brokers could abort a pre-committed transaction: data loss). The limit is read with
  DescribeConfigs, which least-privilege principals usually may not do (DESCRIBE_CONFIGS on the
  cluster). Then the sink says so in a warning and asks the brokers instead: one InitProducerId
  with the sink's timeout, on a transactional id of the sink's prefix that is not one of its pool
  (``probe_transactional_id``), which the brokers refuse with INVALID_TRANSACTION_TIMEOUT if the
  timeout is over their limit. The probe begins no transaction, so nothing is left open, and it
  adds one id per sink to the brokers' transaction state.
- **The output topic exists** (every delivery guarantee; :func:`check_output_topic`), unless the brokers create topics on
  first use (``auto.create.topics.enable=true``, read with DescribeConfigs). Otherwise the first
  batch's tasks fail with UNKNOWN_TOPIC_OR_PARTITION, which reaches the application as hundreds of
  lines of Spark trace; this check fails the query at its start with one line naming the topic
  and how to create it. A sink whose rows name their topics (a ``topic`` column, no ``topic``
  option) is not checked: its topics are known only to its tasks.
- **DESCRIBE on the sink's transactional ids.** ListTransactions answers only with ids the
  principal may DESCRIBE, without an error, so the sweep of lingering transactions would find
  nothing and leave them stalling read_committed consumers. One DescribeTransactions of one of the
  sink's ids tells a missing ACL apart from nothing to find.
"""

from __future__ import annotations

import logging
import time

from connectors.kafka.authorization import PREFIXED, TRANSACTIONAL_ID, authorization_error
from connectors.kafka.clients.broker_retry import BrokerRetryPolicy, RetryingClusterAdmin
from connectors.kafka.clients import KafkaClients
from connectors.kafka.sink.config import KafkaSinkConfig
from connectors.kafka.kafka_errors import KafkaAuthorizationError, TransactionTimeoutRefusedError, UnknownTopicError
from connectors.kafka.sink.internal.transactional_ids import TransactionalIdPool
from connectors.kafka.sink.writer import KafkaTransactionWriter
from twophase.errors import InvalidValueError

log = logging.getLogger(__name__)

_MAX_TIMEOUT = "transaction.max.timeout.ms"
_AUTO_CREATE = "auto.create.topics.enable"
#: A topic created a moment ago may be unknown to the broker that answers until its metadata
#: reaches it: a missing topic is looked up again for this long before the sink refuses it.
TOPIC_RECHECK_S = 3.0


def probe_transactional_id(prefix: str) -> str:
    """The id of the timeout probe: starts with the sink's prefix, so the sink's PREFIXED ACL
    covers it, but is never one of its pool (``{prefix}-{slot}-{index}``), whose transactions the
    probe's InitProducerId would abort."""
    return f"{prefix}-timeout-probe"


def check_sink(config: KafkaSinkConfig, clients: KafkaClients) -> None:
    """The transactional checks of this module; run once per sink on the driver, before any task
    writes, after :func:`check_output_topic` (``connectors/spark/sink_driver.py``)."""
    if not config.exactly_once:
        return
    # DESCRIBE first: the timeout probe's FindCoordinator needs it too, and would report a missing
    # DESCRIBE as WRITE and DESCRIBE.
    check_transactions_visible(config, clients)
    check_transaction_timeout(config, clients)


def check_transaction_timeout(config: KafkaSinkConfig, clients: KafkaClients) -> None:
    """Refuse a transaction timeout the brokers would refuse, or one so short that a transaction
    could be aborted by the brokers between its pre-commit and its commit (silent data loss)."""
    if not config.exactly_once:
        return
    timeout = config.transaction_timeout_ms
    needed = config.checkpoint_timeout_ms + config.restart_budget_ms
    if timeout < needed:
        raise InvalidValueError(
            f"eos.transactionTimeoutMs={timeout} (transaction.timeout.ms) is shorter than the checkpoint timeout "
            f"({config.checkpoint_timeout_ms} ms) plus the restart budget ({config.restart_budget_ms} ms) "
            f"= {needed} ms. A transaction pre-committed for a checkpoint must survive until that "
            "checkpoint completes and, after a crash, until the restarted job commits it; otherwise "
            "the broker aborts it and its records are lost. Raise eos.transactionTimeoutMs or lower "
            "eos.checkpointTimeoutMs / eos.restartBudgetMs."
        )
    # Any live broker answers, and a broker restarting meanwhile is waited out: this runs each
    # time Spark starts a sink's writer, commit time included.
    admin = RetryingClusterAdmin(clients.admin, BrokerRetryPolicy.from_seconds(config.commit_retry_timeout_s))
    try:
        raw_max = admin.broker_config(_MAX_TIMEOUT)
    except KafkaAuthorizationError as denied:
        log.warning("optional ACL missing: %s. Without it the brokers' %s cannot be read, so "
                    "eos.transactionTimeoutMs=%d is checked by an InitProducerId of transactional id %r instead",
                    denied, _MAX_TIMEOUT, timeout, probe_transactional_id(_prefix(config)))
        _probe_timeout(config, clients, "DescribeConfigs of the brokers is not allowed")
        return
    finally:
        admin.close()
    if raw_max is None:
        log.warning("the brokers did not report %s; checking eos.transactionTimeoutMs=%d by an InitProducerId "
                    "instead", _MAX_TIMEOUT, timeout)
        _probe_timeout(config, clients, f"the brokers did not report {_MAX_TIMEOUT}")
    elif timeout > int(raw_max):
        raise TransactionTimeoutRefusedError.exceeding(timeout, raw_max, how="read from the brokers with "
                                                       "DescribeConfigs; they would refuse every transaction")


def _prefix(config: KafkaSinkConfig) -> str:
    if config.transactional_id_prefix is None:
        raise InvalidValueError("an exactly-once sink needs its transactional id prefix (eos.transactionalIdPrefix)")
    return config.transactional_id_prefix


def _probe_timeout(config: KafkaSinkConfig, clients: KafkaClients, why: str) -> None:
    prefix = _prefix(config)
    probe = probe_transactional_id(prefix)
    producer = clients.producer(probe, KafkaTransactionWriter.producer_config(config))
    try:
        producer.init_transactions(config.flush_timeout_s)
    except KafkaAuthorizationError as denied:
        # The ACL the README asks for is on the prefix, not on the probe's id.
        raise authorization_error(config.client_config, ("WRITE", "DESCRIBE"), TRANSACTIONAL_ID, prefix,
                                  pattern=PREFIXED, error_name=denied.code,
                                  doing=f"checking eos.transactionTimeoutMs by InitProducerId of {probe!r}") from denied
    except TransactionTimeoutRefusedError as refused:
        raise TransactionTimeoutRefusedError.exceeding(
            config.transaction_timeout_ms,
            how=f"the brokers refused it at InitProducerId of transactional id {probe!r} with "
                f"INVALID_TRANSACTION_TIMEOUT; their limit itself is unknown: {why}") from refused
    finally:
        producer.close()
    log.info("eos.transactionTimeoutMs=%d accepted by the brokers (InitProducerId of %r)",
             config.transaction_timeout_ms, probe)


def check_transactions_visible(config: KafkaSinkConfig, clients: KafkaClients) -> None:
    """Raise KafkaAuthorizationError unless the principal may DESCRIBE the sink's transactional ids,
    without which the sweep of lingering transactions would silently find none."""
    if not config.exactly_once:
        return
    transactional_id = TransactionalIdPool(_prefix(config)).format(0, 0)
    control = clients.txn_control()
    try:
        # A cluster that never saw a transaction creates __transaction_state at the first
        # FindCoordinator and answers COORDINATOR_NOT_AVAILABLE meanwhile.
        BrokerRetryPolicy.from_seconds(config.commit_retry_timeout_s).call(
            lambda: control.describe_transaction(transactional_id),
            f"describing transactional id {transactional_id!r} (the sink's guardrail)")
    finally:
        control.close()


def missing_topic_message(topic: str, bootstrap_servers: str) -> str:
    return (f"output topic {topic!r} does not exist on {bootstrap_servers}, and the brokers do not create topics "
            f"on first use ({_AUTO_CREATE} is not true): create it before starting the query "
            f"(kafka-topics.sh --bootstrap-server {bootstrap_servers} --create --topic {topic} "
            f"--partitions <N> --replication-factor <R>), or name an existing topic in option topic")


def check_output_topic(config: KafkaSinkConfig, clients: KafkaClients) -> None:
    """Raise UnknownTopicError (one line: the topic and the command that creates it) if the sink's
    topic does not exist and the brokers would not create it when the first batch writes."""
    topic = config.topic
    if not topic:
        return  # each row names its topic
    admin = RetryingClusterAdmin(clients.admin, BrokerRetryPolicy.from_seconds(config.commit_retry_timeout_s))
    try:
        deadline = time.monotonic() + TOPIC_RECHECK_S
        while True:
            try:
                admin.partitions(topic)
                return
            except UnknownTopicError:
                if time.monotonic() >= deadline:
                    break
                time.sleep(0.5)
        try:
            auto_create = admin.broker_config(_AUTO_CREATE)
        except KafkaAuthorizationError as denied:
            log.info("the brokers' %s cannot be read (%s); output topic %r is missing", _AUTO_CREATE, denied, topic)
            auto_create = None
    finally:
        admin.close()
    if (auto_create or "").strip().lower() == "true":
        log.warning("output topic %r does not exist; the brokers create it when the first batch writes "
                    "(%s=true), with their default partitions and replication", topic, _AUTO_CREATE)
        return
    # Without the chain: the broker's error says the same, less usefully, and the query's failure
    # should be this one line.
    raise UnknownTopicError(missing_topic_message(topic, config.bootstrap_servers)) from None
