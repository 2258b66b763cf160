"""A tiny in-process engine: source -> user function -> two-phase-commit sinks, checkpointed.

It is what Spark's micro-batch loop is to the Spark adapters: the thing that moves records and
calls the coordinator. Tests and examples use it; any Python loop can be written the same way.
On a failed checkpoint it fails over like Flink does: restore the latest completed checkpoint
(re-commit, abort lingering transactions, rewind the source) and go on.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from twophase.coordinator import CheckpointCoordinator
from twophase.errors import CheckpointAbortedError, CheckpointCommitError, InvalidValueError
from twophase.participants import ResettableSource, TwoPhaseCommitSink

log = logging.getLogger(__name__)

Transform = Callable[[Any], Iterable[Any]]


@dataclass
class PipelineResult:
    records_in: int
    records_out: int
    restarts: int
    last_checkpoint_id: int | None


class LocalPipeline:
    """Runs ``transform`` over every record of ``source`` into ``sinks``.

    ``route(value) -> index`` picks the sink of each output value (default: the first sink); with
    several sinks they act like the parallel subtasks of one Flink sink operator.
    """

    def __init__(
        self,
        coordinator: CheckpointCoordinator,
        source: ResettableSource[Any],
        transform: Transform,
        sinks: Sequence[TwoPhaseCommitSink[Any, Any]],
        *,
        route: Callable[[Any], int] | None = None,
        max_poll_records: int = 500,
        max_restarts: int = 10,
        idle_sleep: Callable[[], None] | None = None,
        checkpoint_every_records: int | None = None,
    ) -> None:
        if not sinks:
            raise InvalidValueError("sinks must name at least one sink")
        if max_poll_records < 1:
            raise InvalidValueError(f"max_poll_records must be >= 1, got {max_poll_records}")
        if max_restarts < 0:
            raise InvalidValueError(f"max_restarts must be >= 0, got {max_restarts}")
        if checkpoint_every_records is not None and checkpoint_every_records < 1:
            raise InvalidValueError(f"checkpoint_every_records must be >= 1 or None, got {checkpoint_every_records}")
        self.coordinator = coordinator
        self.source = source
        self.transform = transform
        self.sinks = list(sinks)
        self.route = route or (lambda _value: 0)
        self.max_poll_records = max_poll_records
        self.max_restarts = max_restarts
        self.idle_sleep = idle_sleep
        # Besides the coordinator's interval: a checkpoint after this many input records, which
        # makes the checkpoint sequence independent of timing (reproducible crash points).
        self.checkpoint_every_records = checkpoint_every_records
        registered = {p.name for p in coordinator.participants}
        for participant in [source, *self.sinks]:
            if participant.name not in registered:
                coordinator.register(participant)

    def run(self, savepoint_path: str | Path | None = None) -> PipelineResult:
        """Run until a bounded source ends and a final checkpoint has committed everything."""
        restored = self.coordinator.restore(savepoint_path)
        restarts = 0
        records_in = records_out = 0
        while True:
            try:
                records_in, records_out = self._run_until_end(records_in, records_out)
                latest = self.coordinator.latest_completed
                return PipelineResult(records_in, records_out, restarts,
                                      latest.checkpoint_id if latest else None)
            except (CheckpointAbortedError, CheckpointCommitError) as exc:
                restarts += 1
                if restarts > self.max_restarts:
                    raise
                log.warning("failing over after %r (restart %d of at most %d)", exc, restarts,
                            self.max_restarts)
                restored = self.coordinator.restore()
                log.info("resumed from checkpoint %s",
                         restored.checkpoint_id if restored else "none")

    def _run_until_end(self, records_in: int, records_out: int) -> tuple[int, int]:
        every = self.checkpoint_every_records
        since_checkpoint = 0
        while True:
            self.coordinator.tick()
            limit = self.max_poll_records if every is None else min(self.max_poll_records, every - since_checkpoint)
            batch = self.source.poll(limit)
            for record in batch:
                records_in += 1
                for value in self.transform(record):
                    self.sinks[self.route(value)].invoke(value)
                    records_out += 1
            since_checkpoint += len(batch)
            if every is not None and since_checkpoint >= every:
                self.coordinator.trigger_checkpoint()
                since_checkpoint = 0
            if not batch:
                if self.source.end_reached():
                    self.coordinator.trigger_checkpoint()
                    return records_in, records_out
                if self.idle_sleep is not None:
                    self.idle_sleep()
