"""What the Spark sink's driver knows of one batch: handed explicitly to its steps
(``sink_driver.py``) and to the state guard, never carried in the sink's options."""

from __future__ import annotations

from dataclasses import dataclass


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
