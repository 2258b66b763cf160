"""The kit's promise, checked against Spark's own Kafka connector (official jars from Maven Central):
change ``format("kafka")`` to ``format("kafka-eos")`` and nothing else.

The same job (``drop_in_job.py``) runs twice, once per connector, each time one Spark session doing
every read and write of a table of Spark's options (``READS``) with identical options. The rows read,
``(topic, partition, offset, key, value, timestamp, timestampType, headers)``, must be equal as sets.

The input is made here: two topics (4 and 2 partitions) of keyed records with explicit timestamps
(so the timestamp options select real subsets), headers (repeated keys, null values), null keys, an
empty value, and an aborted transaction between two committed ones. Every read says
``kafka.isolation.level=read_committed`` (Spark's default, read_uncommitted, would pass the aborted
records on; the kit reads committed data only), so both must skip it.

Keys: the same 3000 distinct keys and a null-key row are written to 6-partition topics by Spark's sink
(``df.write.format("kafka")``), the kit's (``df.write.format("kafka-eos").mode("append")``) and the
kit's foreachBatch sink: no key may land in another partition than Spark's (Java's murmur2).

On the secured cluster (SASL_SSL, SCRAM-SHA-512, ACLs that deny by default) the same with Java-named
settings only (``kafka.sasl.jaas.config``, a JKS ``kafka.ssl.truststore.location``), and the
exactly-once example job with those settings through a driver SIGKILL in the commit.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition as CTopicPartition

from connectors.kafka.authorization import GROUP, PREFIXED, AclRequirement, sink_acls, source_acls
from connectors.kafka.clients.broker_retry import BrokerRetryPolicy, RetryingClusterAdmin
from kafka_io import assert_exactly_once, copied_id, read_committed_values, topics_with_orders, wait_until_stable
from kafka_testkit.java_truststore import TruststoreError, java_scram_settings, jks_truststore
from kafka_testkit.job_python import job_python
from spark_job import DEFAULT_PREFIX, KILLED, run_spark_job, spark_job_environment, wait_for_end

pytestmark = pytest.mark.spark

JOB = Path(__file__).resolve().parent / "drop_in_job.py"
#: Record timestamps: partition p's record s of topic A at T0 + s*1000 + p, of topic B at T0 + s*1000 + 10 + p.
#: An hour ago: older ones would fall to the brokers' time retention (7 days) while the test runs.
T0 = (int(time.time()) - 3600) * 1000
A_PARTITIONS, A_RECORDS = 4, 60
B_PARTITIONS, B_RECORDS = 2, 40
KEYS = 3000
#: Java producer settings of the keyed writes, given to both sinks alike.
WRITE_OPTIONS = {"kafka.max.request.size": "2097152", "kafka.compression.type": "lz4", "kafka.acks": "all",
                 "kafka.linger.ms": "5"}
KEY_PARTITIONS = 6
READ_COMMITTED = {"kafka.isolation.level": "read_committed"}


def reads(a: str, b: str, pattern: str, run: str) -> list[dict]:
    """The table: Spark's options, several per row. ``a``, ``b``: the input topics; ``pattern``
    matches both and nothing else; ``run``: a token unique to this module's run."""
    every = {p: -2 for p in range(A_PARTITIONS)}
    return [
        {"name": "earliest-latest-headers-pollTimeout", "options": {
            "subscribe": a, "startingOffsets": "earliest", "endingOffsets": "latest", "includeHeaders": "true",
            "kafkaConsumer.pollTimeoutMs": "120000"}},
        {"name": "offsets-json-fetchOffset-retries", "options": {
            # p2 starts on a record of the aborted transaction and ends two offsets later: empty.
            "subscribe": a, "startingOffsets": json.dumps({a: {"0": 5, "1": -2, "2": 31, "3": 0}}),
            "endingOffsets": json.dumps({a: {"0": 40, "1": -1, "2": 33, "3": -1}}),
            "fetchOffset.numRetries": "3", "fetchOffset.retryIntervalMs": "10",
            # Java consumer settings that librdkafka does not name alike (or at all).
            "kafka.max.poll.records": "100", "kafka.fetch.max.bytes": "1048576"}},
        {"name": "offsets-by-timestamp-strategy-latest", "options": {
            # p0 matches no record: latest, by the strategy; p3 starts after the aborted records.
            "subscribe": a, "includeHeaders": "true", "startingOffsetsByTimestampStrategy": "latest",
            "startingOffsetsByTimestamp": json.dumps({a: {"0": T0 + 10**9, "1": T0, "2": T0 + 45_000,
                                                          "3": T0 + 29_600}}),
            "endingOffsetsByTimestamp": json.dumps({a: {"0": T0 + 10**9, "1": T0 + 20_000, "2": T0 + 59_000,
                                                        "3": T0 + 10**9}})}},
        {"name": "global-timestamps-subscribePattern", "options": {
            "subscribePattern": pattern, "startingTimestamp": str(T0 + 15_000),
            "endingTimestamp": str(T0 + 40_000)}},
        {"name": "assign-minPartitions-groupIdPrefix", "options": {
            "assign": json.dumps({a: [0, 2], b: [1]}),
            "startingOffsets": json.dumps({a: {"0": -2, "2": 3}, b: {"1": -2}}),
            "minPartitions": "9", "groupIdPrefix": f"dropin-{run}", "includeHeaders": "true"}},
        {"name": "maxRecordsPerPartition-group.id-failOnDataLoss", "options": {
            "subscribePattern": pattern, "startingOffsets": "earliest", "maxRecordsPerPartition": "7",
            "kafka.group.id": f"dropin-group-{run}", "failOnDataLoss": "false"}},
        {"name": "availableNow-maxOffsetsPerTrigger-memory", "stream": True, "sink": "memory", "options": {
            "subscribe": a, "startingOffsets": "earliest", "maxOffsetsPerTrigger": "50", "includeHeaders": "true"}},
        {"name": "availableNow-minOffsetsPerTrigger-parquet", "stream": True, "sink": "parquet", "options": {
            "subscribePattern": pattern, "startingOffsets": json.dumps({a: every, b: {"0": 4, "1": -2}}),
            "minOffsetsPerTrigger": "20", "maxTriggerDelay": "2s", "maxOffsetsPerTrigger": "100"}},
    ]


READ_NAMES = [r["name"] for r in reads("a", "b", "p", "r")]
#: The rows also run on the secured cluster (with Java-named settings).
SECURED_READS = ["earliest-latest-headers-pollTimeout", "assign-minPartitions-groupIdPrefix",
                 "availableNow-maxOffsetsPerTrigger-memory"]


# -- the input ---------------------------------------------------------------------------------------

def _headers(s: int) -> list[tuple[str, bytes | None]] | None:
    if s % 3:
        return None
    headers: list[tuple[str, bytes | None]] = [("h", f"x{s}".encode()), ("h", b"dup")]
    if s % 7 == 0:
        headers.append(("n", None))
    return headers


def load_input(bootstrap: str, config: dict[str, str], a: str, b: str, txn: str) -> None:
    """Per partition: a committed transaction, an aborted one (5 records "aborted-..." stamped
    between the two), a committed one. Keys ``<p>-<s>`` but null for s % 11 == 5; value empty for s == 13."""
    def records(topic: str, partitions: int, count: int, shift: int, seqs: range):
        for p in range(partitions):
            for s in seqs:
                if s >= count:
                    continue
                key = None if s % 11 == 5 else f"{topic[-1]}-{p}-{s}".encode()
                value = b"" if s == 13 else f"value-{p}-{s}".encode()
                yield topic, p, key, value, T0 + s * 1000 + shift + p, _headers(s)

    def aborted(topic: str, partitions: int, shift: int):
        for p in range(partitions):
            for i in range(5):
                yield topic, p, f"aborted-{i}".encode(), f"aborted-{p}-{i}".encode(), T0 + 29_500 + shift + p, None

    chunks = [(list(records(a, A_PARTITIONS, A_RECORDS, 0, range(30))) +
               list(records(b, B_PARTITIONS, B_RECORDS, 10, range(20))), True),
              (list(aborted(a, A_PARTITIONS, 0)) + list(aborted(b, B_PARTITIONS, 10)), False),
              (list(records(a, A_PARTITIONS, A_RECORDS, 0, range(30, A_RECORDS))) +
               list(records(b, B_PARTITIONS, B_RECORDS, 10, range(20, B_RECORDS))), True)]
    producer = Producer({**config, "bootstrap.servers": bootstrap, "transactional.id": txn})
    producer.init_transactions(60)
    for chunk, commit in chunks:
        producer.begin_transaction()
        for topic, p, key, value, ts, headers in chunk:
            producer.produce(topic, value=value, key=key, partition=p, timestamp=ts, headers=headers)
        producer.flush(60)
        (producer.commit_transaction if commit else producer.abort_transaction)(60)
    producer.flush(60)


def load_keys(bootstrap: str, config: dict[str, str], topic: str) -> None:
    """The keyed rows of the foreachBatch write's input: ``key-<i>`` and one null key, anywhere."""
    producer = Producer({**config, "bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(KEYS):
        producer.produce(topic, value=f"value-{i}".encode(), key=f"key-{i}".encode(), partition=i % 3)
    producer.produce(topic, value=b"null-key", key=None, partition=0)
    assert producer.flush(60) == 0


def key_partitions(bootstrap: str, config: dict[str, str], topic: str) -> dict[bytes | None, set[int]]:
    """Every key of ``topic`` (read committed), and the partitions it is in."""
    consumer = Consumer({**config, "bootstrap.servers": bootstrap, "group.id": f"dropin-check-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    try:
        consumer.assign([CTopicPartition(topic, p, -2) for p in range(KEY_PARTITIONS)])
        found: dict[bytes | None, set[int]] = {}
        at_end: set[int] = set()
        while len(at_end) < KEY_PARTITIONS:
            message = consumer.poll(30)
            assert message is not None, f"{topic}: no end of partitions {set(range(KEY_PARTITIONS)) - at_end} in 30 s"
            if message.error():
                assert message.error().code() == -191, message.error()  # _PARTITION_EOF
                at_end.add(message.partition())
                continue
            found.setdefault(message.key(), set()).add(message.partition())
        return found
    finally:
        consumer.close()


def create_topics(admin_of, topics: dict[str, int]) -> None:  # type: ignore[no-untyped-def]
    admin = RetryingClusterAdmin(admin_of, BrokerRetryPolicy())
    for name, partitions in topics.items():
        admin.create_topic(name, partitions)


# -- the runs ----------------------------------------------------------------------------------------

def run_job(fmt: str, spec: dict, work: Path, jars: str) -> dict:
    work.mkdir(parents=True, exist_ok=True)
    (work / "spec.json").write_text(json.dumps(spec))
    command = [job_python(), str(JOB), "--format", fmt, "--spec", str(work / "spec.json"),
               "--out", str(work / "result.json"), "--work-dir", str(work / "streams")]
    if fmt == "kafka":
        command += ["--jars", jars]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=spark_job_environment(), start_new_session=True)
    finished = wait_for_end(process, timeout_s=900)
    assert finished.returncode == 0 and (work / "result.json").is_file(), \
        f"{fmt} job: exit {finished.returncode}\n{finished.stderr[-6000:]}"
    result = json.loads((work / "result.json").read_text())
    result["stderr"] = finished.stderr
    return result


class Runs:
    """Both connectors' results of one spec, and where the keyed writes went."""

    def __init__(self, bootstrap: str, config: dict[str, str], spec: dict, topics: dict[str, str],
                 results: dict[str, dict]) -> None:
        self.bootstrap, self.config, self.spec, self.topics, self.results = bootstrap, config, spec, topics, results

    def read(self, fmt: str, name: str) -> dict:
        return self.results[fmt]["reads"][name]


def as_set(rows: list[list]) -> set[tuple]:
    return {(t, p, o, k, v, ts, tt, None if h is None else tuple(tuple(x) for x in h))
            for t, p, o, k, v, ts, tt, h in rows}


def _describe(rows: set[tuple], limit: int = 5) -> list[tuple]:
    return sorted(rows, key=lambda r: (r[0], r[1], r[2]))[:limit]


def assert_same_rows(runs: Runs, name: str) -> set[tuple]:
    spark, eos = runs.read("kafka", name), runs.read("kafka-eos", name)
    assert "error" not in spark, f"Spark's own connector failed {name} (the test's fault?): {spark['error']}"
    assert "error" not in eos, f"kafka-eos failed {name}, which Spark's own connector read: {eos['error']}"
    theirs, ours = as_set(spark["rows"]), as_set(eos["rows"])
    assert len(ours) == len(eos["rows"]), f"{name}: kafka-eos returned duplicated rows"
    assert ours == theirs, (f"{name}: {len(theirs)} rows through format('kafka'), {len(ours)} through "
                            f"format('kafka-eos'); only Spark's: {_describe(theirs - ours)}; only the kit's: "
                            f"{_describe(ours - theirs)}")
    aborted = [r for r in theirs if r[4] and bytes.fromhex(r[4]).startswith(b"aborted")]
    assert not aborted, f"{name}: records of the aborted transaction were read: {aborted[:3]}"
    return theirs


def assert_same_partitions(runs: Runs, ours: str) -> None:
    theirs_written = runs.results["kafka"]["writes"]["keys"]
    assert theirs_written == "ok", f"Spark's write failed: {theirs_written}"
    written = runs.results["kafka-eos"]["writes"]["keys" if ours == "keys-eos" else ours]
    assert written == "ok", f"the kit's write to {ours} failed: {written}"
    theirs = key_partitions(runs.bootstrap, runs.config, runs.topics["keys-kafka"])
    kit = key_partitions(runs.bootstrap, runs.config, runs.topics[ours])
    expected = {f"key-{i}".encode() for i in range(KEYS)}
    assert set(theirs) - {None} == expected and set(kit) - {None} == expected, "keys missing from an output"
    assert None in theirs and None in kit, "the null-key row is missing from an output"
    moved = {k: (theirs[k], kit[k]) for k in expected if kit[k] != theirs[k]}
    assert not moved, (f"{len(moved)} of {KEYS} keys landed in another partition than with Spark's sink "
                       f"(Java's murmur2), e.g. {list(moved.items())[:5]}")


def make_runs(tmp: Path, bootstrap: str, clients_config: dict[str, str], common: dict[str, str], admin_of,
              jars: str, names: list[str] | None, foreach_batch: bool,
              grant=None) -> Runs:  # type: ignore[no-untyped-def]
    run = uuid.uuid4().hex[:8]
    base = f"dropin-{run}"
    topics = {"a": f"{base}-in-a", "b": f"{base}-in-b", "keys-in": f"{base}-keys-in",
              "keys-kafka": f"{base}-keys-kafka", "keys-eos": f"{base}-keys-eos", "keys-fb": f"{base}-keys-fb"}
    create_topics(admin_of, {topics["a"]: A_PARTITIONS, topics["b"]: B_PARTITIONS, topics["keys-in"]: 3,
                             topics["keys-kafka"]: KEY_PARTITIONS, topics["keys-eos"]: KEY_PARTITIONS,
                             topics["keys-fb"]: KEY_PARTITIONS})
    if grant:
        grant(topics, run)
    load_input(bootstrap, clients_config, topics["a"], topics["b"], f"{base}-loader")
    if foreach_batch:
        load_keys(bootstrap, clients_config, topics["keys-in"])
    table = [r for r in reads(topics["a"], topics["b"], f"{base}-in-.*", run) if names is None or r["name"] in names]
    for read in table:
        read["options"] = {**READ_COMMITTED, **read["options"]}
    results = {}
    for fmt, out in (("kafka", "keys-kafka"), ("kafka-eos", "keys-eos")):
        spec = {"common": common, "reads": table,
                "writes": [{"name": "keys", "topic": topics[out], "keys": KEYS, "options": WRITE_OPTIONS}],
                "foreach_batch_writes": [{"name": "keys-fb", "input": topics["keys-in"], "topic": topics["keys-fb"]}]
                if foreach_batch else []}
        results[fmt] = run_job(fmt, spec, tmp / fmt, jars)
    return Runs(bootstrap, clients_config, table, topics, results)


# -- on the plain broker -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def plain_runs(kafka_bootstrap, kafka_clients, spark_kafka_connector, tmp_path_factory):
    return make_runs(tmp_path_factory.mktemp("drop-in"), kafka_bootstrap, {},
                     {"kafka.bootstrap.servers": kafka_bootstrap}, kafka_clients.admin,
                     spark_kafka_connector.jars, None, foreach_batch=True)


@pytest.mark.parametrize("name", READ_NAMES)
def test_the_same_rows_as_spark_kafka(plain_runs, name, spark_kafka_jars):
    rows = assert_same_rows(plain_runs, name)
    if name.startswith("availableNow-maxOffsetsPerTrigger"):
        for fmt in ("kafka", "kafka-eos"):
            assert plain_runs.read(fmt, name)["batches"] > 1, f"{fmt}: maxOffsetsPerTrigger=50 made one batch"
    if "offsets-json" not in name:
        assert rows, f"{name}: read nothing through either connector: the row tests nothing"


def test_keys_land_in_the_partitions_of_spark_kafka(plain_runs, spark_kafka_jars):
    assert_same_partitions(plain_runs, "keys-eos")


def test_keys_through_foreach_batch_land_in_the_partitions_of_spark_kafka(plain_runs, spark_kafka_jars):
    assert_same_partitions(plain_runs, "keys-fb")


# -- on the secured broker, with Java-named settings only ----------------------------------------------

@pytest.fixture(scope="module")
def secured_app(secured_kafka, tmp_path_factory):
    """An application user holding no ACL, and its Java client settings (JKS truststore)."""
    app = secured_kafka.application(f"dropin-{uuid.uuid4().hex[:8]}")
    try:
        store, password = jks_truststore(secured_kafka.admin_config["ssl.ca.location"],
                                         tmp_path_factory.mktemp("jks") / "truststore.jks")
    except TruststoreError as exc:
        pytest.skip(str(exc))
    return app, java_scram_settings(app.config, store, password)


@pytest.fixture(scope="module")
def secured_runs(secured_kafka, secured_app, spark_kafka_connector, tmp_path_factory):
    app, java = secured_app

    def grant(topics: dict[str, str], run: str) -> None:
        acls = source_acls([topics["a"], topics["b"]])
        for out in ("keys-kafka", "keys-eos"):
            # The kit's batch writes take the default transactional id prefix.
            acls += sink_acls(topics[out], DEFAULT_PREFIX)
        # Spark's consumers join no group but carry a group id: its own (spark-kafka-*) or groupIdPrefix.
        acls += [AclRequirement("READ", GROUP, "spark-kafka-", PREFIXED),
                 AclRequirement("READ", GROUP, f"dropin-{run}", PREFIXED)]
        secured_kafka.acl.grant(app.principal, list(dict.fromkeys(acls)))

    common = {"kafka.bootstrap.servers": secured_kafka.bootstrap_servers,
              **{f"kafka.{name}": value for name, value in java.items()}}
    return make_runs(tmp_path_factory.mktemp("drop-in-secured"), secured_kafka.bootstrap_servers,
                     secured_kafka.admin_config, common, secured_kafka.admin_clients.admin,
                     spark_kafka_connector.jars, SECURED_READS, foreach_batch=False, grant=grant)


@pytest.mark.parametrize("name", SECURED_READS)
def test_java_settings_on_a_secured_cluster_read_the_same_rows(secured_runs, name, spark_kafka_jars):
    assert assert_same_rows(secured_runs, name)


def test_java_settings_on_a_secured_cluster_write_keys_to_the_same_partitions(secured_runs, spark_kafka_jars):
    assert_same_partitions(secured_runs, "keys-eos")


def test_java_settings_on_a_secured_cluster_are_exactly_once_through_a_driver_kill(secured_kafka, secured_app,
                                                                                   unique_name, tmp_path):
    """The example job, source and sink kafka-eos, with the Java-named settings only, SIGKILLed in
    the commit (mid_commit) and restarted."""
    app, java = secured_app
    clients = secured_kafka.admin_clients
    source, sink, ids = topics_with_orders(clients, unique_name, 3000)
    prefix = unique_name("txn")
    app.grant_pipeline(source, sink, prefix)
    run = dict(kafka_config=java, extra=("--transactional-id-prefix", prefix))
    crashed = run_spark_job(secured_kafka.bootstrap_servers, source, sink, tmp_path / "chk", "mid_commit:exit@2",
                            **run)
    assert crashed.returncode == KILLED, f"exit {crashed.returncode}\n{crashed.stderr[-4000:]}"
    assert len(read_committed_values(clients, sink)) < len(ids), "crashed after finishing"
    finished = run_spark_job(secured_kafka.bootstrap_servers, source, sink, tmp_path / "chk", **run)
    assert finished.returncode == 0, finished.stderr[-4000:]
    wait_until_stable(clients, sink)
    assert_exactly_once(read_committed_values(clients, sink), ids, copied_id)
    assert clients.txn_control().list_open_transactions(prefix) == []
