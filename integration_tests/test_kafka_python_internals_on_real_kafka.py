"""kafka-python's private API, which the transaction control plane reaches through one module
(``connectors/kafka/clients/_kafka_python/admin_internals.py``), on a real broker: each function
that module offers is driven here, so an upgrade of kafka-python that changes any of them fails
this test, not a query's commit."""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import pytest

from kafka.admin import KafkaAdminClient
from kafka.protocol.producer.transaction import EndTxnRequest
from kafka_testkit.kafka_conformance import create_topic, leave_open, read_visible, transactional_ids, wait_for_end_offset

from connectors.kafka.clients import KafkaClients
from connectors.kafka.clients._confluent.librdkafka import LIBRDKAFKA_LOG
from connectors.kafka.clients._kafka_python import admin_internals


def test_the_installed_kafka_python_is_a_checked_release_with_every_internal_in_place(kafka_bootstrap: str) -> None:
    assert admin_internals.installed_version() in admin_internals.CHECKED_VERSIONS
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap, client_id="it-kafka-python-internals")
    try:
        assert admin_internals.missing_internals(admin) == []
    finally:
        admin.close()


def test_find_send_and_forget_commit_a_transaction_another_producer_left_open(
        kafka_bootstrap: str, kafka_clients: KafkaClients, unique_name: Callable[[str], str]) -> None:
    tp = create_topic(kafka_clients, unique_name("topic"))
    with transactional_ids(kafka_clients, unique_name) as prefix:
        tid = prefix + "0-0"
        identity = leave_open(kafka_clients, tid, tp.topic, [b"a", b"b"])
        admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap, client_id="it-kafka-python-internals")
        try:
            async def find() -> dict[str, int]:
                return await admin_internals.transaction_coordinators(admin, [tid])

            node = admin_internals.run(admin, find)[tid]
            admin_internals.forget_transaction_coordinator(admin, tid)
            assert admin_internals.run(admin, find)[tid] == node  # looked up again, the same node

            async def commit() -> object:
                return await admin_internals.send(admin, EndTxnRequest(
                    transactional_id=tid, producer_id=identity.producer_id, producer_epoch=identity.producer_epoch,
                    committed=True, version=4), node)

            response = admin_internals.run(admin, commit)
            assert response.error_code == 0, response
        finally:
            admin.close()
        wait_for_end_offset(kafka_clients, tp, 3)
        assert [r.value for r in read_visible(kafka_clients, tp)] == [b"a", b"b"]


def test_two_hundred_transactions_commit_in_one_round_within_the_in_flight_limit(
        kafka_clients: KafkaClients, unique_name: Callable[[str], str], caplog: pytest.LogCaptureFixture) -> None:
    """A stateful query's batch at Spark's 200 shuffle partitions: 200 transactions ended by one
    ``end_txn_round`` call. kafka-python lets 5 requests be in flight per connection and
    refuses the rest as a paused node; the round queues them instead, so every one commits at its
    first attempt and nothing is logged at warning level."""
    count = 200
    tp = create_topic(kafka_clients, unique_name("topic"))
    with transactional_ids(kafka_clients, unique_name) as prefix:
        tids = [f"{prefix}{i}-0" for i in range(count)]
        with ThreadPoolExecutor(8) as pool:  # opening them is the slow part, not what is tested
            identities = list(pool.map(lambda tid: leave_open(kafka_clients, tid, tp.topic, [tid.encode()]), tids))
        control = kafka_clients.txn_control()
        before = len(caplog.records)
        try:
            with caplog.at_level(logging.INFO):
                results = control.end_txn_round(list(zip(tids, identities)), commit=True)
        finally:
            control.close()
        assert results == {tid: None for tid in tids}
        # The kit's own lines of the round: kafka-python's clients of earlier tests in this process
        # (their brokers stopped) keep logging from their network threads, and librdkafka's lines are
        # the setup's producers (on a busy machine their InitProducerId is retried), neither of which
        # says anything about this round.
        assert [r.getMessage() for r in caplog.records[before:]
                if r.levelno >= logging.WARNING and r.name.split(".")[0] in ("connectors", "twophase")
                and r.name != LIBRDKAFKA_LOG.name] == []
        wait_for_end_offset(kafka_clients, tp, 2 * count)  # a record and a commit marker each
        assert sorted(r.value for r in read_visible(kafka_clients, tp)) == sorted(tid.encode() for tid in tids)
