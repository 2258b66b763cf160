"""The broker-side cost of a long-running exactly-once query, and the per-batch cost of the sink,
for this checkout and (side by side, in the same invocation) an older one (issue 9).

    python bench/id_pool.py --batches 300 \
        [--baseline-python /tmp/old/.venv/bin/python --baseline-checkout /tmp/old]

Every variant runs ``examples/spark_pipeline.py --transform copy --bounded`` of its checkout over
the same input, ``--batch-records`` records per micro-batch, into an output topic of its own.
Measured per variant:

- transactional ids the run left on the broker: ListTransactions (every state) before and after,
  the difference (the broker keeps each until ``transactional.id.expiration.ms``);
- micro-batches, and their mean and median ``triggerExecution`` (the first batch left out);
- the driver's commit time per batch (the sink's "batch N committed: ... X ms" log lines, made
  visible by ``bench/process_hooks``), mean and median (the first batch left out);
- the output, read back with read_committed: records and distinct keys.

Nothing is asserted: the script reports. A broker it starts is stopped at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from run_bench import COMMITTED_LINE, check_output, create_topics, load_input, log, spark_env  # noqa: E402

from connectors.kafka.clients.factory import clients_for  # noqa: E402
from connectors.servers.broker_discovery import find_broker  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


@dataclass
class Variant:
    name: str
    python: str
    checkout: Path
    results: dict[str, Any] = field(default_factory=dict)


def broker_ids(bootstrap: str) -> set[str]:
    control = clients_for(bootstrap).txn_control()
    try:
        return {listing.transactional_id for listing in control.list_transactions("")}
    finally:
        control.close()


def _steady(values: list[float]) -> dict[str, float | None]:
    rest = values[1:]
    return {"mean": round(statistics.fmean(rest), 1) if rest else None,
            "median": round(statistics.median(rest), 1) if rest else None}


def run_variant(variant: Variant, bootstrap: str, input_topic: str, partitions: int, batch_records: int,
                work: Path, stamp: str, timeout_s: float) -> None:
    output = f"idpool-{stamp}-{variant.name}-out"
    create_topics(bootstrap, [output], partitions)
    metrics = work / f"{variant.name}.metrics.jsonl"
    stderr_path = work / f"{variant.name}.stderr.log"
    command = [variant.python, str(variant.checkout / "examples" / "spark_pipeline.py"), "--bootstrap", bootstrap,
               "--input", input_topic, "--output", output, "--checkpoint-dir", str(work / f"{variant.name}-chk"),
               "--bounded", "--transform", "copy", "--max-offsets-per-trigger", str(batch_records),
               "--metrics-file", str(metrics)]
    env = dict(spark_env(dict(os.environ)), PYSPARK_PYTHON=variant.python)
    before = broker_ids(bootstrap)
    log(f"{variant.name}: {' '.join(command)}")
    started = time.monotonic()
    with open(stderr_path, "wb") as err:
        finished = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=err, env=env, timeout=timeout_s,
                                  cwd=variant.checkout, start_new_session=True)
    elapsed = time.monotonic() - started
    after = broker_ids(bootstrap)
    batches = sorted((json.loads(line) for line in metrics.read_text().splitlines()),
                     key=lambda entry: entry["batchId"]) if metrics.exists() else []
    batches = [b for b in batches if b.get("numInputRows")]
    commits = {int(m.group(1)): int(m.group(4))
               for m in COMMITTED_LINE.finditer(stderr_path.read_text(errors="replace"))}
    check = check_output(bootstrap, output, partitions)
    variant.results = {
        "exit_code": finished.returncode,
        "seconds": round(elapsed, 1),
        "micro_batches": len(batches),
        "transactional_ids_created": len(after - before),
        "batch_ms": _steady([float(b["durationMs"]["triggerExecution"]) for b in batches]),
        "driver_commit_ms": _steady([float(ms) for _, ms in sorted(commits.items())]),
        "output_records": check.records,
        "output_distinct_keys": check.distinct_keys,
    }
    log(f"{variant.name}: {variant.results}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", default=None, help="default: KAFKA_BOOTSTRAP_SERVERS, Docker, KAFKA_HOME, or Kafka from Maven Central")
    parser.add_argument("--batches", type=int, default=300, help="micro-batches per run (default: 300)")
    parser.add_argument("--batch-records", type=int, default=10, help="records per micro-batch (default: 10)")
    parser.add_argument("--partitions", type=int, default=3, help="input partitions, i.e. write tasks (default: 3)")
    parser.add_argument("--baseline-checkout", type=Path, default=None,
                        help="an older checkout of the kit to run side by side (its examples/spark_pipeline.py)")
    parser.add_argument("--baseline-python", default=None,
                        help="the Python of a venv with --baseline-checkout installed (pip install -e)")
    parser.add_argument("--run-timeout-s", type=float, default=3600)
    parser.add_argument("--out", default="bench-id-pool.json")
    args = parser.parse_args(argv)
    if (args.baseline_checkout is None) != (args.baseline_python is None):
        parser.error("--baseline-checkout and --baseline-python go together")
    if args.batches < 2 or args.batch_records < 1 or args.partitions < 1:
        parser.error("--batches must be >= 2, --batch-records and --partitions >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    variants = [Variant("current", sys.executable, REPO)]
    if args.baseline_checkout is not None:
        variants.insert(0, Variant("baseline", args.baseline_python, args.baseline_checkout.resolve()))
    stamp = time.strftime("%Y%m%d%H%M%S")
    with find_broker(args.bootstrap) as broker, tempfile.TemporaryDirectory(prefix="idpool-") as tmp:
        log(f"Kafka: {broker.origin} at {broker.bootstrap_servers}")
        input_topic = f"idpool-{stamp}-in"
        create_topics(broker.bootstrap_servers, [input_topic], args.partitions)
        load_input(broker.bootstrap_servers, input_topic, args.batches * args.batch_records, args.partitions, 100)
        for variant in variants:
            run_variant(variant, broker.bootstrap_servers, input_topic, args.partitions, args.batch_records,
                        Path(tmp), stamp, args.run_timeout_s)
    records = args.batches * args.batch_records
    print(f"\n{records} records, {args.partitions} partitions, {args.batch_records} records per micro-batch\n")
    print("| variant | micro-batches | transactional ids left on the broker | batch ms mean / median "
          "| driver commit ms mean / median | output records (distinct keys) |")
    print("|---|---|---|---|---|---|")
    for v in variants:
        r = v.results
        print(f"| {v.name} | {r['micro_batches']} | {r['transactional_ids_created']} | "
              f"{r['batch_ms']['mean']} / {r['batch_ms']['median']} | "
              f"{r['driver_commit_ms']['mean']} / {r['driver_commit_ms']['median']} | "
              f"{r['output_records']} ({r['output_distinct_keys']}) |")
    Path(args.out).write_text(json.dumps({"records": records, "batch_records": args.batch_records,
                                          "partitions": args.partitions,
                                          "variants": {v.name: v.results for v in variants}}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
