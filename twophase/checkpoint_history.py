"""The in-process scheduler's history of its last checkpoints, as Flink's web UI and REST API show
them (the coordinator keeps it in memory; each checkpoint's persisted figures are
``checkpoint_statistics.py``'s)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import Enum


class CheckpointStatus(str, Enum):
    IN_PROGRESS = "IN_PROGRESS"
    COMPLETED = "COMPLETED"
    #: Stored durably, but a participant could not confirm its commit: recovery commits it again.
    COMPLETED_NOT_COMMITTED = "COMPLETED_NOT_COMMITTED"
    FAILED = "FAILED"


@dataclass
class CheckpointHistoryEntry:
    """One checkpoint in the scheduler's in-memory history (not persisted)."""

    checkpoint_id: int
    is_savepoint: bool
    trigger_timestamp_ms: int
    participants: int
    acknowledged: int = 0
    status: CheckpointStatus = CheckpointStatus.IN_PROGRESS
    end_to_end_duration_ms: int | None = None
    state_size_bytes: int | None = None
    failure_cause: str | None = None

    def copy(self) -> "CheckpointHistoryEntry":
        return dataclasses.replace(self)
