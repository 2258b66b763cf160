"""The verifier at scale (issue 54): ``kafka-eos verify`` of a copy and of every ``--shape`` over
20 million records, in at most 1 GiB of resident memory.

    python bench/verify_scale.py [--records 20000000] [--shapes copy,running-count,dedup | all] [--inject]

One broker, one input topic of ``--records`` small keyed JSON records (``{"id": i, "g": i // 2,
"ts": i // 1000}``, key ``i``), and per shape an output topic that a correct query would write,
generated here with a producer (no Spark job: what is measured is the verifier):

- ``copy``: the input, record for record (``--id-field key``, 20M distinct ids);
- ``running-count``: per group ``g`` (two inputs each, so N/2 keys), counts 1 then 2;
  ``complete-count`` the same, with every tenth group's last count written once more (allowed);
- ``windowed-count``: per group, its 60 s window once with count 2 (event time ``json:ts``);
  ``windowed-running-count``: per group, its window with counts 1 then 2;
- ``dedup``: per group, its first input;
- ``join``: a right input with one record per even group, and per even group its two pairs.

Output records are keyed by their group and partitioned by it, so a key's records share a partition
in the order written. Then ``kafka-eos verify`` (the console script, as a subprocess) checks each
output; measured per shape: wall time, records per second (the input and output records the report
counts, over the wall time), and the process's peak RSS (``os.wait4``'s ``ru_maxrss``, which is
that one process's). One JSON line per shape on stdout, a table at the end, everything in ``--out``.

``--inject`` writes every output with one duplicate and one loss (a record written twice or a
count repeated, and a key's outputs dropped) instead of clean: verify must then find exactly one
duplicated and one lost key, and nothing else.

The script exits 1 when a verify's peak RSS exceeds ``--max-rss-mib`` (1024), or when its verdict
is not the expected one (exactly-once on a clean output; exactly the injected anomalies).

The broker: ``--bootstrap``, else ``KAFKA_BOOTSTRAP_SERVERS``, else the kit's launchers
(``connectors.servers.broker_discovery.find_broker``: Docker, ``KAFKA_HOME``, Kafka from Maven
Central), stopped at the end when this script started it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from confluent_kafka import Producer  # noqa: E402

from connectors.servers.broker_discovery import find_broker  # noqa: E402
from connectors.tools.shape_checks import SHAPES  # noqa: E402
from run_bench import create_topics, delete_topics, log  # noqa: E402

KINDS = ("copy", *SHAPES)
#: Inputs per group key: a running count has something to rise through.
PER_GROUP = 2
#: Input records per second of event time, and the tumbling window of the windowed shapes.
PER_SECOND = 1000
WINDOW_S = 60
KAFKA_EOS = Path(sys.executable).parent / "kafka-eos"

Record = tuple[bytes, bytes, int]  # key, value, partition


@dataclass(frozen=True)
class Faults:
    """The one duplicated and the one lost group (or, for the copy, record) of an injected output."""

    duplicate: int
    lost: int


def faults_for(records: int, kind: str) -> Faults:
    groups = records // PER_GROUP
    if kind == "copy":
        return Faults(duplicate=records // 2 + 1, lost=records // 3 + 1)
    # Even groups: the join's right input has only those. Both away from the last window written.
    return Faults(duplicate=(groups // 4) * 2, lost=(groups // 6) * 2)


def _value(i: int) -> bytes:
    return b'{"id":%d,"g":%d,"ts":%d}' % (i, i // PER_GROUP, i // PER_SECOND)


def input_records(records: int, partitions: int) -> Iterator[Record]:
    for i in range(records):
        yield b"%d" % i, _value(i), i % partitions


def right_records(records: int, partitions: int) -> Iterator[Record]:
    for g in range(0, records // PER_GROUP, 2):
        yield b"%d" % g, b'{"g":%d}' % g, g % partitions


def output_records(kind: str, records: int, partitions: int, faults: Faults | None) -> Iterator[Record]:
    """What a correct query of ``kind`` writes for the input (with ``faults``: one duplicate, one loss)."""
    if kind == "copy":
        for key, value, partition in input_records(records, partitions):
            i = int(key)
            if faults and i == faults.lost:
                continue
            yield key, value, partition
            if faults and i == faults.duplicate:
                yield key, value, partition
        return
    for g in range(records // PER_GROUP):
        if faults and g == faults.lost:
            continue
        twice = faults is not None and g == faults.duplicate
        key, partition = b"%d" % g, g % partitions
        start = (g * PER_GROUP // PER_SECOND) // WINDOW_S * WINDOW_S
        window = b'"window":{"start":%d,"end":%d}' % (start, start + WINDOW_S)
        if kind in ("running-count", "windowed-running-count"):
            # Update mode: the count after each input; a duplicate repeats the last one.
            counts = [*range(1, PER_GROUP + 1), *([PER_GROUP] if twice else [])]
        elif kind == "complete-count":
            # Complete mode: unchanged counts may repeat (every tenth group); a duplicate is a batch
            # written again, its counts falling back.
            counts = [*range(1, PER_GROUP + 1), *([PER_GROUP] if g % 10 == 0 else []),
                      *(range(1, PER_GROUP + 1) if twice else [])]
        elif kind == "windowed-count":
            counts = [PER_GROUP] * (2 if twice else 1)
        elif kind == "dedup":
            for _ in range(2 if twice else 1):
                yield key, _value(g * PER_GROUP), partition
            continue
        else:  # join: only even groups have a right record; each of a group's inputs makes a pair
            if g % 2:
                continue
            for _ in range(PER_GROUP + (1 if twice else 0)):
                yield key, b'{"g":%d,"right":%d}' % (g, g), partition
            continue
        windowed = kind.startswith("windowed")
        for count in counts:
            yield key, b'{"key":"%d",%s"count":%d}' % (g, window + b"," if windowed else b"", count), partition


def produce(bootstrap: str, topic: str, records: Iterator[Record]) -> tuple[int, float]:
    """Write ``records`` to ``topic`` (plain producer, large batches); (records, seconds)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 100, "batch.size": 1_000_000,
                         "queue.buffering.max.messages": 2_000_000, "queue.buffering.max.kbytes": 1_048_576,
                         "enable.idempotence": True})
    started = time.monotonic()
    written = 0
    for key, value, partition in records:
        while True:
            try:
                producer.produce(topic, value, key, partition=partition)
                break
            except BufferError:
                producer.poll(0.05)
        written += 1
        if written % 50_000 == 0:
            producer.poll(0)
    left = producer.flush(300)
    if left:
        raise SystemExit(f"writing {topic}: {left} records not acknowledged after 300 s")
    return written, time.monotonic() - started


def verify_command(kind: str, bootstrap: str, topics: dict[str, str], report: Path) -> list[str]:
    command = [str(KAFKA_EOS), "--log-level", "INFO", "verify", "--bootstrap", bootstrap, "--input", topics["input"],
               "--output", topics[kind], "--json-report", str(report)]
    if kind == "copy":
        return command
    command += ["--shape", kind, "--id-field", "json:g"]
    if kind.startswith("windowed"):
        command += ["--event-time-field", "json:ts"]
    if kind == "join":
        command += ["--right-input", topics["right"]]
    return command


def run_verify(command: list[str], work: Path, kind: str, env: dict[str, str]) -> tuple[int, float, int]:
    """(exit code, seconds, peak RSS in bytes) of one verify: ``os.wait4`` gives that one process's
    rusage, where RUSAGE_CHILDREN would give the largest of every child waited for so far."""
    started = time.monotonic()
    with open(work / f"{kind}.stdout", "wb") as out, open(work / f"{kind}.stderr", "wb") as err:
        process = subprocess.Popen(command, stdout=out, stderr=err, env=env)
        _, status, usage = os.wait4(process.pid, 0)
    seconds = time.monotonic() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    return process.returncode, seconds, usage.ru_maxrss * 1024  # ru_maxrss is in KiB on Linux


def judge(kind: str, code: int, report: dict, inject: bool) -> list[str]:
    """What is wrong with a verify's verdict (nothing: an empty list)."""
    if not inject:
        return [] if code == 0 and report.get("exactly_once") else [f"exit {code}, not exactly-once on a clean output"]
    found = {name: a["ids"] for name, a in report.get("anomalies", {}).items() if a["checked"] and a["ids"]}
    expected = {"duplicates": 1, "lost_writes": 1}
    problems = [] if code == 1 else [f"exit {code}, not 1"]
    if found != expected:
        problems.append(f"found {found}, expected {expected}")
    return problems


def table(rows: list[dict]) -> str:
    lines = ["| check | records checked | seconds | records/s | peak RSS | verdict |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['check']} | {r['records_checked']:,} | {r['seconds']:.0f} | {r['records_per_s']:,.0f} | "
                     f"{r['peak_rss_mib']:,.0f} MiB | {r['verdict']} |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    def kinds(text: str) -> list[str]:
        chosen = list(KINDS) if text == "all" else [k.strip() for k in text.split(",") if k.strip()]
        wrong = [k for k in chosen if k not in KINDS]
        if wrong or not chosen:
            raise argparse.ArgumentTypeError(f"--shapes {text!r}: use all, or a comma-separated list of "
                                             f"{', '.join(KINDS)}")
        return chosen

    def at_least(minimum: int) -> Callable[[str], int]:
        def parse(text: str) -> int:
            value = int(text.replace("_", ""))
            if value < minimum:
                raise argparse.ArgumentTypeError(f"{text} must be >= {minimum}")
            return value
        return parse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=at_least(PER_SECOND * 2), default=20_000_000,
                        help="input records (default: 20,000,000)")
    parser.add_argument("--shapes", type=kinds, default=list(KINDS),
                        help=f"all (default), or a comma-separated list of {', '.join(KINDS)}")
    parser.add_argument("--partitions", type=at_least(1), default=4, help="partitions of every topic (default: 4)")
    parser.add_argument("--inject", action="store_true",
                        help="write each output with one duplicate and one loss, which verify must find")
    parser.add_argument("--max-rss-mib", type=at_least(1), default=1024,
                        help="fail when a verify's peak RSS exceeds this (default: 1024)")
    parser.add_argument("--bootstrap", default=None, help="a broker to use instead of starting one")
    parser.add_argument("--work-dir", default=None, help="broker data, verify's scratch and logs (default: a temp dir)")
    parser.add_argument("--out", default="verify-scale.json", help="results file (default: verify-scale.json)")
    parser.add_argument("--keep", action="store_true", help="keep the work dir (and topics on a broker not started here)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # A SIGTERM (a stopped bench) unwinds as an exit, so the broker it started is stopped.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    own_work = args.work_dir is None
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="kafka-eos-verify-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    topics = {"input": f"verify-scale-{stamp}-in", **{k: f"verify-scale-{stamp}-{k}" for k in args.shapes}}
    if "join" in args.shapes:
        topics["right"] = f"verify-scale-{stamp}-right"
    broker = find_broker(args.bootstrap, work_dir=str(work / "broker"))
    env = {**os.environ, "TMPDIR": str(work)}  # verify's scratch database and its sort files
    rows: list[dict] = []
    failures: list[str] = []
    try:
        bootstrap = broker.bootstrap_servers
        log(f"broker: {broker.origin}; work dir {work}")
        create_topics(bootstrap, list(topics.values()), args.partitions)
        written, seconds = produce(bootstrap, topics["input"], input_records(args.records, args.partitions))
        log(f"input: {written:,} records in {seconds:.0f} s")
        if "right" in topics:
            written, seconds = produce(bootstrap, topics["right"], right_records(args.records, args.partitions))
            log(f"right input: {written:,} records in {seconds:.0f} s")
        for kind in args.shapes:
            faults = faults_for(args.records, kind) if args.inject else None
            written, seconds = produce(bootstrap, topics[kind],
                                       output_records(kind, args.records, args.partitions, faults))
            log(f"{kind} output: {written:,} records in {seconds:.0f} s" + (f", injected {faults}" if faults else ""))
            report_path = work / f"{kind}.json"
            code, seconds, rss = run_verify(verify_command(kind, bootstrap, topics, report_path), work, kind, env)
            report = json.loads(report_path.read_text()) if report_path.exists() else {}
            counts = report.get("counts", {})
            checked = counts.get("input_records", 0) + counts.get("output_records", 0)
            problems = judge(kind, code, report, args.inject)
            if rss > args.max_rss_mib * 2**20:
                problems.append(f"peak RSS {rss / 2**20:,.0f} MiB over {args.max_rss_mib} MiB")
            row = {"check": kind, "records": args.records, "input_records": counts.get("input_records"),
                   "output_records": counts.get("output_records"), "records_checked": checked,
                   "seconds": round(seconds, 1), "records_per_s": round(checked / seconds) if seconds else None,
                   "peak_rss_mib": round(rss / 2**20, 1), "exit_code": code, "exactly_once": report.get("exactly_once"),
                   "anomalies": {n: a["records"] for n, a in report.get("anomalies", {}).items() if a["records"]},
                   "injected": faults.__dict__ if faults else None,
                   "verdict": "; ".join(problems) if problems else ("found the injected duplicate and loss"
                                                                    if args.inject else "exactly-once")}
            print(json.dumps(row), flush=True)
            rows.append(row)
            failures += [f"{kind}: {p}" for p in problems]
            if not args.keep and not broker.owned:
                delete_topics(bootstrap, [topics[kind]])
        Path(args.out).write_text(json.dumps({"records": args.records, "partitions": args.partitions,
                                              "inject": args.inject, "broker": broker.origin, "cpus": os.cpu_count(),
                                              "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "runs": rows},
                                             indent=2) + "\n")
        print(table(rows), file=sys.stderr)
        for failure in failures:
            log(f"FAILED {failure}")
        return 1 if failures else 0
    finally:
        if not args.keep and not broker.owned:
            delete_topics(broker.bootstrap_servers, [t for k, t in topics.items() if k in ("input", "right")])
        broker.stop()
        if own_work and not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
