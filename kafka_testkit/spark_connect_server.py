"""A throwaway Spark Connect server on loopback, started from the installed pyspark.

``SparkConnectServer(work_dir).start()`` runs ``bin/spark-submit --class
org.apache.spark.sql.connect.service.SparkConnectServer`` of the pyspark package (on Spark 3.5, whose
pyspark lacks the server, with its jar from Maven Central: :func:`connect_server_jar`) (what
``sbin/start-connect-server.sh --wait`` runs, without its daemon wrapper, whose PID file names a
shell) on ``local[N]`` with the gRPC endpoint bound to 127.0.0.1, and returns its URL
(``sc://127.0.0.1:<port>``) once a Connect client gets an answer from it.

The server's Python workers (data source planning, the sink's commit, foreachBatch functions) run
``python`` (default: this interpreter), which must have the kit, as the server's Python must in
production. ``failpoints`` puts ``KAFKA_EOS_FAILPOINTS`` into the server's environment, with
``KAFKA_EOS_FAILPOINT_KILL_GROUP`` naming the server's own process group: a failpoint's ``exit``
in any of its Python workers SIGKILLs the whole server (JVM and workers), as a lost host would.

``pid`` is the server's JVM: ``spark-submit`` and ``spark-class`` ``exec`` into it, so the process
started here becomes the JVM and leads a process group of its own (checked against
/proc/<pid>/cmdline at start). ``kill()`` SIGKILLs that group; ``stop()`` ends it with SIGTERM,
then SIGKILL. Only processes this object started are touched.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Mapping

from connectors.servers.local_broker import free_port
from connectors.servers.child_process import log_tail, stop_gracefully
from kafka_testkit.process_tree import descendants, kill_leftovers
from kafka_testkit.spark_cluster import pyspark_home
from twophase import failpoints as failpoint_settings

log = logging.getLogger(__name__)

_HOST = "127.0.0.1"
SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"


class SparkConnectServerError(RuntimeError):
    """The server could not be started (the message carries the tail of its log)."""


def connect_server_jar() -> Path:
    """Spark Connect's server for a pyspark that lacks it (Spark 3.5 ships it apart, as
    ``spark-connect_2.12``, a shaded jar): from Maven Central, at the version of Spark's Kafka
    connector found for this pyspark (both are released together; 3.5.9's are not served, 3.5.7's
    are)."""
    from connectors.spark.spark_versions import scala_binary_version
    from connectors.servers.maven_artifacts import MavenUnavailableError, resolve_jars
    from kafka_testkit.spark_kafka_connector import resolve_connector

    try:
        version = resolve_connector().version
        return resolve_jars([f"org.apache.spark:spark-connect_{scala_binary_version(version)}:{version}"],
                            f"spark-connect-{version}", transitive=False).jars[0]
    except MavenUnavailableError as exc:
        raise SparkConnectServerError(f"this pyspark has no Spark Connect server, and Maven Central gave none: "
                                      f"{exc}") from exc


class SparkConnectServer:
    """One Spark Connect server JVM. Use as a context manager, or ``start()`` and ``stop()``."""

    def __init__(self, work_dir: str | os.PathLike[str] | None = None, *, master: str = "local[2]",
                 port: int | None = None, python: str | None = None, failpoints: str | None = None,
                 conf: Mapping[str, str] | None = None, jars: list[str] | None = None,
                 environment: Mapping[str, str] | None = None, spark_home: str | os.PathLike[str] | None = None,
                 start_timeout_s: float = 240.0, stop_grace_s: float = 20.0) -> None:
        self.spark_home = Path(spark_home) if spark_home is not None else pyspark_home()
        self._own_work_dir = work_dir is None
        self.work_dir = Path(work_dir) if work_dir is not None else None
        self.master = master
        self.port = port
        self.python = python or sys.executable
        self.failpoints = failpoints
        self.conf = dict(conf or {})
        self.jars = list(jars or [])
        self.environment = dict(environment or {})
        self.start_timeout_s = start_timeout_s
        self.stop_grace_s = stop_grace_s
        self.url: str | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._log_path: Path | None = None

    @property
    def pid(self) -> int | None:
        """The server JVM's PID (also its process group id), while started."""
        return self._process.pid if self._process is not None else None

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> str:
        if self._process is not None:
            raise SparkConnectServerError("this SparkConnectServer is already started")
        submit = self.spark_home / "bin" / "spark-submit"
        if not submit.is_file():
            raise SparkConnectServerError(f"{submit} is missing: is pyspark installed with its Spark distribution?")
        jars = list(self.jars)
        if not list((self.spark_home / "jars").glob("spark-connect_*.jar")):
            jars.append(str(connect_server_jar()))
        if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
            raise SparkConnectServerError("no Java runtime: neither 'java' on PATH nor JAVA_HOME is set")
        if self.failpoints:
            failpoint_settings.parse(self.failpoints)  # a bad spec fails here, not in the server
        if self.work_dir is None:
            self.work_dir = Path(tempfile.mkdtemp(prefix="kafka-eos-connect-"))
        self.work_dir.mkdir(parents=True, exist_ok=True)
        port = self.port or free_port()
        self._log_path = self.work_dir / f"connect-server-{port}.log"
        atexit.register(self.stop)
        command = [str(submit), "--master", self.master, "--class", SERVER_CLASS, "--name", "kafka-eos test",
                   "--conf", f"spark.connect.grpc.binding.address={_HOST}",
                   "--conf", f"spark.connect.grpc.binding.port={port}",
                   "--conf", f"spark.driver.host={_HOST}", "--conf", f"spark.driver.bindAddress={_HOST}",
                   "--conf", "spark.ui.enabled=false",
                   "--conf", f"spark.pyspark.python={self.python}",
                   "--conf", f"spark.pyspark.driver.python={self.python}"]
        if jars:
            command += ["--jars", ",".join(jars)]
        for name, value in self.conf.items():
            command += ["--conf", f"{name}={value}"]
        # The shell records its own PID as the kill group, then exec's into spark-submit, which
        # exec's (through spark-class) into the JVM: one PID from here to the server.
        launcher = 'export KAFKA_EOS_FAILPOINT_KILL_GROUP=$$; exec "$@"' if self.failpoints else 'exec "$@"'
        try:
            with open(self._log_path, "ab") as out:
                self._process = subprocess.Popen(["/bin/sh", "-c", launcher, "sh", *command], stdout=out,
                                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                                 env=self._environment(), cwd=self.work_dir, start_new_session=True)
            self.url = f"sc://{_HOST}:{port}"
            self._wait_until_serving()
        except BaseException:
            self.stop()
            raise
        log.info("Spark Connect server ready at %s (JVM pid %d)", self.url, self._process.pid)
        return self.url

    def _environment(self) -> dict[str, str]:
        assert self.work_dir is not None
        env = {k: v for k, v in os.environ.items()
               if k not in (failpoint_settings.ENV_VAR, failpoint_settings.KILL_GROUP_ENV, "SPARK_REMOTE",
                            "SPARK_CONNECT_MODE_ENABLED")}
        env.update({"SPARK_HOME": str(self.spark_home), "SPARK_LOCAL_IP": _HOST, "PYSPARK_PYTHON": self.python,
                    "PYSPARK_DRIVER_PYTHON": self.python, "SPARK_LOCAL_DIRS": str(self.work_dir / "local")})
        if self.failpoints:
            env[failpoint_settings.ENV_VAR] = self.failpoints
        env.update(self.environment)
        return env

    def _wait_until_serving(self) -> None:
        """Until a Connect client runs a query on it (an open port alone comes before the session)."""
        assert self._process is not None and self.url is not None
        deadline = time.monotonic() + self.start_timeout_s
        last = "no answer yet"
        jvm_checked = False
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise SparkConnectServerError(f"the Spark Connect server (pid {self._process.pid}) exited with code "
                                              f"{self._process.returncode} while starting\n{self.log_tail()}")
            if not jvm_checked:
                jvm_checked = SERVER_CLASS in self._cmdline()
            if jvm_checked and _port_open(self.url):
                error = _probe(self.url)
                if error is None:
                    return
                last = error
            time.sleep(0.5)
        raise SparkConnectServerError(f"Spark Connect server at {self.url} not ready after {self.start_timeout_s:.0f} s "
                                      f"(last: {last})\n{self.log_tail()}")

    def _cmdline(self) -> str:
        assert self._process is not None
        try:
            return Path(f"/proc/{self._process.pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            return ""

    def is_running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def wait_for_exit(self, timeout_s: float = 300.0) -> int:
        """The server's exit status (negative: killed by that signal), e.g. after a failpoint fired."""
        assert self._process is not None
        return self._process.wait(timeout=timeout_s)

    def kill(self) -> None:
        """SIGKILL the server's process group: the JVM and every Python worker under it at once."""
        if self._process is None or self._process.poll() is not None:
            return
        others = descendants(self._process.pid)
        try:
            os.killpg(self._process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self._process.wait(timeout=60)
        kill_leftovers(others)

    def stop(self) -> None:
        """Stop what this object started (and only that); idempotent."""
        atexit.unregister(self.stop)
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            others = descendants(process.pid)
            stop_gracefully(process, self.stop_grace_s, "Spark Connect server",
                            kill=lambda: os.killpg(process.pid, signal.SIGKILL), kill_wait_s=60)
            # Python workers that left the server's group (Spark's daemon gives workers groups of their own).
            kill_leftovers(others)
        self.url = None
        if self._own_work_dir and self.work_dir is not None:
            shutil.rmtree(self.work_dir, ignore_errors=True)
            self.work_dir = None

    def log_tail(self, lines: int = 60) -> str:
        return log_tail(self._log_path, lines)

    def log_text(self) -> str:
        """The server's whole log so far (its JVM's and its Python workers' output)."""
        return self._log_path.read_text(errors="replace") if self._log_path and self._log_path.is_file() else ""

    def __enter__(self) -> "SparkConnectServer":
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def _port_open(url: str) -> bool:
    host, _, port = url[len("sc://"):].partition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=2):
            return True
    except OSError:
        return False


def _probe(url: str) -> str | None:
    """None if a Connect client runs ``SELECT 1`` at ``url``, else why not. A subprocess: the
    client caches sessions and channels per process, and a failed handshake must leave none behind."""
    code = ("from pyspark.sql import SparkSession\n"
            f"s = SparkSession.builder.remote({url!r}).create()\n"
            "assert s.range(1).collect()[0][0] == 0\n"
            "s.stop()\n")
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                              env={k: v for k, v in os.environ.items() if k != "SPARK_REMOTE"})
    except subprocess.TimeoutExpired:
        return "the probe client did not finish in 120 s"
    if done.returncode == 0:
        return None
    tail = done.stderr.strip().splitlines()
    return tail[-1] if tail else f"probe exited {done.returncode}"
