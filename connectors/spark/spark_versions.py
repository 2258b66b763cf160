"""Which Spark releases the kit runs on, and what each one offers it: the one place that checks a
Spark version.

- **Spark 3.5**: Spark's own Kafka source (``format("kafka")`` with ``read_committed``) feeding the
  kit's foreachBatch sink, which needs only ``mapInArrow`` (Spark 3.3+); the command-line tools.
  Spark 3.5 has no Python data source API, so ``format("kafka-eos")`` is refused in one line.
- **Spark 4.0 and later**: also ``format("kafka-eos")``, source and sink, and its JVM provider
  (update output mode), compiled against Spark 4.0's API.
- **Spark 4.2 and later**: also the source's read limits (``maxOffsetsPerTrigger``,
  ``minOffsetsPerTrigger``), which a Python source gets from Spark 4.2 on; on 4.0 and 4.1 they are
  refused in one line, and each micro-batch reads all that is available.

Each pyspark line is tested in CI at its newest patch, with the lowest and the highest pyarrow,
pandas, confluent-kafka and kafka-python the ranges allow (docs/where-it-runs.md, "Spark
versions"). Where an installed combination cannot run, :func:`check_installed_packages` says so in
one line before anything fails further in.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
from typing import TYPE_CHECKING

from connectors.spark.spark_errors import UnsupportedSparkError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: The first Spark release with the Python data source API (``pyspark.sql.datasource``).
PYTHON_DATA_SOURCE_SINCE = (4, 0)
#: The first with read limits and Trigger.AvailableNow for a Python streaming source
#: (``pyspark.sql.streaming.datasource``): maxOffsetsPerTrigger, minOffsetsPerTrigger.
STREAM_ADMISSION_CONTROL_SINCE = (4, 2)
#: The first Spark whose jars are built for Scala 2.13 only.
SCALA_2_13_SINCE = (4, 0)


def release(version: str) -> tuple[int, int]:
    """``(major, minor)`` of a release number: ``3.5.9`` and ``4.1.0.dev2`` alike."""
    match = re.match(r"^(\d+)\.(\d+)", version)
    if match is None:
        raise UnsupportedSparkError(f"version {version!r} is not a release number")
    return int(match.group(1)), int(match.group(2))


def scala_binary_version(spark_version: str) -> str:
    """The Scala of a Spark line's jars, which Spark's Maven artifacts carry in their names
    (``spark-sql-kafka-0-10_2.13``): 2.12 for pyspark 3.x, 2.13 for 4.x."""
    return "2.12" if release(spark_version) < SCALA_2_13_SINCE else "2.13"


def check_installed_packages() -> None:
    """Refuse, in one line that names the versions and the fix, installed packages that cannot run
    together, before pyarrow's own import fails with a line that does not say why: pyarrow 26 and
    later need NumPy 2, which pyspark 3.5's extras (``sql``, ``connect``) keep below 2, and pip
    cannot see it (pyarrow declares no numpy requirement). Reads package metadata only: imports
    nothing."""
    pyarrow, numpy = _installed("pyarrow"), _installed("numpy")
    if pyarrow is None or numpy is None:
        return
    if release(pyarrow) >= (26, 0) and release(numpy) < (2, 0):
        pyspark = _installed("pyspark") or "?"
        raise UnsupportedSparkError(
            f"pyarrow {pyarrow} needs NumPy 2 or later, and NumPy {numpy} is installed (pyspark {pyspark}'s "
            "extras keep numpy below 2 on Spark 3.5): pip install 'pyarrow<26', or numpy>=2 where nothing pins it")


def _installed(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def has_python_data_source_api() -> bool:
    """Whether the installed pyspark has the Python data source API (Spark 4.0+)."""
    return importlib.util.find_spec("pyspark.sql.datasource") is not None


def has_stream_admission_control() -> bool:
    """Whether the installed pyspark lets a Python streaming source limit a batch (Spark 4.2+)."""
    return importlib.util.find_spec("pyspark.sql.streaming.datasource") is not None


def has_arrow_stream_writer() -> bool:
    """Whether the installed pyspark has an Arrow writer for streaming Python sinks (Spark 4.1+)."""
    import pyspark.sql.datasource

    return hasattr(pyspark.sql.datasource, "DataSourceStreamArrowWriter")


def require_python_data_source(spark: SparkSession | None = None) -> None:
    """Refuse, in one line, ``format("kafka-eos")`` on a Spark without the Python data source API:
    the installed pyspark's, and on Spark Connect also the server's (``spark.version``), which may
    be older than the client."""
    import pyspark

    versions = [pyspark.__version__] if not has_python_data_source_api() else []
    if not versions and spark is not None:
        server = str(spark.version)
        if release(server) < PYTHON_DATA_SOURCE_SINCE:
            versions.append(server)
    if versions:
        raise UnsupportedSparkError(
            f"format(\"kafka-eos\") needs Spark's Python data source API (Spark 4.0 and later); this is Spark "
            f"{versions[0]}. On Spark 3.5 read with Spark's own source, format(\"kafka\") with "
            "kafka.isolation.level=read_committed, and write with the kit's foreachBatch sink, "
            "connectors.spark.foreach_batch.exactly_once_foreach_batch (examples/quickstart_spark_source.py)")


__all__ = ["PYTHON_DATA_SOURCE_SINCE", "SCALA_2_13_SINCE", "STREAM_ADMISSION_CONTROL_SINCE",
           "check_installed_packages", "has_arrow_stream_writer", "has_python_data_source_api",
           "has_stream_admission_control", "release", "require_python_data_source", "scala_binary_version"]
