"""The sink's and the source's Arrow conversions, without a Spark session: the columns Spark's
Kafka connector reads and writes, and the errors it gives for bad rows."""

from __future__ import annotations

import pyarrow as pa
import pytest

pytest.importorskip("pyspark")

from connectors.kafka.clients import TIMESTAMP_LOG_APPEND_TIME, ConsumedBatch  # noqa: E402
from connectors.spark.arrow_batches import batch_to_arrow, batches_to_arrow  # noqa: E402
from connectors.spark.schema import source_schema  # noqa: E402
from connectors.spark.task_writer import produce_batch_of  # noqa: E402

HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def consumed(topic: str, partition: int, offsets: range, headers: bool = False) -> ConsumedBatch:
    batch = ConsumedBatch(topic, partition, headers=[] if headers else None)
    for offset in offsets:
        batch.offsets.append(offset)
        batch.keys.append(None if offset % 3 == 0 else f"k{offset}".encode())
        batch.values.append(f"v{offset}".encode())
        batch.timestamps_ms.append(1_700_000_000_000 + offset)
        batch.timestamp_types.append(TIMESTAMP_LOG_APPEND_TIME)
        if batch.headers is not None:
            batch.headers.append((("h", b"x"), ("empty", None)) if offset % 2 else ())
    return batch


def test_consumed_batch_becomes_spark_kafka_rows():
    arrow = batch_to_arrow(consumed("in", 2, range(10, 14), headers=True), include_headers=True)
    assert arrow.schema.names == [f.name for f in source_schema(True).fields]
    rows = arrow.to_pylist()
    assert [r["offset"] for r in rows] == [10, 11, 12, 13]
    assert rows[2]["key"] is None and rows[1]["key"] == b"k11"
    assert {r["topic"] for r in rows} == {"in"} and {r["partition"] for r in rows} == {2}
    assert rows[1]["timestamp"].timestamp() * 1000 == pytest.approx(1_700_000_000_011)
    assert rows[0]["timestampType"] == 1
    assert rows[1]["headers"] == [{"key": "h", "value": b"x"}, {"key": "empty", "value": None}]
    assert rows[0]["headers"] is None  # as Spark's own source: no headers is null, not []


def test_small_fetches_are_combined_into_larger_arrow_batches_in_order():
    fetches = [consumed("in", 0, range(start, start + 7)) for start in range(0, 70, 7)]
    out = list(batches_to_arrow(fetches, include_headers=False, min_rows=20))
    assert [b.num_rows for b in out] == [21, 21, 21, 7]
    assert [o for b in out for o in b.column("offset").to_pylist()] == list(range(70))


def test_large_records_bound_the_arrow_batch_by_bytes():
    big = ConsumedBatch("in", 0, [0, 1, 2], [None] * 3, [b"x" * 1000] * 3, [0] * 3, [0] * 3)
    out = list(batches_to_arrow([big, big, big], include_headers=False, min_rows=1000, max_bytes=5000))
    assert [b.num_rows for b in out] == [6, 3]


def sink_batch(**columns: pa.Array) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(list(columns.values()), names=list(columns))


def test_string_columns_are_sent_as_their_utf8_bytes():
    batch = sink_batch(key=pa.array(["ä", None]), value=pa.array(["v1", None]))
    records = produce_batch_of(batch, "out", include_headers=True)
    assert records.values == [b"v1", None] and records.keys == ["ä".encode(), None]
    assert records.topic == "out" and records.topics is None and records.partitions is None


def test_topic_option_overrides_the_topic_column_as_in_spark():
    batch = sink_batch(value=pa.array([b"a", b"b"]), topic=pa.array(["t1", "t2"]))
    assert produce_batch_of(batch, "out", include_headers=True).topics is None
    per_row = produce_batch_of(batch, None, include_headers=True)
    assert per_row.topics == ["t1", "t2"] and per_row.topic is None


def test_null_topic_without_topic_option_is_refused():
    batch = sink_batch(value=pa.array([b"a", b"b"]), topic=pa.array(["t1", None]))
    with pytest.raises(ValueError, match="null topic present in the data; use the topic option"):
        produce_batch_of(batch, None, include_headers=True)


def test_partition_column_null_means_partitioner_and_negative_is_refused():
    all_null = sink_batch(value=pa.array([b"a"]), partition=pa.array([None], pa.int32()))
    assert produce_batch_of(all_null, "out", include_headers=True).partitions is None
    mixed = sink_batch(value=pa.array([b"a", b"b"]), partition=pa.array([1, None], pa.int32()))
    assert produce_batch_of(mixed, "out", include_headers=True).partitions == [1, None]
    negative = sink_batch(value=pa.array([b"a"]), partition=pa.array([-1], pa.int32()))
    with pytest.raises(ValueError, match="partition column holds -1"):
        produce_batch_of(negative, "out", include_headers=True)


def test_headers_column_becomes_pairs_and_can_be_left_out():
    headers = pa.array([[{"key": "h", "value": b"1"}], None], HEADERS)
    batch = sink_batch(value=pa.array([b"a", b"b"]), headers=headers)
    assert produce_batch_of(batch, "out", include_headers=True).headers == [[("h", b"1")], None]
    assert produce_batch_of(batch, "out", include_headers=False).headers is None
