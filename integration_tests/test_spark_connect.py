"""The kit over Spark Connect (``sc://``), on a real Kafka broker and a real Spark Connect server.

The server is ``KAFKA_EOS_SPARK_CONNECT_URL`` (``sc://host:port``, a running server whose Python has
the kit and sees this machine's paths; the crash tests need a server of their own and are then
skipped), else one started from the installed pyspark by ``SparkConnectServer`` on loopback; a
server that cannot start skips the tests with the reason. The client is a separate process
(``connect_job.py``), as a user's would be: each API copies the input (3000 orders, an aborted
transaction in the middle) exactly once:

- the streaming sink (``writeStream.format("kafka-eos")``);
- the foreachBatch helper, bound to its query by ``checkpointLocation``;
- a batch write (``df.write.format("kafka-eos")``).

Then the server is SIGKILLed (JVM and Python workers: a failpoint in its environment kills its
process group) at ``after_checkpoint_stored`` and at ``mid_commit``. The client does not reconnect:
it is ended, a new server is started, and the query is submitted again from the same
checkpointLocation, which must complete the output exactly once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pyspark
import pytest

from kafka_io import assert_exactly_once, copied_id, read_committed_values, topics_with_orders, wait_until_stable
from spark_job import wait_for_end
from twophase import failpoints
from twophase.checkpoint_store import FileCheckpointStore

pytestmark = [pytest.mark.spark, pytest.mark.spark_connect]

JOB = Path(__file__).resolve().parent / "connect_job.py"
URL_ENV = "KAFKA_EOS_SPARK_CONNECT_URL"
RECORDS = 3000
BATCH = 500
KILLED = -signal.SIGKILL


def _server_or_skip(work_dir: Path, failpoint_spec: str | None = None):  # type: ignore[no-untyped-def]
    pytest.importorskip("grpc", reason="the Spark Connect client needs pyspark[connect]: pip install -e '.[test]'")
    from kafka_testkit.spark_connect_server import SparkConnectServer, SparkConnectServerError

    server = SparkConnectServer(work_dir, failpoints=failpoint_spec)
    try:
        server.start()
    except SparkConnectServerError as exc:
        pytest.skip(f"no Spark Connect server: set {URL_ENV}, or fix: {str(exc).splitlines()[0]}")
    return server


@pytest.fixture(scope="module")
def connect_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    external = os.environ.get(URL_ENV, "").strip()
    if external:
        yield external
        return
    server = _server_or_skip(tmp_path_factory.mktemp("connect-server"))
    try:
        assert server.url is not None
        yield server.url
    finally:
        server.stop()


def start_client(url: str, bootstrap: str, source: str, sink: str, checkpoint: Path, state_dir: Path | None,
                 api: str, source_format: str = "kafka-eos") -> subprocess.Popen[str]:
    command = [sys.executable, str(JOB), "--remote", url, "--bootstrap", bootstrap, "--input", source,
               "--output", sink, "--checkpoint-dir", str(checkpoint), "--api", api,
               "--max-offsets-per-trigger", str(BATCH), "--source-format", source_format]
    if state_dir is not None:
        command += ["--state-dir", str(state_dir)]
    environment = {k: v for k, v in os.environ.items() if k not in (failpoints.ENV_VAR, "SPARK_REMOTE")}
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment,
                            start_new_session=True)


def run_client(*args: object) -> subprocess.CompletedProcess[str]:
    return wait_for_end(start_client(*args))  # type: ignore[arg-type]


@pytest.mark.parametrize("api", ["sink", "foreach-batch", "batch"])
def test_each_api_over_spark_connect_is_exactly_once(kafka_bootstrap, kafka_clients, connect_url, unique_name,
                                                      tmp_path, api):
    source, sink, ids = topics_with_orders(kafka_clients, unique_name, RECORDS)
    # The batch write's state: a path the server reaches (its default is under the server's HOME).
    state_dir = tmp_path / "batch-state" if api == "batch" else None
    done = run_client(connect_url, kafka_bootstrap, source, sink, tmp_path / "checkpoint", state_dir, api)
    assert done.returncode == 0, done.stderr[-4000:]
    wait_until_stable(kafka_clients, sink)
    assert_exactly_once(read_committed_values(kafka_clients, sink), ids, copied_id)
    if api != "batch":
        assert (tmp_path / "checkpoint" / "kafka-eos").is_dir(), "the state is not in <checkpointLocation>/kafka-eos"


def test_sparks_own_source_into_the_foreach_batch_sink_over_spark_connect_is_exactly_once(
        kafka_bootstrap, kafka_clients, unique_name, tmp_path, spark_kafka_jars):
    """The pair that runs on every Spark from 3.5 on, over Connect (3.5 has Connect, not the Python
    data source API): Spark's connector on a server of its own, the foreachBatch sink bound to the
    query by its checkpointLocation, its batches aligned by output partition. The version matrix
    runs it on every pyspark line."""
    source, sink, ids = topics_with_orders(kafka_clients, unique_name, RECORDS)
    from kafka_testkit.spark_connect_server import SparkConnectServer, SparkConnectServerError

    server = SparkConnectServer(tmp_path / "server", jars=spark_kafka_jars.split(","))
    try:
        try:
            url = server.start()
        except SparkConnectServerError as exc:
            pytest.skip(f"no Spark Connect server: {str(exc).splitlines()[0]}")
        done = run_client(url, kafka_bootstrap, source, sink, tmp_path / "checkpoint", None, "foreach-batch", "kafka")
        assert done.returncode == 0, done.stderr[-4000:]
        # The aligned write (one transaction marker per output partition) runs over Connect 4.x: the
        # server's session took the kit's JVM functions. Connect 3.5 cannot load them (its session's
        # class loader takes no jar the kit can give it): one WARNING, and the batches unaligned.
        unaligned = server.log_text().count("the foreachBatch sink writes unaligned from now on")
        assert unaligned == (1 if pyspark.__version__.startswith("3.5.") else 0), server.log_tail()
    finally:
        server.stop()
    wait_until_stable(kafka_clients, sink)
    assert_exactly_once(read_committed_values(kafka_clients, sink), ids, copied_id)
    assert (tmp_path / "checkpoint" / "kafka-eos").is_dir(), "the state is not in <checkpointLocation>/kafka-eos"


@pytest.mark.parametrize("api", ["sink", "foreach-batch"])
@pytest.mark.parametrize("failpoint", ["after_checkpoint_stored", "mid_commit"])
def test_server_killed_then_query_resubmitted_from_its_checkpoint_is_exactly_once(
        kafka_bootstrap, kafka_clients, unique_name, tmp_path, failpoint, api):
    if os.environ.get(URL_ENV, "").strip():
        pytest.skip(f"{URL_ENV} names a server the tests did not start, so they cannot kill it")
    source, sink, ids = topics_with_orders(kafka_clients, unique_name, RECORDS)
    checkpoint = tmp_path / "checkpoint"
    # Hit 2: the server's commit runs in a reused Python worker, which reaches it in the second
    # batch of six; the first batch was committed before the kill.
    server = _server_or_skip(tmp_path / "server-1", f"{failpoint}:exit@2")
    try:
        client = start_client(server.url, kafka_bootstrap, source, sink, checkpoint, None, api)
        try:
            status = server.wait_for_exit(timeout_s=900)
        finally:
            # The client does not reconnect to a lost server: end it, as a user would resubmit.
            if client.poll() is None:
                os.killpg(client.pid, signal.SIGKILL)
            _, client_stderr = client.communicate()
        assert status == KILLED, f"server exit {status}\n{server.log_tail()}\n{client_stderr[-3000:]}"
    finally:
        server.stop()
    assert len(read_committed_values(kafka_clients, sink)) < RECORDS, "the server died after finishing"
    stored = FileCheckpointStore(str(checkpoint / "kafka-eos"), check_writable=False)
    assert stored.checkpoint_ids(), "nothing stored before the kill"
    assert not stored.is_committed(stored.checkpoint_ids()[-1]), "the kill did not hit the commit window"

    server = _server_or_skip(tmp_path / "server-2")
    try:
        done = run_client(server.url, kafka_bootstrap, source, sink, checkpoint, None, api)
        assert done.returncode == 0, done.stderr[-4000:]
    finally:
        server.stop()
    wait_until_stable(kafka_clients, sink)
    assert_exactly_once(read_committed_values(kafka_clients, sink), ids, copied_id)
    assert kafka_clients.txn_control().list_open_transactions("kafka-eos-") == []


def test_a_running_count_in_update_mode_over_spark_connect(kafka_bootstrap, kafka_clients, connect_url, unique_name,
                                                           tmp_path):
    """A running count in update mode on ``format("kafka-eos")`` (test_output_modes.py) over Spark
    Connect: the server has no jar of the kit; ``register()`` sends the JVM provider's to the session."""
    from running_counts import assert_update_counts, counts_by_key, job_failure, load_keyed, new_topic, run_count_job

    source, update = (new_topic(kafka_clients, unique_name, label) for label in ("counts-in", "update"))
    inputs = load_keyed(kafka_clients, source)
    job = run_count_job(["--remote", connect_url], kafka_bootstrap, source, {"update": update},
                        tmp_path / "checkpoints")
    assert job.returncode == 0, job_failure(job)
    assert "update mode enabled" in job.stderr
    assert_update_counts(counts_by_key(kafka_clients, update), inputs)
