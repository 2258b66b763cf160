"""Which batch a write of the Spark sink belongs to, learned in one place for each way Spark hands
it: an argument (the stream writer's ``commit``/``abort``, foreachBatch), Spark's offset log (the
write planning, ``sink_driver.before_tasks``), a task's local property
(:meth:`BatchContext.of_streaming_task`), or the sink's own id for a plain batch write
(:meth:`BatchContext.of_batch_write`).

The one conversion point of the batch id: at the Spark edge it is Spark's ``batchId``/``batch_id``;
a :class:`BatchContext` made of it carries it as ``checkpoint_id``, the name the sink's steps and
twophase use inside."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

log = logging.getLogger(__name__)

#: The local property Spark sets on every task of a streaming write: the batch id.
BATCH_ID_PROPERTY = "streaming.sql.batchId"


@dataclass(frozen=True)
class BatchContext:
    """What the driver knows of one batch, handed to its steps (never through the sink's options)."""

    #: Spark's batch id (the foreachBatch helper's too), or a plain batch write's own id.
    checkpoint_id: int
    #: The streaming query the foreachBatch helper runs in; None for the data source, whose state
    #: guard reads the query's id from its checkpointLocation, and for a plain batch write.
    query_id: str | None = None
    #: Spark may run this batch id again after a crash (streaming, foreachBatch), so an id already
    #: stored is a replay. A plain ``df.write`` is never replayed: such an id means that another
    #: write to the same sink stored a checkpoint meanwhile.
    replayable: bool = True

    @classmethod
    def of_batch_write(cls, decided_through: int | None) -> "BatchContext":
        """A plain ``df.write``: a fresh id above every stored one (wall-clock ms keeps ids
        increasing across writers of one directory). Spark never replays it: an id found stored at
        commit is another write's."""
        return cls(max(int(time.time() * 1000), (-1 if decided_through is None else decided_through) + 1),
                   replayable=False)

    @classmethod
    def of_streaming_task(cls, decided_through: int | None) -> "BatchContext":
        """The batch a task of a streaming write belongs to: Spark's local property. Spark 4.x sets
        it on every streaming task; without it, the batch after the newest stored one is the best
        guess, and the driver's commit refuses a wrong guess."""
        from pyspark import TaskContext

        context = TaskContext.get()
        raw = context.getLocalProperty(BATCH_ID_PROPERTY) if context else None
        if raw is not None:
            return cls(int(raw))
        guess = (-1 if decided_through is None else decided_through) + 1
        log.warning("Spark local property %r is missing; assuming batch %d (checked at commit)", BATCH_ID_PROPERTY,
                    guess)
        return cls(guess)
