"""The ``kafka-eos`` Python data source: Spark's Kafka connector, exactly-once on the sink side."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource

from connectors.spark.format_names import FORMAT, PYTHON_SOURCE

if TYPE_CHECKING:
    from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, DataSourceStreamWriter, DataSourceWriter
    from pyspark.sql.types import StructType


# Spark starts a Python process of its own for each planning step (creating the source, planning a
# read, running the streaming source and the sink's commits), and each one unpickles this class.
# The imports are therefore made where a step needs them: a process that only asks for the schema
# does not load the reader, the sink, Kafka clients or pyarrow (tests/test_import_footprint.py).
class KafkaEosDataSource(DataSource):
    #: Whether Spark plans this sink's write tasks through the kit's JVM provider, which reads
    #: eos.writeTasks (KafkaEosPythonSource, behind it); registered as FORMAT itself, it does not.
    plans_write_tasks = False

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        from connectors.spark.schema import source_schema

        include_headers = str(self.options.get("includeheaders", "false")).lower() == "true"
        return source_schema(include_headers)

    def reader(self, schema: StructType) -> DataSourceReader:
        from connectors.spark.options import parse_source_options
        from connectors.spark.datasource_readers import KafkaEosBatchReader

        return KafkaEosBatchReader(parse_source_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from connectors.spark.options import parse_source_options
        from connectors.spark.datasource_readers import KafkaEosStreamReader

        return KafkaEosStreamReader(parse_source_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from connectors.spark.datasource_writers import KafkaEosBatchWriter
        from connectors.spark.options import parse_sink_options
        from connectors.spark.sink_driver import before_tasks

        # Spark calls this once per write, before its tasks; the commit uses the writer made here.
        options = parse_sink_options(self.options, streaming=False, plans_write_tasks=self.plans_write_tasks)
        return KafkaEosBatchWriter(options, schema, before_tasks(options, schema, run_starts=True))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from connectors.spark.datasource_writers import KafkaEosStreamWriter
        from connectors.spark.options import parse_sink_options
        from connectors.spark.sink_driver import before_tasks

        options = parse_sink_options(self.options, streaming=True, plans_write_tasks=self.plans_write_tasks)
        if _called_to_commit():
            # The commit or abort of one batch, after its tasks wrote: nothing to prepare, and no
            # recovery (its sweep would abort the batch's own transactions).
            return KafkaEosStreamWriter(options, schema, decided_through=None)
        # Spark plans the write of every micro-batch: the driver recovers only where needed.
        return KafkaEosStreamWriter(options, schema, before_tasks(options, schema, run_starts=False))


#: The module of Spark's Python process that commits or aborts one batch of a streaming write: the
#: ``workerModule`` of Spark's ``PythonStreamingSinkCommitRunner`` (every 4.x line).
COMMIT_RUNNER_MODULE = "pyspark.sql.worker.python_streaming_sink_runner"
#: The module of Spark's Python process that plans a write (``SaveIntoPythonDataSourceRunner``).
WRITE_PLANNING_MODULE = "pyspark.sql.worker.write_into_data_source"
_COMMIT_RUNNER_FILE = COMMIT_RUNNER_MODULE.rpartition(".")[2] + ".py"


def _called_to_commit() -> bool:
    """Whether this ``streamWriter()`` call is Spark's commit runner's: the one place that tells.

    Spark calls ``streamWriter()`` in two kinds of process for every micro-batch: where it plans
    the batch's write (``WRITE_PLANNING_MODULE``), before any task writes; and where it commits or
    aborts the batch (``COMMIT_RUNNER_MODULE``), after the tasks wrote. Only the first may prepare.
    Spark gives nothing else that tells them apart: both pass the same schema and ``overwrite``
    flag, neither runs in a task (no ``TaskContext``), the runner's conf adds only a profiler
    setting, and the data source the runner calls is an instance Spark pickled when it created the
    source rather than one made from the class, which no API promises either. So this looks for
    the runner's module among the calling frames (whichever Python launched it: ``python -m``, the
    kit's launcher). ``integration_tests/test_format_by_spark_version.py`` fails, on every 4.x line
    of the version matrix, on a Spark that renames or reshapes that runner."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename.endswith(_COMMIT_RUNNER_FILE):
            return True
        frame = frame.f_back
    return False


class KafkaEosPythonSource(KafkaEosDataSource):
    """The same data source, registered as ``PYTHON_SOURCE`` behind the JVM provider (Spark refuses
    a Python data source under a name a JVM class holds), which plans its write tasks."""

    plans_write_tasks = True

    @classmethod
    def name(cls) -> str:
        return PYTHON_SOURCE
