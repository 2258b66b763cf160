"""The soak: a query that runs for hours on a 3-node cluster while its nodes are bounced and its
driver is killed, with what must stay flat sampled all along (issue 28).

    python bench/soak.py [--minutes 120] [--rate 200] [--bounce-every-s 180]
                         [--driver-kill-every-min 30] [--out bench/soak-results/<time>]

Not in CI: it runs for hours. What it does:

1. starts a 3-node KRaft cluster (every topic replicated 3 times, min ISR 2) of the official
   Apache Kafka from Maven Central (``KAFKA_EOS_KAFKA_VERSION``, default the newest 4.x), or from
   ``KAFKA_HOME``;
2. produces ``--rate`` records a second to the input, each with an id of its own, all along;
3. runs ``examples/spark_pipeline.py`` unbounded on Spark's own source (``format("kafka")``, the
   official connector from Maven Central, or ``--spark-kafka-jars``) into ``format("kafka-eos")``,
   a micro-batch every ``--trigger-interval``;
4. SIGKILLs one node every ``--bounce-every-s`` seconds and starts it again (the next bounce only
   once every replica is back in sync), and SIGKILLs the driver's whole process group every
   ``--driver-kill-every-min`` minutes and starts it again from its checkpoint; a query that ends
   by itself is a failure, counted and restarted;
5. every ``--sample-every-s`` seconds samples: the PSS and open file descriptors of each broker,
   of the driver's JVM, of the driver's Python and of the Python workers (summed); the
   transactional ids the brokers know with the query's prefix, and the open ones; the objects of
   the kit's state (``--state-dir``) and of Spark's checkpoint; the commit times the sink logged
   since the last sample (``batch N committed: ... X ms``); the input produced and the output
   committed;
6. at the end stops the bounces and the input, waits until the output's committed records
   number the input's, stops the query, runs it once more bounded from its checkpoint (what the
   kill left open), and verifies the output with ``kafka-eos verify``'s check: every input id
   exactly once, and no open transaction left.

Written to ``--out``: ``samples.jsonl`` (one sample a line), ``events.jsonl`` (bounces, kills,
failures), ``summary.json`` and ``summary.md`` (the figures: each series' median over the first
and over the last ``--window-min`` minutes after the warm-up, and their ratio) and ``soak.png``
(every series over time, with the bounces and the driver kills marked). Nothing is asserted: it
reports. Its exit code is 0 when the output is exactly-once and the query never failed by itself.

matplotlib comes with the ``tools`` extra (``pip install -e '.[tools,test]'``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import statistics
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
# The soak drives the example job as the integration tests do (their job runner and command).
sys.path.insert(0, str(REPO / "integration_tests"))
# The test kit (kafka_testkit/) is in the checkout only: after the installed packages.
sys.path.append(str(REPO))

from cluster_faults import RunningQuery  # noqa: E402
from confluent_kafka import Producer  # noqa: E402

from connectors.kafka.clients.broker_retry import BrokerRetryPolicy  # noqa: E402
from connectors.kafka.clients.factory import clients_for  # noqa: E402
from connectors.kafka.clients import KafkaClients, TopicPartition  # noqa: E402
from connectors.tools.verify import verify  # noqa: E402
from connectors.servers.kafka_distribution import from_environment  # noqa: E402
from connectors.servers.local_cluster import LocalKafkaCluster  # noqa: E402
from kafka_testkit.node_bouncer import Bouncer  # noqa: E402
from proc_sampling import cmdline, machine_cpu, open_fds, process_tree, proc_stats, pss  # noqa: E402
from run_bench import COMMITTED_LINE, spark_env  # noqa: E402
from spark_job import spark_job_command  # noqa: E402
from spark_kafka_jars import resolve as resolve_spark_kafka_jars  # noqa: E402

log = logging.getLogger("soak")

_RETRY = BrokerRetryPolicy(timeout_ms=180_000)
PREFIX = "soak"
SAMPLES_VERSION = 1


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=120.0, help="how long the query runs under faults")
    parser.add_argument("--rate", type=int, default=200, help="input records a second")
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--bounce-every-s", type=float, default=180.0, help="a node SIGKILLed and restarted this often")
    parser.add_argument("--bounce-downtime-s", type=float, default=5.0, help="how long a bounced node stays down")
    parser.add_argument("--driver-kill-every-min", type=float, default=30.0,
                        help="the driver's process group SIGKILLed and restarted this often")
    parser.add_argument("--sample-every-s", type=float, default=30.0)
    parser.add_argument("--trigger-interval", default="5 seconds", help="the query's processing-time trigger")
    parser.add_argument("--warmup-min", type=float, default=10.0,
                        help="left out of the first window of the summary (JIT, caches, Spark's first batches)")
    parser.add_argument("--window-min", type=float, default=30.0,
                        help="the summary compares each series' median over the first and the last such window")
    parser.add_argument("--spark-kafka-jars", default=None,
                        help="Spark's Kafka connector jars (default: KAFKA_EOS_SPARK_KAFKA_JARS, else Maven Central)")
    parser.add_argument("--out", type=Path, default=None, help="default: bench/soak-results/<UTC time>")
    args = parser.parse_args(argv)
    for name in ("minutes", "rate", "bounce_every_s", "driver_kill_every_min", "sample_every_s", "window_min"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name.replace('_', '-')} must be above 0, got {getattr(args, name)}")
    return args


# -- the input --------------------------------------------------------------------------------------

class SteadyInput(threading.Thread):
    """Produces ``rate`` records a second (ids ``in-0``, ``in-1``, ...), catching up after a stall
    (a bounce may hold the producer's flush): the count sent follows the clock, not the stalls."""

    def __init__(self, bootstrap: str, topic: str, rate: int) -> None:
        super().__init__(name="steady-input", daemon=True)
        self._producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": "true",
                                   "message.timeout.ms": "300000", "linger.ms": "20", "log_level": 3})
        self._topic = topic
        self._rate = rate
        self._stop_event = threading.Event()
        self.produced = 0
        self.errors: list[str] = []

    def _delivered(self, err: Any, _msg: Any) -> None:
        if err is not None:
            self.errors.append(str(err))

    def run(self) -> None:
        try:
            self._produce()
        except Exception as exc:  # the soak's loop sees the thread gone and ends the soak
            log.exception("the input stopped")
            self.errors.append(repr(exc))

    def _produce(self) -> None:
        started = time.monotonic()
        while not self._stop_event.wait(0.1):
            due = int((time.monotonic() - started) * self._rate)
            while self.produced < due:
                record_id = f"in-{self.produced}"
                value = json.dumps({"id": record_id, "seq": self.produced, "customer": "acme", "amount": 1.0})
                try:
                    self._producer.produce(self._topic, value.encode(), key=record_id.encode(),
                                           on_delivery=self._delivered)
                except BufferError:
                    self._producer.poll(0.5)  # the queue is full while a partition has no leader
                    continue
                self.produced += 1
            self._producer.poll(0)

    def stop(self) -> None:
        self._stop_event.set()
        if self.is_alive():
            self.join(timeout=60)
        remaining = self._producer.flush(300)
        if remaining:
            self.errors.append(f"{remaining} records not acknowledged after 300 s")


# -- sampling ---------------------------------------------------------------------------------------

def _role(command: str) -> str:
    if "org.apache.spark.deploy.SparkSubmit" in command or command.startswith("java"):
        return "driver JVM"
    if "pyspark.daemon" in command:
        return "Python daemon"
    if "spark_pipeline.py" in command:
        return "driver Python"
    return "other"


def _files(root: Path) -> int:
    return sum(len(files) for _dirs, _subdirs, files in os.walk(root)) if root.exists() else 0


@dataclass
class Sample:
    version: int
    time_s: float  # since the soak began
    pss_mib: dict[str, float]
    fds: dict[str, int]
    transactional_ids: int | None
    open_transactions: int | None
    kit_state_objects: int
    spark_checkpoint_objects: int
    commits: int
    commit_ms_median: float | None
    commit_ms_max: float | None
    produced: int
    #: The output's read_committed end offsets, summed: its records plus a marker per partition
    #: and transaction, so it only tells that the output moves.
    output_committed: int | None
    #: The whole machine's busy CPU since the last sample, % of all its cores: what else ran shows.
    machine_busy_pct: float | None = None


class Sampler:
    """One :class:`Sample` at a time of the cluster, the query and what they keep."""

    def __init__(self, cluster: LocalKafkaCluster, query: RunningQuery, clients: KafkaClients, output: str,
                 state_dir: Path, checkpoint_dir: Path, started: float) -> None:
        self._cluster, self._query, self._clients, self._output = cluster, query, clients, output
        self._state_dir, self._checkpoint_dir, self._started = state_dir, checkpoint_dir, started
        self._log_offsets: dict[int, int] = {}
        self._cpu_at: tuple[float, float] = (time.monotonic(), machine_cpu()[0])

    def _new_commit_times(self) -> list[float]:
        """The sink's commit times logged since the last sample, from every run's log."""
        times: list[float] = []
        for run in range(1, self._query.runs + 1):
            path = self._query.log_dir / f"run-{run}.log"
            if not path.exists():
                continue
            with open(path, "rb") as f:
                f.seek(self._log_offsets.get(run, 0))
                text = f.read()
            # Only whole lines: a line being written is read at the next sample.
            whole = text[:text.rfind(b"\n") + 1]
            self._log_offsets[run] = self._log_offsets.get(run, 0) + len(whole)
            times += [float(m.group(4)) for m in COMMITTED_LINE.finditer(whole.decode("utf-8", "replace"))]
        return times

    def _processes(self) -> tuple[dict[str, float], dict[str, int]]:
        stats = proc_stats()
        pss_by: dict[str, float] = {}
        fds_by: dict[str, int] = {}
        for node_id in sorted(self._cluster.nodes):
            pid = self._cluster.pid(node_id)
            size = pss(pid) if pid is not None else 0
            if size:  # not a bounced node that is down
                pss_by[f"broker {node_id}"] = size / 2**20
                fds_by[f"broker {node_id}"] = open_fds(pid)
        process = self._query.process
        if process is not None and process.poll() is None:
            tree = process_tree(process.pid, stats)
            roles = {pid: _role(cmdline(pid)) for pid in tree}
            for pid in tree:
                # pyspark's daemon forks its workers, which keep its command line.
                role = "Python workers" if roles.get(stats[pid].ppid) == "Python daemon" else roles[pid]
                size = pss(pid)
                if size == 0:
                    continue  # exited meanwhile, or a process whose memory is not readable
                pss_by[role] = pss_by.get(role, 0.0) + size / 2**20
                fds_by[role] = fds_by.get(role, 0) + open_fds(pid)
        return pss_by, fds_by

    def _transactions(self) -> tuple[int | None, int | None]:
        # A client per sample, closed after it: one left open per sample is a connection to every
        # broker, which the brokers' file descriptors would count (the first soak's did).
        control = self._clients.txn_control()
        try:
            return (len(control.list_transactions(f"{PREFIX}-")),
                    len(control.list_open_transactions(f"{PREFIX}-")))
        except Exception as exc:  # a bounce under way: this sample goes without
            log.warning("transactions not listed this time: %s", exc)
            return None, None
        finally:
            control.close()

    def _output_committed(self) -> int | None:
        admin = self._clients.admin()
        try:
            partitions = [TopicPartition(self._output, p) for p in admin.partitions(self._output)]
            return sum(admin.list_offsets(partitions, "latest", read_committed=True).values())
        except Exception as exc:
            log.warning("output offsets not read this time: %s", exc)
            return None
        finally:
            admin.close()

    def sample(self, produced: int) -> Sample:
        pss_by, fds_by = self._processes()
        ids, open_ = self._transactions()
        commit_ms = self._new_commit_times()
        now, busy = time.monotonic(), machine_cpu()[0]
        busy_pct = 100 * (busy - self._cpu_at[1]) / ((now - self._cpu_at[0]) * (os.cpu_count() or 1))
        self._cpu_at = (now, busy)
        return Sample(SAMPLES_VERSION, round(time.monotonic() - self._started, 1),
                      {k: round(v, 1) for k, v in pss_by.items()}, fds_by, ids, open_,
                      _files(self._state_dir), _files(self._checkpoint_dir), len(commit_ms),
                      statistics.median(commit_ms) if commit_ms else None, max(commit_ms, default=None),
                      produced, self._output_committed(), round(busy_pct, 1))


# -- the summary and the plot -----------------------------------------------------------------------

def _series(samples: list[Sample]) -> dict[str, list[tuple[float, float]]]:
    """Every figure that must stay flat, as (time_s, value) points."""
    series: dict[str, list[tuple[float, float]]] = {}

    def add(name: str, t: float, value: float | None) -> None:
        if value is not None:
            series.setdefault(name, []).append((t, value))

    for s in samples:
        for role, mib in s.pss_mib.items():
            add(f"PSS MiB, {role}", s.time_s, mib)
        for role, count in s.fds.items():
            add(f"open FDs, {role}", s.time_s, count)
        add("transactional ids on the brokers", s.time_s, s.transactional_ids)
        add("open transactions", s.time_s, s.open_transactions)
        add("kit state objects", s.time_s, s.kit_state_objects)
        add("Spark checkpoint objects", s.time_s, s.spark_checkpoint_objects)
        add("commit ms (median of the interval)", s.time_s, s.commit_ms_median)
        add("machine CPU busy, %", s.time_s, s.machine_busy_pct)
    return series


def summarize(samples: list[Sample], warmup_s: float, window_s: float) -> list[dict[str, Any]]:
    """Each series' median over the first window after the warm-up and over the last window."""
    end = samples[-1].time_s if samples else 0.0
    rows = []
    for name, points in _series(samples).items():
        first = [v for t, v in points if warmup_s <= t < warmup_s + window_s]
        last = [v for t, v in points if t >= end - window_s]
        a = statistics.median(first) if first else None
        b = statistics.median(last) if last else None
        rows.append({"series": name, "first": a, "last": b, "max": max(v for _t, v in points),
                     "ratio": (b / a) if a and b is not None else None})
    return rows


def plot(samples: list[Sample], events: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = _series(samples)
    panels = [("PSS, MiB", "PSS MiB, "), ("open file descriptors", "open FDs, "),
              ("transactional ids and state objects",
               ("transactional ids", "open transactions", "kit state objects", "Spark checkpoint objects")),
              ("commit time, ms (median per sample)", "commit ms"),
              ("the machine's CPU, % busy (all cores; anything else running shows here)", "machine CPU")]
    fig, axes = plt.subplots(len(panels), 1, figsize=(11, 2.6 * len(panels)), sharex=True)
    for ax, (title, match) in zip(axes, panels):
        for name, points in series.items():
            if (name.startswith(match) if isinstance(match, str) else name.startswith(match)):
                label = name.split(", ", 1)[1] if name.startswith(("PSS", "open FDs")) else name
                ax.plot([t / 60 for t, _ in points], [v for _, v in points], label=label, linewidth=1)
        for event in events:
            if event["event"] == "bounce":
                ax.axvline(event["time_s"] / 60, color="0.7", linewidth=0.6, zorder=0)
            elif event["event"] in ("driver kill", "query failed"):
                ax.axvline(event["time_s"] / 60, color="tab:red", linewidth=1, linestyle="--", zorder=0)
        ax.set_title(title, fontsize=9, loc="left")
        ax.legend(fontsize=7, loc="upper left", ncols=4)
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("minutes (grey: a node bounced; red dashed: the driver killed)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:,.1f}"


def markdown(meta: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    lines = [f"Soak of {meta['minutes']:g} min on {meta['kafka']} (3 nodes, RF 3, min ISR 2), Spark's source "
             f"({meta['connector']}) into format(\"kafka-eos\"), {meta['rate']} records/s, a micro-batch every "
             f"{meta['trigger_interval']}: {meta['bounces']} node bounces, {meta['driver_kills']} driver kills, "
             f"{len(meta['query_failures'])} query failures; {meta['verdict']}.", "",
             f"| series | median, first {meta['window_min']:g} min after {meta['warmup_min']:g} min | "
             f"median, last {meta['window_min']:g} min | last / first | max |",
             "|---|---:|---:|---:|---:|"]
    for row in rows:
        ratio = f"{row['ratio']:.2f}" if row["ratio"] is not None else "-"
        lines.append(f"| {row['series']} | {_fmt(row['first'])} | {_fmt(row['last'])} | {ratio} | {_fmt(row['max'])} |")
    return "\n".join(lines) + "\n"


# -- the run ----------------------------------------------------------------------------------------

@dataclass
class Soak:
    args: argparse.Namespace
    out: Path
    events: list[dict[str, Any]] = field(default_factory=list)
    started: float = 0.0

    def event(self, kind: str, **details: Any) -> None:
        entry = {"event": kind, "time_s": round(time.monotonic() - self.started, 1), **details}
        self.events.append(entry)
        with open(self.out / "events.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")
        log.info("%s %s", kind, details or "")

    def run(self) -> int:
        args = self.args
        jars = resolve_spark_kafka_jars(args.spark_kafka_jars)
        if jars.skip_reason:
            log.error("no Spark Kafka connector: %s", jars.skip_reason)
            return 2
        distribution = from_environment(os.environ.get("KAFKA_HOME", "").strip(),
                                        os.environ.get("KAFKA_EOS_KAFKA_VERSION"))
        cluster = LocalKafkaCluster(distribution, self.out / "cluster")
        cluster.start()
        try:
            return self._run_on(cluster, jars)
        finally:
            cluster.stop()

    def _run_on(self, cluster: LocalKafkaCluster, jars: Any) -> int:
        args = self.args
        bootstrap = cluster.bootstrap_servers
        clients = clients_for(bootstrap)
        source, output = "soak-in", "soak-out"
        admin = clients.admin()
        for topic in (source, output):
            admin.create_topic(topic, args.partitions)  # the cluster's default: 3 replicas, min ISR 2
        state_dir, checkpoint_dir = self.out / "state", self.out / "checkpoint"
        extra = ("--transactional-id-prefix", PREFIX, "--trigger-interval", args.trigger_interval,
                 "--source-format", "kafka", "--jars", jars.spark_jars, "--state-dir", str(state_dir))
        command = [a for a in spark_job_command(bootstrap, source, output, checkpoint_dir, batch_records=100_000,
                                                extra=extra) if a != "--bounded"]
        (self.out / "logs").mkdir(exist_ok=True)
        query = RunningQuery(command, self.out / "logs", env=spark_env(dict(os.environ)))
        steady = SteadyInput(bootstrap, source, args.rate)
        bouncer = Bouncer(cluster, period_s=args.bounce_every_s, downtime_s=args.bounce_downtime_s, seed=28)
        self.started = time.monotonic()
        sampler = Sampler(cluster, query, clients, output, state_dir, checkpoint_dir, self.started)
        meta: dict[str, Any] = {"version": SAMPLES_VERSION, "minutes": args.minutes, "rate": args.rate,
                                "trigger_interval": args.trigger_interval, "kafka": cluster.distribution.description,
                                "connector": jars.source, "warmup_min": args.warmup_min,
                                "window_min": args.window_min, "started_utc": datetime.now(timezone.utc).isoformat()}
        samples: list[Sample] = []
        steady.start()
        query.start()
        bouncer.start()
        seen_bounces, failures_seen, kills = 0, 0, 0
        next_kill = self.started + args.driver_kill_every_min * 60
        next_sample = self.started
        end = self.started + args.minutes * 60
        try:
            while (now := time.monotonic()) < end:
                if not steady.is_alive():
                    self.event("input failed", errors=steady.errors)
                    break
                query.check()
                while failures_seen < len(query.failures):
                    self.event("query failed", detail=query.failures[failures_seen])
                    failures_seen += 1
                while seen_bounces < len(bouncer.bounces):
                    self.event("bounce", node=bouncer.bounces[seen_bounces].node_id)
                    seen_bounces += 1
                if now >= next_kill:
                    query.kill()
                    kills += 1
                    self.event("driver kill", run=query.runs)
                    next_kill += args.driver_kill_every_min * 60
                if now >= next_sample:
                    sample = sampler.sample(steady.produced)
                    samples.append(sample)
                    with open(self.out / "samples.jsonl", "a", encoding="utf-8") as f:
                        f.write(json.dumps(asdict(sample)) + "\n")
                    next_sample += args.sample_every_s
                time.sleep(1.0)
        except BaseException:
            query.stop()  # interrupted (SIGTERM, Ctrl-C) or broken: no driver may outlive the soak
            raise
        finally:
            bouncer.stop()
            steady.stop()
        self.event("faults stopped", produced=steady.produced)
        try:
            verdict = self._finish(clients, query, command, source, output, steady.produced)
        except BaseException:
            query.stop()
            raise
        meta.update(bounces=len(bouncer.bounces), bounce_errors=bouncer.errors, driver_kills=kills,
                    query_failures=query.failures, produced=steady.produced, input_errors=steady.errors,
                    verdict=verdict["verdict"], verify=verdict)
        rows = summarize(samples, args.warmup_min * 60, args.window_min * 60)
        (self.out / "summary.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
        (self.out / "summary.md").write_text(markdown(meta, rows))
        plot(samples, self.events, self.out / "soak.png")
        print((self.out / "summary.md").read_text())
        print(f"written to {self.out}")
        ok = verdict["verdict"] == "exactly-once" and not query.failures and not steady.errors
        return 0 if ok else 1

    def _finish(self, clients: KafkaClients, query: RunningQuery, command: list[str],
                source: str, output: str, produced: int) -> dict[str, Any]:
        """Wait for the output, stop the query, recover what the stop left open, and verify.

        The output has caught up when its end offsets (records and transaction markers) are past
        the input's count and have not moved for 30 s; the bounded run recovers the rest anyway."""
        admin = clients.admin()
        partitions = [TopicPartition(output, p) for p in admin.partitions(output)]
        deadline = time.monotonic() + 900
        last, still_since = -1, time.monotonic()
        while time.monotonic() < deadline:
            query.check()
            now = sum(_RETRY.call(lambda: admin.list_offsets(partitions, "latest", read_committed=True),
                                  "end offsets").values())
            if now != last:
                last, still_since = now, time.monotonic()
            elif now >= produced and time.monotonic() - still_since >= 30:
                break
            time.sleep(5)
        query.stop()
        self.event("query stopped")
        bounded = [*command, "--bounded"]
        final = RunningQuery(bounded, self.out / "logs", env=spark_env(dict(os.environ)))
        final.runs = query.runs
        final.start()
        assert final.process is not None
        code = final.process.wait(timeout=1800)
        self.event("bounded run from the checkpoint", exit_code=code)
        (self.out / "verify").mkdir(exist_ok=True)
        report = verify(clients, source, output, id_spec="key", work_dir=self.out / "verify")
        open_left = _RETRY.call(lambda: clients.txn_control().list_open_transactions(f"{PREFIX}-"),
                                "open transactions")
        exactly_once = report.exactly_once and code == 0 and not open_left
        return {"verdict": "exactly-once" if exactly_once else "NOT exactly-once", "counts": report.counts,
                "final_run_exit_code": code, "open_transactions_left": len(open_left)}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kafka").setLevel(logging.WARNING)  # kafka-python logs every connection at INFO
    out = args.out or REPO / "bench" / "soak-results" / datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out.mkdir(parents=True, exist_ok=True)
    soak = Soak(args, out)

    def stop(_signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    return soak.run()


if __name__ == "__main__":
    sys.exit(main())
