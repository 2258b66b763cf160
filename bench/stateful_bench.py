"""Stateful queries at Spark's default 200 shuffle partitions, and at 8, side by side with Spark's
own Kafka sink in one run (issue 45).

    python bench/stateful_bench.py [--records 30000 --keys 3000 --max-offsets-per-trigger 5000]
        [--shuffle-partitions 200,8] [--shapes running_count,dedup,window_count]
        [--sinks kafka,kafka-eos,foreach-batch] [--repeat 1] [--kit-src DIR] [--out stateful.json]

One broker (``--bootstrap``, else the kit's launcher: Kafka from Maven Central), one input topic
of ``--records`` records over ``--keys`` keys with record timestamps 10 ms apart. Each run is
``bench/stateful_job.py`` in a process of its own (``local[2]``, ``Trigger.AvailableNow``,
``maxOffsetsPerTrigger``), into an output topic of its own. For every shuffle-partition count and
shape, the sinks run one after the other, in an order that rotates with each repetition, so a
load that comes and goes on the machine falls on every sink alike. Spark's own sink (``kafka``)
reads with Spark's own source; the kit's runs read with the kit's (what a user changing the format
names runs). The connector's jars: ``--spark-kafka-jars``, ``KAFKA_EOS_SPARK_KAFKA_JARS`` or Maven
Central (``bench/spark_kafka_jars.py``).

Per run: the query's wall time (``start()`` to the end of ``awaitTermination()``, the session's
start excluded), the micro-batches, the records read back with read_committed, the transactional
ids the run left on the broker, and the machine's load: the busy cores of the whole machine
during the run, less the run's own process tree. ``--kit-src DIR`` runs the kit's sinks from
another checkout (``git archive <commit> | tar -x -C DIR``) as a before/after comparison: its
runs are labelled ``<sink>@before``. A script, not a test: it reports ratios and asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

REPO = Path(__file__).resolve().parent.parent
JOB = REPO / "bench" / "stateful_job.py"
#: Its sitecustomize prints the sink's "batch N committed" lines from every Python process of a run.
PROCESS_HOOKS = REPO / "bench" / "process_hooks"
COMMIT_LINE = re.compile(r"batch \d+ committed: (\d+) transactions, \d+ records, (\d+) ms \(.*EndTxn (\d+)")
#: The warning of the one retry layer of EndTxn (twophase/transaction_endings.py), one per
#: transaction and attempt.
RETRY_LINE = re.compile(r"of transaction \S+ \(checkpoint \d+\) failed \(attempt \d+\)")
BUILTIN = "kafka"
#: The output mode of each shape (stateful_job.OUTPUT_MODES, without importing pyspark here).
OUTPUT_MODES = {"running_count": "update", "dedup": "append", "window_count": "append"}
#: The issue's targets: the kit's wall time over Spark's own sink's, at 200 shuffle partitions.
TARGETS = {"kafka-eos": 1.2, "foreach-batch": 1.0}


@dataclass
class Run:
    shape: str
    sink: str
    shuffle_partitions: int
    #: The query's wall time in seconds; None when the run failed (``error`` says why).
    query_s: float | None = None
    session_s: float | None = None
    batches: int = 0
    batch_ms: list[int] = field(default_factory=list)
    records_out: int = 0
    transactional_ids: int = 0
    #: Busy cores of the machine during the run, less the run's own processes.
    other_load_cores: float = 0.0
    #: CPU seconds of the run's own processes (the job, its JVM, its Python workers).
    own_cpu_s: float = 0.0
    #: The kit's commits: transactions a batch, and the commit's and its EndTxn round's ms a batch.
    transactions: list[int] = field(default_factory=list)
    commit_ms: list[int] = field(default_factory=list)
    endtxn_ms: list[int] = field(default_factory=list)
    #: Warning lines of EndTxn retries (twophase/transaction_endings.py).
    retry_warnings: int = 0
    error: str | None = None


def ratio_rows(runs: Sequence[Run], sinks: Sequence[str]) -> list[dict[str, Any]]:
    """One row per (shuffle partitions, shape): each sink's median query time, and the kit's sinks'
    ratios to Spark's own sink (``kafka``) of the same row; a sink that failed or did not run is
    None. Rows in the order of first appearance."""
    rows: dict[tuple[int, str], dict[str, Any]] = {}
    for run in runs:
        key = (run.shuffle_partitions, run.shape)
        row = rows.setdefault(key, {"shuffle_partitions": run.shuffle_partitions, "shape": run.shape,
                                    "mode": OUTPUT_MODES.get(run.shape, "?"), "seconds": {}, "ratio": {},
                                    "ids": {}, "errors": {}})
        if run.query_s is None:
            row["errors"].setdefault(run.sink, run.error or "failed")
        else:
            row["seconds"].setdefault(run.sink, []).append(run.query_s)
            row["ids"][run.sink] = max(row["ids"].get(run.sink, 0), run.transactional_ids)
    for row in rows.values():
        row["seconds"] = {sink: round(statistics.median(times), 1) for sink, times in row["seconds"].items()}
        builtin = row["seconds"].get(BUILTIN)
        for sink in sinks:
            if sink != BUILTIN and builtin and sink in row["seconds"]:
                row["ratio"][sink] = round(row["seconds"][sink] / builtin, 2)
    return list(rows.values())


def markdown(rows: Iterable[dict[str, Any]], sinks: Sequence[str]) -> str:
    """The rows as a markdown table: seconds, ratio to Spark's own sink and ids per sink."""
    kit = [sink for sink in sinks if sink != BUILTIN]
    head = ["shuffle partitions", "query", "Spark's sink (s)"] + [f"{sink} (s, ratio, ids)" for sink in kit]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [str(row["shuffle_partitions"]), f"{row['shape']} ({row['mode']})",
                 _seconds(row, BUILTIN)]
        for sink in kit:
            if sink in row["seconds"]:
                ratio = row["ratio"].get(sink)
                cells.append(f"{row['seconds'][sink]} ({'?' if ratio is None else f'{ratio}x'}, "
                             f"{row['ids'].get(sink, 0)})")
            else:
                cells.append("failed: " + short_error(row["errors"][sink]) if sink in row["errors"] else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def commit_table(runs: Iterable[Run]) -> str:
    """The kit's runs' commits as a markdown table: transactions a batch, the commit's and its
    EndTxn round's median ms a batch, EndTxn retry warnings, the run's CPU and the machine's other
    load."""
    lines = ["| shuffle partitions | query | sink | transactions a batch | commit ms a batch (EndTxn) "
             "| EndTxn retry warnings | CPU s | other load (cores) |", "|" + "---|" * 8]
    for run in runs:
        if run.query_s is None:
            continue
        txns = f"{min(run.transactions)}-{max(run.transactions)}" if run.transactions else "-"
        commit = (f"{statistics.median(run.commit_ms):.0f} ({statistics.median(run.endtxn_ms):.0f})"
                  if run.commit_ms else "-")
        lines.append(f"| {run.shuffle_partitions} | {run.shape} | {run.sink} | {txns} | {commit} | "
                     f"{run.retry_warnings} | {run.own_cpu_s} | {run.other_load_cores} |")
    return "\n".join(lines)


def _seconds(row: dict[str, Any], sink: str) -> str:
    if sink in row["seconds"]:
        return str(row["seconds"][sink])
    return "failed: " + short_error(row["errors"][sink]) if sink in row["errors"] else "-"


def short_error(error: str) -> str:
    """What a failed run's error says, without Spark's wrapping of it."""
    cause = error.split("terminated with exception: ", 1)[-1]
    return cause.removeprefix("requirement failed: ").split(" SQLSTATE")[0][:80]


def rotated(items: Sequence[str], by: int) -> list[str]:
    """``items`` rotated left by ``by``: repetition ``by``'s order of the sinks."""
    if not items:
        return []
    shift = by % len(items)
    return list(items[shift:]) + list(items[:shift])


# -- running it ---------------------------------------------------------------------------------

def _busy_cpu_s() -> float:
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]] + [0] * 8
    return (sum(values[:8]) - values[3] - values[4]) / os.sysconf("SC_CLK_TCK")


def _run_sampled(command: list[str], env: dict[str, str], timeout_s: float) -> tuple[int, str, str, float, float]:
    """Run ``command`` in a session of its own: (exit code, stdout, stderr, wall seconds, CPU
    seconds of its process tree: the job, Spark's JVM and its Python workers, sampled each 0.5 s
    from /proc, each process at the last value seen)."""
    from proc_sampling import proc_stats, process_tree

    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        started = time.monotonic()
        child = subprocess.Popen(command, stdout=out, stderr=err, text=True, env=env, start_new_session=True)
        cpu: dict[int, float] = {}
        while True:
            try:
                code = child.wait(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                stats = proc_stats()
                for pid in process_tree(child.pid, stats):
                    cpu[pid] = max(cpu.get(pid, 0.0), stats[pid].cpu_s)
                if time.monotonic() - started > timeout_s:
                    child.kill()  # only the job this script started, by its pid
                    code = child.wait()
                    break
        elapsed = time.monotonic() - started
        out.seek(0)
        err.seek(0)
        return code, out.read(), err.read(), elapsed, sum(cpu.values())


def produce_input(bootstrap: str, topic: str, records: int, keys: int, partitions: int) -> None:
    from confluent_kafka import Producer

    from connectors.kafka.clients.factory import clients_for

    admin = clients_for(bootstrap).admin()
    try:
        admin.create_topic(topic, partitions)
    finally:
        admin.close()
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    base_ms = int(time.time() * 1000) - records * 10
    for i in range(records):
        key = f"k{i % keys}"
        producer.produce(topic, key=key.encode(), value=json.dumps({"n": i, "key": key}).encode(),
                         timestamp=base_ms + i * 10)
        if i % 10000 == 0:
            producer.poll(0)
    producer.flush(60)


def transactional_ids(bootstrap: str) -> set[str]:
    from connectors.kafka.clients.factory import clients_for

    control = clients_for(bootstrap).txn_control()
    try:
        return {listing.transactional_id for listing in control.list_transactions("")}
    finally:
        control.close()


def committed_records(bootstrap: str, topic: str, partitions: int) -> int:
    from connectors.kafka.clients import TopicPartition
    from connectors.kafka.clients.factory import clients_for

    admin = clients_for(bootstrap).admin()
    try:
        ends = admin.list_offsets([TopicPartition(topic, p) for p in range(partitions)], "latest",
                                  read_committed=True)
    finally:
        admin.close()
    reader = clients_for(bootstrap).reader(read_committed=True)
    try:
        return sum(1 for _ in reader.read({tp: (0, end) for tp, end in ends.items() if end}))
    finally:
        reader.close()


def run_one(args: argparse.Namespace, work: Path, shape: str, sink: str, partitions: int, jars: str | None) -> Run:
    label = sink
    kit_src = None
    if sink.endswith("@before"):
        sink, kit_src = sink.split("@")[0], args.kit_src
    output = f"stateful-out-{uuid.uuid4().hex[:8]}"
    from connectors.kafka.clients.factory import clients_for

    admin = clients_for(args.bootstrap).admin()
    try:
        admin.create_topic(output, args.output_partitions)
    finally:
        admin.close()
    ids_before = transactional_ids(args.bootstrap)
    command = [sys.executable, str(JOB), "--bootstrap", args.bootstrap, "--input", args.input, "--output", output,
               "--checkpoint-dir", str(work / f"chk-{uuid.uuid4().hex[:8]}"), "--shape", shape, "--sink", sink,
               "--shuffle-partitions", str(partitions), "--max-offsets-per-trigger",
               str(args.max_offsets_per_trigger)]
    if sink == BUILTIN and jars:
        command += ["--jars", jars]
    env = dict(os.environ, KAFKA_EOS_BENCH_COMMIT_LOG="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(kit_src or ""), str(PROCESS_HOOKS), env.get("PYTHONPATH", ""))
                                        if p)
    busy = _busy_cpu_s()
    code, stdout, stderr, elapsed, own_cpu = _run_sampled(command, env, args.run_timeout_s)
    other = max(0.0, (_busy_cpu_s() - busy) - own_cpu) / max(elapsed, 1e-9)
    run = Run(shape, label, partitions, other_load_cores=round(other, 2), own_cpu_s=round(own_cpu, 1))
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    if args.keep_logs:
        Path(args.keep_logs).mkdir(parents=True, exist_ok=True)
        Path(args.keep_logs, f"{shape}-{label}-{partitions}-{uuid.uuid4().hex[:4]}.log").write_text(stderr)
    if code != 0 or not lines:
        errors = [line for line in stderr.splitlines() if "Error" in line or "error" in line]
        run.error = (errors[-1] if errors else f"exit {code}").strip()[:300]
        return run
    for match in COMMIT_LINE.finditer(stderr):
        run.transactions.append(int(match.group(1)))
        run.commit_ms.append(int(match.group(2)))
        run.endtxn_ms.append(int(match.group(3)))
    run.retry_warnings = len(RETRY_LINE.findall(stderr))
    result = json.loads(lines[-1])
    run.query_s, run.session_s = result["query_s"], result["session_s"]
    run.batches, run.batch_ms = result["batches"], result["batch_ms"]
    run.records_out = committed_records(args.bootstrap, output, args.output_partitions)
    run.transactional_ids = len(transactional_ids(args.bootstrap) - ids_before)
    return run


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default=None)
    parser.add_argument("--records", type=int, default=30000)
    parser.add_argument("--keys", type=int, default=3000)
    parser.add_argument("--max-offsets-per-trigger", type=int, default=5000)
    parser.add_argument("--input-partitions", type=int, default=4)
    parser.add_argument("--output-partitions", type=int, default=4)
    parser.add_argument("--shuffle-partitions", default="200,8")
    parser.add_argument("--shapes", default="running_count,dedup,window_count")
    parser.add_argument("--sinks", default="kafka,kafka-eos,foreach-batch",
                        help="kafka (Spark's own), kafka-eos, foreach-batch, kafka-eos-by-key; with --kit-src also "
                             "kafka-eos@before, foreach-batch@before")
    parser.add_argument("--kit-src", default=None, help="a checkout of the kit to run the @before sinks from")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--run-timeout-s", type=float, default=1800)
    parser.add_argument("--spark-kafka-jars", default=None)
    parser.add_argument("--keep-logs", default=None, help="a folder for the stderr of every run")
    parser.add_argument("--tables-of", default=None, metavar="JSON",
                        help="print the tables of an earlier run's --out file, and run nothing")
    parser.add_argument("--out", default=None, help="write the runs and the table here as JSON")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.tables_of:
        saved = json.loads(Path(args.tables_of).read_text())
        runs = [Run(**run) for run in saved["runs"]]
        sinks = list(dict.fromkeys(run.sink for run in runs))
        print(markdown(ratio_rows(runs, sinks), sinks) + "\n\n" + commit_table(runs))
        return 0
    sys.path.insert(0, str(REPO / "bench"))
    from spark_kafka_jars import resolve

    from connectors.servers.broker_discovery import find_broker

    sinks = [s.strip() for s in args.sinks.split(",") if s.strip()]
    shapes = [s.strip() for s in args.shapes.split(",") if s.strip()]
    partition_counts = [int(p) for p in args.shuffle_partitions.split(",") if p.strip()]
    jars = resolve(args.spark_kafka_jars)
    if BUILTIN in sinks and jars.skip_reason:
        print(f"Spark's own sink is not run: {jars.skip_reason}", file=sys.stderr)
        sinks.remove(BUILTIN)
    broker = find_broker(args.bootstrap)
    args.bootstrap = broker.bootstrap_servers
    runs: list[Run] = []
    try:
        with tempfile.TemporaryDirectory(prefix="stateful-bench-") as folder:
            work = Path(folder)
            args.input = f"stateful-in-{uuid.uuid4().hex[:8]}"
            produce_input(args.bootstrap, args.input, args.records, args.keys, args.input_partitions)
            number = 0
            for repetition in range(args.repeat):
                for partitions in partition_counts:
                    for shape in shapes:
                        for sink in rotated(sinks, number):
                            run = run_one(args, work, shape, sink, partitions, jars.spark_jars if jars.jars else None)
                            runs.append(run)
                            print(json.dumps(asdict(run)), flush=True)
                        number += 1
    finally:
        broker.stop()
    rows = ratio_rows(runs, sinks)
    table = markdown(rows, sinks) + "\n\n" + commit_table(runs)
    print(table)
    if args.out:
        Path(args.out).write_text(json.dumps({"runs": [asdict(r) for r in runs], "rows": rows,
                                              "connector": jars.source, "table": table}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
