"""The data path's guard (issue 52): a short side-by-side bench whose ratios to Spark's own Kafka
connector must not drop more than 15 % below the ratios recorded in bench/README.md.

    env -u PYTHONDONTWRITEBYTECODE python bench/regression_guard.py [--bootstrap HOST:PORT] [--out guard.json]
    env -u PYTHONDONTWRITEBYTECODE python bench/regression_guard.py --record     # writes the ratios into README

Run it before submitting any change to a source, a sink or the JVM provider (docs/development.md).
It takes about 9 minutes on the 2-core machine, on one broker (``--bootstrap``, else the kit's
launcher: Apache Kafka from Maven Central, stopped at the end), at Spark's defaults, ``local[2]``:

- map-only copies (``run_bench.py``: 1M records of ~100 B in 4 partitions, batches of 250k,
  2 repetitions, medians of the steady throughput): the kit at both ends, Spark's own source into
  each of the kit's sinks, and the kit's source into the foreachBatch sink, each against Spark's
  own connector at both ends. A repetition during which the hypervisor took 5 % or more of the
  machine's CPU (steal) is left out of the medians where another one was not disturbed: on this
  kind of VM such a run of the kit at both ends fell to 0.48x while its neighbours lost nothing;
- a stateful count (``stateful_bench.py``: ``groupBy("key").count()`` in update mode at Spark's
  default 200 shuffle partitions, 20,000 records over 2,000 keys in 4 batches) on both of the
  kit's sinks against Spark's own sink; the ratio is Spark's query time over the kit's, so that a
  higher ratio is better here too.

Each ratio is compared with the one recorded for it in bench/README.md (the table between the
``guard:begin`` and ``guard:end`` markers, which ``--record`` rewrites from a run of this script,
so the recorded ratios come from this same workload). A ratio below 85 % of its recorded value
fails the guard: one ``FAIL`` line per ratio, and exit status 1. A run that fails or loses or
duplicates a record fails it too. Nothing here is a test: the verdict is this script's log and
exit status, so that `.ci/run` or a developer can call it, and no pytest asserts a timing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "bench"
README = BENCH / "README.md"
BEGIN, END = "<!-- guard:begin -->", "<!-- guard:end -->"
#: A ratio may fall this far below its recorded value before the guard fails.
TOLERANCE = 0.15
#: Spark's own connector at both ends: the reference of every map-only ratio.
MAP_ONLY_REFERENCE = "spark_builtin"
#: The map-only checks: the guard's name for each, and run_bench.py's run.
MAP_ONLY = {
    "map-only, the kit at both ends": "spark_eos",
    "map-only, Spark's source into format('kafka-eos')": "spark_builtin_source",
    "map-only, Spark's source into the foreachBatch sink": "spark_builtin_source_fb",
    "map-only, the kit's source into the foreachBatch sink": "spark_eos_fb",
}
#: The stateful checks: the guard's name for each, and stateful_bench.py's sink.
STATEFUL_REFERENCE = "kafka"
STATEFUL = {
    "running count at 200 shuffle partitions, format('kafka-eos')": "kafka-eos",
    "running count at 200 shuffle partitions, the foreachBatch sink": "foreach-batch",
}
_ROW = re.compile(r"^\|\s*(?P<check>[^|]+?)\s*\|\s*(?P<ratio>[0-9.]+)x\s*\|")


@dataclass
class Check:
    name: str
    measured: float | None
    recorded: float | None
    #: Why the check failed without a ratio (a run failed, its output was wrong), else None.
    problem: str | None = None

    @property
    def floor(self) -> float | None:
        return None if self.recorded is None else round(self.recorded * (1 - TOLERANCE), 2)

    @property
    def passed(self) -> bool:
        if self.problem is not None or self.measured is None:
            return False
        return self.floor is None or self.measured >= self.floor


def _split_at_markers(text: str) -> tuple[str, str, str]:
    """``text`` before the guard's table, the table, and after it."""
    if BEGIN not in text or END not in text:
        raise SystemExit(f"regression_guard: {README} has no {BEGIN} ... {END} table; run with --record once")
    before, rest = text.split(BEGIN, 1)
    block, after = rest.split(END, 1)
    return before, block, after


def recorded_ratios(readme: str) -> dict[str, float]:
    """The ratios between the guard's markers in bench/README.md, by check name."""
    block = _split_at_markers(readme)[1]
    return {m["check"]: float(m["ratio"]) for m in map(_ROW.match, block.splitlines()) if m}


def child_env() -> dict[str, str]:
    """The benchmarks' environment: as on a user's machine, Python caches bytecode."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    return env


def run_script(script: str, arguments: list[str], log_file: Path) -> None:
    command = [sys.executable, str(BENCH / script), *arguments]
    print(f"guard: {script} {' '.join(arguments)} (log: {log_file})", flush=True)
    with log_file.open("w") as log:
        done = subprocess.run(command, cwd=REPO, env=child_env(), stdout=log, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        tail = log_file.read_text(errors="replace").splitlines()[-20:]
        raise SystemExit(f"regression_guard: {script} exited {done.returncode}:\n" + "\n".join(tail))


def map_only_checks(results: dict, recorded: dict[str, float], records: int) -> list[Check]:
    summary = results["summary"]
    reference = (summary.get(MAP_ONLY_REFERENCE) or {}).get("steady_rec_s")
    checks = []
    for name, run in MAP_ONLY.items():
        figures = summary.get(run) or {}
        problem = None
        # The runs are named by their config, with "#<repetition>" when repeated.
        outputs = [r for key, r in results["runs"].items() if key.split("#")[0] == run]
        for output in outputs:
            check = output.get("check") or {}
            got, keys = check.get("records"), check.get("distinct_keys")
            if output.get("exit_code") != 0 or got != records or keys != records:
                problem = (f"{run}: exit {output.get('exit_code')}, {got} records of {keys} distinct keys in its "
                           f"output, for {records} input records")
        steady = figures.get("steady_rec_s")
        measured = round(steady / reference, 2) if steady and reference else None
        if measured is None and problem is None:
            problem = f"{run} or {MAP_ONLY_REFERENCE} has no steady throughput"
        # run_bench.py's medians leave out the repetitions the host disturbed (CPU stolen by the
        # hypervisor) where an undisturbed one exists; where none does, nothing can be judged.
        for config in (run, MAP_ONLY_REFERENCE):
            stats = summary.get(config) or {}
            if problem is None and stats.get("repetitions") and \
                    stats.get("disturbed_repetitions") == stats.get("repetitions"):
                problem = (f"inconclusive: every repetition of {config} had CPU stolen by the hypervisor "
                           "(run_bench.py's DISTURBED lines); run the guard again on a quieter host")
        checks.append(Check(name, measured, recorded.get(name), problem))
    return checks


def stateful_checks(results: dict, recorded: dict[str, float]) -> list[Check]:
    """From stateful_bench.py's ``rows`` (its ``ratio_rows``: each sink's median query time and
    first error), of the one shape and partition count the guard runs."""
    (row,) = results["rows"]
    seconds, errors = row["seconds"], row["errors"]
    reference = seconds.get(STATEFUL_REFERENCE)
    checks = []
    for name, sink in STATEFUL.items():
        kit = seconds.get(sink)
        measured = round(reference / kit, 2) if reference and kit else None
        problem = errors.get(sink) or errors.get(STATEFUL_REFERENCE)
        if measured is None and problem is None:
            problem = f"{sink} or Spark's own sink has no query time"
        checks.append(Check(name, measured, recorded.get(name), problem))
    return checks


def record(checks: list[Check], readme: Path) -> None:
    """Rewrite the table between the guard's markers with ``checks``' measured ratios."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                            text=True).stdout.strip() or "?"
    lines = [BEGIN, "", f"Recorded by `bench/regression_guard.py --record` on {time.strftime('%Y-%m-%d')}, "
             f"code of `{commit}`:", "", "| check | recorded ratio |", "|---|---|"]
    lines += [f"| {c.name} | {c.measured:.2f}x |" for c in checks if c.measured is not None]
    before, _, after = _split_at_markers(readme.read_text())
    readme.write_text(before + "\n".join(lines) + "\n\n" + END + after)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", default=None, help="a running broker (else the kit's launcher starts one)")
    parser.add_argument("--records", type=int, default=1_000_000, help="map-only: records copied by each run")
    parser.add_argument("--repeat", type=int, default=2, help="map-only: repetitions (medians are compared)")
    parser.add_argument("--record", action="store_true",
                        help="write this run's ratios into bench/README.md instead of judging against it")
    parser.add_argument("--out", default=None, help="write every check as JSON here")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    recorded = {} if args.record else recorded_ratios(README.read_text())
    sys.path.insert(0, str(REPO))
    from connectors.servers.broker_discovery import find_broker

    started = time.monotonic()
    broker = find_broker(args.bootstrap)
    try:
        with tempfile.TemporaryDirectory(prefix="kafka-eos-guard-") as folder:
            work = Path(folder)
            map_only_json, stateful_json = work / "map_only.json", work / "stateful.json"
            run_script("run_bench.py", [
                "--bootstrap", broker.bootstrap_servers, "--records", str(args.records),
                "--max-offsets-per-trigger", "250000", "--repeat", str(args.repeat), "--pause-s", "1",
                "--runs", ",".join([MAP_ONLY_REFERENCE, *MAP_ONLY.values()]), "--work-dir", str(work / "map_only"),
                "--out", str(map_only_json)], work / "map_only.log")
            run_script("stateful_bench.py", [
                "--bootstrap", broker.bootstrap_servers, "--records", "20000", "--keys", "2000",
                "--shapes", "running_count", "--shuffle-partitions", "200",
                "--sinks", ",".join([STATEFUL_REFERENCE, *STATEFUL.values()]), "--out", str(stateful_json)],
                work / "stateful.log")
            checks = (map_only_checks(json.loads(map_only_json.read_text()), recorded, args.records)
                      + stateful_checks(json.loads(stateful_json.read_text()), recorded))
    finally:
        broker.stop()
    elapsed = time.monotonic() - started
    if args.out:
        Path(args.out).write_text(json.dumps([asdict(c) | {"floor": c.floor, "passed": c.passed} for c in checks],
                                             indent=1) + "\n")
    if args.record:
        record(checks, README)
        for check in checks:
            print(f"guard: recorded {check.measured}x for {check.name}" + (f" ({check.problem})" if check.problem else ""))
        return 0 if all(c.problem is None for c in checks) else 1
    for check in checks:
        verdict = "ok  " if check.passed else "FAIL"
        detail = check.problem or (f"{check.measured:.2f}x, recorded {check.recorded}x, floor {check.floor}x"
                                   if check.recorded is not None else f"{check.measured:.2f}x, nothing recorded")
        print(f"guard: {verdict} {check.name}: {detail}")
    failed = [c for c in checks if not c.passed]
    print(f"guard: {len(checks) - len(failed)} of {len(checks)} ratios hold (tolerance {TOLERANCE:.0%}), "
          f"{elapsed / 60:.1f} minutes")
    if failed:
        print(f"guard: FAILED: {', '.join(c.name for c in failed)} dropped more than {TOLERANCE:.0%} below "
              "bench/README.md's recorded ratio, or did not run. Find the cause before submitting.")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
