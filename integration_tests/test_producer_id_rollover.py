"""Producer-id rollover on a real broker: after 32,767 InitProducerId calls on one transactional id
the broker hands that id a new producer id, its epoch starting afresh (Kafka's epoch is a 16-bit
counter). The
kit's pool has two ids per write slot and each batch initialises one afresh, so a pooled id gets
there after ~65,000 batches: a week at one batch every 10 s. Flink's connector fails a commit
after such a rollover in one of its modes (FLINK-40689).

Each case drives one transactional id's epoch to the edge with bare InitProducerId requests (no
week of batches; ~32k round trips, a minute or two), then runs the kit's own producer and its
driver-side committer (another client, as a restarted driver is) around the rollover:

- a transaction opened just after the rollover (the new producer id), left open by its process,
  is committed by the committer, also when the commit is repeated (a crash after EndTxn, before
  the checkpoint was marked committed), and only its records are visible;
- a transaction opened at the id's last epoch: the committer commits it, a repeated commit
  (recovery) does not mistake it for lost, the records are visible once, and the id's next
  InitProducerId (the next batch) rolls it over and works;
- a transaction left open at the last epoch, whose id another producer then initialises (rolling it
  over and aborting the transaction): the commit reports it lost, never passes over it.
"""

from __future__ import annotations

import time
from typing import Callable

import kafka.errors as kafka_errors
import pytest
from kafka.admin import KafkaAdminClient
from kafka.protocol.producer.transaction import InitProducerIdRequest
from kafka_testkit.kafka_conformance import (
    PRODUCER_CONFIG,
    TIMEOUT_S,
    create_topic,
    leave_open,
    read_visible,
    transactional_ids,
    wait_for_end_offset,
)
from tenacity import Retrying, retry_if_exception, retry_if_exception_type, stop_after_delay, wait_fixed

from connectors.kafka.clients._kafka_python import admin_internals
from connectors.kafka.clients.factory import clients_for
from connectors.kafka.clients import KafkaClients, ProducerIdentity
from connectors.kafka.sink.committable import KafkaCommittable
from connectors.kafka.sink.committer import KafkaCommitter
from connectors.kafka.sink.config import KafkaSinkConfig
from connectors.kafka.kafka_errors import TransactionLostError
from twophase.transaction_endings import EndRequest, end_transactions

#: Kafka's last epoch before a rollover (Short.MAX_VALUE - 1); InitProducerId past it gives a new
#: producer id.
LAST_EPOCH = 32766
_COORDINATOR_BOUND_S = 60.0


def drive_epoch(bootstrap: str, transactional_id: str, *, until_epoch: int | None = None,
                past_producer_id: int | None = None) -> ProducerIdentity:
    """InitProducerId on ``transactional_id`` again and again, as a week of batches would: until its
    epoch is ``until_epoch``, or until its producer id is no longer ``past_producer_id`` (rolled
    over). Returns the last identity."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        async def coordinator() -> int:
            found = await admin_internals.transaction_coordinators(admin, [transactional_id])
            return found[transactional_id]

        node = Retrying(retry=retry_if_exception_type(Exception), stop=stop_after_delay(_COORDINATOR_BOUND_S),
                        wait=wait_fixed(0.5), reraise=True)(admin_internals.run, admin, coordinator)

        def init_once() -> None:
            async def send() -> object:
                return await admin_internals.send(admin, InitProducerIdRequest(
                    transactional_id=transactional_id, transaction_timeout_ms=60_000, producer_id=-1,
                    producer_epoch=-1), node)

            response = admin_internals.run(admin, send)
            if response.error_code:
                raise kafka_errors.for_code(response.error_code)()

        # A coordinator that has just been elected loads its state first (COORDINATOR_LOAD_IN_PROGRESS).
        Retrying(retry=retry_if_exception(lambda exc: getattr(exc, "retriable", False)),
                 stop=stop_after_delay(_COORDINATOR_BOUND_S), wait=wait_fixed(0.5), reraise=True)(init_once)

        async def drive() -> ProducerIdentity:
            transient = 0
            for _ in range(2 * LAST_EPOCH + 10):
                response = await admin_internals.send(admin, InitProducerIdRequest(
                    transactional_id=transactional_id, transaction_timeout_ms=60_000, producer_id=-1,
                    producer_epoch=-1), node)
                if response.error_code and kafka_errors.for_code(response.error_code).retriable and transient < 100:
                    transient += 1  # e.g. CONCURRENT_TRANSACTIONS while an abort's markers are written
                    continue
                assert response.error_code == 0, response
                identity = ProducerIdentity(response.producer_id, response.producer_epoch)
                if until_epoch is not None and identity.producer_epoch >= until_epoch:
                    return identity
                if past_producer_id is not None and identity.producer_id != past_producer_id:
                    return identity
            raise AssertionError(f"{transactional_id}: no rollover after {2 * LAST_EPOCH + 10} InitProducerId")

        return admin_internals.run(admin, drive)
    finally:
        admin.close()


def committable(transactional_id: str, identity: ProducerIdentity, records: int) -> KafkaCommittable:
    return KafkaCommittable(transactional_id, identity.producer_id, identity.producer_epoch, (), records,
                            checkpoint_id=7, begin_timestamp_ms=int(time.time() * 1000),
                            transaction_timeout_ms=int(PRODUCER_CONFIG["transaction.timeout.ms"]))


def commit(committer: KafkaCommitter, committables: list[KafkaCommittable], checkpoint_id: int) -> None:
    """The lifecycle's commit of one checkpoint's transactions: the one loop, its retries and rule."""
    end_transactions([EndRequest(committer, checkpoint_id, c) for c in committables], commit=True,
                     checkpoint_id=checkpoint_id)


def committer_for(bootstrap: str, prefix: str) -> KafkaCommitter:
    """The driver's committer, in a client of its own (a restarted driver's)."""
    return KafkaCommitter(clients_for(bootstrap), KafkaSinkConfig(
        bootstrap_servers=bootstrap, transactional_id_prefix=prefix), "sink")


def test_a_transaction_opened_just_after_a_rollover_commits_and_recommits(
        kafka_bootstrap: str, kafka_clients: KafkaClients, unique_name: Callable[[str], str]) -> None:
    tp = create_topic(kafka_clients, unique_name("topic"))
    with transactional_ids(kafka_clients, unique_name) as prefix:
        tid = prefix + "0-0"
        before = drive_epoch(kafka_bootstrap, tid, until_epoch=LAST_EPOCH)
        rolled = drive_epoch(kafka_bootstrap, tid, past_producer_id=before.producer_id)
        # A new producer id, its epoch starting afresh (Kafka 4.4 hands it out at epoch 1).
        assert rolled.producer_id != before.producer_id and rolled.producer_epoch <= 1, (before, rolled)
        handle = leave_open(kafka_clients, tid, tp.topic, [b"x", b"y"])
        assert handle.producer_id == rolled.producer_id, (handle, rolled)
        committer = committer_for(kafka_bootstrap, prefix)
        try:
            commit(committer, [committable(tid, handle, 2)], 7)
            commit(committer, [committable(tid, handle, 2)], 7)  # recovery repeats it
        finally:
            committer.close()
        wait_for_end_offset(kafka_clients, tp, 3)
        assert [r.value for r in read_visible(kafka_clients, tp)] == [b"x", b"y"]


def test_a_transaction_at_the_last_epoch_commits_and_the_id_rolls_over_after_it(
        kafka_bootstrap: str, kafka_clients: KafkaClients, unique_name: Callable[[str], str]) -> None:
    tp = create_topic(kafka_clients, unique_name("topic"))
    with transactional_ids(kafka_clients, unique_name) as prefix:
        tid = prefix + "0-1"
        drive_epoch(kafka_bootstrap, tid, until_epoch=LAST_EPOCH - 1)
        # The kit's producer gets the last epoch.
        handle = leave_open(kafka_clients, tid, tp.topic, [b"edge"])
        assert handle.producer_epoch == LAST_EPOCH, handle
        committer = committer_for(kafka_bootstrap, prefix)
        try:
            commit(committer, [committable(tid, handle, 1)], 7)
            commit(committer, [committable(tid, handle, 1)], 7)  # recovery repeats it
        finally:
            committer.close()
        wait_for_end_offset(kafka_clients, tp, 2)
        assert [r.value for r in read_visible(kafka_clients, tp)] == [b"edge"]
        # The id goes on working: the next batch's producer initialises it (a new producer id).
        producer = kafka_clients.producer(tid, PRODUCER_CONFIG)
        try:
            after = producer.init_transactions(TIMEOUT_S)
        finally:
            producer.close()
        assert after.producer_id != handle.producer_id, (handle, after)


def test_a_transaction_aborted_by_a_rollover_of_its_id_is_reported_lost(
        kafka_bootstrap: str, kafka_clients: KafkaClients, unique_name: Callable[[str], str]) -> None:
    tp = create_topic(kafka_clients, unique_name("topic"))
    with transactional_ids(kafka_clients, unique_name) as prefix:
        tid = prefix + "1-0"
        drive_epoch(kafka_bootstrap, tid, until_epoch=LAST_EPOCH - 1)
        handle = leave_open(kafka_clients, tid, tp.topic, [b"doomed", b"too"])
        assert handle.producer_epoch == LAST_EPOCH, handle
        # Another producer initialises the id: it rolls over, and the open transaction is aborted.
        rolled = drive_epoch(kafka_bootstrap, tid, past_producer_id=handle.producer_id)
        assert rolled.producer_id != handle.producer_id
        committer = committer_for(kafka_bootstrap, prefix)
        try:
            with pytest.raises(TransactionLostError) as lost:
                commit(committer, [committable(tid, handle, 2)], 7)
        finally:
            committer.close()
        assert lost.value.transaction_count == 1 and lost.value.record_count == 2
        wait_for_end_offset(kafka_clients, tp, 3)  # 2 aborted records and the abort marker
        assert read_visible(kafka_clients, tp) == []
