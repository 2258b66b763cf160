"""The per-batch timeline of a latency run (issue 38): for every micro-batch of the measured window,
what Spark's progress says it spent on each step, what the kit's commit log says of its commit, the
JVM's GC pauses and the processes that started while it ran, and the latency of the records that
became visible when it committed; then the slowest 1 % of batches, by their slowest record.

``latency.py`` feeds it; it reads only files and lists, so a run kept with ``--keep`` can be
looked at again::

    python bench/batch_timeline.py WORK_DIR/TAG   # TAG.metrics.jsonl, TAG.stderr, TAG.gc.log, TAG.samples.json
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

#: A unified-logging GC line with its wall-clock decoration: -Xlog:gc:file=...:time
GC_PAUSE = re.compile(r"^\[(?P<time>[^\]]+)\].*?\b(?P<what>Pause [^(]+?)(?: \([^)]*\))*\s.*?(?P<ms>\d+(?:\.\d+)?)ms\s*$")
#: The kit's commit line (bench/process_hooks/sitecustomize.py has the commit runner log it).
COMMIT = re.compile(r"^(?P<time>\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d[,.]\d{3}).*?batch (?P<batch>\d+) committed: "
                    r"\d+ transactions, \d+ records, (?P<ms>\d+) ms"
                    r"(?: \(prepare (?P<prepare>\d+), store (?P<store>\d+), EndTxn (?P<end_txn>\d+), "
                    r"mark (?P<mark>\d+))?")
SPARK_STEPS = ("latestOffset", "getBatch", "queryPlanning", "walCommit", "addBatch", "commitOffsets",
               "triggerExecution")


@dataclass
class BatchTimeline:
    batch: int
    start_ms: int
    end_ms: int
    rows: int
    #: Spark's durationMs of the batch (its own steps)
    spark_ms: dict[str, int]
    #: the kit's driver-side commit: total, prepare, store, EndTxn, mark (ms), if logged
    commit_ms: dict[str, int] = field(default_factory=dict)
    gc_pauses_ms: list[float] = field(default_factory=list)
    processes_started: list[str] = field(default_factory=list)
    records: int = 0
    max_latency_ms: int | None = None
    #: the batch started late: the time from the previous batch's end to its start, beyond the trigger
    queued_ms: int = 0


def _wall_ms(text: str) -> int:
    text = text.strip().replace(",", ".")
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    parsed = datetime.fromisoformat(re.sub(r"([+-]\d\d)(\d\d)$", r"\1:\2", text))
    if parsed.tzinfo is None:  # the commit log's local time
        return int(parsed.timestamp() * 1000)
    return int(parsed.timestamp() * 1000)


def gc_pauses(gc_log: Path) -> list[tuple[int, float, str]]:
    """(wall ms at the pause's end, pause ms, kind) of every pause in a -Xlog:gc:...:time file."""
    pauses = []
    for line in gc_log.read_text(errors="replace").splitlines() if gc_log.exists() else []:
        m = GC_PAUSE.match(line)
        if m:
            pauses.append((_wall_ms(m.group("time")), float(m.group("ms")), m.group("what").strip()))
    return pauses


def commit_lines(stderr: Path) -> dict[int, dict[str, int]]:
    found: dict[int, dict[str, int]] = {}
    for line in stderr.read_text(errors="replace").splitlines() if stderr.exists() else []:
        m = COMMIT.search(line)
        if m:
            found[int(m.group("batch"))] = {k: int(v) for k, v in m.groupdict().items()
                                            if v is not None and k not in ("time", "batch")}
    return found


def progress_batches(metrics: Path) -> list[dict[str, Any]]:
    entries = []
    for line in metrics.read_text().splitlines() if metrics.exists() else []:
        entry = json.loads(line)
        if entry.get("numInputRows"):
            entries.append(entry)
    return entries


def build(metrics: Path, stderr: Path, gc_log: Path, samples: list[tuple[int, int]],
          process_starts: list[tuple[int, str]], trigger_ms: int, window: tuple[int, int]) -> list[BatchTimeline]:
    """The window's batches, each with the records that became visible after the previous batch's
    end and by its own end (plus a reader's poll of slack)."""
    commits = commit_lines(stderr)
    pauses = gc_pauses(gc_log)
    timelines: list[BatchTimeline] = []
    previous_end: int | None = None
    for entry in progress_batches(metrics):
        start = _wall_ms(entry["timestamp"])
        durations = {k: int(v) for k, v in (entry.get("durationMs") or {}).items() if k in SPARK_STEPS}
        end = start + durations.get("triggerExecution", 0)
        batch = BatchTimeline(batch=int(entry["batchId"]), start_ms=start, end_ms=end, rows=int(entry["numInputRows"]),
                              spark_ms=durations, commit_ms=commits.get(int(entry["batchId"]), {}))
        if previous_end is not None:
            batch.queued_ms = max(0, start - previous_end - trigger_ms)
        previous_end = end
        batch.gc_pauses_ms = [ms for at, ms, _ in pauses if start <= at <= end]
        batch.processes_started = [label for at, label in process_starts if start <= at <= end]
        timelines.append(batch)
    # A record becomes visible at its batch's commit, inside the batch, and the reader sees it
    # within one poll (50 ms): it belongs to the first batch that ended at most a poll before.
    slack = 50
    ends = [b.end_ms for b in timelines]
    latencies: dict[int, list[int]] = {}
    for produced, latency in samples:
        if not window[0] <= produced < window[1]:
            continue
        visible = produced + latency
        index = next((i for i, e in enumerate(ends) if e + slack >= visible), None)
        if index is not None:
            latencies.setdefault(index, []).append(latency)
    for index, values in latencies.items():
        timelines[index].records = len(values)
        timelines[index].max_latency_ms = max(values)
    return [b for b in timelines if b.records]


def slowest(timelines: list[BatchTimeline], share: float = 0.01, at_least: int = 3) -> list[BatchTimeline]:
    count = max(at_least, int(len(timelines) * share + 0.999))
    return sorted(timelines, key=lambda b: b.max_latency_ms or 0, reverse=True)[:count]


def typical(timelines: list[BatchTimeline]) -> dict[str, float]:
    """The median of every step over the window's batches, to read the slow ones against."""
    import statistics

    steps: dict[str, list[int]] = {}
    for b in timelines:
        for k, v in b.spark_ms.items():
            steps.setdefault(k, []).append(v)
        for k, v in b.commit_ms.items():
            steps.setdefault(f"commit.{k}", []).append(v)
        steps.setdefault("queued", []).append(b.queued_ms)
        steps.setdefault("max_latency", []).append(b.max_latency_ms or 0)
    return {k: statistics.median(v) for k, v in steps.items()}


def report(timelines: list[BatchTimeline]) -> dict[str, Any]:
    return {"batches": len(timelines), "median": typical(timelines),
            "slowest_1pct": [asdict(b) for b in slowest(timelines)]}


def render(summary: dict[str, Any]) -> str:
    """The slowest batches as a Markdown table, against the median batch."""
    median = summary["median"]
    lines = ["| batch | slowest record ms | rows | queued ms | " + " | ".join(SPARK_STEPS) +
             " | kit commit (prepare/store/EndTxn/mark) ms | GC pauses ms | processes started |",
             "|---" * (8 + len(SPARK_STEPS) - 1) + "|"]
    lines.append(f"| median | {median.get('max_latency', '')} | | {median.get('queued', '')} | " +
                 " | ".join(str(median.get(s, "")) for s in SPARK_STEPS) +
                 f" | {median.get('commit.ms', '')} ({median.get('commit.prepare', '')}/{median.get('commit.store', '')}/"
                 f"{median.get('commit.end_txn', '')}/{median.get('commit.mark', '')}) | | |")
    for b in summary["slowest_1pct"]:
        c = b["commit_ms"]
        lines.append(f"| {b['batch']} | {b['max_latency_ms']} | {b['rows']} | {b['queued_ms']} | " +
                     " | ".join(str(b["spark_ms"].get(s, "")) for s in SPARK_STEPS) +
                     f" | {c.get('ms', '')} ({c.get('prepare', '')}/{c.get('store', '')}/{c.get('end_txn', '')}/"
                     f"{c.get('mark', '')}) | {', '.join(f'{p:g}' for p in b['gc_pauses_ms'])} | "
                     f"{', '.join(b['processes_started'])} |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    base = Path(argv[0])
    kept = json.loads(Path(f"{base}.samples.json").read_text())
    timelines = build(Path(f"{base}.metrics.jsonl"), Path(f"{base}.stderr"), Path(f"{base}.gc.log"),
                      [tuple(s) for s in kept["samples"]], [tuple(p) for p in kept["process_starts"]],
                      kept["trigger_ms"], tuple(kept["window"]))
    print(render(report(timelines)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
