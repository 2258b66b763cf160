"""One Spark job of the drop-in suite (test_drop_in_for_spark_kafka.py): many reads and writes of
Kafka through one connector, ``--format kafka`` (Spark's own, with ``--jars``) or ``--format
kafka-eos`` (the kit's), in one Spark session, so the suite starts one Spark per connector.

    python drop_in_job.py --format kafka --jars a.jar,b.jar --spec spec.json --out result.json

``spec.json``::

    {"common": {"kafka.bootstrap.servers": "...", ...},      # options of every read and write
     "reads": [{"name": "...", "stream": false, "options": {...}},
               {"name": "...", "stream": true, "sink": "memory" | "parquet", "options": {...}}],
     "writes": [{"name": "...", "topic": "...", "keys": 3000, "options": {...}}],
     "foreach_batch_writes": [{"name": "...", "input": "...", "topic": "..."}]}   # kafka-eos only

Every read and write takes exactly the same options whatever the format (the promise under test):
only the format name differs. A batch write uses ``.mode("append")`` on both (Spark's own sink
takes it too; Python data sources need it). The result holds, per read, the rows as
``[topic, partition, offset, key hex, value hex, timestamp ms, timestampType, headers]`` (headers
``[[key, value hex or null], ...]`` or null without includeHeaders), or the error; per write "ok"
or the error. A failing read does not stop the others.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from connectors import worker_python  # noqa: E402

COLUMNS = ("topic", "partition", "offset", "key", "value", "unix_millis(timestamp) AS ts", "timestampType")


def _hex(value: bytes | bytearray | None) -> str | None:
    return None if value is None else bytes(value).hex()


def row_of(row) -> list:  # type: ignore[no-untyped-def]
    headers = row["headers"]
    return [row["topic"], row["partition"], row["offset"], _hex(row["key"]), _hex(row["value"]), row["ts"],
            row["timestampType"],
            None if headers is None else [[h["key"], _hex(h["value"])] for h in headers]]


def select_columns(df, options: dict[str, str]):  # type: ignore[no-untyped-def]
    with_headers = str(options.get("includeHeaders", "false")).lower() == "true"
    return df.selectExpr(*COLUMNS, "headers" if with_headers else
                         "CAST(NULL AS ARRAY<STRUCT<key: STRING, value: BINARY>>) AS headers")


def error_text(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text[:3000]


def batch_read(spark, fmt: str, options: dict[str, str]) -> dict:  # type: ignore[no-untyped-def]
    df = spark.read.format(fmt).options(**options).load()
    return {"rows": [row_of(r) for r in select_columns(df, options).collect()],
            "partitions": df.rdd.getNumPartitions()}


def stream_read(spark, fmt: str, options: dict[str, str], sink: str, work: Path,  # type: ignore[no-untyped-def]
                name: str) -> dict:
    df = spark.readStream.format(fmt).options(**options).load()
    query_name = "q_" + "".join(c if c.isalnum() else "_" for c in name)
    writer = (select_columns(df, options).writeStream.trigger(availableNow=True)
              .option("checkpointLocation", str(work / f"{name}-chk")))
    if sink == "memory":
        query = writer.format("memory").queryName(query_name).start()
    else:
        query = writer.format("parquet").option("path", str(work / f"{name}-out")).start()
    query.awaitTermination()
    batches = sum(1 for p in query.recentProgress if p["numInputRows"] > 0)
    result = spark.table(query_name) if sink == "memory" else spark.read.parquet(str(work / f"{name}-out"))
    return {"rows": [row_of(r) for r in result.collect()], "batches": batches}


def keyed_rows(spark, keys: int):  # type: ignore[no-untyped-def]
    """``keys`` distinct keys ``key-<i>`` and one row with a null key."""
    keyed = spark.range(keys).selectExpr("CAST(concat('key-', id) AS BINARY) AS key",
                                         "CAST(concat('value-', id) AS BINARY) AS value")
    return keyed.unionByName(spark.createDataFrame([(None, bytearray(b"null-key"))], "key binary, value binary"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--format", choices=["kafka", "kafka-eos"], required=True)
    parser.add_argument("--jars", default=None, help="Spark's Kafka connector jars (spark.jars)")
    parser.add_argument("--spec", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--work-dir", required=True, help="checkpoints and parquet output of the streaming reads")
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    spec = json.loads(Path(args.spec).read_text())
    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PYSPARK_PYTHON", worker_python.path())

    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master(args.master).appName(f"drop-in {args.format}")
               .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.session.timeZone", "UTC"))
    if args.jars:
        builder = builder.config("spark.jars", args.jars)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    if args.format == "kafka-eos":
        from connectors.spark import register

        register(spark)
    common = spec.get("common", {})
    result: dict[str, dict] = {"reads": {}, "writes": {}}
    for read in spec.get("reads", []):
        options = {**common, **read["options"]}
        try:
            if read.get("stream"):
                result["reads"][read["name"]] = stream_read(spark, args.format, options, read.get("sink", "memory"),
                                                            work, read["name"])
            else:
                result["reads"][read["name"]] = batch_read(spark, args.format, options)
        except Exception as exc:  # one failing read must not hide the others' results
            traceback.print_exc()
            result["reads"][read["name"]] = {"error": error_text(exc)}
    for write in spec.get("writes", []):
        try:
            (keyed_rows(spark, write["keys"]).write.format(args.format).mode("append")
             .options(**common).options(**write.get("options", {})).option("topic", write["topic"]).save())
            result["writes"][write["name"]] = "ok"
        except Exception as exc:
            traceback.print_exc()
            result["writes"][write["name"]] = {"error": error_text(exc)}
    if args.format == "kafka-eos":
        from connectors.spark.foreach_batch import exactly_once_foreach_batch

        for write in spec.get("foreach_batch_writes", []):
            checkpoint = str(work / f"{write['name']}-chk")
            try:
                source = (spark.readStream.format("kafka-eos").options(**common).option("subscribe", write["input"])
                          .option("startingOffsets", "earliest").load().select("key", "value"))
                query = (source.writeStream.foreachBatch(exactly_once_foreach_batch(
                    **common, topic=write["topic"], checkpointLocation=checkpoint))
                    .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
                query.awaitTermination()
                result["writes"][write["name"]] = "ok"
            except Exception as exc:
                traceback.print_exc()
                result["writes"][write["name"]] = {"error": error_text(exc)}
    Path(args.out).write_text(json.dumps(result))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
