"""The stateful queries of the integration tests (test_stateful_exactly_once.py, test_stateful_differential.py): the Spark job's
``--transform`` shapes with their inputs on a real broker, and their output checked by ``kafka-eos
verify --shape`` (connectors/tools/shape_checks.py), not by record counts."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from connectors.kafka.clients import KafkaClients
from connectors.kafka.clients.broker_retry import BrokerRetryPolicy, RetryingClusterAdmin
from connectors.tools.loader import group_of
from connectors.tools.jobs.stateful_queries import VERIFY_SHAPE
from connectors.tools.shape_checks import ShapeReport
from connectors.tools.verify import verify_shape
from kafka_io import partitions_of, read_committed_values, topics_with_orders, wait_until_stable
from spark_job import run_spark_job

#: Input orders: 2,000 in batches of 500, so that a failpoint's second hit leaves batches to go.
RECORDS = 2000
BATCH = 500
#: Write tasks of a stateful query in CI (Spark's default of 200 runs in the KAFKA_EOS_INTEGRATION=all set).
SHUFFLE_PARTITIONS = 4


@dataclass(frozen=True)
class Query:
    transform: str
    output_mode: str

    @property
    def name(self) -> str:
        return f"{self.transform}-{self.output_mode}"

    @property
    def shape(self) -> str:
        return VERIFY_SHAPE[(self.transform, self.output_mode)]

    @property
    def input_key(self) -> str:
        """Where the input carries what the shape counts by (the job's group, or the order id)."""
        return "json:id" if self.transform in ("dedup", "join") else "json:group"


QUERIES = {q.name: q for q in (
    Query("running-count", "update"), Query("running-count", "complete"), Query("windowed-count", "append"),
    Query("dedup", "append"), Query("join", "append"), Query("python-state", "update"),
)}


@dataclass(frozen=True)
class Topics:
    source: str
    sink: str
    #: The join's right-hand input.
    right: str | None = None


def stateful_topics(clients: KafkaClients, unique_name: Callable[[str], str], query: Query) -> Topics:
    """Fresh topics with the query's input: orders with unique ids; for ``dedup`` a third of them
    sent again (an at-least-once producer's retries) in a later transaction; for ``join`` a second
    topic with a payment for every other order."""
    source, sink, ids = topics_with_orders(clients, unique_name, RECORDS)
    if query.transform == "dedup":
        resend(clients, source, ids[::3], unique_name("resent"))
    if query.transform == "join":
        right = unique_name("payments")
        RetryingClusterAdmin(clients.admin, BrokerRetryPolicy()).create_topic(right, 3)
        resend(clients, right, ids[::2], unique_name("payer"))
        return Topics(source, sink, right)
    return Topics(source, sink)


def resend(clients: KafkaClients, topic: str, ids: list[str], txn: str) -> None:
    """The orders ``ids`` (as load_orders writes them) again, in one committed transaction."""
    producer = clients.producer(txn, {})
    identity = producer.init_transactions(30)
    producer.begin_transaction()
    for order_id in ids:
        seq = int(order_id[1:])
        producer.produce(topic, json.dumps({"id": order_id, "seq": seq, "group": group_of(seq), "customer": "acme",
                                            "amount": 42.0}).encode(), key=order_id.encode())
    producer.flush(60)
    producer.close()
    clients.txn_control().end_txn(txn, identity, True)
    wait_until_stable(clients, topic)


def job_arguments(query: Query, topics: Topics, sink_format: str, *,
                  shuffle_partitions: int = SHUFFLE_PARTITIONS) -> tuple[str, ...]:
    extra = ("--transform", query.transform, "--output-mode", query.output_mode, "--sink-format", sink_format,
             "--shuffle-partitions", str(shuffle_partitions))
    return extra + (("--join-input", topics.right) if topics.right else ())


def run_query(bootstrap: str, query: Query, topics: Topics, checkpoint: Path, sink_format: str, *failpoints: str,
              extra: tuple[str, ...] = (), env: dict[str, str] | None = None, **kwargs: object):  # type: ignore[no-untyped-def]
    return run_spark_job(bootstrap, topics.source, topics.sink, checkpoint, *failpoints, batch_records=BATCH,
                         extra=job_arguments(query, topics, sink_format, **kwargs) + extra, env=env)


def check_shape(clients: KafkaClients, query: Query, topics: Topics) -> ShapeReport:
    """``kafka-eos verify --shape`` of the query's output; fails the test with its summary."""
    wait_until_stable(clients, topics.sink)
    report = verify_shape(clients, topics.source, topics.sink, query.shape, id_spec=query.input_key,
                          event_time="json:seq", right_input_topic=topics.right)
    assert report.exactly_once, "\n".join(report.summary_lines())
    return report


def final_records(clients: KafkaClients, query: Query, sink: str) -> set[tuple]:
    """What a downstream reader ends up with, comparable across sinks: each key's last count (counts),
    each (key, window, count) (windows), each record (dedup, join)."""
    if query.shape in ("running-count", "complete-count"):
        # One partition per key and offset order within it: the last value read is the last written.
        last = {}
        for value in in_offset_order(clients, sink):
            last[value["key"]] = value["count"]
        return set(last.items())
    values = [json.loads(v) for v in read_committed_values(clients, sink)]
    if query.shape == "windowed-count":
        return {(v["key"], v["window"]["start"], v["window"]["end"], v["count"]) for v in values}
    return {json.dumps(v, sort_keys=True) for v in values}


def in_offset_order(clients: KafkaClients, topic: str) -> list[dict]:
    """The topic's committed values, per partition in offset order."""
    tps = partitions_of(clients, topic)
    admin = clients.admin()
    start = admin.list_offsets(tps, "earliest", True)
    end = admin.list_offsets(tps, "latest", True)
    reader = clients.reader(read_committed=True)
    try:
        records = list(reader.read({tp: (start[tp], end[tp]) for tp in tps if end[tp] > start[tp]}))
    finally:
        reader.close()
    return [json.loads(r.value) for r in sorted(records, key=lambda r: (r.partition, r.offset))]


def state_counts(state_file: Path) -> dict[str, int]:
    """Per group, the count in the running count's state store (the job's --state-file)."""
    counts = {}
    for line in state_file.read_text().splitlines():
        row = json.loads(line)
        counts[row["key"]["group"]] = row["value"]["count"]
    return counts
