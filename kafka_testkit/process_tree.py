"""The processes under one that a launcher started, from /proc: what a server leaves behind when it
is stopped (Spark's Python workers, YARN's containers), so that the launcher ends them too, and
only them."""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    #: When it started (clock ticks since boot): a PID reused later has another.
    start_ticks: int
    cmdline: str


def _processes() -> dict[int, Proc]:
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # gone meanwhile
        # The command name may hold spaces and parentheses: the fields follow the last ')'.
        fields = stat[stat.rindex(")") + 2:].split()
        found[int(entry)] = Proc(int(entry), int(fields[1]), int(fields[19]), cmdline)
    return found


def descendants(pid: int) -> list[Proc]:
    """Every live process under ``pid`` (children first)."""
    processes = _processes()
    children: dict[int, list[Proc]] = {}
    for proc in processes.values():
        children.setdefault(proc.ppid, []).append(proc)
    result: list[Proc] = []
    pending = [pid]
    while pending:
        for child in children.get(pending.pop(), []):
            result.append(child)
            pending.append(child.pid)
    return result


def still_running(proc: Proc) -> bool:
    """The same process is still alive (PIDs are reused: compare the start time)."""
    try:
        stat = Path(f"/proc/{proc.pid}/stat").read_text()
    except OSError:
        return False
    fields = stat[stat.rindex(")") + 2:].split()
    return int(fields[19]) == proc.start_ticks and fields[0] != "Z"


def kill_leftovers(processes: list[Proc]) -> list[Proc]:
    """SIGKILL those of ``processes`` that are still the same live processes; returns them."""
    killed = []
    for proc in processes:
        if still_running(proc):
            try:
                os.kill(proc.pid, signal.SIGKILL)
                killed.append(proc)
            except ProcessLookupError:
                pass
    return killed
