"""A class-data-sharing archive for the Spark driver's JVM, the largest cut of a job's cold start.

A Spark driver JVM spends most of its start reading, verifying and linking tens of thousands of
classes from Spark's jars, and the first query loads thousands more. The JDK can record the
classes a JVM loaded into an archive (``-XX:ArchiveClassesAtExit``) and map them from it at the
next start (``-XX:SharedArchiveFile``), which shortens both the SparkSession start and the first
query (``bench/README.md`` has the figures); it changes nothing else the job does.

The archive belongs to one JDK and one Spark classpath. A JVM given an archive made by another
JDK or for another classpath ignores it and starts as usual; so does a JVM whose archive is
missing. A truncated archive, though, stops the JVM from starting, and a JVM writes its archive
only as it exits, so the archive is recorded by a JVM of its own (``record``) into a temporary
file that is moved into place once that JVM has exited cleanly. ``-XX:+VerifySharedSpaces``
makes a damaged archive be ignored as well.

    kafka-eos jvm-class-archive ~/.cache/kafka-eos/spark-driver.jsa     # once per JDK and Spark
    spark.driver.extraJavaOptions = <java_options(that path)>
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

from connectors.spark.spark_errors import ClassArchiveError

log = logging.getLogger(__name__)

#: Silence the JVM's notes on classes it cannot archive (signed jars, old class files): they are
#: printed to stdout by every recording run and say nothing actionable.
_QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def java_options(path: str | os.PathLike[str]) -> str:
    """The driver JVM options that map the archive at ``path``; empty (with a warning naming the
    command that makes it) when there is none."""
    archive = Path(path).expanduser()
    if not archive.is_file() or archive.stat().st_size == 0:
        log.warning("no JVM class archive at %s: the driver starts without one; make it with "
                    "`kafka-eos jvm-class-archive %s`", archive, archive)
        return ""
    return f"-XX:SharedArchiveFile={archive} -XX:+VerifySharedSpaces {_QUIET}"


def with_java_options(existing: str | None, added: str) -> str:
    """``spark.driver.extraJavaOptions`` with ``added`` after what the user already set."""
    return " ".join(part for part in ((existing or "").strip(), added) if part)


def create(path: str | os.PathLike[str], master: str = "local[2]", timeout_s: float = 600.0) -> Path:
    """Record the archive at ``path`` (replacing any there) with a warm-up job in a JVM of its own."""
    archive = Path(path).expanduser().resolve()
    archive.parent.mkdir(parents=True, exist_ok=True)
    partial = archive.with_name(f".{archive.name}.{uuid.uuid4().hex}.partial")
    env = dict(os.environ)
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    try:
        finished = subprocess.run([sys.executable, "-m", __name__, "--record", str(partial), "--master", master],
                                  env=env, capture_output=True, text=True, timeout=timeout_s)
        if finished.returncode != 0 or not partial.is_file() or partial.stat().st_size == 0:
            tail = "\n".join((finished.stderr or "").splitlines()[-15:])
            raise ClassArchiveError(f"recording the JVM class archive failed (exit {finished.returncode}); "
                                    f"the driver will start without one:\n{tail}")
        os.replace(partial, archive)
    finally:
        partial.unlink(missing_ok=True)
    log.info("JVM class archive recorded at %s (%.0f MB)", archive, archive.stat().st_size / 2**20)
    return archive


def _record(partial: Path, master: str) -> None:
    """In the recording process: a session, a batch query, a streaming query and the kit's data
    source resolved, so that the classes of a streaming job's start are in the archive; then the
    JVM is stopped and waited for, since it writes the archive as it exits."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    from connectors.spark import register

    spark = (SparkSession.builder.master(master).appName("kafka-eos-jvm-class-archive")
             .config("spark.ui.enabled", "false")
             .config("spark.driver.extraJavaOptions",
                     f"-XX:ArchiveClassesAtExit={partial} -XX:+VerifySharedSpaces {_QUIET}")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    spark.range(1000).selectExpr("id % 7 AS k", "id").groupBy("k").count().collect()
    # The kit's data source planned (its schema comes from a Python planner process); no broker
    # is contacted before a query runs.
    spark.readStream.format("kafka-eos").option("kafka.bootstrap.servers", "127.0.0.1:9").option(
        "subscribe", "warm-up").load().selectExpr("CAST(value AS STRING) AS value").schema
    with tempfile.TemporaryDirectory() as checkpoint:
        query = (spark.readStream.format("rate").option("rowsPerSecond", 100).load()
                 .selectExpr("CAST(value AS STRING) AS value").writeStream.format("noop")
                 .option("checkpointLocation", checkpoint).trigger(processingTime="100 milliseconds").start())
        query.processAllAvailable()
        query.stop()
    spark.stop()
    gateway = SparkContext._gateway
    process = getattr(gateway, "proc", None)
    if gateway is not None:
        gateway.shutdown()
    if process is not None:
        if process.stdin is not None:
            process.stdin.close()  # the JVM exits when its parent's pipe closes
        process.wait(timeout=300)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="record a JVM class archive for the Spark driver")
    parser.add_argument("--record", type=Path, required=True)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args(argv)
    _record(args.record, args.master)
    return 0


if __name__ == "__main__":
    sys.exit(main())
