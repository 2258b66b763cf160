"""A job's checkpoint timings as a JSONL file, written by the job and read by ``replay``.

The job registers :class:`CheckpointMetrics` with its coordinator *after* its sources and sinks.
Participants are notified in registration order, so its ``notify_checkpoint_complete`` runs once
every sink has committed, and the line it appends marks the moment the checkpoint's records became
visible. Each line is flushed and fsync'ed at once: the job may be killed with SIGKILL right after.

Events (``time`` fields are wall-clock milliseconds)::

    {"event": "start", "pid": 4242, "time_ms": ...}
    {"event": "restored", "pid": 4242, "checkpoint_id": 7, "time_ms": ...}
    {"event": "checkpoint", "pid": 4242, "checkpoint_id": 8, "trigger_ms": ..., "stored_ms": ...,
     "committed_ms": ..., "records": 500}
    {"event": "held", "pid": 4242, "time_ms": ...}

``held`` says the job has processed its input and now waits for its hold file
(``connectors/tools/jobs/job_hold.py``); any job may append it, the Spark job too.

:func:`read_metrics` also reads the Spark example's ``--metrics-file`` (one StreamingQueryProgress
per line: ``batchId``, ``numInputRows``, ``durationMs``, ``timestamp``).

The participant keeps no state in checkpoints (its snapshot is ``None``), but its name is in every
checkpoint it took part in, so a job must keep registering it (with or without a file) to restore
such checkpoints.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Callable

from twophase.checkpoint import JsonValue, wall_clock_ms
from twophase.coordinator import CheckpointCoordinator
from twophase.participants import CheckpointParticipant, RestoredState

log = logging.getLogger(__name__)

NAME = "kafka-eos-metrics"


def append_event(path: str | os.PathLike[str], event: dict[str, Any]) -> None:
    """Append one event line (with this process's pid), flushed and fsync'ed at once."""
    line = json.dumps({**event, "pid": os.getpid()}, separators=(",", ":")) + "\n"
    with open(path, "a", encoding="utf-8") as out:
        out.write(line)
        out.flush()
        os.fsync(out.fileno())


class CheckpointMetrics(CheckpointParticipant):
    """Appends one line per committed checkpoint to ``path`` (nothing when ``path`` is None).

    ``records_processed`` is read at each checkpoint: the job's running count of records it has
    handed to its sinks, so a line can say how many records the checkpoint carried."""

    def __init__(self, coordinator: CheckpointCoordinator, path: str | os.PathLike[str] | None,
                 records_processed: Callable[[], int] = lambda: 0) -> None:
        self.name = NAME
        self._coordinator = coordinator
        self._path = Path(path) if path is not None else None
        self._records_processed = records_processed
        self._records_at_last = 0
        self._snapshot_records: dict[int, int] = {}
        self._write({"event": "start", "time_ms": wall_clock_ms()})

    def _write(self, event: dict[str, Any]) -> None:
        if self._path is not None:
            append_event(self._path, event)

    def snapshot_state(self, checkpoint_id: int) -> JsonValue:
        processed = self._records_processed()
        self._snapshot_records[checkpoint_id] = processed - self._records_at_last
        self._records_at_last = processed
        return None

    def restore(self, restored: RestoredState) -> None:
        self._snapshot_records.clear()
        self._records_at_last = self._records_processed()
        self._write({"event": "restored", "checkpoint_id": restored.checkpoint_id, "time_ms": wall_clock_ms()})

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        completed = self._coordinator.latest_completed
        if completed is None or completed.checkpoint_id != checkpoint_id:
            log.debug("checkpoint %d: no completed checkpoint to time", checkpoint_id)
            return
        self._write({
            "event": "checkpoint",
            "checkpoint_id": checkpoint_id,
            "trigger_ms": completed.trigger_timestamp_ms,
            "stored_ms": completed.completion_timestamp_ms,
            "committed_ms": wall_clock_ms(),
            "records": self._snapshot_records.pop(checkpoint_id, 0),
        })

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        self._snapshot_records.pop(checkpoint_id, None)


@dataclass(frozen=True)
class CheckpointEvent:
    #: The committing process; None for a Spark progress line, which does not name it.
    pid: int | None
    checkpoint_id: int
    trigger_ms: int
    stored_ms: int
    committed_ms: int
    records: int

    @property
    def latency_ms(self) -> int:
        """Trigger to commit: how long the checkpoint's records waited to become visible."""
        return self.committed_ms - self.trigger_ms


@dataclass(frozen=True)
class JobMetrics:
    checkpoints: list[CheckpointEvent]
    #: When a run of the job had processed its input and began to wait for its hold file.
    held_ms: list[int] = field(default_factory=list)

    def first_commit_after(self, time_ms: int) -> CheckpointEvent | None:
        later = [c for c in self.checkpoints if c.committed_ms >= time_ms]
        return min(later, key=lambda c: c.committed_ms) if later else None

    def first_commit_after_death(self, start_ms: int, death_ms: int, pid: int | None) -> CheckpointEvent | None:
        """The first commit after a run (process ``pid``) that began at ``start_ms`` died at
        ``death_ms``: one by another process.

        The dying run may have written a commit's line in the very millisecond of its death, or
        even stamped it a millisecond after the killer read the clock, so its pids (its own and any
        child's that committed before the death) are ruled out; a line without a pid counts only if
        it is later than the death."""
        dead = {c.pid for c in self.checkpoints if c.pid is not None and start_ms <= c.committed_ms <= death_ms}
        dead.add(pid)
        later = [c for c in self.checkpoints if c.committed_ms >= death_ms and
                 (c.pid not in dead if c.pid is not None else c.committed_ms > death_ms)]
        return min(later, key=lambda c: c.committed_ms) if later else None

    def held_after(self, time_ms: int) -> int | None:
        """The first moment after ``time_ms`` a run was held with all its input processed."""
        return min((t for t in self.held_ms if t >= time_ms), default=None)


def _iso_ms(text: str) -> int:
    # Spark writes e.g. "2026-11-22T03:17:50.153Z".
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def _spark_batch(event: dict[str, Any]) -> CheckpointEvent:
    """A line of the Spark example's ``--metrics-file``: one StreamingQueryProgress (a micro-batch
    is a checkpoint). Its trigger execution ends after the batch's commit, so trigger time plus
    that duration stands for the commit time."""
    trigger_ms = _iso_ms(str(event["timestamp"]))
    committed_ms = trigger_ms + int(event.get("durationMs", {}).get("triggerExecution", 0))
    return CheckpointEvent(pid=None, checkpoint_id=int(event["batchId"]), trigger_ms=trigger_ms,
                           stored_ms=committed_ms, committed_ms=committed_ms,
                           records=int(event.get("numInputRows", 0)))


def read_metrics(path: str | os.PathLike[str]) -> JobMetrics:
    """Parse a metrics file, of :class:`CheckpointMetrics` or of the Spark example; a torn last
    line (the job was killed mid-write) is skipped."""
    checkpoints: list[CheckpointEvent] = []
    held: list[int] = []
    file = Path(path)
    if not file.exists():
        return JobMetrics(checkpoints, held)
    for number, line in enumerate(file.read_text(encoding="utf-8").splitlines(), start=1):
        try:
            event = json.loads(line)
            if event.get("event") == "checkpoint":
                checkpoints.append(CheckpointEvent(
                    int(event["pid"]), int(event["checkpoint_id"]), int(event["trigger_ms"]),
                    int(event["stored_ms"]), int(event["committed_ms"]), int(event.get("records", 0))))
            elif event.get("event") == "held":
                held.append(int(event["time_ms"]))
            elif "batchId" in event:
                checkpoints.append(_spark_batch(event))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning("%s:%d: skipping a line that is not a metrics event (torn by a kill?): %s",
                        file, number, exc)
    return JobMetrics(checkpoints, held)
