"""What a write task of the ``kafka-eos`` sink sends the driver (Spark's ``WriterCommitMessage``).

A module of its own, without Arrow or the Kafka clients: the processes that only receive these
messages (the sink's commit runner and write planning) unpickle them, and would otherwise import
all that the write task does (``task_writer.py``).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from connectors.spark.spark_versions import has_python_data_source_api

if has_python_data_source_api():
    from pyspark.sql.datasource import WriterCommitMessage
else:  # Spark 3.5: only the foreachBatch sink sends these, and Spark never looks at their type
    WriterCommitMessage = object  # type: ignore[assignment,misc]


@dataclass
class KafkaCommitMessage(WriterCommitMessage):
    """What a write task sends the driver: its transaction's committable, as JSON (the driver
    stores it as is, and parses it once to commit)."""

    checkpoint_id: int
    partition_id: int
    attempt: int
    committable: dict[str, Any] | None
    record_count: int
    skipped: bool = False

    # The one codec, where a message travels as data rather than as Spark's pickled object (the
    # foreachBatch sink's mapInArrow returns it as a string column).
    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, raw: str) -> "KafkaCommitMessage":
        return cls(**json.loads(raw))
