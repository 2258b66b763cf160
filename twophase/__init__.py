"""The protocol core: the commit lifecycle, the in-process checkpoint coordinator, the
completed-checkpoint store, savepoints, two-phase-commit contracts and failpoints, and the root of
the kit's errors
(:class:`~twophase.errors.KafkaEosError`). No Kafka and no Spark in here.

The names below are resolved on first use (PEP 562): every Python process Spark starts for the
kit imports ``twophase.errors`` or ``twophase.failpoints``, and most of them need nothing else, so
importing the package must not import the coordinator, the store and pyarrow with it."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "CompletedCheckpoint": "twophase.checkpoint",
    "FileCheckpointStore": "twophase.checkpoint_store",
    "CheckpointAbortedError": "twophase.errors",
    "CheckpointCommitError": "twophase.errors",
    "CheckpointConfig": "twophase.coordinator",
    "CheckpointCoordinator": "twophase.coordinator",
    "CheckpointFailureError": "twophase.errors",
    "CheckpointTriggerError": "twophase.errors",
    "KafkaEosError": "twophase.errors",
    "CommitLifecycle": "twophase.lifecycle",
    "CommitTimings": "twophase.checkpoint_statistics",
    "CommittingParticipant": "twophase.participants",
    "CheckpointParticipant": "twophase.participants",
    "ResettableSource": "twophase.participants",
    "RestoredState": "twophase.participants",
    "TwoPhaseCommitSink": "twophase.participants",
    "TransactionCommitter": "twophase.transaction_endings",
    "LocalPipeline": "twophase.pipeline",
    "PipelineResult": "twophase.pipeline",
    "CheckpointHistoryEntry": "twophase.checkpoint_history",
    "CheckpointStatus": "twophase.checkpoint_history",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'twophase' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


if TYPE_CHECKING:
    from twophase.checkpoint import CompletedCheckpoint
    from twophase.checkpoint_store import FileCheckpointStore
    from twophase.checkpoint_statistics import CommitTimings
    from twophase.coordinator import CheckpointConfig, CheckpointCoordinator
    from twophase.lifecycle import CommitLifecycle
    from twophase.errors import (
        CheckpointAbortedError,
        CheckpointCommitError,
        CheckpointFailureError,
        CheckpointTriggerError,
        KafkaEosError,
    )
    from twophase.participants import (
        CheckpointParticipant,
        CommittingParticipant,
        ResettableSource,
        RestoredState,
        TwoPhaseCommitSink,
    )
    from twophase.pipeline import LocalPipeline, PipelineResult
    from twophase.transaction_endings import TransactionCommitter
    from twophase.checkpoint_history import CheckpointHistoryEntry, CheckpointStatus
