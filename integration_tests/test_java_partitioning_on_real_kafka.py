"""The kit's producer puts keyed records where Java's default partitioner does, on a real broker:
librdkafka's murmur2_random (the kit's default) against Kafka's murmur2 in Python
(connectors/kafka/clients/murmur2.py, checked against Kafka's own vectors in the unit tests)."""

from __future__ import annotations

from typing import Callable

from kafka_testkit.kafka_conformance import create_topic, read_visible

from connectors.kafka.clients import KafkaClients, TopicPartition
from connectors.kafka.clients.factory import clients_for
from connectors.kafka.clients.murmur2 import java_partition

PARTITIONS = 7


def _placement(clients: KafkaClients, topic: str) -> dict[bytes, int]:
    placed: dict[bytes, int] = {}
    for partition in range(PARTITIONS):
        for record in read_visible(clients, TopicPartition(topic, partition), read_committed=False):
            placed[record.key] = partition
    return placed


def test_keyed_records_land_where_javas_default_partitioner_puts_them(
        kafka_bootstrap: str, kafka_clients: KafkaClients, unique_topic: Callable[[], str]) -> None:
    topic = unique_topic()
    create_topic(kafka_clients, topic, PARTITIONS)
    keys = [f"order-{i}".encode() for i in range(200)]
    producer = kafka_clients.producer(None)
    try:
        for key in keys:
            producer.produce(topic, b"v", key)
        producer.flush(30)
    finally:
        producer.close()
    placed = _placement(kafka_clients, topic)
    assert placed == {key: java_partition(key, PARTITIONS) for key in keys}


def test_javas_partitioner_class_setting_is_taken(kafka_bootstrap: str, kafka_clients: KafkaClients,
                                                  unique_topic: Callable[[], str]) -> None:
    topic = unique_topic()
    create_topic(kafka_clients, topic, PARTITIONS)
    clients = clients_for(kafka_bootstrap, {
        "partitioner.class": "org.apache.kafka.clients.producer.internals.DefaultPartitioner",
        "max.request.size": "2000000", "buffer.memory": "33554432", "acks": "all"})
    producer = clients.producer(None)
    keys = [f"k{i}".encode() for i in range(50)]
    try:
        for key in keys:
            producer.produce(topic, b"v", key)
        producer.flush(30)
    finally:
        producer.close()
    assert _placement(kafka_clients, topic) == {key: java_partition(key, PARTITIONS) for key in keys}
