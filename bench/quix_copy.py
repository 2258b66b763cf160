"""The Quix Streams baseline: the work of ``bench/raw_copy.py``, as a Quix Streams application.

    <python with quixstreams 3.28> bench/quix_copy.py --bootstrap 127.0.0.1:9092 --input in \
        --output out [--commit-interval-s 5.0] [--state-dir DIR] [--result-file r.json]

Issue 4 wants the exactly-once Spark pipeline at >= 3x Quix Streams exactly-once on the same
work, so this is that work done the way a Quix user would: an ``Application`` with
``processing_guarantee="exactly-once"``, ``auto_offset_reset="earliest"`` and a consumer group of
its own (so it starts from offset 0), and a StreamingDataFrame that appends ``b"|copied"`` to the
value (raw bytes (de)serializers, no JSON) and writes it under the same key to ``--output``.
Everything else is Quix's default: the producer and consumer settings, and the checkpoint (one
transaction with the consumed offsets) every ``commit_interval`` = 5 s unless
``--commit-interval-s`` says otherwise.

It stops once every partition of ``--input`` has been processed up to the read_committed end
offset found at start-up (``Application.stop()`` from the ``on_message_processed`` callback; the
run loop then commits the last checkpoint). ``--idle-timeout-s`` is a safety net for an input
whose last offsets are transaction markers (no record ever reaches the end offset): a watchdog
thread then calls ``Application.stop()`` after that long without a processed message, and the
result says so. Not ``app.run(timeout=...)``: any stop condition makes Quix add a collecting sink
to the pipeline (every output value kept in a list unless ``collect=False``, a counter even then),
work a production application does not do.

Runs in a virtualenv of its own (quixstreams 3.28 pins confluent-kafka < 2.13, the project uses
2.16), so it imports nothing from the project. The result file has the fields of raw_copy.py's
(``mode``, ``records``, ``first_consumed_time``, ``done_time``), read the same way by
``bench/run_bench.py``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
import uuid
from typing import Any

from confluent_kafka import IsolationLevel, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
from quixstreams import Application

SUFFIX = b"|copied"
#: Application's default commit_interval in quixstreams 3.x.
QUIX_DEFAULT_COMMIT_INTERVAL_S = 5.0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--commit-interval-s", type=float, default=QUIX_DEFAULT_COMMIT_INTERVAL_S,
                        help="Application(commit_interval=...): seconds between checkpoints (transactions)")
    parser.add_argument("--idle-timeout-s", type=float, default=30.0,
                        help="stop after this long without a message even if the end was not reached")
    parser.add_argument("--state-dir", default=None,
                        help="Quix's state dir (this copy is stateless, so it stays empty); default: a "
                             "temporary directory, removed at the end")
    parser.add_argument("--result-file", default=None)
    return parser.parse_args(argv)


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    """The read_committed end offset (last stable offset) of every partition of ``topic``."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    metadata = admin.list_topics(topic, timeout=30)
    partitions = sorted(metadata.topics[topic].partitions)
    futures = admin.list_offsets({TopicPartition(topic, p): OffsetSpec.latest() for p in partitions},
                                 isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=30)
    return {tp.partition: future.result().offset for tp, future in futures.items()}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    ends = end_offsets(args.bootstrap, args.input)
    # The offset each partition still has to reach; empty partitions are done already.
    remaining = {p: end for p, end in ends.items() if end > 0}
    # A fresh group every run: with auto_offset_reset="earliest" it starts from offset 0, and no
    # earlier run's committed offsets are picked up.
    group = f"quix-copy-{args.output}-{uuid.uuid4().hex[:8]}"
    temp_dir = tempfile.TemporaryDirectory(prefix="quix-copy-state-")
    copied = 0
    first_consumed: float | None = None
    last_progress = time.monotonic()
    reached_end = not remaining

    def processed(topic: str, partition: int, offset: int) -> None:
        """Quix's on_message_processed, after each input message: counts, and stops at the end.
        Given to the Application directly (no wrapper): it runs once per record."""
        nonlocal copied, first_consumed, last_progress, reached_end
        if first_consumed is None:
            first_consumed = time.time()
        copied += 1
        last_progress = time.monotonic()
        end = remaining.get(partition)
        if end is not None and offset + 1 >= end:
            del remaining[partition]
            if not remaining:
                reached_end = True
                # Only flags the run loop; it finishes this message and commits the checkpoint.
                app.stop()

    app = Application(
        broker_address=args.bootstrap,
        consumer_group=group,
        auto_offset_reset="earliest",
        processing_guarantee="exactly-once",
        commit_interval=args.commit_interval_s,
        # Quix's default is ./state, which would land in the caller's working tree.
        state_dir=args.state_dir or temp_dir.name,
        # librdkafka's default already, stated because the copy must not see aborted records.
        consumer_extra_config={"isolation.level": "read_committed"},
        on_message_processed=processed,
    )
    source = app.topic(args.input, key_deserializer="bytes", value_deserializer="bytes")
    sink = app.topic(args.output, key_serializer="bytes", value_serializer="bytes")
    sdf = app.dataframe(source)
    sdf = sdf.apply(lambda value: value + SUFFIX if value is not None else None)
    sdf.to_topic(sink)  # the message's key is kept
    finished = threading.Event()

    def watchdog() -> None:
        # The idle clock starts at start-up, so a slow group join (a rebalance delay of seconds)
        # must fit in it too; 30 s by default leaves room.
        while not finished.wait(1.0):
            if time.monotonic() - last_progress > args.idle_timeout_s:
                app.stop()
                return

    if not reached_end:
        threading.Thread(target=watchdog, daemon=True).start()
        try:
            app.run()
        finally:
            finished.set()
    done = time.time()
    temp_dir.cleanup()
    result: dict[str, Any] = {
        "mode": "exactly_once",
        "records": copied,
        "first_consumed_time": first_consumed,
        "done_time": done,
        "stopped_by": "end_offsets" if reached_end else "idle_timeout",
        "commit_interval_s": args.commit_interval_s,
        "end_offsets": ends,
        "consumer_group": group,
    }
    if args.result_file:
        with open(args.result_file, "w") as out:
            json.dump(result, out)
    print(json.dumps(result), file=sys.stderr)
    return 0 if reached_end else 1


if __name__ == "__main__":
    sys.exit(main())
