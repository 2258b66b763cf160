"""What one batch's delivery costs at a cluster's scale, by write tasks and output partitions
(issue 54, item 4), and the cost model of ``docs/scaling.md`` fitted to it.

    python bench/scale_bench.py [--tasks 2,16,64,256] [--partitions 4,64,256] [--records 160000]
                                [--slots 8] [--repeat 2] [--held-out 32x128] [--out scale.json]

Each point is one batch of ``--records`` keyed records written by T tasks into a topic of P
partitions, on a thread pool of ``--slots`` threads standing in for the cluster's task slots, in
three ways, one after another in the same invocation:

- ``alo``, at-least-once through the sink's own task writer: a producer per task, no transaction,
  each task flushing at its end, as Spark's ``KafkaDataWriter.commit`` does (Spark's own sink
  shares one producer per executor among its tasks, which saves the per-task producer set-up; the
  kit cannot share a transaction, so the difference to ``eos`` is exactly what transactions cost);
- ``eos``, the kit's sink unaligned: each task a transaction of its own through the sink's task
  writer (``KafkaTransactionWriter``), touching every partition its rows reach (T x P markers), then
  the batch's commit by the sink's driver (``SparkSinkDriver.commit``: the store, then one EndTxn
  round);
- ``eos-aligned``, the same with the rows of each partition in one task (what both sinks' aligned
  write does): P markers, and only the tasks that got a partition open a transaction.

Reported per point and way, medians of ``--repeat``: the batch's time split into write (the tasks:
producer set-up, produce, flush or pre-commit, on the slots) and commit (the driver's round), the
EndTxn requests, the markers (offsets the topic took beyond its records), and producers. The
cost model of the kit's batch, ``batch = c0 + c_task * T / slots + c_txn * EndTxn + c_pair * M +
c_partition * P`` (M, the task-partition pairs, is the markers: T x P unaligned, P aligned), is fitted by least
squares to the grid's kit points; the ``--held-out`` point is run too, not fitted, and predicted. The records in every output are counted: each batch must hold them once.

Spark itself is not in these runs (its task scheduling and Python workers are the same for every
sink, and ``bench/run_bench.py`` measures them side by side at one point); the cluster is the 3-node
cluster of ``connectors/servers/local_cluster.py`` at replication 3 (or
``KAFKA_EOS_CLUSTER_BOOTSTRAP_SERVERS``), on the same machine. Nothing is asserted: it reports.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from confluent_kafka.admin import AdminClient  # noqa: E402
from pyspark.sql.types import BinaryType, StructField, StructType  # noqa: E402

from connectors.kafka.clients import ProduceBatch, TopicPartition  # noqa: E402
from connectors.kafka.clients.factory import clients_for  # noqa: E402
from connectors.kafka.sink.internal.transactional_ids import TransactionalIdPool  # noqa: E402
from connectors.kafka.sink.writer import KafkaTransactionWriter  # noqa: E402
from connectors.servers.local_cluster import find_cluster  # noqa: E402
from connectors.spark.batch_context import BatchContext  # noqa: E402
from connectors.spark.commit_message import KafkaCommitMessage  # noqa: E402
from connectors.spark.options import parse_sink_options  # noqa: E402
from connectors.spark.sink_driver import SparkSinkDriver  # noqa: E402
from run_bench import log  # noqa: E402

WAYS = ("alo", "eos", "eos-aligned")
VALUE = b"x" * 100


@dataclass
class Figures:
    write_s: float
    commit_s: float
    end_txns: int
    markers: int
    producers: int
    records: int

    @property
    def batch_s(self) -> float:
        return self.write_s + self.commit_s


def _rows_of(task: int, tasks: int, records: int, partitions: int, aligned: bool) -> list[tuple[int, bytes]]:
    """Task ``task``'s (partition, key) rows of the batch's ``records``. Unaligned, record i is in
    task i % T and goes to partition (i // T) % P, so every task reaches every partition (as keys
    hashed from any input partition do); aligned, record i goes to partition i % P, in task
    partition % T."""
    if aligned:
        return [(i % partitions, b"k%d" % i) for i in range(records) if (i % partitions) % tasks == task]
    return [((i // tasks) % partitions, b"k%d" % i) for i in range(task, records, tasks)]


def _markers(bootstrap: str, topic: str, partitions: int, records: int) -> tuple[int, int]:
    """(records held, markers) of ``topic`` under read_committed."""
    clients = clients_for(bootstrap)
    admin = clients.admin()
    reader = clients.reader(read_committed=True)
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        start = admin.list_offsets(tps, "earliest", read_committed=True)
        # EndTxn returns before the markers land: the LSO reaches the high watermark once they have.
        deadline = time.monotonic() + 60
        while (end := admin.list_offsets(tps, "latest", read_committed=True)) != admin.list_offsets(
                tps, "latest", read_committed=False) and time.monotonic() < deadline:
            time.sleep(0.2)
        held = sum(len(batch) for batch in reader.read_batches(
            {tp: (start[tp], end[tp]) for tp in tps if end[tp] > start[tp]}, include_headers=False))
        return held, sum(end[tp] - start[tp] for tp in tps) - held
    finally:
        reader.close()
        admin.close()


def _alo(bootstrap: str, topic: str, tasks: int, partitions: int, records: int, slots: int, work: Path) -> Figures:
    """The same tasks through the sink's task writer at-least-once: a producer each, no transaction,
    a flush at the task's end."""
    clients = clients_for(bootstrap)
    config = parse_sink_options({"kafka.bootstrap.servers": bootstrap, "topic": topic,
                                 "eos.deliveryGuarantee": "at_least_once", "eos.stateDir": str(work / topic)},
                                streaming=False).config

    def task(slot: int) -> None:
        rows = _rows_of(slot, tasks, records, partitions, aligned=False)
        writer = KafkaTransactionWriter(clients, config, None, 0)
        try:
            writer.write_batch(ProduceBatch(topic=topic, values=[VALUE] * len(rows), keys=[k for _, k in rows],
                                            partitions=[p for p, _ in rows]))
            writer.pre_commit()
        except BaseException:
            writer.abort()
            raise

    started = time.monotonic()
    with ThreadPoolExecutor(slots) as pool:
        list(pool.map(task, range(tasks)))
    return Figures(time.monotonic() - started, 0.0, 0, 0, tasks, records)


def _eos(bootstrap: str, topic: str, tasks: int, partitions: int, records: int, slots: int, aligned: bool,
         work: Path) -> Figures:
    clients = clients_for(bootstrap)
    options = parse_sink_options({"kafka.bootstrap.servers": bootstrap, "topic": topic,
                                  "eos.stateDir": str(work / topic)}, streaming=False)
    config = options.config
    assert config.transactional_id_prefix is not None
    pool = TransactionalIdPool(config.transactional_id_prefix)
    context = BatchContext(0, topic)

    def task(slot: int) -> KafkaCommitMessage | None:
        rows = _rows_of(slot, tasks, records, partitions, aligned)
        if not rows:
            return None  # a task without rows opens no transaction, as the sink's
        writer = KafkaTransactionWriter(clients, config, pool.transactional_id(slot, 0), 0)
        try:
            writer.write_batch(ProduceBatch(topic=topic, values=[VALUE] * len(rows), keys=[k for _, k in rows],
                                            partitions=[p for p, _ in rows]))
            committable = writer.pre_commit()
        except BaseException:
            writer.abort()
            raise
        return KafkaCommitMessage(0, slot, 0, committable.to_json(), committable.record_count)

    with SparkSinkDriver(options) as driver:
        driver.before_tasks(StructType([StructField("value", BinaryType())]), context, run_starts=True)
        started = time.monotonic()
        with ThreadPoolExecutor(slots) as workers:
            messages = [m for m in workers.map(task, range(tasks)) if m is not None]
        written = time.monotonic()
        driver.commit(context, messages)
        committed = time.monotonic()
    return Figures(written - started, committed - written, len(messages), 0, len(messages), records)


def one_point(bootstrap: str, way: str, tasks: int, partitions: int, records: int, slots: int,
              work: Path) -> Figures:
    topic = f"scale-{way}-{tasks}x{partitions}-{uuid.uuid4().hex[:8]}"
    admin = clients_for(bootstrap).admin()
    try:
        admin.create_topic(topic, partitions)
    finally:
        admin.close()
    if way == "alo":
        figures = _alo(bootstrap, topic, tasks, partitions, records, slots, work)
    else:
        figures = _eos(bootstrap, topic, tasks, partitions, records, slots, way == "eos-aligned", work)
    held, markers = _markers(bootstrap, topic, partitions, records)
    # Deleted at once: a grid's topics of up to 256 partitions x 3 replicas would fill the brokers'
    # heaps.
    deleter = AdminClient({"bootstrap.servers": bootstrap})
    for deleting in deleter.delete_topics([topic]).values():
        deleting.result(60)
    if held != records:
        raise RuntimeError(f"{topic}: {held:,} records held, {records:,} written")
    figures.markers = 0 if way == "alo" else markers
    return figures


def _features(tasks: int, markers: int, end_txns: int, partitions: int, slots: int) -> list[float]:
    """The model's terms: a constant (the batch's records, the store's write), the tasks' producer
    set-ups and transactions shared over the slots, the driver's EndTxn round, the (task,
    partition) pairs, each a stream of produce requests of its own and one marker at the commit, and
    the partitions written, over which the batch's records are spread in smaller produce batches."""
    return [1.0, tasks / slots, end_txns, markers, partitions]


TERMS = ("c0 (s)", "c_task (s per task a slot)", "c_txn (s per EndTxn)", "c_pair (s per task-partition pair)",
         "c_partition (s per partition written)")


def fit(points: list[dict]) -> list[float]:
    """Least-squares coefficients of the kit's batch time over its grid points (the records are the
    same at every point, so their cost is in c0). A term whose fit goes below zero is noise: it is
    dropped and the rest fitted again."""
    rows = [_features(p["tasks"], p["markers"], p["end_txns"], p["partitions"], p["slots"]) for p in points]
    times = [p["batch_s"] for p in points]
    keep = list(range(len(TERMS)))
    while True:
        solution, *_ = numpy.linalg.lstsq(numpy.array([[r[i] for i in keep] for r in rows]),
                                          numpy.array(times), rcond=None)
        negative = [keep[i] for i, c in enumerate(solution) if c < 0]
        if not negative:
            coefficients = [0.0] * len(TERMS)
            for i, c in zip(keep, solution):
                coefficients[i] = float(c)
            return coefficients
        keep.remove(negative[0])


def predict(coefficients: list[float], tasks: int, markers: int, end_txns: int, partitions: int, slots: int) -> float:
    """The kit's batch time by the model, in seconds."""
    return float(numpy.dot(coefficients, _features(tasks, markers, end_txns, partitions, slots)))


def _grid(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v.strip()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=_grid, default=_grid("2,16,64,256"))
    parser.add_argument("--partitions", type=_grid, default=_grid("4,64,256"))
    parser.add_argument("--records", type=int, default=160_000)
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--held-out", default="32x128", help="TASKSxPARTITIONS run but not fitted")
    parser.add_argument("--ways", default=",".join(WAYS))
    parser.add_argument("--out", default="scale.json")
    parser.add_argument("--from", dest="saved", default=None, metavar="JSON",
                        help="fit and print the table of a saved run's points instead of running")
    args = parser.parse_args(argv)
    if args.saved:
        points = json.loads(Path(args.saved).read_text())["points"]
        return _report(points, args.out, {"from": args.saved})
    held_tasks, held_partitions = (int(v) for v in args.held_out.split("x"))
    ways = [w for w in args.ways.split(",") if w]
    points: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="kafka-eos-scale-") as work:
        # A heap for a grid of topics of up to 256 partitions (the tests' 384 MB is for a few).
        cluster = find_cluster(Path(work, "cluster"), heap_opts="-Xmx1g -Xms256m")
        log(f"cluster: {cluster.origin} at {cluster.bootstrap_servers}")
        try:
            grid = [(t, p) for t in args.tasks for p in args.partitions] + [(held_tasks, held_partitions)]
            for tasks, partitions in grid:
                for way in ways:
                    runs = [one_point(cluster.bootstrap_servers, way, tasks, partitions, args.records, args.slots,
                                      Path(work)) for _ in range(args.repeat)]
                    median = {field: statistics.median(getattr(r, field) for r in runs)
                              for field in ("write_s", "commit_s", "batch_s")}
                    point = {"way": way, "tasks": tasks, "partitions": partitions, "records": args.records,
                             "slots": args.slots, **median, "end_txns": runs[0].end_txns,
                             "markers": runs[0].markers, "producers": runs[0].producers,
                             "held_out": (tasks, partitions) == (held_tasks, held_partitions),
                             "runs": [asdict(r) for r in runs]}
                    points.append(point)
                    log(f"{way} {tasks} tasks x {partitions} partitions: batch {point['batch_s']:.2f} s "
                        f"(write {point['write_s']:.2f}, commit {point['commit_s']:.2f}), "
                        f"{point['end_txns']} EndTxn, {point['markers']:,} markers")
        finally:
            cluster.stop()
    return _report(points, args.out, vars(args) | {"tasks": args.tasks, "partitions": args.partitions})


def _report(points: list[dict], out: str, config: dict) -> int:
    """Fit the model to the kit's points, predict every kit point, write ``out`` and print the table."""
    kit = [p for p in points if p["way"] != "alo" and not p["held_out"]]
    coefficients = fit(kit) if kit else []
    for p in points:
        if coefficients and p["way"] != "alo":
            p["predicted_s"] = predict(coefficients, p["tasks"], p["markers"], p["end_txns"], p["partitions"],
                                       p["slots"])
    Path(out).write_text(json.dumps({"config": config, "coefficients": dict(zip(TERMS, coefficients)),
                                     "points": points}, indent=2, default=str))
    print(table(points, coefficients))
    return 0


def table(points: list[dict], coefficients: list[float]) -> str:
    """The scale table, with Spark's own sink's shape beside each kit row."""
    alo = {(p["tasks"], p["partitions"]): p for p in points if p["way"] == "alo"}
    lines = ["| tasks | partitions | way | batch s | write s | commit s | against at-least-once | EndTxn | markers "
             "| producers | model s |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in points:
        base = alo.get((p["tasks"], p["partitions"]))
        ratio = f"{base['batch_s'] / p['batch_s']:.2f}x" if base and p["way"] != "alo" else ""
        model = f"{p['predicted_s']:.2f}" if "predicted_s" in p else ""
        held = " (held out)" if p["held_out"] else ""
        lines.append(f"| {p['tasks']} | {p['partitions']}{held} | {p['way']} | {p['batch_s']:.2f} | {p['write_s']:.2f} "
                     f"| {p['commit_s']:.2f} | {ratio} | {p['end_txns']} | {p['markers']:,} | {p['producers']} | {model} |")
    if coefficients:
        lines.append("")
        lines.extend(f"- {term}: {value:.3g}" for term, value in zip(TERMS, coefficients))
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
