"""Hadoop's own minicluster on loopback: a real NameNode and DataNode (HDFS, WebHDFS on) and a real
ResourceManager and NodeManager (YARN), in one JVM that this module starts and stops by PID.

The daemons come from Maven Central: ``org.apache.hadoop:hadoop-client-minicluster`` at pyspark's
Hadoop version (3.5.0 for pyspark 4.3.0: its ``hadoop-client-api-3.5.0.jar``), resolved with the
user's ``mvn`` into the kit's cache (``connectors.servers.maven_artifacts``), together with
what that shaded jar leaves out but needs at run time: JUnit's assertions (MiniYARNCluster's
``GenericTestUtils``), Bouncy Castle (the ResourceManager) and reload4j (Hadoop's logging).

``HadoopMiniClusterMain.java``, next to this file, starts ``MiniDFSCluster`` and
``MiniYARNCluster`` and writes the client configuration (``core-site.xml``, ``hdfs-site.xml``,
``yarn-site.xml``) into a folder that serves as ``HADOOP_CONF_DIR`` / ``YARN_CONF_DIR``. It is
compiled with ``javac`` on first use into the cache (keyed by the source's hash), never committed.

    cluster = start_hadoop_minicluster(work_dir)   # HadoopMiniCluster: hdfs_uri, webhdfs_url, ...
    ...
    cluster.stop()                                 # SIGTERM, then SIGKILL after a bound

The NodeManager has 8 GB and 8 vcores to hand out (YARN's memory checks off): room for a Spark
driver as application master and two executors on a small machine; the machine is the real limit.
Containers run as the user of this process, with its ``JAVA_HOME`` and ``HADOOP_CONF_DIR`` = the
cluster's configuration folder, as on a real node. ``stop()`` ends the JVM and then
any container process that outlived it (each checked to be the same process first); it touches
nothing this module did not start.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import logging
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from connectors.servers.maven_artifacts import MavenUnavailableError, cache_dir, resolve_jars
from connectors.servers.child_process import log_tail, stop_gracefully
from kafka_testkit.process_tree import descendants, kill_leftovers

log = logging.getLogger(__name__)

HADOOP_VERSION = "3.5.0"
#: The minicluster and what its shaded jar excludes but loads (versions of Hadoop 3.5.0's own POM).
COORDINATES = (
    f"org.apache.hadoop:hadoop-client-minicluster:{HADOOP_VERSION}",
    "org.junit.jupiter:junit-jupiter-api:5.13.3",
    "junit:junit:4.13.2",
    "org.bouncycastle:bcprov-jdk18on:1.82",
    "org.bouncycastle:bcpkix-jdk18on:1.82",
    "ch.qos.reload4j:reload4j:1.2.22",
    "org.slf4j:slf4j-reload4j:1.7.36",
)
_CACHE_NAME = f"hadoop-minicluster-{HADOOP_VERSION}"
_MAIN = "HadoopMiniClusterMain"
_SOURCE = Path(__file__).with_name(f"{_MAIN}.java")
#: Hadoop's own WARN lines are enough in the log; the tests read its tail when a start fails.
_LOG4J = """\
log4j.rootLogger=WARN, out
log4j.appender.out=org.apache.log4j.ConsoleAppender
log4j.appender.out.layout=org.apache.log4j.PatternLayout
log4j.appender.out.layout.ConversionPattern=%d{HH:mm:ss,SSS} %p %c{1}: %m%n
"""


class HadoopClusterError(RuntimeError):
    """The minicluster could not be compiled or started (the message carries its log's tail)."""


@dataclass
class HadoopMiniCluster:
    hdfs_uri: str
    webhdfs_url: str
    #: HADOOP_CONF_DIR / YARN_CONF_DIR: core-site.xml, hdfs-site.xml, yarn-site.xml.
    conf_dir: Path
    #: ``127.0.0.1:<port>`` of the ResourceManager ("" when started without YARN).
    resource_manager: str
    #: The minicluster's JVM.
    pid: int
    #: ``127.0.0.1:<port>`` of the ResourceManager's web UI and REST API ("" without YARN).
    resource_manager_web: str = ""
    log_path: Path | None = None
    stop_grace_s: float = 60.0
    _process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def client_environment(self) -> dict[str, str]:
        """What a Hadoop or Spark client needs to reach this cluster (spark-submit --master yarn)."""
        return {"HADOOP_CONF_DIR": str(self.conf_dir), "YARN_CONF_DIR": str(self.conf_dir)}

    def container_pids(self, marker: str) -> list[int]:
        """PIDs of the JVMs under the NodeManager (in its containers) whose command line holds
        ``marker`` (e.g. Spark's ``YarnCoarseGrainedExecutorBackend``), oldest first; not the
        ``bash -c`` that YARN's launch script starts each one with."""
        found = [proc for proc in descendants(self.pid)
                 if marker in proc.cmdline and os.path.basename(proc.cmdline.split(" ", 1)[0]) == "java"]
        return [proc.pid for proc in sorted(found, key=lambda p: p.start_ticks)]

    def stop(self) -> None:
        """Stop the JVM (SIGTERM, then SIGKILL after ``stop_grace_s``) and any container left
        behind; idempotent."""
        atexit.unregister(self.stop)
        process, self._process = self._process, None
        if process is None:
            return
        under = descendants(process.pid) if process.poll() is None else []
        stop_gracefully(process, self.stop_grace_s, "Hadoop minicluster", kill_wait_s=30)
        for proc in kill_leftovers(under):
            log.info("Hadoop minicluster: killed leftover container process %d (%s)", proc.pid, proc.cmdline[:100])
        log.info("Hadoop minicluster (pid %d) stopped", process.pid)

    def log_tail(self, lines: int = 60) -> str:
        return log_tail(self.log_path, lines)


def java_home() -> Path:
    """``JAVA_HOME``, else the home of the ``java`` on PATH; the NodeManager's containers need it
    (YARN starts them as ``$JAVA_HOME/bin/java``)."""
    explicit = os.environ.get("JAVA_HOME", "").strip()
    if explicit:
        return Path(explicit)
    java = shutil.which("java")
    if java is None:
        raise HadoopClusterError("no Java runtime: neither 'java' on PATH nor JAVA_HOME is set")
    return Path(java).resolve().parent.parent


def _compiled_main(classpath: str) -> Path:
    """The folder of ``HadoopMiniClusterMain.class``, compiled from the source once per version of
    the source (and of the jars it compiles against)."""
    javac = java_home() / "bin" / "javac"
    if not javac.is_file():
        javac = Path(shutil.which("javac") or "javac")
    source = _SOURCE.read_bytes()
    key = hashlib.sha256(source + classpath.encode()).hexdigest()[:16]
    folder = cache_dir() / "hadoop-minicluster-main" / key
    if (folder / f"{_MAIN}.class").is_file():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=folder.parent))
    try:
        try:
            compiled = subprocess.run([str(javac), "-nowarn", "-cp", classpath, "-d", str(staging), str(_SOURCE)],
                                      capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
        except FileNotFoundError:
            raise HadoopClusterError("no 'javac' (a JDK, not only a JRE, is needed to compile "
                                     f"{_SOURCE.name})") from None
        if compiled.returncode != 0:
            raise HadoopClusterError(f"javac could not compile {_SOURCE}: {compiled.stderr.strip()[-2000:]}")
        shutil.rmtree(folder, ignore_errors=True)
        staging.rename(folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return folder


def start_hadoop_minicluster(work_dir: Path, *, yarn: bool = True, start_timeout_s: float = 300.0,
                             heap: str = "1g") -> HadoopMiniCluster:
    """Start HDFS (and YARN, unless ``yarn=False``) in one JVM with its data under ``work_dir``;
    return once the daemons answer and the client configuration is written.

    Raises MavenUnavailableError when the jars cannot be resolved, HadoopClusterError (with the
    log's tail) when the JVM does not get ready; the JVM is stopped in both cases."""
    work_dir = Path(work_dir).resolve()
    work_dir.mkdir(parents=True, exist_ok=True)
    jars = resolve_jars(COORDINATES, _CACHE_NAME)
    classes = _compiled_main(jars.classpath)
    home = java_home()
    conf_dir = work_dir / "conf"
    shutil.rmtree(conf_dir, ignore_errors=True)
    conf_dir.mkdir()
    log4j = work_dir / "log4j.properties"
    log4j.write_text(_LOG4J)
    log_path = work_dir / "minicluster.log"
    command = [str(home / "bin" / "java"), f"-Xmx{heap}", f"-Dlog4j.configuration={log4j.as_uri()}",
               f"-Dtest.build.data={work_dir / 'test-data'}", "-Djava.net.preferIPv4Stack=true",
               "-cp", os.pathsep.join([str(classes), jars.classpath]), _MAIN, str(work_dir), str(conf_dir),
               "yarn" if yarn else "no-yarn"]
    # The NodeManager hands JAVA_HOME and HADOOP_CONF_DIR (in YARN's default env-whitelist) to its
    # containers, as a real node does: there YARN starts $JAVA_HOME/bin/java, and a driver in
    # cluster mode finds this cluster's configuration.
    env = {**os.environ, "JAVA_HOME": str(home), "HADOOP_CONF_DIR": str(conf_dir)}
    env.pop("YARN_CONF_DIR", None)
    with open(log_path, "ab") as out:
        # A session of its own: a terminal's Ctrl-C reaches pytest, not the cluster behind stop()'s back.
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   cwd=work_dir, env=env, start_new_session=True)
    cluster = HadoopMiniCluster("", "", conf_dir, "", process.pid, log_path=log_path, _process=process)
    atexit.register(cluster.stop)
    log.info("Hadoop minicluster %s starting (pid %d, %s); log in %s", HADOOP_VERSION, process.pid,
             "HDFS and YARN" if yarn else "HDFS only", log_path)
    try:
        ready = _wait_until_ready(process, conf_dir / "ready.json", start_timeout_s, log_path)
    except BaseException:
        cluster.stop()
        raise
    cluster.hdfs_uri = ready["hdfs_uri"]
    cluster.webhdfs_url = ready["webhdfs_url"]
    cluster.resource_manager = ready["resource_manager"]
    cluster.resource_manager_web = ready["resource_manager_web"]
    log.info("Hadoop minicluster ready: %s, WebHDFS %s, ResourceManager %s (pid %d)", cluster.hdfs_uri,
             cluster.webhdfs_url, cluster.resource_manager or "none", cluster.pid)
    return cluster


def _wait_until_ready(process: subprocess.Popen[bytes], ready_file: Path, timeout_s: float,
                      log_path: Path) -> dict[str, str]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if ready_file.is_file():
            return json.loads(ready_file.read_text())
        if process.poll() is not None:
            raise HadoopClusterError(f"the Hadoop minicluster (pid {process.pid}) exited with code "
                                     f"{process.returncode} while starting\n{log_tail(log_path, 60)}")
        time.sleep(0.5)
    raise HadoopClusterError(f"the Hadoop minicluster (pid {process.pid}) was not ready after {timeout_s:.0f} s\n"
                             f"{log_tail(log_path, 60)}")


__all__ = ["HadoopClusterError", "HadoopMiniCluster", "MavenUnavailableError", "start_hadoop_minicluster"]
