"""Java's client settings on a real broker: the kit's producer puts keyed records where Java's
default partitioner does (librdkafka's murmur2_random, the kit's default, against Kafka's murmur2 in
Python, connectors/kafka/clients/murmur2.py, checked against Kafka's own vectors in the unit tests),
and Java-named settings (a JAAS line, a JKS truststore) connect every client to a secured cluster."""

from __future__ import annotations

from typing import Callable

import pytest

from kafka_testkit.kafka_conformance import create_topic, read_visible, wait_for_end_offset

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


def test_java_named_settings_connect_every_client_to_a_secured_cluster(secured_kafka, tmp_path,
                                                                       unique_topic: Callable[[], str]) -> None:
    """A JAAS line and a JKS truststore, as a job on Spark's own connector has them: the admin, the
    transactional producer, the reader (librdkafka) and the transaction control (kafka-python)."""
    import subprocess

    from connectors.kafka.clients.keystores import keytool

    admin = secured_kafka.admin_config
    if not admin.get("ssl.ca.location") or admin.get("sasl.mechanism", "").upper() not in ("SCRAM-SHA-512",
                                                                                             "SCRAM-SHA-256"):
        pytest.skip("needs a SCRAM super user over TLS with a CA file")
    truststore = tmp_path / "truststore.jks"
    subprocess.run([keytool(), "-importcert", "-noprompt", "-alias", "ca", "-file", admin["ssl.ca.location"],
                    "-keystore", str(truststore), "-storetype", "JKS", "-storepass", "changeit"],
                   check=True, capture_output=True, timeout=120)
    java = {"security.protocol": "SASL_SSL", "sasl.mechanism": admin["sasl.mechanism"],
            "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                                f'username="{admin["sasl.username"]}" password="{admin["sasl.password"]}";',
            "ssl.truststore.location": str(truststore), "ssl.truststore.password": "changeit",
            "max.request.size": "2000000", "fetch.max.wait.ms": "100", "group.id": "java-named"}
    clients = clients_for(secured_kafka.bootstrap_servers, java)
    topic = unique_topic()
    create_topic(clients, topic, 3)
    producer = clients.producer("java-named-settings", {"transaction.timeout.ms": "60000"})
    try:
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce(topic, b"v", b"k")
        producer.flush(30)
        control = clients.txn_control()
        assert [t.transactional_id for t in control.list_open_transactions("java-named-")] == [
            "java-named-settings"]
        control.end_txn("java-named-settings", producer.identity(), True)
    finally:
        producer.close()
    tp = TopicPartition(topic, java_partition(b"k", 3))
    wait_for_end_offset(clients, tp, 2)  # the record and the commit marker
    assert [r.value for r in read_visible(clients, tp)] == [b"v"]
