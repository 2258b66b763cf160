"""A throwaway Spark standalone cluster on loopback, started from the installed pyspark.

``SparkStandaloneCluster().start()`` runs ``bin/spark-class`` of the pyspark package: one Master and
``workers`` Workers of one core each on 127.0.0.1, and returns the master URL
(``spark://127.0.0.1:<port>``) once every Worker has registered. A job submitted there gets
executors that are JVMs of their own, launched by the Workers, each with its own Python workers:
what a driver crash leaves behind (executors that live on for a while) and what an executor crash
takes down are those of a real cluster.

Executors run the Python the driver names (``PYSPARK_PYTHON`` or ``spark.pyspark.python``), which
must have the kit and its dependencies, as on every node of a real cluster; or the kit ships with
the job (``spark.submit.pyFiles``).

``stop()`` ends exactly the processes this object started, by PID: the Workers and the Master, then
any executor (or Python worker under it) that outlived its Worker. ``executor_pids()`` finds the
executor JVMs under the Workers (``CoarseGrainedExecutorBackend`` in /proc), for tests that kill
one.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Mapping

from connectors.servers.local_broker import free_port
from connectors.servers.child_process import log_tail, stop_gracefully
from kafka_testkit.process_tree import descendants, kill_leftovers

log = logging.getLogger(__name__)

_HOST = "127.0.0.1"
EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"


class SparkClusterError(RuntimeError):
    """The cluster could not be started (the message carries the tail of its logs)."""


def pyspark_home() -> Path:
    """The Spark distribution inside the installed pyspark package (bin/spark-class, jars/)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


class SparkStandaloneCluster:
    """A Master and ``workers`` Workers (``cores_per_worker`` cores, ``memory_per_worker`` each) on
    127.0.0.1. Use as a context manager, or call ``start()`` and ``stop()``."""

    def __init__(self, work_dir: str | os.PathLike[str] | None = None, *, workers: int = 2,
                 cores_per_worker: int = 1, memory_per_worker: str = "1g", spark_home: str | os.PathLike[str] | None = None,
                 environment: Mapping[str, str] | None = None, start_timeout_s: float = 120.0,
                 stop_grace_s: float = 20.0) -> None:
        self.spark_home = Path(spark_home) if spark_home is not None else pyspark_home()
        self._own_work_dir = work_dir is None
        self.work_dir = Path(work_dir) if work_dir is not None else None
        self.workers = workers
        self.cores_per_worker = cores_per_worker
        self.memory_per_worker = memory_per_worker
        self.environment = dict(environment or {})
        self.start_timeout_s = start_timeout_s
        self.stop_grace_s = stop_grace_s
        self.master_url: str | None = None
        self._web_port: int | None = None
        self._master: subprocess.Popen[bytes] | None = None
        self._workers: list[subprocess.Popen[bytes]] = []

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> str:
        if self._master is not None:
            raise SparkClusterError("this SparkStandaloneCluster is already started")
        spark_class = self.spark_home / "bin" / "spark-class"
        if not spark_class.is_file():
            raise SparkClusterError(f"{spark_class} is missing: is pyspark installed with its Spark distribution?")
        if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
            raise SparkClusterError("no Java runtime: neither 'java' on PATH nor JAVA_HOME is set")
        if self.work_dir is None:
            self.work_dir = Path(tempfile.mkdtemp(prefix="kafka-eos-spark-"))
        self.work_dir.mkdir(parents=True, exist_ok=True)
        atexit.register(self.stop)
        try:
            port, self._web_port = free_port(), free_port()
            self.master_url = f"spark://{_HOST}:{port}"
            self._master = self._spawn("master", "org.apache.spark.deploy.master.Master", "--host", _HOST,
                                       "--port", str(port), "--webui-port", str(self._web_port))
            self._wait_for_workers(0)
            for number in range(self.workers):
                work = self.work_dir / f"worker-{number}"
                work.mkdir(exist_ok=True)
                self._workers.append(self._spawn(
                    f"worker-{number}", "org.apache.spark.deploy.worker.Worker", "--host", _HOST,
                    "--webui-port", str(free_port()), "--cores", str(self.cores_per_worker),
                    "--memory", self.memory_per_worker, "--work-dir", str(work), self.master_url))
            self._wait_for_workers(self.workers)
        except BaseException:
            self.stop()
            raise
        log.info("Spark standalone cluster ready at %s (master pid %d, worker pids %s)", self.master_url,
                 self._master.pid, [w.pid for w in self._workers])
        return self.master_url

    def _environment(self) -> dict[str, str]:
        assert self.work_dir is not None
        env = dict(os.environ)
        env.update({"SPARK_HOME": str(self.spark_home), "SPARK_LOCAL_IP": _HOST,
                    "SPARK_LOCAL_DIRS": str(self.work_dir / "local"), "SPARK_LOG_DIR": str(self.work_dir / "logs")})
        env.update(self.environment)
        return env

    def _spawn(self, name: str, main_class: str, *arguments: str) -> subprocess.Popen[bytes]:
        assert self.work_dir is not None
        with open(self.work_dir / f"{name}.log", "ab") as out:
            # spark-class exec's into java: this PID is the daemon's JVM. A session of its own keeps
            # a terminal's Ctrl-C from killing it behind stop()'s back.
            return subprocess.Popen([str(self.spark_home / "bin" / "spark-class"), main_class, *arguments],
                                    stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=self._environment(), cwd=self.work_dir, start_new_session=True)

    def _wait_for_workers(self, count: int) -> None:
        # The Master's JSON status page lists the registered Workers.
        deadline = time.monotonic() + self.start_timeout_s
        last = "no answer yet"
        while time.monotonic() < deadline:
            for process in [self._master, *self._workers]:
                if process is not None and process.poll() is not None:
                    raise SparkClusterError(f"a Spark daemon (pid {process.pid}) exited with code "
                                            f"{process.returncode} while starting\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"http://{_HOST}:{self._web_port}/json/", timeout=2) as answer:
                    status = json.loads(answer.read())
                alive = sum(1 for w in status.get("workers", []) if w.get("state") == "ALIVE")
                if alive >= count:
                    return
                last = f"{alive} of {count} workers alive"
            except (OSError, ValueError) as exc:
                last = str(exc)
            time.sleep(0.3)
        raise SparkClusterError(f"Spark master at {self.master_url} not ready after {self.start_timeout_s:.0f} s "
                                f"(last: {last})\n{self.log_tail()}")

    def executor_pids(self) -> list[int]:
        """PIDs of the executor JVMs the Workers are running now, oldest first."""
        found = [proc for worker in self._workers for proc in descendants(worker.pid)
                 if EXECUTOR_CLASS in proc.cmdline]
        return [proc.pid for proc in sorted(found, key=lambda p: p.start_ticks)]

    def stop(self) -> None:
        """Stop what this object started (and only that); idempotent."""
        atexit.unregister(self.stop)
        workers, self._workers = self._workers, []
        master, self._master = self._master, None
        # Executors and their Python workers are the Workers' children: note them before the
        # Workers go, and end any the Workers' shutdown leaves behind.
        under_workers = [proc for worker in workers if worker.poll() is None for proc in descendants(worker.pid)]
        for process in [*workers, master]:
            if process is not None:
                stop_gracefully(process, self.stop_grace_s, "Spark cluster")
        for proc in kill_leftovers(under_workers):
            log.info("Spark cluster: killed leftover pid %d (%s)", proc.pid, proc.cmdline[:80])
        self.master_url = None
        if self._own_work_dir and self.work_dir is not None:
            shutil.rmtree(self.work_dir, ignore_errors=True)
            self.work_dir = None

    def log_tail(self, lines: int = 40) -> str:
        if self.work_dir is None:
            return "(no logs)"
        return "\n".join(log_tail(path, lines) for path in sorted(self.work_dir.glob("*.log"))) or "(no logs)"

    def __enter__(self) -> "SparkStandaloneCluster":
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
