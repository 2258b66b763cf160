"""Fixtures for tests against a real Kafka broker.

``kafka_bootstrap`` finds a broker the way ``kafka-eos demo`` does (connectors/servers/broker_discovery.py):

1. ``KAFKA_BOOTSTRAP_SERVERS``: an already running cluster (nothing is started or stopped);
2. a Docker engine that answers: an ``apache/kafka`` container (KRaft) through testcontainers
   (image overridable with ``KAFKA_EOS_IMAGE``);
3. ``KAFKA_HOME``: a Kafka 3.9/4.x distribution, started by ``LocalKafkaBroker`` on loopback ports;
4. Maven Central: the official ``org.apache.kafka:kafka_2.13`` jars, resolved with ``mvn`` into the
   kit's cache and started the same way (``KAFKA_EOS_KAFKA_VERSION``: ``4``, the default, for the
   newest 4.x; ``3.9``; or an exact version).

Without any of them every integration test is skipped, with a reason naming all of them. The fake
cluster is never accepted here: these tests are the evidence that the fake is faithful.

With ``KAFKA_EOS_REQUIRE_SERVERS=1`` (which ``.ci/run`` sets, and ``CI=true`` implies) an
integration test that skips fails instead, naming the reason: in CI every server must be there.

The other real servers are found or started the same way:

- ``secured_kafka``, a cluster with SASL_SSL and ACLs: ``KAFKA_EOS_SECURED_BOOTSTRAP_SERVERS`` with
  ``KAFKA_EOS_SECURED_ADMIN_CONFIG`` (a properties file of librdkafka settings of a super user, e.g.
  ``security.protocol=SASL_SSL``, ``sasl.mechanism=SCRAM-SHA-512``, ``sasl.username``,
  ``sasl.password``, ``ssl.ca.location``; the tests create SCRAM-SHA-512 users and their ACLs with
  it), else ``KAFKA_HOME`` or Maven Central started by ``SecuredKafkaBroker``;
- ``spark_cluster``, a Spark standalone cluster: ``KAFKA_EOS_SPARK_MASTER`` (``spark://host:port``;
  its executors must run this checkout's Python, and tests that kill executors are skipped), else
  one started from the installed pyspark by ``SparkStandaloneCluster`` (two Workers, one core each).

- ``kafka_cluster``, a cluster of 3 nodes (RF 3, ``min.insync.replicas=2``) for tests of broker
  restarts: ``KAFKA_EOS_CLUSTER_BOOTSTRAP_SERVERS`` (not started here, so tests that bounce nodes
  skip), else three nodes started from ``KAFKA_HOME`` (or Maven Central) by ``LocalKafkaCluster``,
  which the tests SIGKILL and restart by PID.

``hadoop_cluster`` is Hadoop's own minicluster (HDFS with WebHDFS, and YARN) from Maven Central
(``org.apache.hadoop:hadoop-client-minicluster``, pyspark's Hadoop version), started once per session
in one JVM by ``kafka_testkit.hadoop_cluster`` and stopped by its PID; without ``mvn`` or a JDK the
tests that use it skip (fail in CI).

``s3_bucket`` finds a real S3 server for the tests of the kit's state on object stores, through the
variables the AWS SDKs read:

- ``AWS_ENDPOINT_URL`` (an S3-compatible server: MinIO, Ceph RGW, ...) with ``AWS_ACCESS_KEY_ID``
  and ``AWS_SECRET_ACCESS_KEY``: the bucket ``kafka-eos-it`` there (created if missing), or
- ``KAFKA_EOS_TEST_S3_BUCKET``: a bucket the credentials (any the SDKs find) can write, e.g. on AWS, or
- ``KAFKA_EOS_S3_SERVER``: the path of a launcher script with the interface of ``run-s3.sh`` (Ceph's
  radosgw from Debian packages, kept outside the repository: ``LAUNCHER PORT DATADIR``, prints
  ``S3_READY URL ACCESS SECRET``, stops on SIGTERM). The session starts it on free loopback ports
  with its data under pytest's tmp (``kafka_testkit.s3_server.S3Server``), points the ``AWS_*``
  variables of this process (and so of the Spark jobs it starts) at it, and stops it by its PID at
  the end. If it does not get ready, the tests skip with the launcher's last lines of output.

Without any of them, those tests are skipped with a reason naming all three. Every test writes under
a prefix of its own, which it deletes at the end.
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

import pytest

from connectors.kafka.authorization import source_acls, sink_acls
from connectors.kafka.clients.factory import clients_for
from connectors.kafka.clients import KafkaClients
from connectors.servers.broker_discovery import find_broker
from connectors.servers.server_errors import NoBrokerError
from kafka_testkit.acl_admin import AclAdmin
from connectors.simulated_kafka import FAKE_SCHEME

if TYPE_CHECKING:
    from connectors.servers.local_cluster import KafkaCluster
    from kafka_testkit.hadoop_cluster import HadoopMiniCluster
    from kafka_testkit.spark_cluster import SparkStandaloneCluster

log = logging.getLogger(__name__)

_HERE = Path(__file__).resolve().parent
# The state crash matrix of tests/ (state_fixtures, memory_system) runs here on a real S3 server too.
if str(_HERE.parent / "tests") not in sys.path:
    sys.path.append(str(_HERE.parent / "tests"))


REQUIRE_SERVERS_ENV = "KAFKA_EOS_REQUIRE_SERVERS"


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_configure(config: pytest.Config) -> None:
    # A run ended with SIGTERM (a CI timeout, a Ctrl-C'd wrapper) tears down its fixtures as on
    # Ctrl-C, so the brokers, clusters and S3 server they started are stopped by PID; by default
    # SIGTERM ends Python without running them, and those servers would outlive the run.
    signal.signal(signal.SIGTERM, _interrupt)


def servers_required() -> bool:
    """In CI every real server must be found or started: a skip is a failure."""
    explicit = os.environ.get(REQUIRE_SERVERS_ENV, "").strip().lower()
    if explicit:
        return explicit not in ("0", "false", "no")
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def _is_integration(item: pytest.Item) -> bool:
    return _HERE in Path(str(item.fspath)).resolve().parents


#: ``ci`` (the default): the CI set below; ``all``: every integration test.
SUITE_ENV = "KAFKA_EOS_INTEGRATION"
#: The integration tests of a plain ``pytest`` run (README command 2, which CI runs): at least one
#: real-server test of each case, within pytest's share of CI's 45 minutes on 2 cores
#: (docs/development.md, "CI's time"). Node ids relative to this folder; an entry ending in ``::``,
#: ``[`` or ``[...-`` takes every test it begins.
#: ``KAFKA_EOS_INTEGRATION=all pytest`` runs the rest too, as does naming a test file or node id on
#: the command line.
CI_SET = (
    # The client seam, and the fake cluster's conformance, on the real broker (4.x and 3.9), and a
    # transaction's handle under transaction version 2 and the classic protocol.
    "test_kafka_clients.py::",
    "test_kafka_python_internals_on_real_kafka.py::",
    # Java client settings as Spark jobs carry them: murmur2 partitioning, partitioner.class, a JAAS line
    # with a JKS truststore for every client of both libraries.
    "test_java_client_settings_on_real_kafka.py::",
    "test_real_kafka_conformance.py::",
    "test_transaction_versions.py::",
    # README command 1: Kafka from Maven Central, a driver kill, a broker restart, a lost transaction.
    "test_demo_on_real_kafka.py::",
    # The README's quick-start scripts, each as a user runs it (the version matrix runs the third,
    # Spark's source into the foreachBatch sink, on every line, 4.3 too); the
    # kit shipped to a standalone cluster's executors as a packed venv (spark.archives), and workers
    # that lack it.
    "test_quickstart_on_real_kafka.py::test_a_quickstart_script_is_exactly_once_on_real_kafka[foreach-batch]",
    "test_quickstart_on_real_kafka.py::test_a_quickstart_script_is_exactly_once_on_real_kafka[kafka-eos]",
    "test_quickstart_on_real_kafka.py::test_the_windowed_aggregation_example_is_exactly_once_on_real_kafka",
    "test_workers_python.py::test_the_kit_shipped_as_a_packed_venv_with_spark_archives",
    "test_workers_python.py::test_workers_without_the_kit_fail_with_one_line_naming_the_fix",
    # Where the format tells Spark's streaming commit runner from its write planning (no server; the
    # version matrix runs it on every other 4.x line).
    "test_format_by_spark_version.py::test_the_format_tells_sparks_commit_runner_from_its_write_planning_on_this_spark",
    # A driver SIGKILL in each commit window, and executor task failures on a standalone cluster.
    # mid_commit and after_checkpoint_stored are killed by many tests below (secured, moved driver,
    # HDFS, Connect, stateful; during_restore's first run is after_checkpoint_stored), after_pre_commit
    # by the demo above (the same Spark job on real Kafka): here, the rest.
    "test_exactly_once_spark.py::test_every_failpoint_has_a_scenario",
    "test_exactly_once_spark.py::test_spark_job_killed_at_failpoint_and_restarted_is_exactly_once[local-before_pre_commit]",
    "test_exactly_once_spark.py::test_spark_job_killed_at_failpoint_and_restarted_is_exactly_once[local-before_commit]",
    "test_exactly_once_spark.py::test_spark_job_killed_at_failpoint_and_restarted_is_exactly_once[local-after_commit]",
    "test_exactly_once_spark.py::test_spark_job_killed_at_failpoint_and_restarted_is_exactly_once[local-during_restore]",
    "test_exactly_once_spark.py::test_spark_job_with_executor_task_failures_is_exactly_once[standalone-kafka-eos]",
    "test_exactly_once_kafka.py::",
    "test_driver_commit_fails.py::test_driver_commit_fails_while_the_jvm_lives_and_the_restart_is_exactly_once"
    "[mid_commit-exit]",
    "test_upgrade_from_previous_version.py::",  # the previous release killed after a decision, then this one
    # A rolling restart of a 3-node cluster, and a rolling upgrade of one from Kafka 3.9 to 4.x.
    "test_rolling_restarts.py::test_bounces_and_a_coordinator_killed_mid_commit_never_fail_the_query",
    "test_rolling_upgrade.py::",
    # Transaction markers per batch on the 3-node cluster: 64 write tasks into 64 partitions (issue 54).
    "test_markers_on_a_cluster.py::",
    # The driver's commit round of 1,000 transactions on the 3-node cluster (issue 54).
    "test_commit_round_at_scale.py::",
    # Months of operation: producer-id rollover, expired transactional ids.
    "test_producer_id_rollover.py::",
    "test_expired_transactional_ids.py::",
    # State on S3, and the driver moving to another machine with it.
    "test_state_on_s3.py::",
    "test_driver_moves.py::test_driver_killed_and_restarted_on_another_machine_is_exactly_once[mid_commit]",
    # Spark on YARN (Hadoop's own minicluster, checkpoint and state on hdfs://), the kit shipped by
    # spark.archives: an executor container killed (client mode), the AM killed mid-commit (cluster mode).
    "test_spark_on_yarn.py::",
    # The kit's state on HDFS through WebHDFS: the atomic create under racing writers, the state
    # crash matrix, and Spark's checkpoint with the kit's state on hdfs:// (lost state, moved driver;
    # the move after after_checkpoint_stored runs with the rest: the stateful set below kills there).
    "test_state_on_hdfs.py::test_hdfs_locations_map_to_webhdfs_through_hdfs_site_and_the_probe_passes",
    "test_state_on_hdfs.py::test_checkpoints_on_hdfs_are_write_once_files_and_retention_leaves_no_folders",
    "test_state_on_hdfs.py::test_a_conditional_create_on_hdfs_has_exactly_one_winner_among_threads",
    "test_state_on_hdfs.py::test_a_conditional_create_on_hdfs_has_exactly_one_winner_among_processes",
    "test_state_on_hdfs.py::test_a_zombie_driver_cannot_overwrite_a_stored_checkpoint_on_hdfs",
    "test_state_on_hdfs.py::test_savepoints_on_hdfs",
    "test_state_on_hdfs.py::test_a_crash_before_every_write_of_the_state_on_hdfs_is_exactly_once",
    "test_state_on_hdfs.py::test_driver_killed_at_a_commit_failpoint_and_restarted_on_another_machine_with_all_on_hdfs"
    "_is_exactly_once[mid_commit]",
    "test_state_on_hdfs.py::test_a_restart_with_another_state_location_on_hdfs_is_refused_as_lost_state",
    # Secured, least privilege. The tools' Java-named settings on it through --command-config (the
    # other way in, --client-config KEY=VALUE, reaches the same settings: test_cli.py holds that).
    "test_secured_cluster.py::test_secured_spark_job_killed_at_failpoint_and_restarted_is_exactly_once[mid_commit]",
    "test_secured_cluster.py::test_a_missing_acl_fails_the_job_with_one_line_naming_it[transactional id WRITE]",
    "test_secured_cluster.py::test_tls_client_certificates_from_the_same_options_for_both_client_libraries",
    "test_replay_on_secured_kafka.py::test_load_and_replay_on_a_secured_cluster[java-names-command-config]",
    # Update and complete output mode on format("kafka-eos") (the JVM provider), local and over Connect.
    "test_output_modes.py::test_a_running_count_in_update_and_complete_mode_runs_unchanged[local]",
    "test_spark_connect.py::test_a_running_count_in_update_mode_over_spark_connect",
    # Spark Connect.
    "test_spark_connect.py::test_each_api_over_spark_connect_is_exactly_once[sink]",
    "test_spark_connect.py::test_server_killed_then_query_resubmitted_from_its_checkpoint_is_exactly_once"
    "[mid_commit-sink]",
    # Spark's own Kafka source feeding the sink (Spark's connector jars from Maven Central).
    "test_spark_kafka_source.py::test_spark_kafka_source_driver_killed_and_restarted_is_exactly_once[mid_commit]",
    # The drop-in promise against Spark's own connector: the same options read the same rows, keys land in
    # the same partitions; on the secured cluster with Java-named settings only (its driver kill runs
    # with the rest: test_secured_cluster.py kills mid-commit there, test_two_clusters.py with other
    # security).
    "test_drop_in_for_spark_kafka.py::test_the_same_rows_as_spark_kafka[",
    "test_drop_in_for_spark_kafka.py::test_keys_land_in_the_partitions_of_spark_kafka",
    "test_drop_in_for_spark_kafka.py::test_keys_through_foreach_batch_land_in_the_partitions_of_spark_kafka",
    "test_drop_in_for_spark_kafka.py::test_java_settings_on_a_secured_cluster_read_the_same_rows[",
    "test_drop_in_for_spark_kafka.py::test_java_settings_on_a_secured_cluster_write_keys_to_the_same_partitions",
    # Source on one cluster, sink on another with other security, through a driver kill mid-commit.
    "test_two_clusters.py::",
    # kafka-eos status on a crashed, then finished query.
    "test_status_on_real_kafka.py::",
    # Stateful queries (issue 45), compact, each output mode on a sink: a driver SIGKILL in the commit
    # (update on the foreachBatch sink, with the state store read back; append on the format),
    # a broker restart through `replay --shape`, the differential against Spark's own sink (update
    # on the format; Python state on the foreachBatch sink), and the windowed-aggregation example (in
    # the quick-start file above). Update and complete on the format commit as append does (the JVM
    # provider only adds Spark's update marker): the format's kill mid-commit is the append one here,
    # its task failures the standalone one above, its update and complete modes test_output_modes.py.
    "test_stateful_exactly_once.py::test_stateful_query_killed_at_failpoint_and_restarted_is_exactly_once"
    "[running-count-update-kafka-eos-foreach-batch-after_checkpoint_stored]",
    "test_stateful_exactly_once.py::test_stateful_query_killed_at_failpoint_and_restarted_is_exactly_once"
    "[windowed-count-append-kafka-eos-mid_commit]",
    "test_stateful_exactly_once.py::test_replay_runs_a_stateful_query_through_a_broker_restart_and_verifies_it_by_shape"
    "[windowed-count]",
    "test_stateful_differential.py::test_stateful_query_ends_with_the_same_records_as_on_sparks_own_sink"
    "[running-count-update-kafka-eos]",
    "test_stateful_differential.py::test_stateful_query_ends_with_the_same_records_as_on_sparks_own_sink"
    "[python-state-update-kafka-eos-foreach-batch]",
    # Complete mode on the foreachBatch sink (its few coalesced write tasks), through executor task
    # failures. (Its stateful append, dedup, runs with the rest: the sink writes what Spark hands it,
    # whatever the mode, and update and complete above coalesce the same way.)
    "test_stateful_exactly_once.py::test_stateful_query_with_executor_task_failures_is_exactly_once"
    "[kafka-eos-foreach-batch-running-count-complete]",
)


#: The version matrix's compact set: what .ci/run runs (kafka_testkit/version_matrix.py) in a venv of
#: each other pyspark line, and of pyspark 4.3 at the lowest dependencies its ranges allow
#: (``KAFKA_EOS_INTEGRATION=versions``). The full suite runs on 4.3 at the highest. Each entry says
#: which Spark it runs on: every one (3.5 too: Spark's own source and the foreachBatch sink), those
#: with the Python data source API (``format``: 4.x, ``format("kafka-eos")``), or those without it
#: (``no-format``: 3.5).
VERSION_SET = (
    # The one-line refusal on 3.5; the example job's defaults on each line. (On 4.x, where it reads a
    # batch through the format: each format test below registers it, and the main suite's drop-in
    # tests read batches through it on 4.3.)
    ("test_format_by_spark_version.py::test_the_format_is_registered_on_spark_4_and_refused_in_one_line_on_spark_3_5",
     "no-format"),
    ("test_format_by_spark_version.py::test_the_example_job_defaults_to_what_this_spark_runs", "every"),
    # Where the format tells Spark's streaming commit runner from its write planning, on each 4.x line.
    ("test_format_by_spark_version.py::test_the_format_tells_sparks_commit_runner_from_its_write_planning_on_this_spark",
     "format"),
    # The quick start: Spark's own source feeding the foreachBatch sink. (The format's quick start
    # runs in the main suite; on each 4.x line here, the JVM provider's test below runs the format
    # both ways from the plain install with a quiet console, and the kill below through a restart.)
    ("test_quickstart_on_real_kafka.py::test_a_quickstart_script_is_exactly_once_on_real_kafka[spark-source]", "every"),
    # A driver SIGKILL mid-commit: Spark's own source into the foreachBatch sink on 3.5; the format
    # both ways on 4.x. (Spark's source of 4.1, connector 4.1.1 (the newest 4.1 Maven Central serves),
    # fails every restarted query on its replayed batch, SPARK-55271: docs/where-it-runs.md.)
    ("test_spark_kafka_source.py::test_spark_kafka_source_driver_killed_and_restarted_is_exactly_once[mid_commit]",
     "no-format"),
    ("test_exactly_once_spark.py::test_one_batch_killed_mid_commit_and_restarted_is_exactly_once", "format"),
    # Executor task failures behind Spark's own source into the foreachBatch sink, on 3.5. (On 4.x:
    # the main suite's, on 4.3: test_exactly_once_spark.py's on a standalone cluster, and
    # test_stateful_exactly_once.py's complete mode.)
    ("test_spark_kafka_source.py::test_spark_kafka_source_with_executor_task_failures_is_exactly_once", "no-format"),
    # The JVM provider by its behaviour on each 4.x line: update mode on the format, a stateful batch
    # in at most defaultParallelism transactions, a map-only one with no shuffle added.
    ("test_output_modes.py::test_the_jvm_provider_behaves_as_documented_on_this_spark", "format"),
    # Spark Connect on 3.5 (which has Connect, not the Python data source API): Spark's own source
    # into the foreachBatch sink. (Connect on 4.x: the main suite's, on 4.3.)
    ("test_spark_connect.py::test_sparks_own_source_into_the_foreach_batch_sink_over_spark_connect_is_exactly_once",
     "no-format"),
)


#: README command 2 runs in two pytest-xdist workers (``-n 2``; pyproject's addopts add ``--dist
#: loadgroup``). Each module is a group of its own, so its module-scoped fixtures (a Spark session,
#: the drop-in comparison's runs) are made once; the modules that share a server the session starts
#: are one group, so that the server starts in one worker only. The groups keep xdist's order (most
#: tests first): queued longest first, these groups ran beside the version matrix and slowed it by
#: half (a fresh clone's .ci/run took 77 minutes, against about 50).
SHARED_SERVER_GROUPS = {
    "secured-kafka": ("test_drop_in_for_spark_kafka.py", "test_java_client_settings_on_real_kafka.py",
                      "test_replay_on_secured_kafka.py", "test_secured_cluster.py", "test_two_clusters.py"),
    "hadoop-and-packed-venv": ("test_spark_on_yarn.py", "test_state_on_hdfs.py", "test_workers_python.py"),
    "kafka-3-nodes": ("test_rolling_restarts.py", "test_long_rolling_restarts.py", "test_markers_on_a_cluster.py",
                      "test_commit_round_at_scale.py"),
    "kafka-3.9": ("test_transaction_versions.py", "test_real_kafka_conformance.py"),
}
_GROUP_OF_MODULE = {module: group for group, modules in SHARED_SERVER_GROUPS.items() for module in modules}


def _worker_group(item: pytest.Item) -> str:
    path = Path(str(item.fspath))
    if _is_integration(item) and path.name in _GROUP_OF_MODULE:
        return _GROUP_OF_MODULE[path.name]
    return path.resolve().relative_to(_HERE.parent).as_posix()


def _suite() -> str:
    value = os.environ.get(SUITE_ENV, "ci").strip().lower() or "ci"
    if value not in ("ci", "all", "versions"):
        raise pytest.UsageError(f"{SUITE_ENV}={value!r}: use ci (the CI set of integration tests, the default), "
                                "all (every integration test) or versions (the version matrix's compact set)")
    return value


def _node(item: pytest.Item) -> str:
    return f"{Path(str(item.fspath)).name}::{item.name}"


def _matches(node: str, entry: str) -> bool:
    return node == entry or (entry.endswith(("::", "[", "-")) and node.startswith(entry))


def _in_ci_set(item: pytest.Item) -> bool:
    return any(_matches(_node(item), entry) for entry in CI_SET)


def _version_set_here() -> tuple[str, ...]:
    """The VERSION_SET entries that run on the installed Spark."""
    from connectors.spark.spark_versions import has_python_data_source_api

    runs_here = ("every", "format") if has_python_data_source_api() else ("every", "no-format")
    return tuple(entry for entry, spark in VERSION_SET if spark in runs_here)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # This hook sees the whole session's items, not only this directory's. A run that names what
    # to run (a file, a node id) gets just that; a plain run gets the CI set of integration tests;
    # the version matrix gets its compact set, and nothing else.
    suite = _suite()
    every = suite == "all" or (suite == "ci" and bool(config.option.file_or_dir))
    version_set = _version_set_here() if suite == "versions" else ()
    kept, left_out = [], []
    for item in items:
        if suite == "versions" and not any(_matches(_node(item), entry) for entry in version_set):
            left_out.append(item)
            continue
        if _is_integration(item):
            item.add_marker(pytest.mark.integration)
            if not every and suite == "ci" and not _in_ci_set(item):
                left_out.append(item)
                continue
        kept.append(item)
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = kept
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: its items are what the workers share out
        for item in items:
            item.add_marker(pytest.mark.xdist_group(_worker_group(item)))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[pytest.TestReport]:
    report: pytest.TestReport = yield
    if report.skipped and _is_integration(item) and servers_required():
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = (f"an integration test skipped while {REQUIRE_SERVERS_ENV} (or CI) requires every server: "
                           f"{reason}")
    return report


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip().startswith(FAKE_SCHEME):
        pytest.skip("integration tests need a real Kafka broker; KAFKA_BOOTSTRAP_SERVERS names the "
                    "fake cluster, which is what these tests check the fake against")
    try:
        broker = find_broker(work_dir=str(tmp_path_factory.mktemp("kafka-broker")))
    except NoBrokerError as exc:
        pytest.skip(f"no Kafka broker for integration tests. {exc}")
    log.info("integration tests run against %s at %s", broker.origin, broker.bootstrap_servers)
    try:
        yield broker.bootstrap_servers
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator["KafkaCluster"]:
    from connectors.servers.local_cluster import NoClusterError, find_cluster

    try:
        cluster = find_cluster(tmp_path_factory.mktemp("kafka-cluster"))
    except NoClusterError as exc:
        pytest.skip(str(exc))
    log.info("cluster tests run against %s at %s", cluster.origin, cluster.bootstrap_servers)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def kafka_clients(kafka_bootstrap: str) -> KafkaClients:
    return clients_for(kafka_bootstrap)


KAFKA39_ENV = "KAFKA_EOS_KAFKA39_BOOTSTRAP_SERVERS"


@pytest.fixture(scope="session")
def kafka39_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Kafka 3.9 broker, the last line before 4.0 (the classic transaction protocol):
    ``KAFKA_EOS_KAFKA39_BOOTSTRAP_SERVERS``, else the newest 3.9.x from Maven Central, started here."""
    external = os.environ.get(KAFKA39_ENV, "").strip()
    if external:
        yield external
        return
    from connectors.servers.server_errors import BrokerStartError
    from connectors.servers.kafka_distribution import MavenKafka
    from connectors.servers.local_broker import LocalKafkaBroker

    try:
        broker = LocalKafkaBroker(MavenKafka("3.9"), tmp_path_factory.mktemp("kafka39"))
        bootstrap = broker.start()
    except BrokerStartError as exc:
        pytest.skip(f"no Kafka 3.9: set {KAFKA39_ENV}, or have mvn and Java for Kafka 3.9 from Maven Central. "
                    f"Tried: {str(exc).splitlines()[0]}")
    log.info("Kafka 3.9 tests run against %s at %s", broker.description, bootstrap)
    try:
        yield bootstrap
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def kafka39_clients(kafka39_bootstrap: str) -> KafkaClients:
    return clients_for(kafka39_bootstrap)


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """Names (topics, transactional ids) unique to this test and call:
    ``unique_name("out")`` -> ``it-<test>-out-<random>``."""
    test = re.sub(r"[^A-Za-z0-9]+", "-", request.node.name).strip("-")[:40]

    def make(label: str = "t") -> str:
        return f"it-{test}-{label}-{uuid.uuid4().hex[:8]}"

    return make


@pytest.fixture
def unique_topic(unique_name: Callable[[str], str]) -> Callable[[], str]:
    """A fresh topic name on every call (the topic itself is not created)."""
    return lambda: unique_name("topic")


# -- a secured cluster ------------------------------------------------------------------------------

@dataclass
class SecuredCluster:
    """A cluster with SASL_SSL and ACLs, and its administrator."""

    bootstrap_servers: str
    admin_config: dict[str, str]
    acl: AclAdmin
    origin: str
    #: A listener taking OAUTHBEARER with unsecured JWTs (only on a broker the tests started).
    oauth_bootstrap_servers: str | None = None
    #: A listener requiring client certificates, and a maker of them (name -> client settings).
    tls_bootstrap_servers: str | None = None
    client_certificate: Callable[[str], dict[str, str]] | None = None

    @property
    def admin_clients(self) -> KafkaClients:
        return clients_for(self.bootstrap_servers, self.admin_config)

    def application(self, name: str) -> "Application":
        """A new SCRAM user holding no ACL."""
        return Application(self, f"User:{name}", self.acl.create_user(name))


@dataclass
class Application:
    cluster: SecuredCluster
    principal: str
    config: dict[str, str]

    def grant_pipeline(self, source: str, sink: str, prefix: str, group: str | None = None) -> None:
        """Exactly the ACLs the README's table lists for the source and the sink."""
        self.cluster.acl.grant(self.principal, source_acls([source], group) + sink_acls(sink, prefix))


def _read_properties(path: str) -> dict[str, str]:
    settings = {}
    for line in Path(path).read_text().splitlines():
        line = line.strip()
        if line and not line.startswith(("#", "!")):
            name, _, value = line.partition("=")
            settings[name.strip()] = value.strip()
    return settings


@pytest.fixture(scope="session")
def secured_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredCluster]:
    bootstrap = os.environ.get("KAFKA_EOS_SECURED_BOOTSTRAP_SERVERS", "").strip()
    if bootstrap:
        admin_file = os.environ.get("KAFKA_EOS_SECURED_ADMIN_CONFIG", "").strip()
        if not admin_file:
            pytest.skip("KAFKA_EOS_SECURED_BOOTSTRAP_SERVERS is set without KAFKA_EOS_SECURED_ADMIN_CONFIG (a "
                        "properties file of a super user's librdkafka settings)")
        admin_config = _read_properties(admin_file)
        yield SecuredCluster(bootstrap, admin_config, AclAdmin(bootstrap, admin_config),
                             "KAFKA_EOS_SECURED_BOOTSTRAP_SERVERS")
        return
    kafka_home = os.environ.get("KAFKA_HOME", "").strip()
    from connectors.servers.kafka_distribution import from_environment
    from connectors.servers.local_broker import LocalBrokerError
    from kafka_testkit.secured_broker import SecuredKafkaBroker
    from connectors.servers.broker_discovery import OWN_BROKER_TXN_CLEANUP_MS, TXN_CLEANUP_INTERVAL_KEY
    from connectors.servers.server_errors import BrokerStartError

    try:
        distribution = from_environment(kafka_home)
        broker = SecuredKafkaBroker(distribution, tmp_path_factory.mktemp("secured-broker"), oauth_listener=True,
                                    tls_client_listener=shutil.which("openssl") is not None,
                                    extra_config={TXN_CLEANUP_INTERVAL_KEY: str(OWN_BROKER_TXN_CLEANUP_MS)})
        bootstrap = broker.start()
    except (LocalBrokerError, BrokerStartError) as exc:
        pytest.skip("no secured Kafka: set KAFKA_EOS_SECURED_BOOTSTRAP_SERVERS and KAFKA_EOS_SECURED_ADMIN_CONFIG, or "
                    "KAFKA_HOME, or have mvn and Java (Kafka from Maven Central), which the tests start with SASL_SSL "
                    f"and ACLs. Tried: {str(exc).splitlines()[0]}")
    try:
        yield SecuredCluster(bootstrap, broker.admin_config, AclAdmin(bootstrap, broker.admin_config),
                             f"SecuredKafkaBroker of {distribution.description} (pid {broker.pid})",
                             broker.oauth_bootstrap_servers, broker.tls_bootstrap_servers,
                             broker.client_certificate if broker.tls_bootstrap_servers else None)
    finally:
        broker.stop()


# -- Spark's own Kafka connector ------------------------------------------------------------------

JARS_ENV = "KAFKA_EOS_SPARK_KAFKA_JARS"


def resolve_jars(value: str) -> list[str]:
    """``KAFKA_EOS_SPARK_KAFKA_JARS``: comma-separated jar paths, or directories of jars."""
    jars: list[str] = []
    for item in (part.strip() for part in value.split(",")):
        if not item:
            continue
        path = Path(item)
        if path.is_dir():
            jars += sorted(str(p) for p in path.glob("*.jar"))
        elif path.is_file():
            jars.append(str(path))
        else:
            raise FileNotFoundError(f"{JARS_ENV}: {item} is neither a jar nor a directory")
    return jars


@dataclass(frozen=True)
class ConnectorJars:
    """The connector's jars for ``--jars``, and where they come from (for the reports)."""

    jars: str
    description: str


def _jars_from_environment(value: str) -> ConnectorJars:
    jars = resolve_jars(value)
    if not any("spark-sql-kafka-0-10" in Path(j).name for j in jars):
        pytest.skip(f"{JARS_ENV}={value} holds no spark-sql-kafka-0-10 jar")
    return ConnectorJars(",".join(jars), f"Spark's Kafka connector from {JARS_ENV}={value}")


@pytest.fixture(scope="session")
def spark_kafka_connector() -> ConnectorJars:
    """``KAFKA_EOS_SPARK_KAFKA_JARS`` when set (the user's jars win), else Maven Central."""
    value = os.environ.get(JARS_ENV, "").strip()
    if value:
        connector = _jars_from_environment(value)
    else:
        from connectors.servers.maven_artifacts import MavenUnavailableError
        from kafka_testkit.spark_kafka_connector import resolve_connector

        try:
            resolved = resolve_connector()
        except MavenUnavailableError as exc:
            pytest.skip(f"Spark's Kafka connector: {JARS_ENV} is not set, and Maven Central gave none: {exc}")
        connector = ConnectorJars(resolved.spark_jars, resolved.description)
    log.info("%s: %s", connector.description, connector.jars)
    return connector


@pytest.fixture
def spark_kafka_jars(spark_kafka_connector: ConnectorJars, record_property: Callable[[str, object], None],
                     request: pytest.FixtureRequest) -> str:
    """The jars for ``--jars``; the test's report names the connector (its version), so that a pass
    on a fallback version is not mistaken for one on pyspark's own."""
    record_property("spark_kafka_connector", spark_kafka_connector.description)
    request.node.add_report_section("setup", "spark kafka connector", spark_kafka_connector.description)
    return spark_kafka_connector.jars


# -- Spark masters ----------------------------------------------------------------------------------

@dataclass
class SparkCluster:
    master_url: str
    #: The launcher, when the tests started the cluster (None for KAFKA_EOS_SPARK_MASTER).
    launcher: "SparkStandaloneCluster | None"


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    external = os.environ.get("KAFKA_EOS_SPARK_MASTER", "").strip()
    if external:
        yield SparkCluster(external, None)
        return
    from kafka_testkit.spark_cluster import SparkClusterError, SparkStandaloneCluster

    cluster = SparkStandaloneCluster(tmp_path_factory.mktemp("spark-cluster"))
    try:
        master_url = cluster.start()
    except SparkClusterError as exc:
        pytest.skip(f"no Spark standalone cluster: set KAFKA_EOS_SPARK_MASTER, or fix: {str(exc).splitlines()[0]}")
    try:
        yield SparkCluster(master_url, cluster)
    finally:
        cluster.stop()


@pytest.fixture(params=["local", "standalone"])
def spark_master(request: pytest.FixtureRequest) -> str | None:
    """Where a Spark job runs: None for the example's default ``local[2,4]``, or the master URL of a
    standalone cluster (executors in JVMs of their own)."""
    if request.param == "local":
        return None
    cluster: SparkCluster = request.getfixturevalue("spark_cluster")
    return cluster.master_url


# -- the kit as a packed venv (spark.archives) ----------------------------------------------------------

#: What the kit's packages import on executors and on a driver in a cluster's container
#: (pyproject.toml's dependencies but pyspark, and the hdfs extra for state on hdfs://), at the
#: versions of this environment.
PACKED_DEPENDENCIES = ("pyarrow", "confluent-kafka", "kafka-python", "tenacity", "hdfs")
#: Not needed by Spark's workers: left out of the packed venv.
PACKED_TRIMMED = ("pyarrow/tests", "pyarrow/include")


def _venv_pack() -> str:
    found = shutil.which("venv-pack") or str(Path(sys.executable).with_name("venv-pack"))
    if not os.access(found, os.X_OK):
        pytest.skip("venv-pack is not installed (pip install venv-pack; it is in the test extra)")
    return found


@pytest.fixture(scope="session")
def packed_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``env.tar.gz``: a venv holding the kit (not editable) and its dependencies, packed by
    venv-pack as Spark documents for Python dependencies (``spark.archives=env.tar.gz#environment``
    with ``PYSPARK_PYTHON=./environment/bin/python``); made once per session.

    As small as it can be: a fresh venv with a non-editable install of the kit (venv-pack refuses
    editable installs) and :data:`PACKED_DEPENDENCIES`, without pyspark (Spark puts its own
    ``pyspark.zip`` and py4j on its processes' path), pip and the test kit. Its ``bin/python``
    links to this session's base interpreter (venv-pack keeps the link): the nodes need that Python
    at the same path, which on this one machine they have."""
    venv_pack = _venv_pack()
    work = tmp_path_factory.mktemp("packed-venv")
    # A copy of the sources, so that the build leaves nothing in the checkout.
    repo_root = _HERE.parent
    source = work / "source"
    source.mkdir()
    for name in ("twophase", "connectors"):
        shutil.copytree(repo_root / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(repo_root / name, source / name)
    env = work / "env"
    subprocess.run([sys.executable, "-m", "venv", str(env)], check=True)
    pip = [str(env / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, "--no-deps", str(source)], check=True)
    pins = [f"{name}=={importlib.metadata.version(name)}" for name in PACKED_DEPENDENCIES]
    installed = subprocess.run([*pip, *pins], capture_output=True, text=True)
    if installed.returncode != 0:
        pytest.skip(f"could not install {' '.join(pins)} into the venv to pack: {installed.stderr[-1000:]}")
    subprocess.run([str(env / "bin" / "python"), "-m", "pip", "uninstall", "-q", "-y", "pip", "setuptools"],
                   check=True)
    site = Path(subprocess.run([str(env / "bin" / "python"), "-c",
                                "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    for name in PACKED_TRIMMED:
        shutil.rmtree(site / name, ignore_errors=True)
    archive = work / "env.tar.gz"
    subprocess.run([venv_pack, "-p", str(env), "-o", str(archive), "-q"], check=True)
    return archive


# -- Hadoop: HDFS and YARN ---------------------------------------------------------------------------

@pytest.fixture(scope="session")
def hadoop_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator["HadoopMiniCluster"]:
    """Hadoop's own minicluster (a NameNode and DataNode with WebHDFS, a ResourceManager and
    NodeManager) from Maven Central, in one JVM started here and stopped by its PID at the end."""
    from connectors.servers.maven_artifacts import MavenUnavailableError
    from kafka_testkit.hadoop_cluster import HadoopClusterError, start_hadoop_minicluster

    try:
        cluster = start_hadoop_minicluster(tmp_path_factory.mktemp("hadoop"))
    except (MavenUnavailableError, HadoopClusterError) as exc:
        pytest.skip(f"no Hadoop minicluster (HDFS and YARN): it needs mvn (hadoop-client-minicluster from Maven "
                    f"Central) and a JDK (java and javac). Tried: {str(exc).splitlines()[0]}")
    try:
        yield cluster
    finally:
        cluster.stop()


S3_BUCKET_ENV = "KAFKA_EOS_TEST_S3_BUCKET"
S3_SERVER_ENV = "KAFKA_EOS_S3_SERVER"
S3_DEFAULT_BUCKET = "kafka-eos-it"


@pytest.fixture(scope="session")
def s3_bucket(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A bucket on a real S3 server: one the environment names, else one on a server that the
    ``KAFKA_EOS_S3_SERVER`` launcher starts for this session (so CI needs no S3 account)."""
    bucket = os.environ.get(S3_BUCKET_ENV) or (S3_DEFAULT_BUCKET if os.environ.get("AWS_ENDPOINT_URL") else "")
    launcher = os.environ.get(S3_SERVER_ENV, "").strip()
    if not bucket and not launcher:
        pytest.skip(f"no S3 server for the state-on-S3 tests: set AWS_ENDPOINT_URL (an S3-compatible server "
                    f"such as MinIO or Ceph RGW) with AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or "
                    f"{S3_BUCKET_ENV} (a bucket on AWS S3 that the credentials can write), or "
                    f"{S3_SERVER_ENV}=<path to a run-s3.sh-style launcher> (started for the session)")
    pytest.importorskip("boto3", reason="the state-on-S3 tests need boto3: pip install -e '.[s3]'")
    import contextlib

    from botocore.exceptions import BotoCoreError, ClientError

    from twophase.storage.conditional_create import s3_client

    with contextlib.ExitStack() as session:
        if not bucket:
            from kafka_testkit.s3_server import S3Server, S3ServerError

            server = S3Server(launcher, tmp_path_factory.mktemp("s3-server") / "data")
            session.callback(server.stop)
            try:
                endpoint = server.start()
            except S3ServerError as exc:
                pytest.skip(f"the S3 server of {S3_SERVER_ENV} did not start: {exc}")
            # Set for the session only (undone before the server stops): pyarrow, boto3 and the
            # Spark jobs the tests start all read these.
            environment = session.enter_context(pytest.MonkeyPatch.context())
            for name, value in endpoint.client_environment().items():
                if value is None:
                    environment.delenv(name, raising=False)
                else:
                    environment.setenv(name, value)
            bucket = S3_DEFAULT_BUCKET
        client = s3_client(os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION"))
        try:
            client.head_bucket(Bucket=bucket)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") not in ("404", "NoSuchBucket", "NotFound"):
                raise
            client.create_bucket(Bucket=bucket)
        except BotoCoreError as exc:
            pytest.skip(f"the S3 server at {client.meta.endpoint_url} does not answer: {exc}")
        log.info("state-on-S3 tests use s3://%s at %s", bucket, client.meta.endpoint_url)
        yield bucket


@pytest.fixture
def s3_prefix(s3_bucket: str, unique_name: Callable[[str], str]) -> Iterator[str]:
    """``s3://<bucket>/<a prefix of this test>``, deleted afterwards."""
    from twophase.storage.state_storage import open_state_storage

    uri = f"s3://{s3_bucket}/{unique_name('state')}"
    yield uri
    open_state_storage(uri).delete_folder()
