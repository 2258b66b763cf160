"""Throughput benchmark of the exactly-once Spark pipeline against its baselines (issue 4).

    python bench/run_bench.py [--records 1000000] [--out bench-results.json]

One invocation, one broker, one input topic; each run is a subprocess reading that input from
offset 0 into an output topic of its own:

- ``raw_alo`` / ``raw_eos``: ``bench/raw_copy.py``, a single-process confluent-kafka copy loop,
  at-least-once, and exactly-once with a transaction every 100 ms;
- ``quix_eos``: ``bench/quix_copy.py``, the same copy as a Quix Streams 3.28 application with
  ``processing_guarantee="exactly-once"`` (Quix's defaults, a checkpoint every 5 s unless
  ``--quix-commit-interval-s``). Quix pins confluent-kafka < 2.13, so it runs on the Python of
  ``--quix-python``, else of a venv at ``~/.cache/pyspark-kafka-eos/bench-quix-venv`` that is made
  (``python -m venv`` + ``pip install quixstreams==3.28.1``) when missing; if that fails the run
  is skipped, with the reason in the report;
- ``spark_alo`` / ``spark_eos``: ``examples/spark_pipeline.py --transform copy --bounded``
  (Trigger.AvailableNow, ``--max-offsets-per-trigger`` records per micro-batch), with the sink in
  at-least-once and in exactly-once mode;
- ``spark_eos_s3`` (with ``--state-uri s3://bucket/prefix``): ``spark_eos`` with the sink's state
  on that object store (``--state-dir``) instead of the local checkpoint folder.
- ``spark_builtin`` / ``spark_builtin_source`` (issue 21): the same job on Spark's own Kafka
  connector (``format("kafka")``) at both ends, at-least-once, and Spark's own source feeding the
  kit's exactly-once sink; the connector's jars from ``--spark-kafka-jars`` or
  ``KAFKA_EOS_SPARK_KAFKA_JARS``, else the official artifacts from Maven Central, resolved with
  ``mvn`` at the installed pyspark's version or the nearest one served
  (``bench/spark_kafka_jars.py``); the log and the report name the connector version used. Only
  when none of these gives the four jars are these runs skipped, with the reason. Their
  ``*_restart`` runs are SIGKILLed and restarted like ``spark_eos_restart``.

Measured per run (nothing is asserted: the script reports, it does not judge by failing):

- steady-state throughput, start-up excluded: for Spark, the records of every micro-batch after
  the first divided by those batches' summed ``triggerExecution`` durations (from the job's
  ``--metrics-file``); for the raw loop and Quix, records / (last record acknowledged, or
  last transaction committed - first consumed);
- cold start: process start until a watcher polling the output's read_committed end offsets
  (admin ListOffsets, every 100 ms) first sees one above 0;
- per-micro-batch overhead of exactly-once: mean batch duration of ``spark_eos`` minus
  ``spark_alo`` over the batches after the first (same batch ids, same sizes), and the driver's
  commit time from the sink's "batch N committed: ... X ms" log lines;
- peak memory: the RSS of the run's whole process tree (driver, JVM, Python workers), summed over
  every process each 200 ms from /proc. Pages shared between processes (forked Python workers) are
  counted once per process, so this is an upper bound; the PSS sum (every 1 s) shares them out;
- CPU: seconds used by the tree, by the broker (when this script started it) and by every other
  process, so a busy machine shows up in the results; and the client CPU per million records, the
  machine's busy CPU minus the broker's and this script's (issue 30).

Every output is then read back with read_committed and its records and distinct keys counted.
``--repeat N`` runs the sequence N times; the targets are then judged on the medians. The "3x Quix
Streams exactly-once" target is judged against the ``quix_eos`` median of the same invocation;
only when ``quix_eos`` did not run is it judged against a reference figure (73k rec/s) measured
earlier, and the row says so.

The broker: ``--bootstrap``, else ``KAFKA_BOOTSTRAP_SERVERS``, else a Docker engine, else
``KAFKA_HOME``, else the official Apache Kafka from Maven Central (``KAFKA_EOS_KAFKA_VERSION``,
default the newest 4.x), the last two started on 127.0.0.1 by the kit's launcher
(``connectors.servers.broker_discovery.find_broker``). A broker this script starts is stopped at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient

from connectors.kafka.clients import TopicPartition
from connectors.kafka.clients.factory import clients_for
from connectors.servers.broker_discovery import Broker, find_broker
from cold_start import breakdown, load_trace, render
from proc_sampling import ProcStat, cmdline, machine_cpu, process_tree, proc_stats, pss
from spark_kafka_jars import ENV_VAR as SPARK_KAFKA_JARS_ENV, OPTION as SPARK_KAFKA_JARS_OPTION
from spark_kafka_jars import SparkKafkaJars, resolve as resolve_spark_kafka_jars
from twophase.storage.state_storage import open_state_storage

REPO = Path(__file__).resolve().parent.parent
SPARK_PIPELINE = REPO / "connectors" / "tools" / "jobs" / "spark_pipeline.py"
RAW_COPY = REPO / "bench" / "raw_copy.py"
QUIX_COPY = REPO / "bench" / "quix_copy.py"
#: Holds a sitecustomize that prints the sink's commit-time log lines from Spark's Python workers, and traces processes (--trace).
PROCESS_HOOKS = REPO / "bench" / "process_hooks"
ALL_RUNS = ("raw_alo", "raw_eos", "quix_eos", "spark_alo", "spark_builtin", "spark_builtin_source",
            "spark_builtin_source_fb", "spark_eos", "spark_eos_fb", "spark_eos_zip", "spark_eos_cds",
            "spark_builtin_restart", "spark_builtin_source_restart", "spark_builtin_source_fb_restart",
            "spark_eos_restart", "spark_eos_fb_restart", "spark_eos_restart_cds", "spark_eos_s3")
FOREACH_BATCH_SINK = "kafka-eos-foreach-batch"
#: Runs on Spark's own Kafka connector (issue 21): (source format, sink format). Its sink is
#: at-least-once; spark_builtin_source feeds the kit's exactly-once sink from Spark's source.
SPARK_CONNECTOR_RUNS = {
    "spark_builtin": ("kafka", "kafka"),
    "spark_builtin_source": ("kafka", "kafka-eos"),
    "spark_builtin_restart": ("kafka", "kafka"),
    "spark_builtin_source_restart": ("kafka", "kafka-eos"),
    "spark_builtin_source_fb": ("kafka", FOREACH_BATCH_SINK),
    "spark_builtin_source_fb_restart": ("kafka", FOREACH_BATCH_SINK),
}
#: Runs whose sink is the kit's foreachBatch helper (the job's --sink-format kafka-eos-foreach-batch),
#: which writes with mapInArrow and commits in the driver's Python process.
FOREACH_BATCH_RUNS = ("spark_eos_fb", "spark_eos_fb_restart")
#: The kit's exactly-once Spark runs judged against Spark's own connector (issue 21), with the
#: restart run of each.
KIT_AGAINST_BUILTIN = {"spark_eos": "spark_eos_restart", "spark_eos_fb": "spark_eos_fb_restart",
                       "spark_builtin_source": "spark_builtin_source_restart",
                       "spark_builtin_source_fb": "spark_builtin_source_fb_restart"}
#: Issue 21: spark_eos with KAFKA_EOS_WORKER_PYTHON=0, so Spark's Python processes import pyspark
#: from pyspark.zip as before kafka-eos-worker-python (connectors/worker_python.py).
ZIP_RUNS = ("spark_eos_zip",)
#: Runs SIGKILLed after their first committed batch and started again from the same checkpoint.
RESTART_RUNS = ("spark_builtin_restart", "spark_builtin_source_restart", "spark_builtin_source_fb_restart",
                "spark_eos_restart", "spark_eos_fb_restart", "spark_eos_restart_cds")
#: Runs whose driver JVM starts from a class archive (connectors/spark/jvm_class_archive.py).
CLASS_ARCHIVE_RUNS = ("spark_eos_cds", "spark_eos_restart_cds")
#: Runs that need --state-uri (an object store for the sink's state).
STATE_URI_RUNS = ("spark_eos_s3",)
MEMORY_RUN = "spark_eos_memory"  # --memory-check-records: spark_eos on a bigger topic
SUFFIX = b"|copied"

#: Quix Streams 3.28 exactly-once on the same machine and work, measured once earlier: only the
#: fallback of the "3x Quix" target when this invocation did not run ``quix_eos`` itself.
QUIX_EOS_REC_S = 73_000
TARGET_VS_QUIX = 3.0
TARGET_STEADY_REC_S = 220_000  # ~TARGET_VS_QUIX * QUIX_EOS_REC_S, the fallback target
#: quixstreams 3.28 pins confluent-kafka < 2.13 and the project needs 2.16, so Quix runs from a
#: virtualenv of its own, made (once) here unless --quix-python names one.
QUIX_VERSION = "3.28.1"
QUIX_VENV = Path.home() / ".cache" / "pyspark-kafka-eos" / "bench-quix-venv"
TARGET_EOS_VS_ALO = 0.90
TARGET_OVERHEAD_MS = 50.0
TARGET_MIN_BATCH = 200_000
#: Issue 11: cold start and restart to the first committed output or checkpoint, and the 1M-record
#: job's rec/s from process start against the figure measured when the issue was opened.
TARGET_COLD_START_S = 10.0
TARGET_RESTART_S = 10.0
ISSUE_11_FROM_START_REC_S = 48_277
TARGET_FROM_START_FACTOR = 2.0
#: Issue 21: against Spark's own connector in the same invocation.
TARGET_FIRST_BATCH_BEHIND_BUILTIN_S = 2.0
TARGET_RESTART_BEHIND_BUILTIN_S = 2.0
TARGET_EOS_VS_BUILTIN = 1.0
#: The rates judged against Spark's own connector (>= TARGET_EOS_VS_BUILTIN): the result's key, the
#: comparison's suffix, the target row's name and its note ({config}: the kit's run).
RATES_AGAINST_BUILTIN = (
    ("steady_rec_s", "vs_builtin", "EOS steady state vs Spark's own (at-least-once) connector",
     "{config} against spark_builtin"),
    ("warm_rec_s", "warm_vs_builtin", "EOS warm state vs Spark's own connector",
     "the second half of the batches after the first, when the JVM's JIT has warmed up"),
)

#: A run during which the hypervisor gave this share of the VM's CPU time to others (steal, in
#: /proc/stat) is disturbed: its throughput and CPU figures say more about the host than about the
#: run (issue 52: one run of the kit at both ends fell to 0.48x with 10 s of 95 stolen, its
#: Python workers' CPU up by half, while the runs around it lost under 1 %). The summary's medians
#: leave such repetitions out where an undisturbed one exists.
DISTURBED_STOLEN_SHARE = 0.05

COMMITTED_LINE = re.compile(
    r"batch (\d+) committed: (\d+) transactions, (\d+) records, (\d+) ms"
    r"(?: \(prepare (\d+), store (\d+), EndTxn (\d+), mark (\d+))?")
BENCH_PID = os.getpid()


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class TreeSampler(threading.Thread):
    """Every ``interval_s``: the summed RSS of the process tree of ``root`` (its descendants, and
    every process of its session: it is started as a session leader); the peak and what made it
    up; CPU seconds of the tree's processes, of ``watch_pid`` (the broker) and of everything else
    on the machine.

    RSS counts a page shared by several processes (forked Python workers, a JVM that forks) once
    per process, so its sum is an upper bound. Every ``pss_every``-th sample also sums the PSS
    (/proc/<pid>/smaps_rollup, which shares such pages out; slower to read, hence less often).

    CPU is read per process while it lives: what a process uses after the last sample before it
    exits is missed, so both the tree's and the others' figures are lower bounds."""

    def __init__(self, root: int, interval_s: float = 0.2, watch_pid: int | None = None,
                 pss_every: int = 5) -> None:
        super().__init__(daemon=True)
        self.root = root
        self.interval_s = interval_s
        self.pss_every = pss_every
        self.watch_pid = watch_pid
        self.samples = 0
        self.peak_rss = 0
        self.peak_pss = 0
        self._rss_at_pss = 0
        self.peak_time = 0.0
        self.peak_processes: list[dict[str, Any]] = []
        self.series: list[tuple[float, int]] = []
        self.max_processes = 0
        self.labels: dict[int, tuple[str, str]] = {}  # pid -> (comm, label)
        # pid -> (CPU seconds when first seen, latest): the tree's from 0, others' from the first
        # sample (a process started later counts from 0).
        self.cpu_tree: dict[int, float] = {}
        self.cpu_other: dict[int, tuple[float, float]] = {}
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            self.sample()
            self._halt.wait(self.interval_s)
        self.sample()

    def _tree(self, stats: dict[int, ProcStat]) -> list[int]:
        return process_tree(self.root, stats)

    def label(self, pid: int) -> str:
        return self.labels[pid][1] if pid in self.labels else "?"

    def sample(self) -> None:
        stats = proc_stats()
        now = time.time()
        tree = self._tree(stats)
        in_tree = set(tree)
        first = self.samples == 0
        for pid, stat in stats.items():
            if pid in in_tree:
                self.cpu_tree[pid] = max(self.cpu_tree.get(pid, 0.0), stat.cpu_s)
                if self.labels.get(pid, ("",))[0] != stat.comm:  # new, or exec'ed (spark-class -> java)
                    self.labels[pid] = (stat.comm, cmdline(pid))
            elif pid != BENCH_PID:
                base = self.cpu_other[pid][0] if pid in self.cpu_other else (stat.cpu_s if first else 0.0)
                self.cpu_other[pid] = (base, stat.cpu_s)
        # A child with exactly its parent's RSS is (almost surely) a fork or vfork that has not
        # exec'ed yet, e.g. the JVM spawning a Python worker: its pages are the parent's.
        tree = [pid for pid in tree
                if not (stats[pid].ppid in in_tree and stats[stats[pid].ppid].rss == stats[pid].rss)]
        total = sum(stats[pid].rss for pid in tree)
        self.max_processes = max(self.max_processes, len(tree))
        # Also when the RSS has grown by a tenth since the last PSS reading: short runs get one.
        if self.samples % self.pss_every == 0 or total > 1.1 * self._rss_at_pss:
            self._rss_at_pss = total
            self.peak_pss = max(self.peak_pss, sum(pss(pid) for pid in tree))
        self.samples += 1
        if tree:
            self.series.append((now, total))
        if total > self.peak_rss:
            self.peak_rss, self.peak_time = total, now
            self.peak_processes = sorted(
                ({"pid": pid, "process": self.label(pid), "rss_mb": round(stats[pid].rss / 2**20, 1)}
                 for pid in tree), key=lambda p: -p["rss_mb"])

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=10)

    @property
    def tree_cpu_s(self) -> float:
        return sum(self.cpu_tree.values())

    def cpu_by_process(self) -> dict[str, float]:
        """The tree's CPU seconds by kind of process (driver, JVM, Python worker kinds)."""
        by_label: dict[str, float] = {}
        for pid, cpu in self.cpu_tree.items():
            label = self.label(pid)
            by_label[label] = by_label.get(label, 0.0) + cpu
        return {label: round(cpu, 1) for label, cpu in sorted(by_label.items(), key=lambda kv: -kv[1])}

    @property
    def watch_cpu_s(self) -> float | None:
        if self.watch_pid not in self.cpu_other:
            return None
        base, last = self.cpu_other[self.watch_pid]
        return last - base

    @property
    def other_cpu_s(self) -> float:
        return sum(last - base for pid, (base, last) in self.cpu_other.items() if pid != self.watch_pid)

    def peak_between(self, start: float, end: float) -> int:
        return max((rss for t, rss in self.series if start <= t <= end), default=0)


class FirstOutputWatcher(threading.Thread):
    """Polls the read_committed end offsets of ``topic`` until one is above 0."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, interval_s: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.admin = clients_for(bootstrap).admin()
        self.partitions = [TopicPartition(topic, p) for p in range(partitions)]
        self.interval_s = interval_s
        self.seen_at: float | None = None
        self._halt = threading.Event()

    def run(self) -> None:
        try:
            while not self._halt.is_set():
                try:
                    ends = self.admin.list_offsets(self.partitions, "latest", read_committed=True)
                    if any(offset > 0 for offset in ends.values()):
                        self.seen_at = time.time()
                        return
                except Exception as exc:  # a slow answer is retried; the run still goes on
                    log(f"watcher: {exc!r}")
                self._halt.wait(self.interval_s)
        finally:
            self.admin.close()

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=10)


# -- Kafka helpers -------------------------------------------------------------------------------

def create_topics(bootstrap: str, names: list[str], partitions: int) -> None:
    admin = clients_for(bootstrap).admin()
    try:
        for name in names:
            admin.create_topic(name, partitions)
    finally:
        admin.close()


def delete_topics(bootstrap: str, names: list[str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for name, future in admin.delete_topics(names, operation_timeout=30).items():
        try:
            future.result()
        except KafkaException as exc:
            log(f"deleting topic {name}: {exc}")


def input_record(i: int, payload: str) -> tuple[bytes, bytes]:
    # The loader's record shape ({"id", "seq", "payload"}), padded to the requested size.
    return str(i).encode(), b'{"id":%d,"seq":%d,"payload":"%s"}' % (i, i, payload.encode())


def load_input(bootstrap: str, topic: str, records: int, partitions: int, value_bytes: int) -> float:
    """Write ``records`` records (round-robin over the partitions, plain producer); return seconds."""
    payload = "x" * max(0, value_bytes - len(input_record(records // 2, "")[1]))
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.size": 1_000_000,
                         "queue.buffering.max.messages": 1_000_000, "enable.idempotence": True})
    started = time.monotonic()
    for i in range(records):
        key, value = input_record(i, payload)
        while True:
            try:
                producer.produce(topic, value, key, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    left = producer.flush(120)
    if left:
        raise RuntimeError(f"loading {topic}: {left} records not acknowledged after 120 s")
    return time.monotonic() - started


@dataclass
class OutputCheck:
    records: int = 0
    distinct_keys: int = 0
    bad_values: int = 0
    #: Offsets the output's partitions took beyond the records read back: the transaction markers
    #: (one per transaction and partition it wrote), plus any aborted records.
    markers: int = 0
    seconds: float = 0.0


def check_output(bootstrap: str, topic: str, partitions: int) -> OutputCheck:
    """Read ``topic`` to its end with read_committed (the kit's own range reader); count records,
    distinct keys, and values that are not a copy (no ``|copied`` suffix)."""
    started = time.monotonic()
    clients = clients_for(bootstrap)
    admin = clients.admin()
    reader = clients.reader(read_committed=True)
    check = OutputCheck()
    keys: set[bytes | None] = set()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        start = admin.list_offsets(tps, "earliest", read_committed=True)
        end = admin.list_offsets(tps, "latest", read_committed=True)
        ranges = {tp: (start[tp], end[tp]) for tp in tps if end[tp] > start[tp]}
        for batch in reader.read_batches(ranges, include_headers=False):
            check.records += len(batch)
            keys.update(batch.keys)
            check.bad_values += sum(1 for value in batch.values if value is None or not value.endswith(SUFFIX))
        check.markers = sum(e - s for s, e in ranges.values()) - check.records
    finally:
        reader.close()
        admin.close()
    check.distinct_keys = len(keys)
    check.seconds = time.monotonic() - started
    return check


# -- Quix Streams virtualenv ---------------------------------------------------------------------

def run_environment(keep_env: bool) -> dict[str, str]:
    """The environment every run starts from. ``PYTHONDONTWRITEBYTECODE`` is dropped unless
    ``--keep-env``: users' machines do not set it, and without cached bytecode every Python
    process Spark starts compiles the kit's modules again."""
    env = dict(os.environ)
    if not keep_env:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _quix_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The runs' environment without what would make the Quix venv's Python import the
    project's packages (confluent-kafka 2.16) instead of its own."""
    return {k: v for k, v in (os.environ if base is None else base).items()
            if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}


def _quix_version(python: str) -> tuple[str | None, str]:
    """(quixstreams version, "") if ``python`` imports it, else (None, why not)."""
    try:
        done = subprocess.run([python, "-c", "import quixstreams; print(quixstreams.__version__)"],
                              capture_output=True, text=True, timeout=120, env=_quix_env(), cwd=tempfile.gettempdir())
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"{python}: {exc}"
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["?"])[-1]
        return None, f"{python} cannot import quixstreams: {last}"
    return done.stdout.strip(), ""


def quix_python(explicit: str | None, timeout_s: float = 900) -> tuple[str | None, str]:
    """(a Python with quixstreams, its version) or (None, why there is none).

    ``explicit`` (--quix-python) is used as given. Otherwise the venv at QUIX_VENV is reused when
    it has quixstreams QUIX_VERSION, else (re)made: ``python -m venv`` and
    ``pip install quixstreams==QUIX_VERSION`` (through pip's configured index), its output in
    QUIX_VENV/install.log. Failing that, the quix run is skipped, not the benchmark."""
    if explicit:
        version, why = _quix_version(explicit)
        return (explicit, version) if version else (None, why)
    python = QUIX_VENV / "bin" / "python"
    if python.exists():
        version, why = _quix_version(str(python))
        if version == QUIX_VERSION:
            log(f"quix: reusing {QUIX_VENV} (quixstreams {version})")
            return str(python), version
        log(f"quix: {QUIX_VENV} has quixstreams {version or 'none'} ({why or 'wrong version'}); reinstalling")
    install_log = QUIX_VENV / "install.log"
    steps = []
    if not python.exists():
        steps.append([sys.executable, "-m", "venv", str(QUIX_VENV)])
    steps.append([str(python), "-m", "pip", "install", f"quixstreams=={QUIX_VERSION}"])
    for step in steps:
        log(f"quix: {' '.join(step)}")
        try:
            QUIX_VENV.parent.mkdir(parents=True, exist_ok=True)
            output = subprocess.run(step, capture_output=True, text=True, timeout=timeout_s, env=_quix_env(),
                                    cwd=tempfile.gettempdir())
        except (OSError, subprocess.TimeoutExpired) as exc:
            return None, f"{' '.join(step[1:4])}: {exc}"
        # The log lives in the venv, which exists only once "venv" has run (or failed part way).
        if QUIX_VENV.exists():
            with open(install_log, "a") as f:
                f.write(f"$ {' '.join(step)}\n{output.stdout}{output.stderr}")
        if output.returncode != 0:
            last = (output.stderr.strip().splitlines() or ["?"])[-1]
            return None, f"{' '.join(step[1:4])} failed (exit {output.returncode}): {last}"
    version, why = _quix_version(str(python))
    if not version:
        return None, why
    log(f"quix: installed quixstreams {version} into {QUIX_VENV}")
    return str(python), version


# -- runs ----------------------------------------------------------------------------------------

@dataclass
class Run:
    name: str  # the config, with "#<repetition>" when repeated
    config: str  # one of ALL_RUNS
    repetition: int
    kind: str  # raw | quix | spark
    guarantee: str
    output: str
    command: list[str]
    env: dict[str, str] | None = None
    metrics_file: Path | None = None
    result_file: Path | None = None
    stderr_file: Path | None = None
    records: int = 0  # in its input
    trace_file: Path | None = None  # --trace: the process trace of a Spark run
    stages_file: Path | None = None  # --stages: CPU by stage of the kit's record path
    results: dict[str, Any] = field(default_factory=dict)


def _iso_to_epoch(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def execute(run: Run, bootstrap: str, partitions: int, work: Path, broker_pid: int | None,
            timeout_s: float) -> None:
    """Start the run's process, watch it until it exits, and fill ``run.results``."""
    assert run.stderr_file is not None
    load_before = os.getloadavg()
    cpu_before = machine_cpu()
    bench_cpu_before = time.process_time()
    watcher = FirstOutputWatcher(bootstrap, run.output, partitions)
    with open(run.stderr_file.with_suffix(".stdout"), "wb") as out, open(run.stderr_file, "wb") as err:
        started = time.time()
        # A session of its own: on a timeout the whole job (JVM, workers) is killed by its group.
        process = subprocess.Popen(run.command, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                   cwd=REPO, env=run.env, start_new_session=True)
    sampler = TreeSampler(process.pid, watch_pid=broker_pid)
    sampler.start()
    watcher.start()
    try:
        code = process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        log(f"{run.name}: still running after {timeout_s:.0f} s; killing its process group")
        os.killpg(process.pid, signal.SIGKILL)
        code = process.wait()
    ended = time.time()
    sampler.stop()
    watcher.stop()
    cpu_after = machine_cpu()
    bench_cpu = time.process_time() - bench_cpu_before
    busy = cpu_after[0] - cpu_before[0]
    steal = cpu_after[1] - cpu_before[1]
    broker_cpu = sampler.watch_cpu_s
    r = run.results
    r.update({
        "exit_code": code,
        "wall_s": ended - started,
        "cold_start_s": (watcher.seen_at - started) if watcher.seen_at else None,
        "peak_rss_mb": round(sampler.peak_rss / 2**20, 1),
        "peak_pss_mb": round(sampler.peak_pss / 2**20, 1),
        "peak_rss_at_s": round(sampler.peak_time - started, 1) if sampler.peak_time else None,
        "peak_rss_processes": sampler.peak_processes[:8],
        "max_processes_in_tree": sampler.max_processes,
        "cpu": {
            "tree_s": round(sampler.tree_cpu_s, 1),
            "broker_s": round(broker_cpu, 1) if broker_cpu is not None else None,
            # Every other process of the machine (not this script): a quiet machine has ~0.
            "other_s": round(sampler.other_cpu_s, 1),
            "bench_script_s": round(bench_cpu, 1),
            "machine_busy_s": round(busy, 1),
            "machine_steal_s": round(steal, 1),
            "machine_cores": os.cpu_count(),
            "tree_by_process": sampler.cpu_by_process(),
            # What a user reads off the machine: busy CPU minus the broker's and this script's
            # (the run is the only other thing running; "other_s" shows when it was not), and
            # minus the steal, which /proc/stat counts as busy but no process of this VM used.
            "client_s": round(busy - steal - (broker_cpu or 0.0) - bench_cpu, 1),
        },
        "loadavg_before": [round(v, 2) for v in load_before],
        "loadavg_after": [round(v, 2) for v in os.getloadavg()],
        "stolen_share": round(steal / max(1e-9, (ended - started) * (os.cpu_count() or 1)), 3),
    })
    r["disturbed"] = r["stolen_share"] >= DISTURBED_STOLEN_SHARE
    if code != 0:
        tail = run.stderr_file.read_text(errors="replace").splitlines()[-25:]
        log(f"{run.name}: exit code {code}; stderr tail:\n" + "\n".join(tail))
    records = run.records or 0
    if records:
        r["client_cpu_s_per_m_records"] = round(r["cpu"]["client_s"] / records * 1e6, 1)
    if run.kind in ("raw", "quix"):
        _raw_results(run, started)
    else:
        _spark_results(run, started, sampler)
        if run.stages_file is not None:
            r["cpu_by_stage"] = cpu_by_stage(run.stages_file, records)
        if run.trace_file is not None and run.trace_file.exists():
            r["cold_start_breakdown"] = breakdown(load_trace(run.trace_file), started, r.get("batches"),
                                                  r.get("cold_start_s"))


def execute_restart(run: Run, bootstrap: str, partitions: int, work: Path, broker_pid: int | None,
                    timeout_s: float) -> None:
    """``spark_eos_restart``: the exactly-once job SIGKILLed (the driver, its JVM and every Python
    process of the run, by PID) once a micro-batch is committed, then started again from the same
    checkpoint. The second process is measured like any run; its first micro-batch end, from its
    own start, is the restart-to-first-committed-checkpoint time."""
    assert run.metrics_file is not None and run.stderr_file is not None
    first_metrics = run.metrics_file.with_name(run.metrics_file.stem + ".killed.jsonl")
    command = list(run.command)
    command[command.index("--metrics-file") + 1] = str(first_metrics)
    first_env = dict(run.env or os.environ)
    first_env.pop("KAFKA_EOS_BENCH_TRACE", None)  # only the restart is traced
    with open(run.stderr_file.with_suffix(".killed.stderr"), "wb") as err:
        started = time.time()
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL,
                                   cwd=REPO, env=first_env, start_new_session=True)
    deadline = time.monotonic() + timeout_s
    committed = 0
    while process.poll() is None and time.monotonic() < deadline and not committed:
        if first_metrics.exists():
            committed = sum(1 for line in first_metrics.read_text().splitlines()
                            if line.strip() and json.loads(line).get("numInputRows"))
        time.sleep(0.05)
    if process.poll() is not None:
        run.results["restart_note"] = f"the first process exited ({process.returncode}) before it was killed"
    for pid in process_tree(process.pid, proc_stats()):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    process.wait()
    run.results["killed_at_s"] = round(time.time() - started, 2)
    run.results["killed_after_batches"] = committed
    log(f"{run.name}: first process SIGKILLed {run.results['killed_at_s']:.1f} s after its start, "
        f"{committed} micro-batch(es) committed; restarting from the same checkpoint")
    time.sleep(1.0)  # the broker notices the dead clients' connections
    execute(run, bootstrap, partitions, work, broker_pid, timeout_s)
    run.results["restart_first_checkpoint_s"] = run.results.get("first_batch_end_s")
    # The output already holds the first process's records: no cold start to see there.
    run.results["cold_start_s"] = None


def _raw_results(run: Run, started: float) -> None:
    r = run.results
    if run.result_file is None or not run.result_file.exists():
        return
    raw = json.loads(run.result_file.read_text())
    r["records_copied"] = raw["records"]
    r["transactions"] = raw.get("transactions")  # quix_copy.py cannot count Quix's checkpoints
    if "stopped_by" in raw:
        r["stopped_by"] = raw["stopped_by"]
    if raw["first_consumed_time"]:
        copying = raw["done_time"] - raw["first_consumed_time"]
        r["startup_s"] = raw["first_consumed_time"] - started
        r["copy_s"] = copying
        r["steady_rec_s"] = raw["records"] / copying if copying > 0 else None
        r["from_start_rec_s"] = raw["records"] / (raw["done_time"] - started)


def warm_rate(steady: list[dict[str, Any]]) -> tuple[float, int]:
    """Records a second over the second half of ``steady`` (the batches after the first), and how
    many batches that is. The JVM's JIT keeps speeding a Spark run up for several batches after
    the first, most of all Spark's own connector, whose Kafka clients are JVM code too: a run of a
    few batches measures a query still warming up, this half one that has run for a while."""
    warm = steady[len(steady) // 2:]
    return sum(b["rows"] for b in warm) / (sum(b["trigger_ms"] for b in warm) / 1000), len(warm)


def _spark_results(run: Run, started: float, sampler: TreeSampler) -> None:
    r = run.results
    assert run.metrics_file is not None and run.stderr_file is not None
    batches = []
    if run.metrics_file.exists():
        for line in run.metrics_file.read_text().splitlines():
            entry = json.loads(line)
            if not entry.get("numInputRows"):
                continue  # an idle trigger, no data
            durations = entry.get("durationMs") or {}
            start = _iso_to_epoch(entry["timestamp"])
            trigger = durations.get("triggerExecution", 0)
            batches.append({
                "batch_id": entry["batchId"],
                "rows": entry["numInputRows"],
                "trigger_ms": trigger,
                "add_batch_ms": durations.get("addBatch"),
                # What Spark spends around the write: offsets, planning, WAL and commit logs.
                "spark_other_ms": trigger - durations.get("addBatch", 0),
                "start_s": round(start - started, 3),
                "end_s": round(start + trigger / 1000 - started, 3),
            })
    batches.sort(key=lambda b: b["batch_id"])
    commits = {int(m.group(1)): {"transactions": int(m.group(2)), "records": int(m.group(3)),
                                 "ms": int(m.group(4)),
                                 # the parts that read or write the sink's state, and EndTxn
                                 **({key: int(m.group(i)) for i, key in
                                     enumerate(("prepare_ms", "store_ms", "endtxn_ms", "mark_ms"), 5)}
                                    if m.group(5) else {})}
               for m in COMMITTED_LINE.finditer(run.stderr_file.read_text(errors="replace"))}
    for batch in batches:
        if batch["batch_id"] in commits:
            batch["driver_commit"] = commits[batch["batch_id"]]
    r["batches"] = batches
    r["records_processed"] = sum(b["rows"] for b in batches)
    if not batches:
        return
    first, rest = batches[0], batches[1:]
    r["first_batch_ms"] = first["trigger_ms"]
    r["first_batch_end_s"] = first["end_s"]
    r["last_batch_end_s"] = batches[-1]["end_s"]
    r["from_start_rec_s"] = r["records_processed"] / batches[-1]["end_s"]
    r["batch_rows"] = [b["rows"] for b in batches]
    if rest:
        rows = sum(b["rows"] for b in rest)
        r["steady_rec_s"] = rows / (sum(b["trigger_ms"] for b in rest) / 1000)
        # The same, on the wall clock from the end of the first batch (includes gaps between
        # triggers).
        r["steady_wall_rec_s"] = rows / (batches[-1]["end_s"] - first["end_s"])
        r["warm_rec_s"], r["warm_batches"] = warm_rate(rest)
        r["steady_batch_ms_mean"] = _mean([b["trigger_ms"] for b in rest])
        r["steady_spark_other_ms_mean"] = _mean([b["spark_other_ms"] for b in rest])
        # Memory bounded by the batch, not the topic: does the tree keep growing after batch 1?
        r["peak_rss_until_first_batch_mb"] = round(
            sampler.peak_between(started, started + first["end_s"]) / 2**20, 1)
        r["peak_rss_after_first_batch_mb"] = round(
            sampler.peak_between(started + first["end_s"], started + batches[-1]["end_s"] + 1) / 2**20, 1)
    commit_ms = [c["ms"] for _, c in sorted(commits.items())]
    state_ms = [c["prepare_ms"] + c["store_ms"] + c["mark_ms"] for _, c in sorted(commits.items())
                if "store_ms" in c]
    if state_ms:
        r["driver_state_ms_mean"] = _mean(state_ms[1:] or state_ms)
    if commit_ms:
        r["driver_commit_ms"] = commit_ms
        # Like the throughput, the steady state leaves out the first batch (cold clients).
        steady_commits = commit_ms[1:] or commit_ms
        r["driver_commit_ms_mean"] = _mean(steady_commits)
        r["driver_commit_ms_max"] = max(steady_commits)


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def summarize(runs: dict[str, Run]) -> dict[str, dict[str, Any]]:
    """Per config (raw_alo, ...): medians over its repetitions (max for memory)."""
    summary: dict[str, dict[str, Any]] = {}
    for config in ALL_RUNS:
        every = [run.results for run in runs.values() if run.config == config]
        if not every:
            continue
        # Repetitions the host disturbed (DISTURBED_STOLEN_SHARE) count only where all were.
        results = [r for r in every if not r.get("disturbed")] or every

        def values(key: str) -> list[Any]:
            return [r[key] for r in results if r.get(key) is not None]

        s: dict[str, Any] = {"repetitions": len(every), "medians_of": len(results),
                             "disturbed_repetitions": sum(1 for r in every if r.get("disturbed"))}
        for key in ("steady_rec_s", "warm_rec_s", "steady_wall_rec_s", "from_start_rec_s", "cold_start_s", "first_batch_ms",
                    "steady_batch_ms_mean", "steady_spark_other_ms_mean", "first_batch_end_s",
                    "restart_first_checkpoint_s"):
            s[key] = _median(values(key))
        s["steady_rec_s_each"] = values("steady_rec_s")
        s["warm_rec_s_each"] = values("warm_rec_s")
        for key in ("peak_rss_mb", "peak_pss_mb"):
            s[key] = max(values(key), default=None)
        commits = [ms for r in results for ms in (r.get("driver_commit_ms") or [])[1:]]
        s["driver_commit_ms_mean"] = _mean(commits)
        s["driver_state_ms_mean"] = _median(values("driver_state_ms_mean"))
        s["driver_commit_ms_max"] = max(commits, default=None)
        s["driver_commit_ms_first_batch"] = values("driver_commit_ms") and [c[0] for c in values("driver_commit_ms")]
        growth = [(r["peak_rss_until_first_batch_mb"], r["peak_rss_after_first_batch_mb"]) for r in results
                  if r.get("peak_rss_until_first_batch_mb") and r.get("peak_rss_after_first_batch_mb")]
        if growth:
            s["peak_rss_until_first_batch_mb"], s["peak_rss_after_first_batch_mb"] = max(
                growth, key=lambda pair: pair[1] / pair[0])
        s["batch_rows"] = results[0].get("batch_rows")
        s["cpu_tree_s"] = _median([r["cpu"]["tree_s"] for r in results if r.get("cpu")])
        s["client_cpu_s_per_m_records"] = _median(values("client_cpu_s_per_m_records"))
        s["cpu_other_s_max"] = max((r["cpu"]["other_s"] for r in results if r.get("cpu")), default=None)
        summary[config] = s
    return summary


def _batch_pairs(eos: Run, alo: Run) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Batches after the first with the same id and size in both runs."""
    alo_batches = {b["batch_id"]: b for b in alo.results.get("batches", [])[1:]}
    return [(b, alo_batches[b["batch_id"]]) for b in eos.results.get("batches", [])[1:]
            if b["batch_id"] in alo_batches and alo_batches[b["batch_id"]]["rows"] == b["rows"]]


def compare(runs: dict[str, Run], summary: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """EOS against ALO: throughput (medians), and the Spark batches' duration difference, pairing
    each repetition's EOS run with the same repetition's ALO run."""
    out: dict[str, Any] = {}
    for prefix in ("raw", "spark"):
        e = summary.get(f"{prefix}_eos", {}).get("steady_rec_s")
        a = summary.get(f"{prefix}_alo", {}).get("steady_rec_s")
        if e and a:
            out[f"{prefix}_eos_vs_alo"] = e / a
    quix = summary.get("quix_eos", {}).get("steady_rec_s")
    if quix:
        out["quix_eos_steady_rec_s"] = quix
        for config in ("spark_eos", "raw_eos"):
            rate = summary.get(config, {}).get("steady_rec_s")
            if rate:
                out[f"{config}_vs_quix_eos"] = rate / quix
    diffs, add_diffs, per_repetition = [], [], {}
    for eos in (run for run in runs.values() if run.config == "spark_eos"):
        alo = next((run for run in runs.values()
                    if run.config == "spark_alo" and run.repetition == eos.repetition), None)
        if alo is None:
            continue
        pairs = _batch_pairs(eos, alo)
        each = [e["trigger_ms"] - a["trigger_ms"] for e, a in pairs]
        diffs += each
        add_diffs += [e["add_batch_ms"] - a["add_batch_ms"] for e, a in pairs
                      if e["add_batch_ms"] is not None and a["add_batch_ms"] is not None]
        if each:
            per_repetition[eos.name] = _mean(each)
        e_rate, a_rate = eos.results.get("steady_rec_s"), alo.results.get("steady_rec_s")
        if e_rate and a_rate:
            eos.results["eos_vs_alo"] = e_rate / a_rate
        if each:
            eos.results["overhead_ms_per_batch"] = _mean(each)
    if diffs:
        out["overhead_batches_compared"] = len(diffs)
        out["overhead_ms_per_batch"] = _mean(diffs)
        out["overhead_ms_per_batch_median"] = _median(diffs)
        out["overhead_add_batch_ms_per_batch"] = _mean(add_diffs)
        out["overhead_ms_per_batch_each"] = diffs
        out["overhead_ms_per_batch_by_repetition"] = per_repetition
    # Issue 21: the kit against Spark's own connector, medians of the same invocation.
    for config, key in ([(c, "first_batch_end_s") for c in KIT_AGAINST_BUILTIN]
                        + [(c, "restart_first_checkpoint_s") for c in KIT_AGAINST_BUILTIN.values()]):
        builtin = "spark_builtin_restart" if key == "restart_first_checkpoint_s" else "spark_builtin"
        mine, theirs = summary.get(config, {}).get(key), summary.get(builtin, {}).get(key)
        if mine is not None and theirs is not None:
            out[f"{config}_{key}_behind_builtin"] = mine - theirs
    for config in KIT_AGAINST_BUILTIN:
        for key, suffix, _, _ in RATES_AGAINST_BUILTIN:
            mine, theirs = summary.get(config, {}).get(key), summary.get("spark_builtin", {}).get(key)
            if mine and theirs:
                out[f"{config}_{suffix}"] = mine / theirs
    memory = next((run for run in runs.values() if run.config == MEMORY_RUN), None)
    small = [run for run in runs.values() if run.config == "spark_eos" and run.results.get("peak_pss_mb")]
    if memory is not None and small and memory.results.get("peak_pss_mb"):
        # Medians of the spark_eos repetitions against the one run on the bigger topic.
        out["memory_check"] = {
            "records": [small[0].records, memory.records],
            "peak_rss_mb": [_median([run.results["peak_rss_mb"] for run in small]), memory.results["peak_rss_mb"]],
            "peak_pss_mb": [_median([run.results["peak_pss_mb"] for run in small]), memory.results["peak_pss_mb"]],
            "batches": [len(small[0].results.get("batch_rows") or []),
                        len(memory.results.get("batch_rows") or [])],
        }
    for run in runs.values():
        if run.config == "raw_eos":
            alo = next((r for r in runs.values() if r.config == "raw_alo" and r.repetition == run.repetition), None)
            e_rate = run.results.get("steady_rec_s")
            a_rate = alo.results.get("steady_rec_s") if alo else None
            if e_rate and a_rate:
                run.results["eos_vs_alo"] = e_rate / a_rate
    return out


def targets(summary: dict[str, dict[str, Any]], comparison: dict[str, Any], max_offsets: int,
            quix_skipped: str | None = None) -> list[dict[str, Any]]:
    eos = summary.get("spark_eos", {})
    rows = []

    def add(name: str, target: str, measured: Any, met: bool | None, note: str = "") -> None:
        rows.append({"target": name, "wanted": target, "measured": measured, "met": met, "note": note})

    ratio = comparison.get("spark_eos_vs_alo")
    add("EOS vs ALO steady-state throughput", f">= {TARGET_EOS_VS_ALO:.0%}",
        f"{ratio:.1%}" if ratio else "n/a", ratio >= TARGET_EOS_VS_ALO if ratio else None,
        "median of the repetitions")
    overhead = comparison.get("overhead_ms_per_batch")
    commit = eos.get("driver_commit_ms_mean")
    measured = []
    if overhead is not None:
        measured.append(f"EOS-ALO batch {overhead:+.0f} ms (median {comparison['overhead_ms_per_batch_median']:+.0f})")
    if commit is not None:
        measured.append(f"driver commit {commit:.0f} ms")
    # The commit step is measured directly; the batch difference is noisy but catches task-side costs.
    worst = max((v for v in (overhead, commit) if v is not None), default=None)
    add("EOS overhead per micro-batch", f"<= {TARGET_OVERHEAD_MS:.0f} ms", "; ".join(measured) or "n/a",
        worst <= TARGET_OVERHEAD_MS if worst is not None else None,
        "batches after the first; met only if both are within the target")
    steady = eos.get("steady_rec_s")
    quix = comparison.get("quix_eos_steady_rec_s")
    name = f"EOS steady state >= {TARGET_VS_QUIX:.0f}x Quix Streams EOS"
    if quix:
        # The baseline measured side by side, in this invocation, on the same input and broker.
        n = summary["quix_eos"]["repetitions"]
        add(name, f">= {TARGET_VS_QUIX:.0f}x quix_eos = {TARGET_VS_QUIX * quix:,.0f} rec/s",
            f"{steady:,.0f} rec/s = {steady / quix:.2f}x quix_eos {quix:,.0f} rec/s" if steady
            else f"n/a (quix_eos {quix:,.0f} rec/s)",
            steady / quix >= TARGET_VS_QUIX if steady else None,
            f"quix_eos measured in this run ({'median of ' + str(n) if n > 1 else 'one run'})")
    else:
        why = f"quix_eos skipped: {quix_skipped}" if quix_skipped else "quix_eos not run"
        add(name, f">= {TARGET_STEADY_REC_S:,} rec/s (reference)",
            f"{steady:,.0f} rec/s ({steady / QUIX_EOS_REC_S:.1f}x reference Quix {QUIX_EOS_REC_S // 1000}k)"
            if steady else "n/a", steady >= TARGET_STEADY_REC_S if steady else None,
            f"{why}; judged against the reference {QUIX_EOS_REC_S:,} rec/s measured earlier, not side by side")
    cold = eos.get("cold_start_s")
    add("cold start to first committed output", f"<= {TARGET_COLD_START_S:.0f} s",
        f"{cold:.1f} s" if cold is not None else "n/a", cold <= TARGET_COLD_START_S if cold is not None else None,
        "spark_eos: process start until read_committed sees output")
    cold_cds = summary.get("spark_eos_cds", {}).get("cold_start_s")
    if cold_cds is not None:
        add("cold start, driver JVM from a class archive", f"<= {TARGET_COLD_START_S:.0f} s", f"{cold_cds:.1f} s",
            cold_cds <= TARGET_COLD_START_S, "spark_eos_cds (kafka-eos jvm-class-archive)")
    for config, what in (("spark_eos_restart", ""), ("spark_eos_restart_cds", ", driver JVM from a class archive")):
        restart = summary.get(config, {}).get("restart_first_checkpoint_s")
        if restart is None and config.endswith("_cds"):
            continue
        add(f"restart after SIGKILL to first committed checkpoint{what}", f"<= {TARGET_RESTART_S:.0f} s",
            f"{restart:.1f} s" if restart is not None else f"n/a ({config} not run)",
            restart <= TARGET_RESTART_S if restart is not None else None,
            f"{config}: the new process's start until its first micro-batch ends")
    wanted = TARGET_FROM_START_FACTOR * ISSUE_11_FROM_START_REC_S
    for config in ("spark_eos", "spark_eos_cds"):
        from_start = summary.get(config, {}).get("from_start_rec_s")
        if from_start is None and config.endswith("_cds"):
            continue
        add(f"rec/s from process start ({config})",
            f">= {TARGET_FROM_START_FACTOR:.0f}x {ISSUE_11_FROM_START_REC_S:,} = {wanted:,.0f}",
            f"{from_start:,.0f}" if from_start else "n/a", from_start >= wanted if from_start else None,
            "the issue's figure is for 1M records of 100 B in batches of 250k: compare like with like")
    builtin = summary.get("spark_builtin", {})
    builtin_restart = summary.get("spark_builtin_restart", {})
    # Issue 21: each of the kit's exactly-once jobs that ran against Spark's own connector.
    for config, restart_config in KIT_AGAINST_BUILTIN.items():
        if config != "spark_eos" and config not in summary:
            continue
        mine = summary.get(config, {})
        behind = comparison.get(f"{config}_first_batch_end_s_behind_builtin")
        add(f"first batch ends, behind Spark's own connector ({config})", f"<= {TARGET_FIRST_BATCH_BEHIND_BUILTIN_S:.0f} s",
            f"{behind:+.1f} s ({mine['first_batch_end_s']:.1f} s against {builtin['first_batch_end_s']:.1f} s)"
            if behind is not None else "n/a (spark_builtin not run)",
            behind <= TARGET_FIRST_BATCH_BEHIND_BUILTIN_S if behind is not None else None,
            f"{config} against spark_builtin: process start until the end of batch 0")
        behind = comparison.get(f"{restart_config}_restart_first_checkpoint_s_behind_builtin")
        if behind is not None or config == "spark_eos":
            add(f"restart after SIGKILL to first committed batch, behind Spark's own connector ({restart_config})",
                f"<= {TARGET_RESTART_BEHIND_BUILTIN_S:.0f} s",
                f"{behind:+.1f} s ({summary[restart_config]['restart_first_checkpoint_s']:.1f} s against "
                f"{builtin_restart['restart_first_checkpoint_s']:.1f} s)" if behind is not None
                else f"n/a ({restart_config} or spark_builtin_restart not run)",
                behind <= TARGET_RESTART_BEHIND_BUILTIN_S if behind is not None else None,
                f"{restart_config} against spark_builtin_restart: the new process's start until its first batch ends")
        for key, suffix, label, note in RATES_AGAINST_BUILTIN:
            ratio = comparison.get(f"{config}_{suffix}")
            add(f"{label} ({config})", f">= {TARGET_EOS_VS_BUILTIN:.1f}x",
                f"{ratio:.2f}x ({mine[key]:,.0f} against {builtin[key]:,.0f} rec/s)" if ratio else "n/a",
                ratio >= TARGET_EOS_VS_BUILTIN if ratio else None, note.format(config=config))
    sizes = eos.get("batch_rows") or []
    add("micro-batch size", f">= {TARGET_MIN_BATCH:,} records",
        f"{min(sizes):,}..{max(sizes):,} (max offsets per trigger {max_offsets:,})" if sizes else "n/a",
        min(sizes[:-1] or sizes) >= TARGET_MIN_BATCH if sizes else None,
        "the last batch holds the remainder")
    check = comparison.get("memory_check")
    before, after = eos.get("peak_rss_until_first_batch_mb"), eos.get("peak_rss_after_first_batch_mb")
    if check:
        (n_small, n_big), (p_small, p_big) = check["records"], check["peak_pss_mb"]
        growth = p_big / p_small - 1
        add("memory bounded by batch size", "same peak on a bigger topic",
            f"peak PSS {p_small:,.0f} MB at {n_small:,} records, {p_big:,.0f} MB at {n_big:,} ({growth:+.0%}); "
            f"RSS {check['peak_rss_mb'][0]:,.0f} / {check['peak_rss_mb'][1]:,.0f} MB",
            growth <= 0.15, "same batch size; met if the peak grows by <= 15 %")
    elif before and after:
        growth = after / before - 1
        add("memory bounded by batch size", "no growth with records processed",
            f"peak RSS {before:,.0f} MB by batch 1, {after:,.0f} MB after ({growth:+.0%})", None,
            "indicative only (the JVM heap grows lazily); --memory-check-records tests it")
    else:
        add("memory bounded by batch size", "no growth with records processed", "n/a", None,
            "needs at least two batches, or --memory-check-records")
    return rows


# -- output --------------------------------------------------------------------------------------

def _fmt(value: Any, spec: str = ",.0f", suffix: str = "") -> str:
    if value is None:
        return "-"
    return f"{value:{spec}}{suffix}"


def print_tables(results: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(file=sys.stdout, width=190)
    runs = results["runs"]
    comparison = results["comparison"]
    cfg = results["config"]
    table = Table(title=(f"kafka-eos bench: {cfg['records']:,} records of ~{cfg['value_bytes']} B, "
                         f"{cfg['partitions']} partitions, micro-batches of {cfg['max_offsets_per_trigger']:,}, "
                         f"{cfg['master']}"))
    quix = comparison.get("quix_eos_steady_rec_s")
    for column in ("run", "steady rec/s", "warm rec/s", "EOS vs ALO", "x quix_eos", "rec/s from start", "cold start s", "first batch s",
                   "batch ms (steady)", "EOS overhead ms/batch", "driver commit ms (state)", "peak RSS / PSS MB",
                   "CPU s run/kafka/rest", "client CPU s / M rec", "output (dups)"):
        table.add_column(column, justify="left" if column == "run" else "right",
                         no_wrap=column in ("run", "peak RSS / PSS MB", "output (dups)"))
    def row(name: str, r: dict[str, Any], ratio: float | None, overhead: float | None,
            check: dict[str, Any] | None, style: str | None = None) -> None:
        cpu = r.get("cpu") or {}
        cpu_text = (f"{_fmt(cpu.get('tree_s'), '.0f')}/{_fmt(cpu.get('broker_s'), '.0f')}/"
                    f"{_fmt(cpu.get('other_s'), '.0f')}") if cpu else ""
        if check:
            dups = check["records"] - check["distinct_keys"]
            expected = r.get("expected_records", cfg["records"])
            if r.get("duplicates_allowed"):
                ok = check["distinct_keys"] == expected and not check["bad_values"]
            else:
                ok = check["records"] == expected and dups == 0 and not check["bad_values"]
            check_text = (f"{check['records']:,} ({dups:,}" + (", ALO" if r.get("duplicates_allowed") else "")
                          + ")" + ("" if ok else " !"))
        else:
            check_text = ""
        steady = r.get("steady_rec_s")
        # Every run against the quix_eos median of this invocation (1.00x for quix_eos itself).
        vs_quix = _fmt(steady / quix, ".2f", "x") if steady and quix else ""
        table.add_row(
            name, _fmt(steady), _fmt(r.get("warm_rec_s")), _fmt(ratio, ".1%") if ratio else "", vs_quix,
            _fmt(r.get("from_start_rec_s")), _fmt(r.get("cold_start_s"), ".1f"),
            _fmt((r["first_batch_ms"] / 1000) if r.get("first_batch_ms") else None, ".1f"),
            _fmt(r.get("steady_batch_ms_mean")), _fmt(overhead, "+.0f") if overhead is not None else "",
            (_fmt(r.get("driver_commit_ms_mean")) + (f" (state {_fmt(r['driver_state_ms_mean'])})"
                                                     if r.get("driver_state_ms_mean") is not None else ""))
            if r.get("driver_commit_ms_mean") is not None else "",
            f"{_fmt(r.get('peak_rss_mb'))} / {_fmt(r.get('peak_pss_mb'))}", cpu_text,
            _fmt(r.get("client_cpu_s_per_m_records"), ".1f"), check_text,
            style=style)

    for name, r in runs.items():
        row(name, r, r.get("eos_vs_alo"), r.get("overhead_ms_per_batch"), r.get("check"))
    skipped = results.get("skipped_runs", {})
    for config in skipped:
        table.add_row(config, "skipped", *[""] * (len(table.columns) - 2), style="yellow")
    if cfg["repeat"] > 1:
        for config, s in results["summary"].items():
            kind = config.split("_")[0]
            row(f"{config} (median)", s, comparison.get(f"{kind}_eos_vs_alo") if config.endswith("eos") else None,
                comparison.get("overhead_ms_per_batch") if config == "spark_eos" else None, None, style="bold")
    console.print(table)
    for name, r in runs.items():
        if r.get("cold_start_breakdown"):
            console.print(f"\n{name}: where the cold start goes (--trace)\n" + render(r["cold_start_breakdown"]),
                          markup=False, highlight=False)
        if r.get("restart_first_checkpoint_s") is not None:
            console.print(f"{name}: killed {r['killed_at_s']} s after start with {r['killed_after_batches']} batch(es) "
                          f"committed; the restarted process committed its first checkpoint "
                          f"{r['restart_first_checkpoint_s']:.1f} s after its start", highlight=False)
    for config, why in skipped.items():
        console.print(f"[yellow]{config} skipped: {why}[/yellow]", markup=True, highlight=False)
    target_table = Table(title="issue 4, 11 and 21 targets (spark_eos" + (", medians)" if cfg["repeat"] > 1 else ")"))
    for column in ("target", "wanted", "measured", "met", "note"):
        target_table.add_column(column)
    for target in results["targets"]:  # not "row": that is the run-row function above
        met = {True: "[green]met[/green]", False: "[red]MISSED[/red]", None: "?"}[target["met"]]
        target_table.add_row(target["target"], target["wanted"], str(target["measured"]), met, target["note"])
    console.print(target_table)
    env = results["environment"]
    console.print(
        f"machine: {env['cpus']} CPUs; load average {env['loadavg_start']} at start, "
        f"{env['loadavg_end']} at end; quiet at start: {env['quiet_at_start']}; "
        f"broker: {results['broker']}")


# -- main ----------------------------------------------------------------------------------------

def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", default=None,
                        help="a running broker (else KAFKA_BOOTSTRAP_SERVERS, Docker, KAFKA_HOME or "
                             "Kafka from Maven Central)")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--max-offsets-per-trigger", type=int, default=250_000)
    parser.add_argument("--max-partitions", type=int, default=None,
                        help="eos.maxPartitions of the kit's source (the runs that read with it)")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--runs", default=None,
                        help=f"comma-separated subset of {', '.join(ALL_RUNS)} (default: all; "
                             f"{', '.join(STATE_URI_RUNS)} only with --state-uri)")
    parser.add_argument("--state-uri", default=None,
                        help="an object-store location (s3://bucket/prefix, ...) for spark_eos_s3: the sink's "
                             "state goes under a fresh prefix of it (deleted afterwards unless --keep); "
                             "credentials and endpoint from the environment (AWS_ENDPOINT_URL, ...)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="run every selected config this many times (interleaved); medians are compared")
    parser.add_argument("--memory-check-records", type=int, default=0,
                        help="also run spark_eos once on a topic of this many records (e.g. 2x --records, "
                             "same batch size) and compare peak memory: bounded by batch, not topic")
    parser.add_argument("--transaction-interval-ms", type=int, default=100,
                        help="raw_eos: commit a transaction this often")
    parser.add_argument("--quix-python", default=None,
                        help=f"quix_eos: a Python with quixstreams (default: a venv at {QUIX_VENV}, made with "
                             f"quixstreams=={QUIX_VERSION} if missing)")
    parser.add_argument("--quix-commit-interval-s", type=float, default=None,
                        help="quix_eos: Application(commit_interval=...), seconds per transaction "
                             "(default: Quix's own, 5 s)")
    parser.add_argument("--run-timeout-s", type=float, default=1800)
    parser.add_argument("--pause-s", type=float, default=3.0, help="pause between runs")
    parser.add_argument("--wait-quiet-s", type=float, default=0,
                        help="before starting, wait up to this long for the 1-minute load average "
                             "to drop below --quiet-load")
    parser.add_argument("--quiet-load", type=float, default=1.0)
    parser.add_argument("--work-dir", default=None, help="checkpoints, logs, metrics (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the work dir and the topics")
    parser.add_argument("--jvm-class-archive", default=None, metavar="PATH",
                        help="the driver class archive of the *_cds runs (default: one recorded in the work dir "
                             "before the runs, unmeasured)")
    parser.add_argument("--keep-env", action="store_true",
                        help="run with this environment as it is (by default PYTHONDONTWRITEBYTECODE is "
                             "dropped, as on a user's machine)")
    parser.add_argument("--no-warm-up", action="store_true",
                        help="the kit's Spark runs start no Python task workers ahead of the query")
    parser.add_argument("--stages", action="store_true",
                        help="the Spark runs' CPU by stage of the kit's record path, in microseconds per record "
                             "(bench/process_hooks/sitecustomize.py; costs a few percent of CPU)")
    parser.add_argument("--trace", action="store_true",
                        help="trace every Python process of the first repetition of each Spark run and "
                             "report where its cold start goes (bench/cold_start.py)")
    parser.add_argument("--spark-kafka-jars", default=None, metavar="PATHS|DIR",
                        help="Spark's own Kafka connector for the spark_builtin* runs: comma-separated jars or a "
                             "directory (spark-sql-kafka-0-10, spark-token-provider-kafka-0-10, kafka-clients, "
                             "commons-pool2); default: $KAFKA_EOS_SPARK_KAFKA_JARS, else the official artifacts "
                             "from Maven Central (the installed pyspark's version or the nearest served); "
                             "those runs are skipped only when none of these gives the jars")
    parser.add_argument("--out", default="bench-results.json")
    return parser.parse_args(argv)


def wait_until_quiet(limit_s: float, threshold: float) -> bool:
    deadline = time.monotonic() + limit_s
    while True:
        load = os.getloadavg()[0]
        if load < threshold:
            return True
        if time.monotonic() >= deadline:
            log(f"load average still {load:.2f} after waiting {limit_s:.0f} s; running anyway")
            return False
        log(f"load average {load:.2f} >= {threshold}; waiting for a quiet machine")
        time.sleep(min(30.0, max(1.0, deadline - time.monotonic())))


def _spark_command(args: argparse.Namespace, bootstrap: str, input_topic: str, output: str,
                   guarantee: str, work: Path, tag: str) -> list[str]:
    return [sys.executable, str(SPARK_PIPELINE), "--bootstrap", bootstrap, "--input", input_topic,
            "--output", output, "--checkpoint-dir", str(work / f"{tag}-checkpoint"), "--bounded",
            "--transform", "copy", "--max-offsets-per-trigger", str(args.max_offsets_per_trigger),
            "--delivery-guarantee", guarantee, "--master", args.master,
            "--metrics-file", str(work / f"{tag}.metrics.jsonl")]


def cpu_by_stage(stages_file: Path, records: int) -> dict[str, Any]:
    """The last cumulative line of every process in ``stages_file``, summed by stage: CPU seconds
    and microseconds per record of the run's input."""
    last: dict[int, dict[str, Any]] = {}
    for line in stages_file.read_text().splitlines() if stages_file.exists() else []:
        entry = json.loads(line)
        last[entry["pid"]] = entry["stages"]
    totals: dict[str, float] = {}
    for stages in last.values():
        for stage, figures in stages.items():
            totals[stage] = totals.get(stage, 0.0) + figures["cpu_s"]
    return {stage: {"cpu_s": round(cpu, 2), "us_per_record": round(cpu / records * 1e6, 2) if records else None}
            for stage, cpu in sorted(totals.items())}


def spark_env(base: dict[str, str], trace_file: Path | None = None) -> dict[str, str]:
    """``base`` with the bench's process hook on the path of the job and its Python workers: the
    sink's commit runs in Spark's Python workers, whose logging is not configured, and the hook
    has them log the "batch N committed" line (``COMMITTED_LINE``); with ``trace_file``, the
    processes' start-up trace too."""
    env = dict(base, KAFKA_EOS_BENCH_COMMIT_LOG="1", PYTHONPATH=os.pathsep.join(
        p for p in (str(PROCESS_HOOKS), base.get("PYTHONPATH", "")) if p))
    if trace_file is not None:
        env["KAFKA_EOS_BENCH_TRACE"] = str(trace_file)
    return env


def class_archive_path(args: argparse.Namespace, work: Path) -> Path:
    return Path(args.jvm_class_archive).expanduser() if args.jvm_class_archive else work / "spark-driver.jsa"


def state_location(args: argparse.Namespace, stamp: str, tag: str) -> str:
    return f"{args.state_uri.rstrip('/')}/bench-{stamp}-{tag}"


def selected_runs(args: argparse.Namespace) -> list[str]:
    if args.runs is None:
        return [run for run in ALL_RUNS if args.state_uri or run not in STATE_URI_RUNS]
    selected = [name.strip() for name in args.runs.split(",") if name.strip()]
    if not args.state_uri and set(selected) & set(STATE_URI_RUNS):
        raise SystemExit(f"{', '.join(sorted(set(selected) & set(STATE_URI_RUNS)))} needs --state-uri")
    unknown = set(selected) - set(ALL_RUNS)
    if unknown:
        raise SystemExit(f"unknown runs {sorted(unknown)}; choose from {', '.join(ALL_RUNS)}")
    return selected


def skip_spark_connector_runs(args: argparse.Namespace, selected: list[str],
                              skipped: dict[str, str]) -> SparkKafkaJars | None:
    """Spark's own Kafka connector for the selected SPARK_CONNECTOR_RUNS; without it those runs
    are taken out of ``selected`` and put in ``skipped`` with the reason."""
    wanted = [config for config in selected if config in SPARK_CONNECTOR_RUNS]
    if not wanted:
        return None
    jars = resolve_spark_kafka_jars(args.spark_kafka_jars)
    if jars.skip_reason:
        for config in wanted:
            log(f"{config} skipped: {jars.skip_reason}")
            skipped[config] = jars.skip_reason
            selected.remove(config)
    else:
        # source is a description ("Spark's Kafka connector 4.2.0 from Maven Central (...)") or the setting.
        label = f"the jars of {jars.source}" if jars.source in (SPARK_KAFKA_JARS_OPTION, SPARK_KAFKA_JARS_ENV) \
            else jars.source
        log(f"{', '.join(wanted)} on {label}: {jars.spark_jars}")
    return jars


def build_runs(args: argparse.Namespace, bootstrap: str, input_topic: str, stamp: str, work: Path,
               memory_topic: str | None, selected: list[str], quix: str | None,
               spark_kafka_jars: SparkKafkaJars | None = None) -> dict[str, Run]:
    """The runs in order; ``quix`` is the Python for quix_eos (selected only if there is one),
    ``spark_kafka_jars`` Spark's own connector for SPARK_CONNECTOR_RUNS (selected only if found)."""
    runs: dict[str, Run] = {}
    base_env = run_environment(args.keep_env)
    for repetition in range(1, args.repeat + 1):
        for config in ALL_RUNS:
            if config not in selected:
                continue
            name = config if args.repeat == 1 else f"{config}#{repetition}"
            tag = name.replace("_", "-").replace("#", "-")
            kind, short = config.split("_")[:2]
            guarantee = "exactly_once" if short == "eos" else "at_least_once"
            if config in SPARK_CONNECTOR_RUNS:
                # Spark's own sink is at-least-once; the kit's sink behind Spark's source is exactly-once.
                guarantee = "exactly_once" if SPARK_CONNECTOR_RUNS[config][1] != "kafka" else "at_least_once"
            output = f"bench-{stamp}-{tag}-out"
            run = Run(name, config, repetition, kind, guarantee, output, [], stderr_file=work / f"{tag}.stderr",
                      records=args.records)
            if kind == "raw":
                run.result_file = work / f"{tag}.json"
                run.command = [sys.executable, str(RAW_COPY), "--bootstrap", bootstrap, "--input", input_topic,
                               "--output", output, "--mode", guarantee,
                               "--transaction-interval-ms", str(args.transaction_interval_ms),
                               "--result-file", str(run.result_file)]
                run.env = base_env
            elif kind == "quix":
                assert quix is not None
                run.result_file = work / f"{tag}.json"
                run.command = [quix, str(QUIX_COPY), "--bootstrap", bootstrap, "--input", input_topic,
                               "--output", output, "--state-dir", str(work / f"{tag}-state"),
                               "--result-file", str(run.result_file)]
                if args.quix_commit_interval_s is not None:
                    run.command += ["--commit-interval-s", str(args.quix_commit_interval_s)]
                run.env = _quix_env(base_env)
            else:
                run.metrics_file = work / f"{tag}.metrics.jsonl"
                run.command = _spark_command(args, bootstrap, input_topic, output, guarantee, work, tag)
                if config in STATE_URI_RUNS:
                    run.command += ["--state-dir", state_location(args, stamp, tag)]
                if config in CLASS_ARCHIVE_RUNS:
                    run.command += ["--jvm-class-archive", str(class_archive_path(args, work))]
                if config in SPARK_CONNECTOR_RUNS:
                    assert spark_kafka_jars is not None and not spark_kafka_jars.skip_reason
                    source_format, sink_format = SPARK_CONNECTOR_RUNS[config]
                    run.command += ["--source-format", source_format, "--sink-format", sink_format,
                                    "--jars", spark_kafka_jars.spark_jars]
                # The first repetition of each Spark config is traced with --trace.
                run.trace_file = work / f"{tag}.trace.jsonl" if args.trace and repetition == 1 else None
                run.env = spark_env(base_env, run.trace_file)
                if args.stages:
                    run.stages_file = work / f"{tag}.stages.jsonl"
                    run.env["KAFKA_EOS_BENCH_STAGES"] = str(run.stages_file)
                if args.max_partitions:  # read only by the kit's source
                    run.command += ["--max-partitions", str(args.max_partitions)]
                if args.no_warm_up:
                    run.command += ["--no-warm-up"]
                if config in FOREACH_BATCH_RUNS:
                    run.command += ["--sink-format", FOREACH_BATCH_SINK]
                if config in ZIP_RUNS:
                    run.env["KAFKA_EOS_WORKER_PYTHON"] = "0"
            runs[name] = run
    if memory_topic is not None:
        # The same exactly-once job on a bigger topic, same batch size: memory must not follow.
        name, tag = f"spark_eos@{args.memory_check_records:,}", "spark-eos-memory"
        output = f"bench-{stamp}-{tag}-out"
        run = Run(name, MEMORY_RUN, 1, "spark", "exactly_once", output,
                  _spark_command(args, bootstrap, memory_topic, output, "exactly_once", work, tag),
                  env=spark_env(base_env), metrics_file=work / f"{tag}.metrics.jsonl",
                  stderr_file=work / f"{tag}.stderr", records=args.memory_check_records)
        runs[name] = run
    return runs


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # A SIGTERM (a stopped bench) unwinds as an exit, so the broker and jobs it started are stopped.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    quiet = wait_until_quiet(args.wait_quiet_s, args.quiet_load) if args.wait_quiet_s > 0 else None
    load_start = [round(v, 2) for v in os.getloadavg()]
    own_work = args.work_dir is None
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="kafka-eos-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    input_topic = f"bench-{stamp}-in"
    broker: Broker = find_broker(args.bootstrap)
    topics: list[str] = []
    runs: dict[str, Run] = {}
    try:
        bootstrap = broker.bootstrap_servers
        pid_match = re.search(r"pid (\d+)", broker.origin)
        broker_pid = int(pid_match.group(1)) if broker.owned and pid_match else None
        log(f"broker: {broker.origin} at {bootstrap}; work dir {work}")
        memory_topic = f"bench-{stamp}-in-memory" if args.memory_check_records else None
        selected = selected_runs(args)
        quix: str | None = None
        quix_version: str | None = None
        skipped: dict[str, str] = {}  # config -> why it did not run
        if "quix_eos" in selected:
            quix, found = quix_python(args.quix_python)
            if quix:
                quix_version = found
            else:
                log(f"quix_eos skipped: {found}")
                skipped["quix_eos"] = found
                selected.remove("quix_eos")
        spark_kafka_jars = skip_spark_connector_runs(args, selected, skipped)
        runs = build_runs(args, bootstrap, input_topic, stamp, work, memory_topic, selected, quix, spark_kafka_jars)
        topics = [input_topic] + ([memory_topic] if memory_topic else []) + [run.output for run in runs.values()]
        archive = class_archive_path(args, work)
        if any(run.config in CLASS_ARCHIVE_RUNS for run in runs.values()) and not archive.is_file():
            from connectors.spark.jvm_class_archive import create

            began = time.monotonic()
            create(archive, master=args.master)
            log(f"JVM class archive recorded at {archive} in {time.monotonic() - began:.0f} s (not measured)")
        create_topics(bootstrap, topics, args.partitions)
        load_s = load_input(bootstrap, input_topic, args.records, args.partitions, args.value_bytes)
        log(f"loaded {args.records:,} records into {input_topic} in {load_s:.1f} s")
        if memory_topic:
            seconds = load_input(bootstrap, memory_topic, args.memory_check_records, args.partitions,
                                 args.value_bytes)
            log(f"loaded {args.memory_check_records:,} records into {memory_topic} in {seconds:.1f} s")
        for i, run in enumerate(runs.values()):
            if i:
                time.sleep(args.pause_s)
            log(f"{run.name}: {' '.join(run.command[1:3])} ...")
            if run.config in RESTART_RUNS:
                execute_restart(run, bootstrap, args.partitions, work, broker_pid, args.run_timeout_s)
            else:
                execute(run, bootstrap, args.partitions, work, broker_pid, args.run_timeout_s)
            check = check_output(bootstrap, run.output, args.partitions)
            run.results["check"] = check.__dict__
            run.results["expected_records"] = run.records
            # Spark's own sink is at-least-once: after a SIGKILL it writes the lost batch again.
            run.results["duplicates_allowed"] = run.guarantee == "at_least_once" and run.config in RESTART_RUNS
            r = run.results
            log(f"{run.name}: exit {r['exit_code']}, steady {_fmt(r.get('steady_rec_s'))} rec/s, "
                f"cold start {_fmt(r.get('cold_start_s'), '.1f')} s, peak RSS {r['peak_rss_mb']:,.0f} MB, "
                f"output {check.records:,} records / {check.distinct_keys:,} keys, "
                f"{check.markers / args.partitions / max(1, -(-(run.records or 0) // args.max_offsets_per_trigger)):.1f} "
                "markers per output partition per batch"
                + (f"; DISTURBED: {r['cpu']['machine_steal_s']} s of CPU stolen by the hypervisor "
                   f"({r['stolen_share']:.0%} of the machine)" if r.get("disturbed") else ""))
        summary = summarize(runs)
        comparison = compare(runs, summary)
        results = {
            "config": {"records": args.records, "value_bytes": args.value_bytes, "partitions": args.partitions,
                       "max_offsets_per_trigger": args.max_offsets_per_trigger, "master": args.master,
                       "transaction_interval_ms": args.transaction_interval_ms, "repeat": args.repeat,
                       "memory_check_records": args.memory_check_records,
                       "quix_python": quix, "quix_commit_interval_s": args.quix_commit_interval_s,
                       "spark_kafka_jars": list(map(str, spark_kafka_jars.jars)) if spark_kafka_jars else None,
                       "spark_kafka_connector": spark_kafka_jars.source if spark_kafka_jars else None,
                       "runs": list(runs)},
            "environment": {"cpus": os.cpu_count(), "loadavg_start": load_start,
                            "loadavg_end": [round(v, 2) for v in os.getloadavg()],
                            "quiet_at_start": quiet, "python": sys.version.split()[0],
                            "quixstreams": quix_version,
                            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")},
            "broker": broker.origin,
            "input": {"topic": input_topic, "load_s": load_s},
            "runs": {name: run.results for name, run in runs.items()},
            "summary": summary,
            "comparison": comparison,
            "skipped_runs": skipped,
            "reference": {"quix_streams_eos_rec_s": QUIX_EOS_REC_S},
        }
        results["targets"] = targets(summary, comparison, args.max_offsets_per_trigger, skipped.get("quix_eos"))
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
        print_tables(results)
        log(f"results written to {args.out}")
        return 0
    finally:
        if topics and not args.keep and not broker.owned:
            delete_topics(broker.bootstrap_servers, topics)
        if args.state_uri and not args.keep:
            for run in [r for r in runs.values() if r.config in STATE_URI_RUNS]:
                open_state_storage(run.command[run.command.index("--state-dir") + 1]).delete_folder()
        broker.stop()
        if own_work and not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
