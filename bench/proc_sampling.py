"""What /proc says of processes: their parent, session, CPU and RSS (one pass over /proc), a
process tree, a process's PSS, its open file descriptors and a short label from its command line,
and the machine's busy and stolen CPU. ``run_bench.py`` and ``soak.py`` sample with it."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class ProcStat:
    comm: str
    ppid: int
    session: int
    cpu_s: float
    rss: int


def proc_stats() -> dict[int, ProcStat]:
    """Every process (and kernel thread) of the machine, from /proc/<pid>/stat."""
    stats = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                data = f.read().decode("utf-8", "replace")
        except OSError:
            continue  # exited meanwhile
        close = data.rfind(")")
        fields = data[close + 2:].split()
        # fields[0] is field 3 (state) of proc(5): ppid 4, session 6, utime 14, stime 15, rss 24.
        stats[int(entry)] = ProcStat(data[data.find("(") + 1:close], int(fields[1]), int(fields[3]),
                                     (int(fields[11]) + int(fields[12])) / CLOCK_TICKS,
                                     int(fields[21]) * PAGE_SIZE)
    return stats


def process_tree(root: int, stats: dict[int, ProcStat]) -> list[int]:
    """``root`` and its descendants, and the processes of its session: Spark's Python daemon and
    its workers may have been re-parented."""
    children: dict[int, list[int]] = {}
    for pid, stat in stats.items():
        children.setdefault(stat.ppid, []).append(pid)
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid in stats and pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, ()))
    found.update(pid for pid, stat in stats.items() if stat.session == root)
    return sorted(found)


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            parts = f.read().split(b"\0")
    except OSError:
        return "?"
    words = [p.decode("utf-8", "replace") for p in parts if p]
    # Enough to tell a driver from the JVM from a Python worker.
    interesting = [w for w in words if w.endswith(".py") or w.startswith("pyspark.") or
                   w.startswith("org.apache.spark.") or w == "-m"]
    return " ".join([Path(words[0]).name] + interesting)[:100] if words else "?"


def pss(pid: int) -> int:
    """Proportional set size in bytes (shared pages split between their users), 0 if gone."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def machine_cpu() -> tuple[float, float]:
    """(busy, steal) CPU seconds of the whole machine since boot, from /proc/stat. Steal is time
    the hypervisor gave this VM's CPUs to someone else (counted in busy)."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]] + [0] * 8
    # user nice system idle iowait irq softirq steal guest guest_nice; guest time is in user.
    busy = sum(values[:8]) - values[3] - values[4]
    return busy / CLOCK_TICKS, values[7] / CLOCK_TICKS


def open_fds(pid: int) -> int:
    """How many file descriptors ``pid`` has open, 0 if gone."""
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0
