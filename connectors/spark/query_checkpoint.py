"""What the sink reads from the streaming query's own checkpoint folder (Spark writes it; the kit
never does):

- ``metadata``: ``{"id": "<query id>"}``, written when the query first starts. The id stays the same
  across restarts from that folder and is what Spark sets as the local property
  ``sql.streaming.queryId``; a deleted (reset) checkpoint folder gets a new one.
- ``offsets/<batchId>``: one file per batch, written before the batch runs (Spark's offset log);
- ``commits/<batchId>``: one file per batch whose sink commit completed (Spark's commit log).

The folder is read through the same filesystem layer as the kit's state (twophase.storage.state_storage),
so ``s3a://``, ``abfss://``, ``gs://``, ``hdfs://`` and ``dbfs:/`` checkpoint locations work too.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

from connectors.spark.spark_errors import QueryCheckpointError
from twophase.storage.state_storage import open_state_storage

log = logging.getLogger(__name__)

METADATA_FILE = "metadata"
COMMIT_LOG = "commits"
OFFSET_LOG = "offsets"


@dataclass(frozen=True)
class QueryCheckpoint:
    location: str
    query_id: str

    def last_committed_batch(self) -> int | None:
        """The newest batch id in Spark's commit log, or None if no batch was committed yet."""
        return self._newest(COMMIT_LOG)

    def last_planned_batch(self) -> int | None:
        """The newest batch id in Spark's offset log: the batch Spark is about to run (it logs a
        batch's offsets before planning its write, and a restart runs an uncommitted one again)."""
        return self._newest(OFFSET_LOG)

    def _newest(self, log_folder: str) -> int | None:
        storage = open_state_storage(self.location, read_only=True)
        batches = [int(name) for name in (key.rsplit("/", 1)[-1] for key in storage.list_keys(log_folder))
                   if name.isdigit()]
        return max(batches, default=None)


def read_query_checkpoint(location: str) -> QueryCheckpoint:
    """The query id Spark keeps in ``<location>/metadata``."""
    storage = open_state_storage(location, read_only=True)
    try:
        data = storage.read(METADATA_FILE)
    except FileNotFoundError:
        raise QueryCheckpointError(
            f"Spark's query metadata {storage.location(METADATA_FILE)} does not exist, although Spark "
            "writes it when a query starts. Is checkpointLocation the folder Spark uses (an absolute "
            "path or a URI, the same one on every machine)?") from None
    try:
        document = json.loads(data.decode("utf-8").splitlines()[0])
        query_id = str(document["id"])
    except (IndexError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        raise QueryCheckpointError(
            f"Spark's query metadata {storage.location(METADATA_FILE)} has no query id ({exc!r})") from exc
    return QueryCheckpoint(location=location, query_id=query_id)
