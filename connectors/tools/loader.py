"""Loads an input topic whose every record has a unique id, so ``verify`` can match it.

Record ``i`` has key ``str(i)`` and value ``{"id": i, "seq": i, "group": "g<i % 100>", "payload": ...}``:
``verify`` can match by ``key`` or ``json:id``; a stateful query can count by ``group`` (``verify
--shape running-count --id-field json:group``) and take ``seq`` as its event time. The records are written in committed transactions, and one
aborted transaction of ``aborted`` records (ids ``aborted-<n>``) is written half way through:
a pipeline that reads its input with read_committed never passes those on, and ``verify`` reports
any that reach the output as aborted reads.
"""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass

from connectors.kafka.clients import KafkaClients
from connectors.kafka.kafka_errors import KafkaConnectorError
from connectors.servers.broker_discovery import retry_transient
from connectors.tools.verify import ProgressCallback
from twophase.errors import InvalidValueError

log = logging.getLogger(__name__)

_FLUSH_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class LoadResult:
    topic: str
    committed: int
    aborted: int
    partitions: int


@dataclass(frozen=True)
class TopicInfo:
    partitions: int
    #: True when this call created the topic (so it is known to be empty).
    created: bool


def ensure_topic(clients: KafkaClients, topic: str, partitions: int) -> TopicInfo:
    """Create ``topic`` with ``partitions`` unless it exists."""
    return retry_transient(lambda: _ensure_topic(clients, topic, partitions), f"creating topic {topic}")


def _ensure_topic(clients: KafkaClients, topic: str, partitions: int) -> TopicInfo:
    admin = clients.admin()
    try:
        if topic in admin.list_topics():
            return TopicInfo(len(admin.partitions(topic)), created=False)
        try:
            admin.create_topic(topic, partitions)
        except KafkaConnectorError as exc:
            # Another process may have created it in between (the fake says TOPIC_ALREADY_EXISTS).
            if "ALREADY_EXISTS" not in str(exc):
                raise
            return TopicInfo(len(admin.partitions(topic)), created=False)
        return TopicInfo(len(admin.partitions(topic)), created=True)
    finally:
        admin.close()


def _write_transaction(clients: KafkaClients, topic: str, records: list[tuple[bytes, bytes]],
                       commit: bool) -> None:
    # One producer per transaction: the transaction is ended with EndTxn from the control plane
    # (the seam has no producer-side commit), after which the producer is done.
    transactional_id = f"kafka-eos-loader-{uuid.uuid4().hex[:12]}"
    producer = clients.producer(transactional_id, {})
    try:
        identity = producer.init_transactions(_FLUSH_TIMEOUT_S)
        producer.begin_transaction()
        for key, value in records:
            producer.produce(topic, value, key=key)
        producer.flush(_FLUSH_TIMEOUT_S)
    finally:
        producer.close()
    control = clients.txn_control()
    try:
        control.end_txn(transactional_id, identity, commit)
    finally:
        control.close()


#: Groups of the input's records, for the stateful queries' counts.
GROUPS = 100


def group_of(seq: int) -> str:
    """The group of input record ``seq``: a running count has ``seq / GROUPS`` inputs per group."""
    return f"g{seq % GROUPS}"


def record(i: int, payload_bytes: int = 32) -> tuple[bytes, bytes]:
    """The key and value of input record ``i``."""
    value = {"id": i, "seq": i, "group": group_of(i), "payload": "x" * payload_bytes}
    return str(i).encode(), json.dumps(value, separators=(",", ":")).encode()


def load_input(
    clients: KafkaClients,
    topic: str,
    records: int,
    *,
    partitions: int = 3,
    aborted: int = 50,
    transaction_size: int = 5000,
    progress: ProgressCallback | None = None,
) -> LoadResult:
    """Create ``topic`` (if needed) and write ``records`` committed records plus one aborted
    transaction of ``aborted`` records in the middle."""
    if records < 0 or aborted < 0 or transaction_size < 1:
        raise InvalidValueError("records and aborted must be >= 0 and transaction_size >= 1")
    partition_count = ensure_topic(clients, topic, partitions).partitions
    phase = f"loading {topic}"
    written = 0
    aborted_written = False
    if progress:
        progress(phase, 0, records)
    while written < records or (aborted and not aborted_written):
        if aborted and not aborted_written and written >= records // 2:
            junk = [(f"aborted-{n}".encode(), json.dumps({"id": f"aborted-{n}"}).encode()) for n in range(aborted)]
            _write_transaction(clients, topic, junk, commit=False)
            aborted_written = True
            continue
        end = min(records, written + transaction_size)
        if aborted and not aborted_written:
            # Stop the transaction at the middle, where the aborted one goes.
            end = min(end, max(records // 2, written + 1))
        _write_transaction(clients, topic, [record(i) for i in range(written, end)], commit=True)
        written = end
        if progress:
            progress(phase, written, records)
    log.info("loaded %d committed records (+%d aborted) into %s (%d partitions)", records, aborted,
             topic, partition_count)
    return LoadResult(topic, records, aborted, partition_count)
