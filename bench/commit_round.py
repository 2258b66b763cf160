"""The driver's commit round at a cluster's scale (issue 54): how long one batch's EndTxn round takes
for 2 to 1,000 transactions, on a 3-node KRaft cluster at replication 3.

    env -u PYTHONDONTWRITEBYTECODE python bench/commit_round.py [--transactions 2,16,64,256,1000] [--repeat 2]

For each count, ``kafka_testkit/prepared_transactions.py`` pre-commits that many transactions as
that many write tasks of one batch hand them over (one record each, into a topic of 64
partitions), and the sink driver (``SparkSinkDriver.commit``) commits the batch: the figure is the
commit step of the batch's timings, from the first EndTxn sent to the last response, the same
figure ``kafka-eos status`` and the ``end_txn`` phase in Prometheus report. Medians of the
repetitions. The cluster: ``KAFKA_EOS_CLUSTER_BOOTSTRAP_SERVERS``, else one started from
``KAFKA_HOME`` or Maven Central (``connectors/servers/local_cluster.py``), stopped at the end.
Nothing is asserted: the script reports.

Where the script started the cluster, it also reports the CPU time the three brokers spent in the
round (from ``/proc``): with the driver's, it says whether the round is bound by the machine's
cores. On a machine whose cores the brokers share, a round cannot take less wall time than their
CPU time and the driver's divided by the cores.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from pyspark.sql.types import BinaryType, StructField, StructType  # noqa: E402

from connectors.kafka.clients.factory import clients_for  # noqa: E402
from connectors.servers.local_cluster import find_cluster  # noqa: E402
from connectors.spark.batch_context import BatchContext  # noqa: E402
from connectors.spark.options import parse_sink_options  # noqa: E402
from connectors.spark.sink_driver import SparkSinkDriver  # noqa: E402
from kafka_testkit.prepared_transactions import prepare_transactions  # noqa: E402
from run_bench import log  # noqa: E402

PARTITIONS = 64


def cpu_seconds(pids: list[int]) -> float:
    """The user and system CPU time the processes ``pids`` have spent so far (Linux ``/proc``)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        # Fields after the command name (which may hold spaces, so split after its ")"): utime is
        # the 14th field of the line, stime the 15th.
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / ticks


def one_round(bootstrap: str, count: int, work: Path, broker_pids: list[int]) -> dict[str, float]:
    """Prepare ``count`` transactions of a fresh sink and commit them in one batch."""
    clients = clients_for(bootstrap)
    name = f"round-{count}-{uuid.uuid4().hex[:8]}"
    admin = clients.admin()
    try:
        admin.create_topic(name, PARTITIONS)
    finally:
        admin.close()
    options = parse_sink_options({"kafka.bootstrap.servers": bootstrap, "topic": name,
                                  "eos.stateDir": str(work / name)}, streaming=False)
    context = BatchContext(0, name)
    with SparkSinkDriver(options) as driver:
        driver.before_tasks(StructType([StructField("value", BinaryType())]), context, run_starts=True)
        started = time.monotonic()
        messages = prepare_transactions(clients, options, 0, count, PARTITIONS)
        prepared_s = time.monotonic() - started
        cpu, brokers_cpu = time.process_time(), cpu_seconds(broker_pids)
        timings = driver.commit(context, messages)
        cpu, brokers_cpu = time.process_time() - cpu, cpu_seconds(broker_pids) - brokers_cpu
    assert timings is not None
    figures = {"prepare_s": prepared_s, "end_txn_ms": timings.commit_ms, "commit_ms": timings.total_ms,
               "driver_cpu_ms": cpu * 1000}
    if broker_pids:
        figures["brokers_cpu_ms"] = brokers_cpu * 1000
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transactions", default="2,16,64,256,1000",
                        help="comma-separated transaction counts (default: 2,16,64,256,1000)")
    parser.add_argument("--repeat", type=int, default=2, help="repetitions of each count (default: 2)")
    parser.add_argument("--out", help="write the figures as JSON here")
    args = parser.parse_args(argv)
    counts = [int(c) for c in args.transactions.split(",") if c.strip()]
    with tempfile.TemporaryDirectory(prefix="kafka-eos-commit-round-") as work:
        cluster = find_cluster(Path(work, "cluster"))
        log(f"cluster: {cluster.origin} at {cluster.bootstrap_servers}")
        broker_pids = ([pid for pid in (cluster.local.pid(node) for node in cluster.local.running_nodes()) if pid]
                       if cluster.local is not None else [])
        results: dict[int, list[dict[str, float]]] = {}
        try:
            for repetition in range(args.repeat):
                for count in counts:
                    figures = one_round(cluster.bootstrap_servers, count, Path(work), broker_pids)
                    results.setdefault(count, []).append(figures)
                    log(f"repetition {repetition + 1}: {count} transactions: EndTxn round {figures['end_txn_ms']:.0f} ms, "
                        f"the batch's commit {figures['commit_ms']:.0f} ms, the driver's CPU {figures['driver_cpu_ms']:.0f} ms, "
                        f"the brokers' CPU {figures.get('brokers_cpu_ms', float('nan')):.0f} ms (prepared in {figures['prepare_s']:.1f} s)")
        finally:
            cluster.stop()
    cores = os.cpu_count() or 1
    print("| transactions | EndTxn round, ms (median) | the batch's commit, ms (median) | the driver's CPU in it, ms (median) "
          f"| the brokers' CPU in it, ms (median) | the least wall time {cores} cores allow, ms |")
    print("|---|---|---|---|---|---|")
    for count in counts:
        rounds = results[count]
        driver_cpu = statistics.median(r["driver_cpu_ms"] for r in rounds)
        brokers = [r["brokers_cpu_ms"] for r in rounds if "brokers_cpu_ms" in r]
        brokers_cpu = statistics.median(brokers) if brokers else None
        floor = "" if brokers_cpu is None else f"{(driver_cpu + brokers_cpu) / cores:.0f}"
        print(f"| {count} | {statistics.median(r['end_txn_ms'] for r in rounds):.0f} | "
              f"{statistics.median(r['commit_ms'] for r in rounds):.0f} | {driver_cpu:.0f} | "
              f"{'' if brokers_cpu is None else f'{brokers_cpu:.0f}'} | {floor} |")
    if args.out:
        Path(args.out).write_text(json.dumps({str(k): v for k, v in results.items()}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
