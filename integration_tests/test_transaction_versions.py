"""Transaction version 2 (KIP-890) and the classic protocol, on real brokers.

Kafka 4.x clusters formatted since 4.0 finalise ``transaction.version=2``, under which EndTxn
version 5 bumps the producer epoch at every commit and abort. librdkafka, the kit's data path,
does not speak version 2, so the kit's control plane ends its transactions with EndTxn version 4,
the classic protocol, on every broker (version 5 is refused by a 4.x node whose cluster has not
finalised version 2, as all through a rolling upgrade from 3.9). These tests show on a cluster
with version 2 finalised and on Kafka 3.9 that:

- the driver's commit of a transaction a closed producer left open makes its records visible;
- the commit resent with that handle (an answer lost to a broker restart) succeeds;
- the opposite outcome is refused, and a re-initialised id fences the old handle;
- the next InitProducerId hands out the old epoch + 1 on both: the kit's EndTxn bumps nothing, so
  (transactional id, producer id, epoch) names one transaction and never a later one.

design/exactly-once-protocol.md ("Transaction version 2") says what must change once the producer
speaks version 2.
"""

from __future__ import annotations

from typing import Callable

import pytest
from kafka.admin import KafkaAdminClient
from kafka_testkit.kafka_conformance import (
    PRODUCER_CONFIG,
    TIMEOUT_S,
    create_topic,
    end_txn,
    leave_open,
    read_visible,
    transactional_ids,
    wait_for_end_offset,
)

from connectors.kafka.clients.factory import clients_for
from connectors.kafka.clients import KafkaClients
from connectors.kafka.kafka_errors import InvalidTxnStateError, ProducerFencedError

#: The broker fixture, and the transaction version the case is about (the kit starts Kafka 4.x,
#: which finalises 2, and 3.9 from Maven Central; a broker given from outside is checked).
BROKERS = {"kafka": ("kafka_bootstrap", 2), "kafka-3.9": ("kafka39_bootstrap", 0)}


def finalized_transaction_version(bootstrap: str) -> int:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        feature = admin.describe_features().get("transaction.version")
    finally:
        admin.close()
    return feature["finalized"][1] if feature else 0


@pytest.mark.parametrize("broker", list(BROKERS))
def test_a_transaction_is_named_by_its_handle_under_either_transaction_version(
        broker: str, request: pytest.FixtureRequest, unique_name: Callable[[str], str]) -> None:
    fixture, expected_version = BROKERS[broker]
    bootstrap: str = request.getfixturevalue(fixture)
    version = finalized_transaction_version(bootstrap)
    if version != expected_version and expected_version == 2:
        pytest.skip(f"the broker at {bootstrap} runs transaction.version={version}, not 2 (a Kafka 4.x cluster "
                    "formatted by 4.0 or later finalises 2; the kit's own broker does)")
    clients: KafkaClients = clients_for(bootstrap)
    tp = create_topic(clients, unique_name("topic"))
    with transactional_ids(clients, unique_name) as prefix:
        tid = prefix + "0"
        handle = leave_open(clients, tid, tp.topic, [b"a", b"b", b"c"])
        control = clients.txn_control()
        try:
            end_txn(control, tid, handle, commit=True)
            end_txn(control, tid, handle, commit=True)  # resent, as after a lost answer
            with pytest.raises(InvalidTxnStateError):
                end_txn(control, tid, handle, commit=False)
        finally:
            control.close()
        wait_for_end_offset(clients, tp, 4)  # 3 records and the commit marker
        assert [r.value for r in read_visible(clients, tp)] == [b"a", b"b", b"c"]
        producer = clients.producer(tid, PRODUCER_CONFIG)
        try:
            after = producer.init_transactions(TIMEOUT_S)
        finally:
            producer.close()
        assert after.producer_id == handle.producer_id
        # Only InitProducerId bumped the epoch: the kit's EndTxn (version 4) does not, under either.
        assert after.producer_epoch == handle.producer_epoch + 1
        control = clients.txn_control()
        try:
            with pytest.raises(ProducerFencedError):
                end_txn(control, tid, handle, commit=True)
        finally:
            control.close()
