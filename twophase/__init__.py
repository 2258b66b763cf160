"""The protocol core: checkpoint coordinator, completed-checkpoint store, savepoints,
two-phase-commit contracts and failpoints. No Kafka and no Spark in here."""

from twophase.checkpoint import CompletedCheckpoint
from twophase.checkpoint_store import FileCheckpointStore
from twophase.coordinator import (
    CheckpointAbortedError,
    CheckpointCommitError,
    CheckpointConfig,
    CheckpointCoordinator,
    CheckpointFailureError,
    CheckpointTriggerError,
)
from twophase.participants import CheckpointParticipant, ResettableSource, RestoredState, TwoPhaseCommitSink
from twophase.pipeline import LocalPipeline, PipelineResult
from twophase.stats import CheckpointStats, CheckpointStatus

__all__ = [
    "CheckpointAbortedError", "CheckpointCommitError", "CheckpointConfig", "CheckpointCoordinator",
    "CheckpointFailureError", "CheckpointParticipant", "CheckpointStats", "CheckpointStatus",
    "CheckpointTriggerError", "CompletedCheckpoint", "FileCheckpointStore", "LocalPipeline",
    "PipelineResult", "ResettableSource", "RestoredState", "TwoPhaseCommitSink",
]
