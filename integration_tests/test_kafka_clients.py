"""The real client seam (librdkafka + kafka-python) against a real broker: what only the real
clients have to show.

The Kafka facts the exactly-once protocol relies on (design/exactly-once-protocol.md) are checked
by kafka_testkit/kafka_conformance.py, against this broker by integration_tests/test_real_kafka_conformance.py
and against the fake cluster by tests/kafka_testkit/test_kafka_conformance.py. Here: a transaction survives its
producer's process dying without any destructor, and the producer's own message.max.bytes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable, Iterator

import pytest
from kafka_testkit.kafka_conformance import (
    create_topic,
    end_txn,
    read_visible,
    transactional_ids,
    wait_for_end_offset,
)

from connectors.kafka.clients import KafkaClients, ProducerIdentity
from connectors.kafka.kafka_errors import RecordTooLargeError

REPO_ROOT = Path(__file__).resolve().parents[1]
TXN_TIMEOUT_MS = "60000"
PRODUCER_CONFIG = {"transaction.timeout.ms": TXN_TIMEOUT_MS}

# Opens a transaction, writes records, flushes, prints the identity and dies without ending the
# transaction and without running any destructor: what a crashed Spark executor leaves behind.
CHILD = r"""
import json, os, sys
from connectors.kafka.clients.factory import clients_for
bootstrap, transactional_id, topic, count, label = sys.argv[1:6]
producer = clients_for(bootstrap).producer(transactional_id, {"transaction.timeout.ms": "60000"})
producer.init_transactions(30)
producer.begin_transaction()
for i in range(int(count)):
    producer.produce(topic, f"{label}-{i}".encode(), key=str(i).encode(), partition=0)
producer.flush(30)
identity = producer.identity()
sys.stdout.write(json.dumps({"producer_id": identity.producer_id,
                             "producer_epoch": identity.producer_epoch}) + "\n")
sys.stdout.flush()
os._exit(0)
"""


def open_txn_in_child(
    bootstrap: str, transactional_id: str, topic: str, count: int, label: str
) -> ProducerIdentity:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    result = subprocess.run(
        [sys.executable, "-c", CHILD, bootstrap, transactional_id, topic, str(count), label],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=REPO_ROOT,
    )
    assert result.returncode == 0, f"child failed:\n{result.stdout}\n{result.stderr}"
    identity = json.loads(result.stdout.strip().splitlines()[-1])
    return ProducerIdentity(identity["producer_id"], identity["producer_epoch"])


@pytest.fixture
def txn_prefix(kafka_clients: KafkaClients, unique_name: Callable[[str], str]) -> Iterator[str]:
    """A transactional id prefix for this test; whatever it leaves open is aborted afterwards, so
    no read_committed consumer of a later test stalls on it."""
    with transactional_ids(kafka_clients, unique_name) as prefix:
        yield prefix


# -- a transaction outlives its process ---------------------------------------------------------


def test_commit_of_a_dead_processes_transaction_makes_every_record_visible(
    kafka_bootstrap: str, kafka_clients: KafkaClients, unique_topic: Callable[[], str], txn_prefix: str
) -> None:
    tp = create_topic(kafka_clients, unique_topic())
    tid = txn_prefix + "0"
    identity = open_txn_in_child(kafka_bootstrap, tid, tp.topic, 5, "committed")
    assert identity.producer_id >= 0 and identity.producer_epoch >= 0
    assert read_visible(kafka_clients, tp) == []  # the open transaction holds the LSO at 0

    control = kafka_clients.txn_control()
    try:
        end_txn(control, tid, identity, commit=True)
    finally:
        control.close()

    wait_for_end_offset(kafka_clients, tp, 6)  # 5 records and the commit marker
    records = read_visible(kafka_clients, tp)
    assert [r.value for r in records] == [f"committed-{i}".encode() for i in range(5)]
    assert [r.key for r in records] == [str(i).encode() for i in range(5)]
    assert [r.offset for r in records] == [0, 1, 2, 3, 4]
    assert all(r.topic == tp.topic and r.partition == 0 and r.timestamp_ms > 0 for r in records)


# -- the producer's own limits ------------------------------------------------------------------


def test_record_too_large_is_reported(
    kafka_clients: KafkaClients, unique_topic: Callable[[], str]
) -> None:
    tp = create_topic(kafka_clients, unique_topic())
    producer = kafka_clients.producer(None, {"message.max.bytes": "100000"})
    try:
        with pytest.raises(RecordTooLargeError):
            producer.produce(tp.topic, b"x" * 200_000, partition=0)
    finally:
        producer.close()
