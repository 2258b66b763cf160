"""kafka-python's private API, which the transaction control plane reaches through one module
(``connectors/kafka/clients/_kafka_python/admin_internals.py``), on a real broker: each function
that module offers is driven here, so an upgrade of kafka-python that changes any of them fails
this test, not a query's commit."""

from __future__ import annotations

from typing import Callable

from kafka.admin import KafkaAdminClient
from kafka.protocol.producer.transaction import EndTxnRequest
from kafka_testkit.kafka_conformance import create_topic, leave_open, read_visible, transactional_ids, wait_for_end_offset

from connectors.kafka.clients import KafkaClients
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
