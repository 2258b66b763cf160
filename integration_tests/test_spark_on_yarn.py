"""The Spark example on YARN: Hadoop's own minicluster (``hadoop_cluster``: a real ResourceManager
and NodeManager, a real NameNode and DataNode), Kafka from the ``kafka_bootstrap`` fixture.

Nothing is installed on the "nodes": the kit goes with the job as a packed venv (``packed_venv``,
made by venv-pack) through ``spark.archives=env.tar.gz#environment``, and its processes run
``./environment/bin/python`` (``PYSPARK_PYTHON``); Spark's own jars go as ``spark.yarn.archive``, a
zip put on HDFS once per session, as a cluster's admin does. Spark's ``checkpointLocation`` is on
the minicluster's ``hdfs://``, and so is the kit's state (its default, ``<checkpointLocation>/kafka-eos``,
reached through WebHDFS). Each test checks the output topic is exactly-once:

- client deploy mode (the driver here, in this session's Python, with the archive unpacked in its
  working folder as docs/where-it-runs.md says): each executor's first write task is held before
  its pre-commit with its transaction open; an executor container's JVM is SIGKILLed inside that
  hold; YARN gives Spark a new container and the task is retried;
- cluster deploy mode (the driver in the application master's container, its Python from the
  archive too): the driver-side commit of batch 2 is held at ``mid_commit`` (the decision stored,
  some transactions committed, not all), where the whole AM container is SIGKILLed (its JVM, the
  driver's Python, its Python workers); with one attempt allowed, the application fails; the same
  job resubmitted from the same checkpoint finishes the batch and the rest.
"""

from __future__ import annotations

import getpass
import os
import re
import signal
import subprocess
import time
import zipfile
from pathlib import Path
from typing import Callable, Iterator

import pytest

from kafka_io import assert_exactly_once, copied_id, read_committed_values, topics_with_orders, wait_until_stable
from kafka_testkit.hadoop_cluster import HadoopMiniCluster
from kafka_testkit.process_tree import descendants
from kafka_testkit.spark_cluster import pyspark_home
from spark_job import JOB, spark_job_command, spark_job_environment
from twophase import failpoints
from twophase.checkpoint_store import FileCheckpointStore

pytestmark = pytest.mark.spark

RECORDS = 3000
# Each Python worker's first write task waits here with its transaction open: the executor is killed
# inside this hold, which the test confirms before the kill (open transactions, batch not committed).
HOLD_MS = 30_000
# The driver-side commit waits here until the test kills the AM container (never this long).
COMMIT_HOLD_MS = 600_000
ENVIRONMENT = "./environment/bin/python"
#: A write task (and a transaction) per Kafka partition, 3 per batch: both executors hold one in
#: the client-mode test, and the cluster-mode commit is held with transactions left open.
ONE_TASK_PER_PARTITION = ("--min-records-per-task", "0")
EXECUTOR_CLASS = "org.apache.spark.executor.YarnCoarseGrainedExecutorBackend"
AM_CLASS = "org.apache.spark.deploy.yarn.ApplicationMaster"
#: Small containers: an AM (or driver) and two one-core executors fit the machine next to Kafka.
RESOURCES = {
    "spark.executor.instances": "2",
    "spark.executor.cores": "1",
    "spark.executor.memory": "512m",
    "spark.yarn.am.memory": "512m",
    "spark.driver.memory": "768m",
    # Loopback only: Spark would bind a container's driver and executors to the host's interface.
    "spark.yarn.appMasterEnv.SPARK_LOCAL_IP": "127.0.0.1",
    "spark.executorEnv.SPARK_LOCAL_IP": "127.0.0.1",
    # YARN's client logs an application report at this interval while it waits.
    "spark.yarn.report.interval": "5s",
}


@pytest.fixture(scope="session")
def hdfs_client(hadoop_cluster: HadoopMiniCluster):  # type: ignore[no-untyped-def]
    import hdfs

    return hdfs.InsecureClient(hadoop_cluster.webhdfs_url, user=getpass.getuser())


@pytest.fixture(scope="session")
def spark_yarn_archive(hadoop_cluster: HadoopMiniCluster, hdfs_client, tmp_path_factory) -> str:  # type: ignore[no-untyped-def]
    """Spark's jars (pyspark's own) as one zip on HDFS, for ``spark.yarn.archive``: without it every
    submission compresses and uploads 460 MB of jars again."""
    jars = pyspark_home() / "jars"
    archive = tmp_path_factory.mktemp("spark-yarn-archive") / "spark-libs.zip"
    # Stored, not deflated: jars are compressed already, and this is on the test's clock.
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_STORED) as out:
        for jar in sorted(jars.glob("*.jar")):
            out.write(jar, jar.name)
    target = "/apps/spark/spark-libs.zip"
    hdfs_client.upload(target, str(archive), overwrite=True)
    archive.unlink()
    return f"{hadoop_cluster.hdfs_uri}{target}"


@pytest.fixture
def hadoop_client_environment(hadoop_cluster: HadoopMiniCluster, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """HADOOP_CONF_DIR / YARN_CONF_DIR for the jobs and for this process (which reads the kit's
    state on hdfs:// to confirm where a kill landed)."""
    environment = hadoop_cluster.client_environment()
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    return environment


@pytest.fixture
def stray_containers(hadoop_cluster: HadoopMiniCluster) -> Iterator[None]:
    """A test that fails half-way can leave its application running on YARN (an AM held in a
    failpoint): its containers' processes are SIGKILLed after the test, those started during it."""
    before = {proc.pid for proc in descendants(hadoop_cluster.pid)}
    yield
    for proc in descendants(hadoop_cluster.pid):
        if proc.pid not in before and (AM_CLASS in proc.cmdline or EXECUTOR_CLASS in proc.cmdline
                                       or "ExecutorLauncher" in proc.cmdline):
            try:
                os.kill(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _submit_args(settings: dict[str, str]) -> str:
    return " ".join(f"--conf {name}={value}" for name, value in settings.items())


class Job:
    """A job (the driver here, or spark-submit) in a session of its own, its output in a file: a
    pipe left unread while the test waits would fill and stall it (YARN's client reports every
    second)."""

    def __init__(self, command: list[str], env: dict[str, str], cwd: Path, log_path: Path) -> None:
        self.log_path = log_path
        with open(log_path, "w") as out:
            self.process = subprocess.Popen(command, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, text=True, start_new_session=True)

    @property
    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait(self, timeout_s: float = 900.0) -> int:
        """Its exit code; after ``timeout_s`` its group is SIGKILLed."""
        try:
            return self.process.wait(timeout=timeout_s)
        finally:
            self.kill()

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def wait_for(self, condition: Callable[[], object], what: str, timeout_s: float = 600.0):  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"the job ended (exit {self.process.returncode}) before {what}\n"
                                     f"{self.output[-4000:]}")
            found = condition()
            if found:
                return found
            time.sleep(0.3)
        raise AssertionError(f"no {what} after {timeout_s:.0f} s\n{self.output[-4000:]}")


def _kill_tree(pid: int) -> list[int]:
    """SIGKILL ``pid`` and every process under it, as a lost container: the JVM and its Pythons."""
    victims = [pid, *(proc.pid for proc in descendants(pid))]
    for victim in victims:
        try:
            os.kill(victim, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return victims


def test_client_mode_an_executor_container_killed_mid_batch_is_exactly_once(
        kafka_bootstrap, kafka_clients, unique_name, tmp_path, hadoop_cluster, hadoop_client_environment,
        hdfs_client, packed_venv, spark_yarn_archive, stray_containers):
    source, sink, ids = topics_with_orders(kafka_clients, unique_name, RECORDS)
    prefix = unique_name("txn")
    checkpoint = f"{hadoop_cluster.hdfs_uri}/checkpoints/{unique_name('chk')}"
    # Client deploy mode: the kit's data source runs Python on the driver too (its planning steps),
    # from the driver's working folder, with the same relative PYSPARK_PYTHON: the archive is
    # unpacked there, as docs/where-it-runs.md says.
    driver_folder = tmp_path / "driver"
    (driver_folder / "environment").mkdir(parents=True)
    subprocess.run(["tar", "-xzf", str(packed_venv), "-C", str(driver_folder / "environment")], check=True)
    settings = {"spark.archives": f"{packed_venv}#environment", "spark.yarn.archive": spark_yarn_archive,
                "spark.yarn.maxAppAttempts": "1", **RESOURCES}
    earlier = set(hadoop_cluster.container_pids(EXECUTOR_CLASS))
    job = Job(spark_job_command(kafka_bootstrap, source, sink, checkpoint,  # type: ignore[arg-type]
                                f"before_pre_commit:sleep({HOLD_MS})@1", master="yarn",
                                extra=("--transactional-id-prefix", prefix, *ONE_TASK_PER_PARTITION)),
              spark_job_environment({**hadoop_client_environment, "PYSPARK_PYTHON": ENVIRONMENT,
                                     "PYSPARK_SUBMIT_ARGS": f"{_submit_args(settings)} pyspark-shell"}),
              driver_folder, tmp_path / "driver.log")
    try:
        control = kafka_clients.txn_control()
        # Both executors (one core each) run a write task of batch 0, held with its transaction open.
        job.wait_for(lambda: len(control.list_open_transactions(f"{prefix}-")) >= 2, "two open transactions")
        executors = job.wait_for(lambda: [p for p in hadoop_cluster.container_pids(EXECUTOR_CLASS) if p not in earlier],
                                 "executor containers of the job")
        assert hdfs_client.status(f"{checkpoint.removeprefix(hadoop_cluster.hdfs_uri)}/commits/0",
                                  strict=False) is None, "batch 0 committed before the kill"
        _kill_tree(executors[0])
        code = job.wait()
    finally:
        job.kill()
    assert code == 0, job.output[-4000:]
    wait_until_stable(kafka_clients, sink)
    assert_exactly_once(read_committed_values(kafka_clients, sink), ids, copied_id)
    assert control.list_open_transactions(f"{prefix}-") == []


def _cluster_mode_command(bootstrap: str, source: str, sink: str, checkpoint: str, prefix: str,
                          settings: dict[str, str], *failpoint_specs: str) -> list[str]:
    """spark-submit of the example in cluster deploy mode: the driver in the AM's container."""
    command = [str(pyspark_home() / "bin" / "spark-submit"), "--master", "yarn", "--deploy-mode", "cluster"]
    for name, value in settings.items():
        command += ["--conf", f"{name}={value}"]
    job = spark_job_command(bootstrap, source, sink, checkpoint, *failpoint_specs, master="yarn",  # type: ignore[arg-type]
                            extra=("--transactional-id-prefix", prefix, *ONE_TASK_PER_PARTITION))
    # The job's own command line without its interpreter: spark-submit runs the script with the
    # archive's Python in the container.
    assert job[1] == str(JOB)
    return [*command, *job[1:]]


def test_cluster_mode_the_application_master_killed_mid_commit_then_resubmitted_is_exactly_once(
        kafka_bootstrap, kafka_clients, unique_name, tmp_path, hadoop_cluster, hadoop_client_environment,
        packed_venv, spark_yarn_archive, stray_containers):
    source, sink, ids = topics_with_orders(kafka_clients, unique_name, RECORDS)
    prefix = unique_name("txn")
    checkpoint = f"{hadoop_cluster.hdfs_uri}/checkpoints/{unique_name('chk')}"
    fired_log = tmp_path / "failpoints.log"
    fired_log.touch()
    settings = {
        "spark.archives": f"{packed_venv}#environment", "spark.yarn.archive": spark_yarn_archive,
        # The driver's Python and its workers' in the AM container, the executors' in theirs: the
        # archive's, unpacked by YARN in each container's working folder.
        "spark.yarn.appMasterEnv.PYSPARK_PYTHON": ENVIRONMENT,
        "spark.executorEnv.PYSPARK_PYTHON": ENVIRONMENT,
        # A lost AM fails the application; the test resubmits it, as an operator (or a scheduler) does.
        "spark.yarn.maxAppAttempts": "1",
        **RESOURCES,
    }
    hold = f"mid_commit:sleep({COMMIT_HOLD_MS})@2"
    crash_settings = {
        **settings,
        # The driver-side commit runs in a Python worker of the AM's JVM, which gets the AM's
        # environment; the firing is confirmed through a file this test reads (same machine).
        f"spark.yarn.appMasterEnv.{failpoints.ENV_VAR}": hold,
        f"spark.yarn.appMasterEnv.{failpoints.LOG_FILE_ENV}": str(fired_log),
    }
    environment = spark_job_environment({**hadoop_client_environment, "PYSPARK_PYTHON": ENVIRONMENT})
    environment.pop(failpoints.ENV_VAR, None)
    earlier = set(hadoop_cluster.container_pids(AM_CLASS))
    job = Job(_cluster_mode_command(kafka_bootstrap, source, sink, checkpoint, prefix, crash_settings, hold), environment,
              tmp_path, tmp_path / "submit-1.log")
    try:
        line = job.wait_for(lambda: re.search(r"failpoint mid_commit fired .* pid (\d+)\)", fired_log.read_text()),
                            "mid_commit held in the driver's commit")
        held_pid = int(line.group(1))
        masters = [p for p in hadoop_cluster.container_pids(AM_CLASS) if p not in earlier]
        assert len(masters) == 1, masters
        # The commit runs in the AM's container: the held Python is one of the AM JVM's processes.
        assert held_pid in {proc.pid for proc in descendants(masters[0])}, (held_pid, masters)
        state = FileCheckpointStore(f"{checkpoint}/kafka-eos", check_writable=False)
        stored = state.checkpoint_ids()
        assert stored and not state.is_committed(stored[-1]), "the kill would not land in the commit window"
        control = kafka_clients.txn_control()
        assert control.list_open_transactions(f"{prefix}-"), "the held commit left no transaction open"
        _kill_tree(masters[0])
        crashed = job.wait()
    finally:
        job.kill()
    assert crashed != 0, job.output[-4000:]
    assert len(read_committed_values(kafka_clients, sink)) < RECORDS, "crashed after finishing"

    resubmitted = Job(_cluster_mode_command(kafka_bootstrap, source, sink, checkpoint, prefix, settings), environment,
                      tmp_path, tmp_path / "submit-2.log")
    assert resubmitted.wait() == 0, resubmitted.output[-4000:]
    wait_until_stable(kafka_clients, sink)
    assert_exactly_once(read_committed_values(kafka_clients, sink), ids, copied_id)
    assert control.list_open_transactions(f"{prefix}-") == []
    state = FileCheckpointStore(f"{checkpoint}/kafka-eos", check_writable=False)
    assert state.is_committed(state.checkpoint_ids()[-1])
