"""The driver's per-batch cost of the sink's state, on local disk and on S3, side by side (issue 14).

    AWS_ENDPOINT_URL=http://127.0.0.1:27480 AWS_ACCESS_KEY_ID=... AWS_SECRET_ACCESS_KEY=... \\
        python bench/state_bench.py --s3 s3://kafka-eos-bench/state-bench [--batches 200] [--out state-bench.json]

For every location (a local temp dir, then each ``--s3`` URI) it runs ``--batches`` micro-batches
of what the driver does for one batch of the exactly-once Spark sink, with the real code and
no transaction in them (the fake Kafka cluster of kafka_testkit stands in for the broker, so
only the state's cost differs between locations):

- ``prepare``: what the sink driver's ``prepare`` does before a run's first batch: the state
  guard (reads Spark's query id; the full check once per process, as in a reused Python worker)
  and ``SparkSinkDriver.recover()`` (lists the state, reads the latest checkpoint). Spark's
  commit runner no longer does this for every batch; it is kept here as the upper bound;
- ``commit``: ``SparkSinkDriver.commit()``: latest, restore, store the checkpoint (a
  conditional create) and retention (deletes), mark it committed, the lingering sweep; the
  sink's own log line breaks it down, and ``store`` and ``mark`` are taken from it;
- then Spark's commit-log entry is written, as Spark would.

With ``--retained`` above the default 3 the listing grows with it: ``--retained 1000 --batches
1100`` shows what a listing of thousands of keys costs per batch.

``--without-statistics`` leaves out the per-checkpoint statistics (``chk-N/_statistics``, issue
20: one GET before the batch is stored, one PUT after its commit), for their cost side by side.

A script, not a test: it reports medians and 90th percentiles and asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from connectors.simulated_kafka import FakeKafkaClients
from connectors.spark.sink_driver import BatchContext, SparkSinkDriver
from connectors.spark.options import parse_sink_options
from connectors.spark.state_guard import guard_sink_state
from twophase.storage.state_storage import open_state_storage

COMMIT_LINE = re.compile(r"batch (\d+) committed: .* \(prepare (\d+), store (\d+), EndTxn (\d+), mark (\d+), "
                         r"lingering sweep (\d+)\)")


class _CommitLines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.parts: dict[int, dict[str, int]] = {}

    def emit(self, record: logging.LogRecord) -> None:
        match = COMMIT_LINE.search(record.getMessage())
        if match:
            batch, *parts = (int(g) for g in match.groups())
            self.parts[batch] = dict(zip(("prepare", "store", "endtxn", "mark", "sweep"), parts))


def _spark_checkpoint(folder: Path) -> None:
    (folder / "commits").mkdir(parents=True)
    (folder / "metadata").write_text(json.dumps({"id": str(uuid.uuid4())}) + "\n")


def run_location(state_uri: str, batches: int, retained: int, work: Path) -> dict[str, Any]:
    checkpoint = work / f"checkpoint-{uuid.uuid4().hex[:8]}"
    _spark_checkpoint(checkpoint)
    clients = FakeKafkaClients(work / f"kafka-{uuid.uuid4().hex[:8]}.db")
    options = parse_sink_options({"kafka.bootstrap.servers": clients.bootstrap_servers, "topic": "out",
                                  "checkpointlocation": str(checkpoint), "eos.statedir": state_uri,
                                  "eos.retainedcheckpoints": str(retained)}, streaming=True)
    lines = _CommitLines()
    logger = logging.getLogger("connectors.spark.sink_driver")
    logger.addHandler(lines)
    logger.setLevel(logging.INFO)
    per_batch = []
    try:
        for batch in range(batches):
            started = time.perf_counter()
            guard_sink_state(options)
            protocol = SparkSinkDriver(options, clients)
            try:
                protocol.recover()
            finally:
                protocol.close()
            prepared = time.perf_counter()
            protocol = SparkSinkDriver(options, clients)
            try:
                protocol.commit(BatchContext(batch), [])
            finally:
                protocol.close()
            committed = time.perf_counter()
            (checkpoint / "commits" / str(batch)).write_text("v1\n{}")
            per_batch.append({"batch": batch, "prepare_ms": (prepared - started) * 1000,
                              "commit_ms": (committed - prepared) * 1000, **lines.parts.get(batch, {})})
    finally:
        logger.removeHandler(lines)
    return _summarize(state_uri, batches, retained, per_batch)


def _summarize(state_uri: str, batches: int, retained: int, per_batch: list[dict[str, Any]]) -> dict[str, Any]:
    for batch in per_batch:
        batch["total_ms"] = batch["prepare_ms"] + batch["commit_ms"]
    steady = per_batch[1:] or per_batch  # the first batch opens clients and checks the state fully

    def stats(key: str) -> dict[str, float]:
        values = sorted(b[key] for b in steady if key in b)
        return {"median": statistics.median(values), "p90": values[int(0.9 * (len(values) - 1))]}

    return {"state": state_uri, "batches": batches, "retained": retained,
            "first_batch_ms": per_batch[0]["total_ms"],
            **{key: stats(key) for key in ("total_ms", "prepare_ms", "commit_ms", "store", "mark")},
            "per_batch": per_batch}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--s3", action="append", default=[],
                        help="an s3:// (or gs://, abfss://, hdfs://) location to compare with local disk; "
                             "each run writes under a fresh prefix of it, deleted afterwards; may repeat")
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--retained", type=int, default=3, help="eos.retainedCheckpoints")
    parser.add_argument("--out", default="state-bench.json")
    parser.add_argument("--without-statistics", action="store_true",
                        help="do not record the per-checkpoint statistics (to measure what they cost)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.without_statistics:
        import twophase.lifecycle as lifecycle

        lifecycle.record_statistics = lambda *a, **k: None  # type: ignore[assignment]
    results = []
    with tempfile.TemporaryDirectory(prefix="kafka-eos-state-bench-") as tmp:
        work = Path(tmp)
        locations = [str(work / "local-state")] + [f"{uri.rstrip('/')}/{uuid.uuid4().hex[:12]}" for uri in args.s3]
        for location in locations:
            try:
                results.append(run_location(location, args.batches, args.retained, work))
            finally:
                if "://" in location:
                    open_state_storage(location).delete_folder()
    Path(args.out).write_text(json.dumps({"batches": args.batches, "retained": args.retained,
                                          "results": results}, indent=2) + "\n")
    print(f"{args.batches} batches, eos.retainedCheckpoints={args.retained}, statistics "
          f"{'off' if args.without_statistics else 'on'}; ms per batch, median (p90), first batch excluded")
    print(f"{'state':<48} {'total':>14} {'prepare':>14} {'commit':>14} {'store':>12} {'mark':>12} {'1st batch':>10}")
    for r in results:
        def cell(key: str, width: int) -> str:
            return f"{r[key]['median']:.1f} ({r[key]['p90']:.1f})".rjust(width)
        print(f"{r['state'][:48]:<48} {cell('total_ms', 14)} {cell('prepare_ms', 14)} {cell('commit_ms', 14)} "
              f"{cell('store', 12)} {cell('mark', 12)} {r['first_batch_ms']:>10.0f}")
    print(f"results written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
