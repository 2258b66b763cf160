"""Loading, reading and waiting on a real broker, for the integration tests."""

from __future__ import annotations

import json
import time
from collections import Counter
from typing import Callable

from connectors.kafka.clients import KafkaClients, TopicPartition
from connectors.kafka.clients.broker_retry import BrokerRetryPolicy, RetryingClusterAdmin
from connectors.tools.loader import group_of


def partitions_of(clients: KafkaClients, topic: str) -> list[TopicPartition]:
    return [TopicPartition(topic, p) for p in clients.admin().partitions(topic)]


def load_orders(clients: KafkaClients, topic: str, count: int, txn_prefix: str) -> list[str]:
    """``count`` JSON orders keyed by id, in two committed transactions around an aborted one
    (whose records must never reach any output)."""
    ids = [f"o{i}" for i in range(count)]
    half = count // 2
    for txn, chunk, commit in ((f"{txn_prefix}-a", ids[:half], True),
                               (f"{txn_prefix}-junk", ["junk-1", "junk-2", "junk-3"], False),
                               (f"{txn_prefix}-b", ids[half:], True)):
        producer = clients.producer(txn, {})
        identity = producer.init_transactions(30)
        producer.begin_transaction()
        for order_id in chunk:
            seq = int(order_id[1:]) if order_id[1:].isdigit() else -1
            value = json.dumps({"id": order_id, "seq": seq, "group": group_of(seq) if seq >= 0 else "junk",
                                "customer": "acme", "amount": 42.0}).encode()
            producer.produce(topic, value, key=order_id.encode())
        producer.flush(60)
        producer.close()
        clients.txn_control().end_txn(txn, identity, commit)
    wait_until_stable(clients, topic)
    return ids


def wait_until_stable(clients: KafkaClients, topic: str, timeout_s: float = 60) -> None:
    """Wait until no open transaction holds the LSO back (EndTxn returns before the markers land)."""
    tps = partitions_of(clients, topic)
    admin = clients.admin()
    deadline = time.monotonic() + timeout_s
    while True:
        lso = admin.list_offsets(tps, "latest", read_committed=True)
        hw = admin.list_offsets(tps, "latest", read_committed=False)
        if lso == hw:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{topic}: LSO {lso} still behind high watermark {hw} after {timeout_s}s")
        time.sleep(0.2)


def read_committed_values(clients: KafkaClients, topic: str) -> list[bytes]:
    tps = partitions_of(clients, topic)
    admin = clients.admin()
    start = admin.list_offsets(tps, "earliest", True)
    end = admin.list_offsets(tps, "latest", True)
    ranges = {tp: (start[tp], end[tp]) for tp in tps if end[tp] > start[tp]}
    reader = clients.reader(read_committed=True)
    try:
        return [r.value for r in reader.read(ranges)] if ranges else []
    finally:
        reader.close()


def assert_exactly_once(values: list[bytes], expected_ids: list[str], id_of: Callable[[bytes], str]) -> None:
    counts = Counter(id_of(v) for v in values)
    duplicates = {k: n for k, n in counts.items() if n > 1}
    lost = set(expected_ids) - set(counts)
    unexpected = set(counts) - set(expected_ids)
    assert not duplicates, f"{len(duplicates)} duplicated ids, e.g. {list(duplicates.items())[:5]}"
    assert not lost, f"{len(lost)} lost ids, e.g. {sorted(lost)[:5]}"
    assert not unexpected, f"ids that are no input's (aborted input leaked?): {sorted(unexpected)[:5]}"


def copied_id(value: bytes) -> str:
    """The order id in an output value of the copy transform (input JSON + ``|copied``)."""
    assert value.endswith(b"|copied"), value
    return json.loads(value[: -len(b"|copied")])["id"]


def topics_with_orders(clients: KafkaClients, unique_name: Callable[[str], str], count: int,
                       partitions: int = 3) -> tuple[str, str, list[str]]:
    """A fresh input topic loaded with ``count`` orders, and a fresh empty output topic."""
    source, sink = unique_name("in"), unique_name("out")
    # Under the retries the kit's own requests get: on a cluster that has just started, librdkafka
    # fails a request in flight on a bootstrap connection it replaces (_DESTROY_BROKER).
    admin = RetryingClusterAdmin(clients.admin, BrokerRetryPolicy())
    admin.create_topic(source, partitions)
    admin.create_topic(sink, partitions)
    return source, sink, load_orders(clients, source, count, unique_name("loader"))
