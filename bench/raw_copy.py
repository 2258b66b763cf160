"""The baseline: a single-process confluent-kafka copy loop, Kafka to Kafka, no Spark.

    python bench/raw_copy.py --bootstrap 127.0.0.1:9092 --input in --output out \
        [--mode at_least_once|exactly_once] [--transaction-interval-ms 100] [--result-file r.json]

It reads every partition of ``--input`` from offset 0 (explicit assignment, read_committed,
``fetch.queue.backoff.ms=10``) up to the end it finds at start-up, writes ``value + b"|copied"``
under the same key to ``--output`` (what ``examples/spark_pipeline.py --transform copy`` does),
and stops. ``exactly_once`` wraps the writes in a transaction that is committed, together with
the consumed offsets, every ``--transaction-interval-ms``.

The result file (JSON) says how many records were copied and when the first record was consumed
and the last one acknowledged (wall-clock seconds), so the caller can compute a throughput that
excludes process and client start-up.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

SUFFIX = b"|copied"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--mode", choices=["at_least_once", "exactly_once"], default="at_least_once")
    parser.add_argument("--transaction-interval-ms", type=int, default=100)
    parser.add_argument("--result-file", default=None)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    exactly_once = args.mode == "exactly_once"
    consumer = Consumer({
        "bootstrap.servers": args.bootstrap,
        # Needed for the consumer group metadata of send_offsets_to_transaction; never joined
        # (explicit assignment), so no rebalance.
        "group.id": f"raw-copy-{args.output}",
        "enable.auto.commit": False,
        "isolation.level": "read_committed",
        "fetch.queue.backoff.ms": 10,
        "enable.partition.eof": True,
    })
    producer_config = {
        "bootstrap.servers": args.bootstrap,
        "enable.idempotence": True,
        "linger.ms": 10,
        "batch.size": 1_000_000,
        "queue.buffering.max.messages": 500_000,
    }
    if exactly_once:
        producer_config["transactional.id"] = f"raw-copy-{args.output}"
    producer = Producer(producer_config)
    metadata = consumer.list_topics(args.input, timeout=30)
    partitions = sorted(metadata.topics[args.input].partitions)
    consumer.assign([TopicPartition(args.input, p, 0) for p in partitions])
    if exactly_once:
        producer.init_transactions(30)
        producer.begin_transaction()

    remaining = set(partitions)
    positions: dict[int, int] = {}
    copied = 0
    transactions = 0
    first_consumed: float | None = None
    interval_s = args.transaction_interval_ms / 1000
    next_commit = time.monotonic() + interval_s

    def commit() -> None:
        nonlocal transactions
        offsets = [TopicPartition(args.input, p, o) for p, o in positions.items()]
        if offsets:
            producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 30)
        producer.commit_transaction(60)
        transactions += 1

    while remaining:
        messages = consumer.consume(num_messages=10_000, timeout=0.1)
        if messages and first_consumed is None:
            first_consumed = time.time()
        for msg in messages:
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    remaining.discard(msg.partition())
                    continue
                raise KafkaException(err)
            value = msg.value()
            while True:
                try:
                    producer.produce(args.output, value + SUFFIX if value is not None else None, msg.key())
                    break
                except BufferError:
                    producer.poll(0.01)
            if exactly_once:
                positions[msg.partition()] = msg.offset() + 1
            copied += 1
        producer.poll(0)
        if exactly_once and time.monotonic() >= next_commit:
            commit()
            producer.begin_transaction()
            next_commit = time.monotonic() + interval_s
    if exactly_once:
        commit()
    else:
        left = producer.flush(60)
        if left:
            raise RuntimeError(f"{left} records not acknowledged after 60 s")
    done = time.time()
    consumer.close()
    result = {
        "mode": args.mode,
        "records": copied,
        "transactions": transactions,
        "first_consumed_time": first_consumed,
        "done_time": done,
    }
    if args.result_file:
        with open(args.result_file, "w") as out:
            json.dump(result, out)
    print(json.dumps(result), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
