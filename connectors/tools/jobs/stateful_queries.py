"""The stateful shapes of the Spark job (``spark_pipeline.py --transform ...``): the queries for
which exactly-once matters most, as users write them.

Input values are JSON records with ``id``, ``seq`` (a number) and ``group`` (what ``kafka-eos
load`` writes, and the integration tests' orders); the event time is ``seq`` seconds after the
epoch (plus 1 ms, see ``_events``), so windows and watermarks are a function of the input, not of
the clock. Each shape writes
JSON values keyed by what ``kafka-eos verify --shape`` checks (docs/exactly-once.md):

- ``running-count``: ``groupBy(group).count()``, ``{"key": group, "count": n}`` (update or complete);
- ``windowed-count``: a count per (group, tumbling event-time window) with a watermark,
  ``{"key": group, "window": {"start": s, "end": e}, "count": n}`` in epoch seconds (append);
- ``dedup``: ``dropDuplicates(id, event time)`` with a watermark, the first record of each id,
  ``{"key": id, "seq": ...}`` (append);
- ``join``: a stream-stream inner join of the input with ``--join-input`` on ``id``,
  ``{"key": id, "left": seq, "right": seq}`` (append);
- ``python-state``: a running count per group kept in Python state (``applyInPandasWithState``),
  the same output as ``running-count`` (update).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from connectors.tools.tool_errors import UsageError
from twophase.errors import InvalidValueError

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame

#: The output modes each transform takes, the first its default (Spark's own rules, narrowed to
#: those whose output ``kafka-eos verify --shape`` can check).
OUTPUT_MODES: dict[str, tuple[str, ...]] = {
    "enrich": ("append",),
    "copy": ("append",),
    "running-count": ("update", "complete"),
    "windowed-count": ("append", "update"),
    "dedup": ("append",),
    "join": ("append",),
    "python-state": ("update",),
}
STATEFUL = tuple(name for name in OUTPUT_MODES if name not in ("enrich", "copy"))

#: The shape `kafka-eos verify --shape` checks a transform's output with, per output mode.
VERIFY_SHAPE: dict[tuple[str, str], str] = {
    ("running-count", "update"): "running-count",
    ("running-count", "complete"): "complete-count",
    ("windowed-count", "append"): "windowed-count",
    ("windowed-count", "update"): "windowed-running-count",
    ("dedup", "append"): "dedup",
    ("join", "append"): "join",
    ("python-state", "update"): "running-count",
}


def job_arguments(shape: str) -> tuple[list[str], str, str]:
    """For ``kafka-eos replay --engine spark --shape SHAPE``: this job's arguments that write that
    shape, and where its input (``kafka-eos load``'s) carries the shape's key and event time."""
    found = [(transform, mode) for (transform, mode), name in VERIFY_SHAPE.items()
             if name == shape and transform != "python-state"]
    if not found or shape == "join":
        raise UsageError(f"--shape {shape} is not one the kit's Spark job writes from one input topic: use "
                         f"{', '.join(sorted({s for s in VERIFY_SHAPE.values() if s != 'join'}))}, or "
                         "--job-command with your own job")
    transform, mode = found[0]
    key = "json:id" if transform == "dedup" else "json:group"
    return ["--transform", transform, "--output-mode", mode], key, "json:seq"


def output_mode_error(transform: str, output_mode: str | None, join_input: str | None) -> str | None:
    """The one line refusing a combination of --transform, --output-mode and --join-input, or None."""
    modes = OUTPUT_MODES[transform]
    if output_mode is not None and output_mode not in modes:
        return f"--output-mode {output_mode} does not go with --transform {transform}: use {' or '.join(modes)}"
    if (transform == "join") != (join_input is not None):
        return "--join-input TOPIC goes with --transform join, and only with it (the join's right-hand input)"
    return None


def _events(source: "DataFrame", watermark_s: int | None) -> "DataFrame":
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    schema = StructType([StructField("id", StringType()), StructField("seq", LongType()),
                         StructField("group", StringType())])
    parsed = source.select(F.from_json(F.col("value").cast("string"), schema).alias("e")).select("e.*")
    # seq seconds, plus 1 ms: Spark's first watermark is 0 and deduplication drops a record whose
    # event time is at or below the watermark, so record 0 at exactly 0 would be dropped as late.
    # The millisecond moves no record to another window of whole seconds.
    events = parsed.withColumn("event_time", F.timestamp_millis(F.col("seq") * 1000 + 1))
    return events if watermark_s is None else events.withWatermark("event_time", f"{watermark_s} seconds")


def _json(key: str, **fields) -> list:  # type: ignore[no-untyped-def]
    from pyspark.sql import functions as F

    return [F.col(key).cast("string").alias("key"),
            F.to_json(F.struct(F.col(key).alias("key"), *(c.alias(n) for n, c in fields.items()))).alias("value")]


def _count_in_state(key: tuple[str], frames: Iterator["pd.DataFrame"], state) -> Iterator["pd.DataFrame"]:  # type: ignore[no-untyped-def]
    import pandas as pd

    count = state.get[0] if state.exists else 0
    for frame in frames:
        count += len(frame)
    state.update((count,))
    yield pd.DataFrame({"group": [key[0]], "count": [count]})


def stateful_output(source: "DataFrame", transform: str, *, window_s: int, watermark_s: int,
                    right: "DataFrame | None" = None) -> "DataFrame":
    """The (key, value) rows ``transform`` writes for the Kafka records of ``source``."""
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    if transform == "running-count":
        counts = _events(source, None).groupBy("group").count()
        return counts.select(*_json("group", count=F.col("count")))
    if transform == "windowed-count":
        counts = (_events(source, watermark_s)
                  .groupBy(F.window("event_time", f"{window_s} seconds"), "group").count())
        window = F.struct(F.col("window.start").cast("long").alias("start"),
                          F.col("window.end").cast("long").alias("end"))
        return counts.select(*_json("group", window=window, count=F.col("count")))
    if transform == "dedup":
        # With the event time among the columns, the watermark lets Spark drop old state.
        first = _events(source, watermark_s).dropDuplicates(["id", "event_time"])
        return first.select(*_json("id", seq=F.col("seq")))
    if transform == "join":
        assert right is not None
        left = _events(source, None).select("id", F.col("seq").alias("left"))
        other = _events(right, None).select(F.col("id").alias("right_id"), F.col("seq").alias("right"))
        pairs = left.join(other, F.col("id") == F.col("right_id"))
        return pairs.select(*_json("id", left=F.col("left"), right=F.col("right")))
    if transform == "python-state":
        counts = _events(source, None).select("group").groupBy("group").applyInPandasWithState(
            _count_in_state, "group string, count long", "count long", "Update", GroupStateTimeout.NoTimeout)
        return counts.select(*_json("group", count=F.col("count")))
    raise InvalidValueError(f"not a stateful transform: {transform!r}; one of {', '.join(STATEFUL)}")
