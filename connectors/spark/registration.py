"""The registration of the ``kafka-eos`` format with a Spark session (:func:`register`, which
``connectors.spark`` exports), and the Python that Spark's processes for the kit run with.

    from connectors.spark import register
    register(spark)
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import TYPE_CHECKING, Iterator

from pyspark.sql import SparkSession

from connectors.spark.spark_errors import SpeculationNotSupportedError
from connectors.spark.spark_versions import require_python_data_source

if TYPE_CHECKING:
    from connectors.spark.datasource import KafkaEosDataSource


def register(spark: SparkSession, *, warm_up: bool = True) -> None:
    """Register the ``kafka-eos`` format with ``spark``.

    With ``warm_up`` (on a classic session), Spark's Python task workers start now, in the
    background, with the kit's task modules imported (``worker_warmup.py``), so that the first
    batch's tasks find them ready instead of starting them (bench/README.md, issue 38). The
    warm-up is planned while Spark registers the data source (``_register_while_warming_up``).

    ``format("kafka-eos")`` is the kit's JVM provider where it can be put into the session's driver
    (``jvm_provider.install``), which lets Spark run update output mode; the Python data source is
    then registered under its own name behind it. Where it cannot, the Python data source is
    registered as ``kafka-eos`` itself (append and complete mode), after one warning line.

    Refuses, in one line, a Spark without the Python data source API (3.5: the line names the
    foreachBatch sink with Spark's own source, which run there), and speculative execution, which
    the kit's two-phase commit has not been tested with. (A speculative copy of a write task writes
    under a transactional id of its own, as a retry does, so the two cannot fence each other.)"""
    require_python_data_source(spark)
    if spark.conf.get("spark.speculation", "false").strip().lower() == "true":
        raise SpeculationNotSupportedError(
            "kafka-eos exactly-once writes refuse spark.speculation=true: speculative copies of write "
            "tasks have not been tested with the kit's two-phase commit. Set spark.speculation=false "
            "(task retries after failures are fine: a retry writes under a transactional id of its own)."
        )
    use_session_python(spark)
    _check_driver_python(spark)
    with _data_source_python(spark) as tasks_python:
        source = data_source_to_register(spark)
        if warm_up and _has_spark_context(spark):
            _register_while_warming_up(spark, source, tasks_python)
        else:
            spark.dataSource.register(source)


def data_source_to_register(spark: SparkSession) -> type[KafkaEosDataSource]:
    """The kit's Python data source under the name it must have in ``spark``: behind the JVM
    provider when that is installed (Spark refuses a Python name a JVM class holds), else as
    ``format("kafka-eos")`` itself."""
    from connectors.spark.datasource import KafkaEosDataSource, KafkaEosPythonSource
    from connectors.spark.jvm_provider import install

    return KafkaEosPythonSource if install(spark) else KafkaEosDataSource


def _has_spark_context(spark: SparkSession) -> bool:
    try:
        spark.sparkContext
    except Exception:  # Spark Connect: no SparkContext here, and no executors of its own to warm
        return False
    return True


def _register_while_warming_up(spark: SparkSession, source: type[KafkaEosDataSource],
                               tasks_python: str | None) -> None:
    """Register the data source on a thread of its own while this one plans the warm-up.

    Spark's first registration of a Python data source in an application looks up the installed
    ones (``pyspark_*`` modules, ``pyspark/sql/worker/lookup_data_sources.py``) in Python
    processes it starts for that: a version check, a daemon and its worker, about a second in
    which the driver's JVM only waits. Planning the warm-up is the JVM's first analysis of a
    DataFrame in the application, most of it loading classes, which the query's ``load()`` would
    otherwise pay; it runs meanwhile instead of after (bench/README.md, issue 38). Both read the
    Python that ``_data_source_python`` set for the data source's processes."""
    from connectors.spark.worker_warmup import start_task_workers

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="kafka-eos-register") as pool:
        registered = pool.submit(spark.dataSource.register, source)
        try:
            start_task_workers(spark, tasks_python)
        finally:
            registered.result()  # the registration's own error, if it failed


def use_session_python(spark: SparkSession) -> str | None:
    """On a local master where the user named no Python for Spark's workers, make them run this
    session's interpreter (``connectors.worker_python.use_session_python``): without it,
    PySpark starts ``python3`` from ``PATH``, which in a job run as ``.venv/bin/python job.py``
    without an activated venv is a Python without the kit. Must run on the driver before the
    functions whose workers it concerns are made (registration, ``mapInArrow``); returns the
    Python it set, or None (kept as it was; on Spark Connect there is nothing to set here)."""
    from connectors.worker_python import use_session_python as use

    try:
        context = spark.sparkContext
    except Exception:  # Spark Connect: no SparkContext here, the server starts the processes
        return None
    return use(context)


def _check_driver_python(spark: SparkSession) -> None:
    """Refuse, in one line, a relative ``PYSPARK_PYTHON`` that the driver cannot run.

    A Python data source's planning steps (lookup, schema, read and write planning, the streaming
    source and the sink's commits) run in Python processes that the driver JVM starts, with the
    same ``pythonExec`` as its tasks, from the JVM's working folder. Spark's recipe for a packed
    venv, ``spark.archives=env.tar.gz#environment`` with ``PYSPARK_PYTHON=./environment/bin/python``,
    unpacks the archive in each executor's working folder (and, in cluster deploy mode, the
    driver's); in client mode the driver's working folder lacks ``./environment`` unless the user
    unpacked it there, and every planning step would fail with ``Cannot run program``."""
    from connectors.spark.spark_errors import WorkerPythonError

    try:
        context = spark.sparkContext
        python = str(context.pythonExec)
        driver_folder = str(context._jvm.java.lang.System.getProperty("user.dir"))  # type: ignore[attr-defined]
    except Exception:  # Spark Connect: the server starts the processes
        return
    if os.path.isabs(python) or os.sep not in python:  # absolute, or looked up on PATH
        return
    if os.access(os.path.join(driver_folder, python), os.X_OK):
        return
    raise WorkerPythonError(
        f"PYSPARK_PYTHON={python} does not exist in the driver's working folder {driver_folder}: the kit's data "
        "source runs Python processes on the driver too (its planning steps), with the same Python as its tasks. "
        "With a packed venv shipped by spark.archives=env.tar.gz#environment, unpack it there as well "
        "(mkdir environment && tar -xzf env.tar.gz -C environment) or use cluster deploy mode "
        "(see docs/where-it-runs.md)")


@contextmanager
def _data_source_python(spark: SparkSession) -> Iterator[str | None]:
    """While registering, the Python processes Spark starts for the data source (one per planning
    step, and the worker daemon) import pyspark from the installed package, not from
    ``pyspark.zip`` (``connectors/worker_python.py``), where that is safe.

    Spark takes the Python of a data source's processes from ``SparkContext.pythonExec`` when the
    data source is registered (and of the warm-up's tasks when it is planned), so it is swapped
    for the registration only: the job's other Python code (UDFs, foreachBatch) keeps the
    session's. Yields the Python the data source's tasks run with when it is not the session's
    (None: the session's, or Spark Connect)."""
    from connectors.worker_python import for_data_source

    try:
        context = spark.sparkContext
        launcher = for_data_source(context.pythonExec, context.master)
    except Exception:  # Spark Connect: no SparkContext here, the server starts the processes
        launcher = None
    if launcher is None:
        yield None
        return
    session_python = context.pythonExec
    context.pythonExec = launcher
    try:
        yield launcher
    finally:
        context.pythonExec = session_python


__all__ = ["data_source_to_register", "register", "use_session_python"]
