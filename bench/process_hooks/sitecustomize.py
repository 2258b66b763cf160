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
