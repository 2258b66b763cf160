"""End-to-end latency and client CPU of the kit against Spark's own Kafka connector (issue 30).

    python bench/latency.py [--rates 5000,50000] [--triggers 1s,200ms] [--jobs ...] [--out latency.json]

One invocation, one broker; for every input rate, trigger and job (interleaved, each on fresh
topics), a Spark job copies the input topic to an output topic with a processing-time trigger
(``examples/spark_pipeline.py --transform copy``) while this script:

- produces the input at a steady rate (confluent-kafka, every 10 ms a share of the rate), each
  value starting with the wall-clock millisecond it was produced in;
- reads the output with a ``read_committed`` consumer and takes, for every record, the time it
  became visible there minus the time it was produced: the end-to-end latency a reader of an
  exactly-once output sees (Spark's own at-least-once sink makes records visible as it writes);
- over the measured window (after ``--warmup-s``), the client CPU: the machine's busy CPU minus
  the broker's and this script's own (its producer and consumer), i.e. what the job's processes
  (driver, JVM, Python workers) used, per million records; the job's process tree is sampled
  too (a lower bound: a process that exits between samples is missed);
- from Spark's progress, the mean ``addBatch`` and ``triggerExecution`` of the batches in the
  window, and from the kit's log, its driver-side commit time;
- the per-batch timeline of the window (``batch_timeline.py``): each batch's steps from Spark's
  progress and the kit's commit log, the driver JVM's GC pauses (``-Xlog:gc``), the processes that
  started during it, and its slowest record; then the slowest 1 % of batches. The default window
  is 3 minutes, so that p99 and max are over ~900 batches at a 200 ms trigger, not a handful.

Jobs: ``spark_builtin`` (Spark's own connector at both ends, at-least-once), ``spark_eos`` (the
kit's source and ``format("kafka-eos")``), ``spark_eos_fb`` (the kit's source and the foreachBatch
sink), ``spark_builtin_source`` and ``spark_builtin_source_fb`` (Spark's own source into the kit's
two sinks). Spark's connector comes from ``--spark-kafka-jars`` or ``KAFKA_EOS_SPARK_KAFKA_JARS``,
else the official artifacts from Maven Central (``bench/spark_kafka_jars.py``). The broker as in
``run_bench.py``. Nothing is asserted: the script reports."""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition as ConfluentTopicPartition

from connectors.servers.broker_discovery import find_broker
from batch_timeline import build as build_timeline, render as render_timeline, report as timeline_report
from proc_sampling import cmdline, machine_cpu, proc_stats, process_tree
from run_bench import COMMITTED_LINE, SPARK_PIPELINE, create_topics, delete_topics, log, run_environment, spark_env
from spark_kafka_jars import resolve as resolve_spark_kafka_jars

REPO = Path(__file__).resolve().parent.parent
#: job -> (source format, sink format, delivery guarantee)
JOBS: dict[str, tuple[str, str, str]] = {
    "spark_builtin": ("kafka", "kafka", "at_least_once"),
    "spark_eos": ("kafka-eos", "kafka-eos", "exactly_once"),
    "spark_eos_fb": ("kafka-eos", "kafka-eos-foreach-batch", "exactly_once"),
    "spark_builtin_source": ("kafka", "kafka-eos", "exactly_once"),
    "spark_builtin_source_fb": ("kafka", "kafka-eos-foreach-batch", "exactly_once"),
}
DEFAULT_JOBS = "spark_builtin,spark_eos,spark_eos_fb,spark_builtin_source"
TICK_S = 0.01


def parse_trigger(text: str) -> str:
    """``1s``, ``200ms`` -> Spark's processingTime spelling."""
    text = text.strip()
    if text.endswith("ms"):
        return f"{int(text[:-2])} milliseconds"
    if text.endswith("s"):
        return f"{float(text[:-1]):g} seconds"
    raise argparse.ArgumentTypeError(f"--triggers: {text!r} is neither N ms nor N s (e.g. 200ms, 1s)")


class RateProducer(threading.Thread):
    """Produces ``rate`` records a second into ``topic`` until stopped; each value starts with the
    wall-clock millisecond it was produced in."""

    def __init__(self, bootstrap: str, topic: str, rate: int, value_bytes: int) -> None:
        super().__init__(daemon=True)
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all",
                                  "queue.buffering.max.messages": 1_000_000})
        self.topic, self.rate, self.value_bytes = topic, rate, value_bytes
        self.sent = 0
        self.behind_s = 0.0  # the most this thread fell behind its schedule
        self._halt = threading.Event()

    def run(self) -> None:
        started = time.monotonic()
        padding = b"x" * max(0, self.value_bytes - 30)
        while not self._halt.is_set():
            due = int((time.monotonic() - started) * self.rate)
            now_ms = int(time.time() * 1000)
            while self.sent < due:
                self.producer.produce(self.topic, b"%013d|%d|%s" % (now_ms, self.sent, padding),
                                      key=str(self.sent).encode())
                self.sent += 1
            self.producer.poll(0)
            lag = time.monotonic() - started - self.sent / self.rate
            self.behind_s = max(self.behind_s, lag)
            self._halt.wait(TICK_S)
        self.producer.flush(30)

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=60)


class LatencyReader(threading.Thread):
    """Reads ``topic`` read_committed from the start; keeps (produced at ms, latency ms) of every record."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        super().__init__(daemon=True)
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"latency-{topic}",
                                  "isolation.level": "read_committed", "enable.auto.commit": False,
                                  "fetch.wait.max.ms": 10, "auto.offset.reset": "earliest"})
        self.consumer.assign([ConfluentTopicPartition(topic, p, 0) for p in range(partitions)])
        self.samples: list[tuple[int, int]] = []
        self._halt = threading.Event()

    def run(self) -> None:
        try:
            while not self._halt.is_set():
                messages = self.consumer.consume(num_messages=5000, timeout=0.05)
                now_ms = int(time.time() * 1000)
                for message in messages:
                    if message.error() is None:
                        produced = int(message.value()[:13])
                        self.samples.append((produced, now_ms - produced))
        finally:
            self.consumer.close()

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=30)


def cpu_of(pid: int | None) -> float | None:
    if pid is None:
        return None
    stat = proc_stats().get(pid)
    return stat.cpu_s if stat else None


@dataclass
class Measurement:
    job: str
    rate: int
    trigger: str
    results: dict[str, Any] = field(default_factory=dict)


def percentile(values: list[int], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, int(q * len(ordered)))])


def trigger_ms(trigger: str) -> int:
    """Spark's processingTime spelling (``parse_trigger``) -> milliseconds."""
    amount, unit = trigger.split()
    return int(float(amount) * (1 if unit.startswith("milli") else 1000))


def measure(job: str, rate: int, trigger: str, args: argparse.Namespace, bootstrap: str, broker_pid: int | None,
            work: Path, jars: str | None) -> Measurement:
    source, sink, guarantee = JOBS[job]
    tag = f"{job}-{rate}-{trigger.replace(' ', '')}-{time.strftime('%H%M%S')}"
    topic_in, topic_out = f"lat-{tag}-in", f"lat-{tag}-out"
    create_topics(bootstrap, [topic_in, topic_out], args.partitions)
    metrics = work / f"{tag}.metrics.jsonl"
    command = [sys.executable, str(SPARK_PIPELINE), "--bootstrap", bootstrap, "--input", topic_in, "--output",
               topic_out, "--checkpoint-dir", str(work / f"{tag}-checkpoint"), "--transform", "copy",
               "--trigger-interval", trigger, "--master", args.master, "--source-format", source,
               "--sink-format", sink, "--delivery-guarantee", guarantee, "--metrics-file", str(metrics)]
    if jars:
        command += ["--jars", jars]
    if args.max_partitions:  # read only by the kit's source (examples/spark_pipeline.py)
        command += ["--max-partitions", str(args.max_partitions)]
    if args.min_records_per_task is not None:
        command += ["--min-records-per-task", str(args.min_records_per_task)]
    gc_log = work / f"{tag}.gc.log"
    env = spark_env(run_environment(False))
    # The driver JVM's GC pauses with their wall-clock time, for the per-batch timeline.
    env["JDK_JAVA_OPTIONS"] = f"-Xlog:gc:file={gc_log}:time {env.get('JDK_JAVA_OPTIONS', '')}".strip()
    result = Measurement(job, rate, trigger)
    stderr = work / f"{tag}.stderr"
    with open(work / f"{tag}.stdout", "wb") as out, open(stderr, "wb") as err:
        process = subprocess.Popen(command, stdout=out, stderr=err, stdin=subprocess.DEVNULL, cwd=REPO,
                                   env=env, start_new_session=True)
    reader = LatencyReader(bootstrap, topic_out, args.partitions)
    producer = RateProducer(bootstrap, topic_in, rate, args.value_bytes)
    try:
        # The query runs once its first (empty) trigger is in the metrics file.
        deadline = time.monotonic() + 120
        while not (metrics.exists() and metrics.stat().st_size) and process.poll() is None \
                and time.monotonic() < deadline:
            time.sleep(0.2)
        if process.poll() is not None or time.monotonic() >= deadline:
            result.results["error"] = f"the job did not start (exit {process.poll()}); see {stderr}"
            return result
        reader.start()
        producer.start()
        time.sleep(args.warmup_s)
        window_start_ms = int(time.time() * 1000)
        busy0, broker0, own0 = machine_cpu()[0], cpu_of(broker_pid), time.process_time()
        tree_cpu: dict[int, tuple[float, float]] = {}
        process_starts: list[tuple[int, str]] = []

        def sample_tree() -> None:
            stats = proc_stats()
            for pid in process_tree(process.pid, stats):
                if pid not in tree_cpu and tree_cpu:
                    process_starts.append((int(time.time() * 1000), cmdline(pid)))
                first, _ = tree_cpu.get(pid, (stats[pid].cpu_s, 0.0))
                tree_cpu[pid] = (first, stats[pid].cpu_s)

        sample_tree()
        ends = time.monotonic() + args.duration_s
        while time.monotonic() < ends:
            time.sleep(0.2)  # short-lived Python processes (a planning step) live ~0.3-1 s
            sample_tree()
        busy1, broker1, own1 = machine_cpu()[0], cpu_of(broker_pid), time.process_time()
        window_end_ms = int(time.time() * 1000)
        sent_in_window = producer.sent
        producer.stop()
        # What was produced in the window becomes visible within a few triggers.
        time.sleep(args.tail_s)
    finally:
        producer.stop() if producer.is_alive() else None
        reader.stop() if reader.is_alive() else None
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        if not args.keep:
            delete_topics(bootstrap, [topic_in, topic_out])
    latencies = [lat for produced, lat in reader.samples if window_start_ms <= produced < window_end_ms]
    expected = rate * (window_end_ms - window_start_ms) / 1000
    client_cpu = (busy1 - busy0) - ((broker1 or 0) - (broker0 or 0)) - (own1 - own0)
    batches = _batches(metrics, window_start_ms, window_end_ms)
    commits = [int(m.group(4)) for m in COMMITTED_LINE.finditer(stderr.read_text(errors="replace"))]
    timeline = build_timeline(metrics, stderr, gc_log, reader.samples, process_starts, trigger_ms(trigger),
                              (window_start_ms, window_end_ms))
    if args.keep:
        (work / f"{tag}.samples.json").write_text(json.dumps({
            "samples": reader.samples, "process_starts": process_starts, "trigger_ms": trigger_ms(trigger),
            "window": [window_start_ms, window_end_ms]}))
    result.results = {
        "records_in_window": len(latencies),
        "expected_in_window": round(expected),
        "producer_behind_s": round(producer.behind_s, 3),
        "sent": sent_in_window,
        "latency_ms": {"p50": percentile(latencies, 0.50), "p90": percentile(latencies, 0.90),
                       "p99": percentile(latencies, 0.99), "max": float(max(latencies)) if latencies else None},
        "cpu": {"client_s": round(client_cpu, 2), "broker_s": round((broker1 or 0) - (broker0 or 0), 2),
                "bench_script_s": round(own1 - own0, 2), "machine_busy_s": round(busy1 - busy0, 2),
                "job_tree_s": round(sum(last - first for first, last in tree_cpu.values()), 2),
                "window_s": round((window_end_ms - window_start_ms) / 1000, 1)},
        "client_cpu_s_per_m_records": round(client_cpu / expected * 1e6, 1) if expected else None,
        "batches": len(batches),
        "rows_per_batch_mean": _mean([b["numInputRows"] for b in batches]),
        "add_batch_ms_mean": _mean([(b.get("durationMs") or {}).get("addBatch", 0) for b in batches]),
        "trigger_execution_ms_mean": _mean([(b.get("durationMs") or {}).get("triggerExecution", 0)
                                            for b in batches]),
        "driver_commit_ms_median": statistics.median(commits[1:]) if len(commits) > 1 else None,
        "timeline": timeline_report(timeline),
    }
    return result


def _mean(values: list[float]) -> float | None:
    return round(statistics.fmean(values), 1) if values else None


def _batches(metrics: Path, start_ms: int, end_ms: int) -> list[dict[str, Any]]:
    from datetime import datetime

    found = []
    for line in metrics.read_text().splitlines() if metrics.exists() else []:
        entry = json.loads(line)
        at = datetime.fromisoformat(entry["timestamp"].replace("Z", "+00:00")).timestamp() * 1000
        if entry.get("numInputRows") and start_ms <= at < end_ms:
            found.append(entry)
    return found


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", default=None, help="a running broker (else as run_bench.py)")
    parser.add_argument("--rates", default="5000,50000", help="input records per second, comma-separated")
    parser.add_argument("--triggers", default="1s,200ms", help="processing-time triggers, comma-separated")
    parser.add_argument("--jobs", default=DEFAULT_JOBS, help=f"comma-separated subset of {', '.join(JOBS)}")
    parser.add_argument("--warmup-s", type=float, default=15)
    parser.add_argument("--duration-s", type=float, default=180,
                        help="the measured window (3 minutes by default: p99 and max over enough batches)")
    parser.add_argument("--tail-s", type=float, default=8, help="after the window, for its last records to arrive")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--max-partitions", type=int, default=None,
                        help="eos.maxPartitions of the kit's source (the jobs that read with it)")
    parser.add_argument("--min-records-per-task", type=int, default=None,
                        help="eos.minRecordsPerTask of the kit's source (default: the kit's, 25000; 0: one task per "
                             "Kafka partition)")
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--spark-kafka-jars", default=None, metavar="PATHS|DIR")
    parser.add_argument("--keep", action="store_true", help="keep the work dir and the topics")
    parser.add_argument("--out", default="latency.json")
    args = parser.parse_args(argv)
    try:
        args.rate_list = [int(r) for r in args.rates.split(",") if r.strip()]
    except ValueError:
        parser.error(f"--rates: {args.rates!r} is not a comma-separated list of integers")
    args.trigger_list = [parse_trigger(t) for t in args.triggers.split(",") if t.strip()]
    args.job_list = [j.strip() for j in args.jobs.split(",") if j.strip()]
    unknown = [j for j in args.job_list if j not in JOBS]
    if unknown:
        parser.error(f"--jobs: unknown {', '.join(unknown)}; valid: {', '.join(JOBS)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # A SIGTERM (a stopped bench) unwinds as an exit, so the broker and jobs it started are stopped.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    work = Path(tempfile.mkdtemp(prefix="kafka-eos-latency-"))
    broker = find_broker(args.bootstrap)
    results: list[Measurement] = []
    try:
        pid = re.search(r"pid (\d+)", broker.origin)
        broker_pid = int(pid.group(1)) if broker.owned and pid else None
        log(f"broker: {broker.origin}; work dir {work}")
        jars = None
        if any(JOBS[j][0] == "kafka" or JOBS[j][1] == "kafka" for j in args.job_list):
            found = resolve_spark_kafka_jars(args.spark_kafka_jars)
            if found.skip_reason:
                log(f"Spark's own connector is not available: {found.skip_reason}")
                return 1
            jars = found.spark_jars
            log(f"Spark's own connector: {found.source}")
        for rate in args.rate_list:
            for trigger in args.trigger_list:
                for job in args.job_list:
                    log(f"{job} at {rate:,} rec/s, trigger {trigger} ...")
                    m = measure(job, rate, trigger, args, broker.bootstrap_servers, broker_pid, work,
                                jars if "kafka" in JOBS[job][:2] else None)
                    results.append(m)
                    r = m.results
                    log(f"  {json.dumps({k: r.get(k) for k in ('latency_ms', 'client_cpu_s_per_m_records', 'rows_per_batch_mean', 'add_batch_ms_mean', 'trigger_execution_ms_mean', 'driver_commit_ms_median', 'records_in_window', 'expected_in_window', 'error')})}")
        document = {"config": {k: v for k, v in vars(args).items()}, "broker": broker.origin,
                    "cpus": os.cpu_count(), "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                    "measurements": [m.__dict__ for m in results]}
        Path(args.out).write_text(json.dumps(document, indent=1) + "\n")
        print_table(results)
        for m in results:
            if m.results.get("timeline"):
                print(f"\nThe slowest 1 % of batches: {m.job} at {m.rate:,} rec/s, trigger {m.trigger}\n")
                print(render_timeline(m.results["timeline"]))
        log(f"results written to {args.out}")
        return 0
    finally:
        broker.stop()
        if not args.keep:
            import shutil

            shutil.rmtree(work, ignore_errors=True)


def print_table(results: list[Measurement]) -> None:
    print("| rate rec/s | trigger | job | p50 ms | p99 ms | max ms | client CPU s per M records | rows/batch | addBatch ms | trigger ms |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for m in results:
        r = m.results
        lat = r.get("latency_ms") or {}
        print(f"| {m.rate:,} | {m.trigger} | {m.job} | {lat.get('p50')} | {lat.get('p99')} | {lat.get('max')} | "
              f"{r.get('client_cpu_s_per_m_records')} | {r.get('rows_per_batch_mean')} | {r.get('add_batch_ms_mean')} | "
              f"{r.get('trigger_execution_ms_mean')} |")


if __name__ == "__main__":
    sys.exit(main())
