"""Where a Spark run's cold start goes, from the trace of ``process_hooks/sitecustomize.py``.

``run_bench.py --trace`` records, for every Python process of a Spark run (the driver, each
planner process Spark starts for the data source, the worker daemon and the workers it forks),
when it started, how long the first import of each heavy package took, and when the kit and the
example logged. This module turns those events into phases of the run and one row per process.

    python bench/cold_start.py <trace.jsonl> [--started EPOCH_S]
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Import groups shown per process: Spark's own Python, the kit, and the libraries under it.
GROUPS = {
    "pyspark": ("pyspark",),
    "kit": ("connectors", "twophase"),
    "pyarrow": ("pyarrow", "pandas", "numpy"),
    "kafka clients": ("confluent_kafka", "kafka"),
    "other": ("tenacity", "boto3", "rich", "matplotlib"),
}


@dataclass
class TracedProcess:
    pid: int
    role: str
    start: float
    end: float
    forked: bool = False
    imports_ms: dict[str, float] = field(default_factory=dict)
    pyspark_from_zip: bool = False
    logs: list[tuple[float, str]] = field(default_factory=list)

    def group_ms(self, group: str) -> float:
        return sum(self.imports_ms.get(package, 0.0) for package in GROUPS[group])


def load_trace(path: Path) -> list[dict[str, Any]]:
    events = []
    for line in path.read_text().splitlines():
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line cut by a SIGKILLed process
    return sorted(events, key=lambda e: e["t"])


def _role(argv: list[str]) -> str:
    """From the process's command line (the interpreter first)."""
    args = argv[1:]
    if "-m" in args:
        rest = args[args.index("-m") + 1:]
        module = rest[0] if rest else "?"
        if module == "pyspark.daemon":
            # Spark starts one daemon per worker module: the tasks' and each planning step's.
            served = rest[1] if len(rest) > 1 else "pyspark.worker"
            return f"daemon for {served.rsplit('.', 1)[-1]} (pyspark.daemon {served})"
        return f"{module.rsplit('.', 1)[-1]} ({module})"
    if "-c" in args:
        return "python -c (Spark's check of the Python version)"
    script = next((a for a in args if a.endswith(".py")), "")
    if os.path.basename(script) == "spark_pipeline.py":
        return "driver (examples/spark_pipeline.py)"
    return os.path.basename(script) or "python"


def processes(events: list[dict[str, Any]]) -> list[TracedProcess]:
    found: dict[int, TracedProcess] = {}
    for event in events:
        pid = event["pid"]
        process = found.get(pid)
        if event["event"] == "start":
            found[pid] = TracedProcess(pid, _role(event.get("argv") or []), event["started"], event["t"])
            continue
        if event["event"] == "fork":
            parent = found.get(event["ppid"])
            # Only the daemon's forks run Python; any other fork is about to exec a program.
            if parent is not None and parent.role.startswith("daemon for"):
                served = parent.role.split(" ", 3)[2]
                found[pid] = TracedProcess(pid, f"worker forked by the daemon: {served}", event["t"], event["t"],
                                           forked=True)
            continue
        if process is None:
            continue
        process.end = max(process.end, event["t"])
        if event["event"] == "import":
            process.imports_ms.setdefault(event["package"], event["ms"])
            if event["package"] == "pyspark" and ".zip" in (event.get("origin") or ""):
                process.pyspark_from_zip = True
        elif event["event"] == "log":
            process.logs.append((event["t"], event["message"]))
    return sorted(found.values(), key=lambda p: p.start)


def _first_log(process: TracedProcess, text: str) -> float | None:
    return next((t for t, message in process.logs if text in message), None)


def breakdown(events: list[dict[str, Any]], started: float | None = None,
              batches: list[dict[str, Any]] | None = None, first_output_s: float | None = None) -> dict[str, Any]:
    """Phases (seconds from ``started``, the run's process start) and one row per process.

    ``batches`` are run_bench's per-batch entries (``start_s``/``end_s`` from the run's start)."""
    procs = processes(events)
    if not procs:
        return {}
    origin = started if started is not None else procs[0].start
    driver = next((p for p in procs if p.role.startswith("driver")), procs[0])
    requested = _first_log(driver, "starting the Spark session")
    session = _first_log(driver, "Spark session ready")
    query = _first_log(driver, "query started")
    first = (batches or [None])[0]

    def rel(t: float | None) -> float | None:
        return round(t - origin, 3) if t is not None else None

    phases: list[dict[str, Any]] = []

    def phase(name: str, begin: float | None, end: float | None) -> None:
        if begin is not None and end is not None:
            phases.append({"phase": name, "from_s": round(begin, 3), "to_s": round(end, 3),
                           "s": round(end - begin, 3)})

    phase("driver: interpreter and imports until the session is requested", 0.0, rel(requested))
    phase("JVM and SparkSession start", rel(requested), rel(session))
    phase("data source lookup, creation, query start", rel(session), rel(query))
    if first:
        phase("query started until batch 0 starts", rel(query), first["start_s"])
        phase("batch 0 (triggerExecution)", first["start_s"], first["end_s"])
        if first_output_s is not None and first_output_s > first["start_s"]:
            phase("batch 0 start until its output is visible to read_committed", first["start_s"], first_output_s)
    cutoff = origin + first["end_s"] if first else None
    # Processes started after the first batch are not part of the cold start.
    kept = [p for p in procs if cutoff is None or p.start <= cutoff]
    rows = []
    for p in kept:
        rows.append({
            "pid": p.pid, "role": p.role, "start_s": rel(p.start), "last_event_s": rel(p.end),
            "imports_ms": {group: round(p.group_ms(group)) for group in GROUPS if p.group_ms(group)},
            "pyspark_from_zip": p.pyspark_from_zip,
            "kit_logs": [{"s": rel(t), "message": m[:160]} for t, m in p.logs[:12]],
        })
    totals = {group: round(sum(r["imports_ms"].get(group, 0) for r in rows)) for group in GROUPS}
    return {"phases": phases, "processes": rows, "import_ms_totals": totals,
            "python_processes_started": sum(1 for p in kept if not p.forked),
            "python_workers_forked": sum(1 for p in kept if p.forked)}


def render(result: dict[str, Any]) -> str:
    """Plain-text tables (no terminal needed)."""
    lines = ["phase | from s | to s | s", "---|---|---|---"]
    lines += [f"{p['phase']} | {p['from_s']:.2f} | {p['to_s']:.2f} | {p['s']:.2f}" for p in result.get("phases", [])]
    lines += ["", "process | start s | last event s | imports ms (pyspark / kit / pyarrow / kafka clients / other)",
              "---|---|---|---"]
    for row in result.get("processes", []):
        imports = row["imports_ms"]
        parts = " / ".join(str(imports.get(group, 0)) for group in GROUPS)
        zip_note = " (pyspark from pyspark.zip)" if row["pyspark_from_zip"] else ""
        lines.append(f"{row['role']} [{row['pid']}] | {row['start_s']:.2f} | {row['last_event_s']:.2f} | "
                     f"{parts}{zip_note}")
    totals = result.get("import_ms_totals", {})
    lines += ["", "imports until batch 0 ends, summed over processes (ms): "
              + ", ".join(f"{group} {ms}" for group, ms in totals.items())]
    return "\n".join(lines)


def timeline(events: list[dict[str, Any]], started: float | None = None, until_s: float | None = None) -> str:
    """Every process start and every kit log line, in time order (seconds from ``started``)."""
    procs = processes(events)
    if not procs:
        return ""
    origin = started if started is not None else procs[0].start
    rows = []
    for p in procs:
        imports = ", ".join(f"{group} {round(p.group_ms(group))}" for group in GROUPS if p.group_ms(group))
        rows.append((p.start - origin, f"start  {p.role} [{p.pid}]" + (f"; imports ms: {imports}" if imports else "")))
        rows += [(t - origin, f"log    {p.role.split(' (')[0]} [{p.pid}]: {m[:140]}") for t, m in p.logs]
    return "\n".join(f"{t:7.2f}  {text}" for t, text in sorted(rows) if until_s is None or t <= until_s)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument("--started", type=float, default=None,
                        help="the run's process start (epoch s); default: the first traced process")
    parser.add_argument("--timeline", action="store_true",
                        help="also list every process start and kit log line in time order")
    parser.add_argument("--until", type=float, default=None, help="with --timeline: up to this second")
    args = parser.parse_args(argv)
    events = load_trace(args.trace)
    result = breakdown(events, args.started)
    print(render(result))  # a command-line report
    if args.timeline:
        print("\n" + timeline(events, args.started, args.until))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
