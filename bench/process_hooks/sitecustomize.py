"""Imported at start-up by every Python process of a bench run (``run_bench.py`` puts this
directory on ``PYTHONPATH``), including Spark's Python planner processes and workers, which
configure no logging. Two hooks, each switched on by an environment variable:

``KAFKA_EOS_BENCH_COMMIT_LOG=1``
    The exactly-once sink's driver-side commit runs in such a worker (Spark's streaming sink
    runner), so its "batch N committed: T transactions, R records, X ms" line is an INFO record
    that nobody would print. This sends that logger's records to the process's stderr, which
    Spark passes on to the job's stderr, where the bench reads the commit times.

``KAFKA_EOS_BENCH_TRACE=<file>`` (``run_bench.py --trace``)
    Each process appends JSON lines to that file: when it started (from /proc, so interpreter
    start-up counts), its command line, how long the first import of each heavy package took,
    when the kit and the example logged (client set-up, session ready, commits), and, for the
    workers Spark's daemon forks (which do not run this module again), when they were forked.
    ``bench/cold_start.py`` turns that into the cold-start breakdown.
"""

import json
import logging
import os
import sys
import time

if os.environ.get("KAFKA_EOS_BENCH_COMMIT_LOG") == "1":
    _logger = logging.getLogger("connectors.spark.sink_driver")
    _logger.setLevel(logging.INFO)
    # Bound now to the real stderr: Spark may swap sys.stderr for a capturing wrapper later.
    _handler = logging.StreamHandler(sys.stderr)
    _handler.setFormatter(logging.Formatter("%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s"))
    _logger.addHandler(_handler)
    _logger.propagate = False

_TRACE = os.environ.get("KAFKA_EOS_BENCH_TRACE")

if _TRACE:
    import builtins

    _PACKAGES = ("pyspark", "pyarrow", "pandas", "numpy", "confluent_kafka", "kafka", "connectors",
                 "twophase", "tenacity", "boto3", "rich", "matplotlib")
    _real_import = builtins.__import__

    def _process_start() -> float:
        with open("/proc/self/stat") as stat:
            ticks = int(stat.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as uptime:
            booted = time.time() - float(uptime.read().split()[0])
        return booted + ticks / os.sysconf("SC_CLK_TCK")

    def _emit(event: str, **fields) -> None:
        record = {"event": event, "pid": os.getpid(), "ppid": os.getppid(), "t": time.time(), **fields}
        # One write per line in append mode: lines of concurrent processes do not interleave.
        with open(_TRACE, "a") as out:
            out.write(json.dumps(record) + "\n")

    def _timed_import(name, globals=None, locals=None, fromlist=(), level=0):
        top = name.split(".")[0] if level == 0 else None
        if top in _PACKAGES and top not in sys.modules:
            started = time.perf_counter()
            try:
                return _real_import(name, globals, locals, fromlist, level)
            finally:
                # Cumulative (a package's time includes the packages it imports first). Emitted at
                # once: Spark ends many of its Python processes with os._exit, skipping atexit.
                _emit("import", package=top, ms=round((time.perf_counter() - started) * 1000, 1),
                      origin=getattr(sys.modules.get(top), "__file__", None))
        return _real_import(name, globals, locals, fromlist, level)

    builtins.__import__ = _timed_import

    class _TraceHandler(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            _emit("log", logger=record.name, message=record.getMessage())

    for _name in ("connectors", "twophase", "spark_pipeline"):
        _logger = logging.getLogger(_name)
        if _logger.level == logging.NOTSET or _logger.level > logging.INFO:
            _logger.setLevel(logging.INFO)
        _logger.addHandler(_TraceHandler(logging.INFO))

    def _cmdline() -> list[str]:
        # sys.argv is not set yet for ``python -m module`` while site runs.
        with open("/proc/self/cmdline", "rb") as f:
            return [part.decode("utf-8", "replace") for part in f.read().split(b"\0") if part]

    _emit("start", started=_process_start(), argv=_cmdline(), executable=sys.executable)
    os.register_at_fork(after_in_child=lambda: _emit("fork"))

_STAGES = os.environ.get("KAFKA_EOS_BENCH_STAGES")

if _STAGES:
    # ``KAFKA_EOS_BENCH_STAGES=<file>`` (``run_bench.py --stages``): the CPU time (this thread's)
    # that each process spends in each stage of the kit's record path, appended as JSON lines of
    # cumulative totals per process (the last line of a pid is its total). A stage's time is
    # inclusive of what it calls, so the stages below are chosen not to nest:
    #   read     the reader's consume from librdkafka into Python lists (ConfluentRecordReader.read_batches)
    #   arrow    those lists into Arrow record batches (arrow_batches.batch_to_arrow and _combined)
    #   columns  the sink's Arrow columns into Python lists (task_writer.produce_batch_of)
    #   produce  those lists into librdkafka, one produce() per record (ConfluentProducer.produce_batch)
    #   precommit the task's flush and producer identity (KafkaTransactionWriter.pre_commit)
    # Everything else a Python task worker spends (pyspark's Arrow stream to and from the JVM, its
    # framing, the worker's own loop) is its total CPU from /proc minus these.
    import functools
    import importlib.abc
    import importlib.machinery

    _totals: dict = {}
    _last_flush = [0.0]

    def _flush(force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - _last_flush[0] < 1.0:
            return
        _last_flush[0] = now
        with open(_STAGES, "a") as out:
            out.write(json.dumps({"pid": os.getpid(), "stages": _totals}) + "\n")

    def _account(stage: str, cpu_s: float, rows: int) -> None:
        entry = _totals.setdefault(stage, {"cpu_s": 0.0, "calls": 0, "rows": 0})
        entry["cpu_s"] += cpu_s
        entry["calls"] += 1
        entry["rows"] += rows

    def _rows_of(result) -> int:
        for attribute in ("num_rows",):
            if hasattr(result, attribute):
                return int(getattr(result, attribute))
        try:
            return len(result)
        except TypeError:
            return 0

    def _timed(stage: str, function, force_flush: bool = False):
        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            started = time.thread_time()
            result = function(*args, **kwargs)
            _account(stage, time.thread_time() - started, _rows_of(result) if stage != "produce" else
                     _rows_of(args[-1]))
            _flush(force_flush)
            return result
        return wrapper

    def _timed_generator(stage: str, function):
        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            iterator = function(*args, **kwargs)
            while True:
                started = time.thread_time()
                try:
                    item = next(iterator)
                except StopIteration:
                    _account(stage, time.thread_time() - started, 0)
                    _flush(True)
                    return
                _account(stage, time.thread_time() - started, _rows_of(item))
                yield item
        return wrapper

    def _patch(name: str, module) -> None:
        if name == "connectors.kafka.clients._confluent.reader":
            module.ConfluentRecordReader.read_batches = _timed_generator("read", module.ConfluentRecordReader.read_batches)
        elif name == "connectors.spark.arrow_batches":
            module.batch_to_arrow = _timed("arrow", module.batch_to_arrow)
            module._combined = _timed("arrow", module._combined)
        elif name == "connectors.spark.task_writer":
            module.produce_batch_of = _timed("columns", module.produce_batch_of)
        elif name == "connectors.kafka.clients._confluent.producer":
            module.ConfluentProducer.produce_batch = _timed("produce", module.ConfluentProducer.produce_batch)
        elif name == "connectors.kafka.sink.writer":
            module.KafkaTransactionWriter.pre_commit = _timed("precommit", module.KafkaTransactionWriter.pre_commit,
                                                              force_flush=True)

    _PATCHED = {"connectors.kafka.clients._confluent.reader", "connectors.spark.arrow_batches",
                "connectors.spark.task_writer", "connectors.kafka.clients._confluent.producer",
                "connectors.kafka.sink.writer"}

    class _PatchOnImport(importlib.abc.MetaPathFinder):
        """Wraps the stages' functions as their modules are first imported (in any process)."""

        def find_spec(self, name, path, target=None):
            if name not in _PATCHED:
                return None
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            if spec is None or spec.loader is None:
                return None
            loader = spec.loader
            execute = loader.exec_module

            def exec_module(module):
                execute(module)
                _patch(name, module)

            loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, _PatchOnImport())
