"""What a write task and a read task pay for their Kafka clients, per task (issue 9).

    python bench/task_clients.py [--tasks 60]   # a broker as find_broker finds one, else Kafka from Maven Central

Each step is what one Spark task does, timed on real Kafka, in one process:

- ``producer cold``: what a write task does today: create a transactional producer, InitProducerId
  (FindCoordinator first), begin, produce one record, flush (pre-commit), read the identity,
  release the producer;
- ``producer warm``: the same when the producer was created and initialised before the task
  started (what reusing a Python worker's producer could at best save): begin, produce, flush,
  identity;
- ``reader cold``: create a consumer, read a 100-record range, close it;
- ``reader warm``: the same read with a consumer kept from the previous task.

Medians and 90th percentiles, in ms. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent))

from run_bench import create_topics, load_input, log  # noqa: E402

from connectors.kafka.clients.factory import clients_for  # noqa: E402
from connectors.kafka.clients import KafkaClients, ProducerClient, ProducerIdentity, TopicPartition  # noqa: E402
from connectors.servers.broker_discovery import find_broker  # noqa: E402

PRODUCER_CONFIG = {"transaction.timeout.ms": "60000"}
T = TypeVar("T")


def timed(step: Callable[[], T]) -> tuple[float, T]:
    started = time.perf_counter()
    result = step()
    return (time.perf_counter() - started) * 1000, result


def producer_task(clients: KafkaClients, topic: str, transactional_id: str,
                  ready: ProducerClient | None) -> ProducerIdentity:
    """The write task's client work; the driver's commit (EndTxn) is not part of it."""
    producer = ready
    if producer is None:
        producer = clients.producer(transactional_id, PRODUCER_CONFIG)
        producer.start_transaction(30, topic)  # as a write task does (topic looked up first)
    else:
        producer.begin_transaction()
    producer.produce(topic, b"x", key=b"k", partition=0)
    producer.flush(30)
    identity = producer.identity()
    producer.close()
    return identity


def summary(name: str, samples: list[float]) -> str:
    ordered = sorted(samples)
    p90 = ordered[int(0.9 * (len(ordered) - 1))]
    return f"| {name} | {statistics.median(samples):.1f} | {p90:.1f} | {len(samples)} |"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", default=None)
    parser.add_argument("--tasks", type=int, default=60)
    args = parser.parse_args(argv)
    stamp = time.strftime("%Y%m%d%H%M%S")
    with find_broker(args.bootstrap) as broker:
        bootstrap = broker.bootstrap_servers
        topic = f"task-clients-{stamp}"
        create_topics(bootstrap, [topic], 1)
        load_input(bootstrap, topic, 1000, 1, 100)
        clients = clients_for(bootstrap)
        results: dict[str, list[float]] = {"producer cold": [], "producer warm": [], "reader cold": [],
                                           "reader warm": []}
        ranges = {TopicPartition(topic, 0): (0, 100)}
        warm_reader = clients.reader(read_committed=True)
        control = clients.txn_control()
        for task in range(args.tasks):
            tid = f"task-clients-{stamp}-{task % 4}"
            ms, identity = timed(lambda: producer_task(clients, topic, tid, None))
            results["producer cold"].append(ms)
            control.end_txn(tid, identity, True)
            ready = clients.producer(tid, PRODUCER_CONFIG)
            ready.init_transactions(30)
            ms, identity = timed(lambda: producer_task(clients, topic, tid, ready))
            results["producer warm"].append(ms)
            control.end_txn(tid, identity, True)

            def cold_read() -> int:
                reader = clients.reader(read_committed=True)
                try:
                    return len(list(reader.read(ranges)))
                finally:
                    reader.close()

            results["reader cold"].append(timed(cold_read)[0])
            results["reader warm"].append(timed(lambda: len(list(warm_reader.read(ranges))))[0])
        control.close()
        warm_reader.close()
    log(f"{args.tasks} tasks against {broker.origin}")
    print("| step | median ms | p90 ms | tasks |")
    print("|---|---|---|---|")
    for name, samples in results.items():
        print(summary(name, samples))
    return 0


if __name__ == "__main__":
    sys.exit(main())
