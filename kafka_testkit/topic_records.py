"""Shared helpers for unit tests over the fake Kafka cluster."""

from __future__ import annotations

from typing import Iterable

from connectors.kafka.clients import ConsumedRecord, KafkaClients, TopicPartition


def produce_committed(clients: KafkaClients, topic: str, values: Iterable[bytes], *,
                      key_of=lambda v: v, txn_id: str = "test-producer") -> None:
    producer = clients.producer(txn_id, {})
    identity = producer.init_transactions(10)
    producer.begin_transaction()
    for value in values:
        producer.produce(topic, value, key=key_of(value))
    producer.flush(10)
    producer.close()
    clients.txn_control().end_txn(txn_id, identity, True)


def produce_aborted(clients: KafkaClients, topic: str, values: Iterable[bytes], txn_id: str = "test-aborter") -> None:
    producer = clients.producer(txn_id, {})
    producer.init_transactions(10)
    producer.begin_transaction()
    for value in values:
        producer.produce(topic, value, key=value)
    producer.flush(10)
    producer.abort_transaction(10)
    producer.close()


def read_all(clients: KafkaClients, topic: str, read_committed: bool = True) -> list[ConsumedRecord]:
    admin = clients.admin()
    partitions = [TopicPartition(topic, p) for p in admin.partitions(topic)]
    start = admin.list_offsets(partitions, "earliest", read_committed)
    end = admin.list_offsets(partitions, "latest", read_committed)
    ranges = {tp: (start[tp], end[tp]) for tp in partitions if end[tp] > start[tp]}
    return list(clients.reader(read_committed=read_committed).read(ranges)) if ranges else []
