"""``kafka-eos status`` against the embedded cluster: a query's files as Spark and the sink leave
them, with the driver crashed between every two writes of the sink's state; its Prometheus output
parsed with prometheus-client's own parser; exit statuses."""

import json

import pytest

pytest.importorskip("pyspark")

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from connectors.kafka.clients import TopicPartition  # noqa: E402
from connectors.kafka.sink.internal.transactional_ids import TransactionalIdPool  # noqa: E402
from connectors.kafka.sink.writer import KafkaTransactionWriter  # noqa: E402
from connectors.spark.sink_driver import BatchContext, SparkSinkDriver  # noqa: E402
from connectors.spark.options import parse_sink_options  # noqa: E402
from connectors.spark.datasource_writers import KafkaCommitMessage  # noqa: E402
from connectors.tools import cli  # noqa: E402
from connectors.monitoring.prometheus_metrics import exposition  # noqa: E402
from connectors.monitoring import status as status_module  # noqa: E402
from connectors.monitoring.status import attention_reasons, read_status  # noqa: E402
from kafka_testkit.topic_records import produce_committed  # noqa: E402
from kafka_testkit.crashing_storage import CrashingStorage, SimulatedCrash, WriteLog  # noqa: E402
from connectors.simulated_kafka import FakeKafkaClients  # noqa: E402
from twophase import failpoints  # noqa: E402
from twophase.checkpoint_statistics import CheckpointOutcome  # noqa: E402
from twophase.checkpoint_store import FileCheckpointStore  # noqa: E402
from twophase.storage.state_storage import open_state_storage  # noqa: E402

QUERY_ID = "5c7e0c3e-0000-4000-8000-000000000001"
ROWS_PER_TASK = (3, 2, 4)
INPUT_RECORDS = 30


class Query:
    """A streaming query's checkpoint folder, written the way Spark writes it, around the real
    driver-side commit of the sink; executors' tasks are the sink's own writer."""

    def __init__(self, fake: FakeKafkaClients, location, retained: int = 1) -> None:
        self.fake, self.location = fake, location
        # Where each batch ends in the input; the last batch reads up to its end (the last stable
        # offset, past the commit marker of the records' transaction).
        end = fake.admin().list_offsets([TopicPartition("in", 0)], "latest")[TopicPartition("in", 0)]
        self.source_offsets = [10, 20, end]
        location.mkdir()
        (location / "metadata").write_text(json.dumps({"id": QUERY_ID}) + "\n")
        (location / "offsets").mkdir()
        (location / "commits").mkdir()
        self.options = parse_sink_options({"kafka.bootstrap.servers": fake.bootstrap_servers, "topic": "out",
                                           "checkpointlocation": str(location),
                                           "eos.retainedcheckpoints": str(retained),
                                           "eos.transactiontimeoutms": "900000"}, streaming=True)

    def tasks(self, batch_id: int) -> list[KafkaCommitMessage]:
        pool = TransactionalIdPool(self.options.config.transactional_id_prefix)
        messages = []
        for task, rows in enumerate(ROWS_PER_TASK):
            writer = KafkaTransactionWriter(self.fake, self.options.config, pool.transactional_id(task, batch_id),
                                            batch_id)
            for i in range(rows):
                writer.write({"value": f"{batch_id}-{task}-{i}", "partition": task})
            committable = writer.pre_commit()
            messages.append(KafkaCommitMessage(batch_id, task, 0, committable.to_json(), committable.record_count))
        return messages

    def run_batch(self, batch_id: int, storage=None) -> None:
        (self.location / "offsets" / str(batch_id)).write_text(
            'v1\n{"batchWatermarkMs":0,"batchTimestampMs":0,"conf":{}}\n'
            + json.dumps({"in": {"0": self.source_offsets[batch_id]}}) + "\n")
        store = None if storage is None else FileCheckpointStore(storage, self.options.retained_checkpoints,
                                                                 check_writable=False)
        protocol = SparkSinkDriver(self.options, store=store)
        decided_through = protocol.recover()
        if decided_through is not None and decided_through >= batch_id:  # a replay: its tasks see the batch committed and write nothing
            messages = [KafkaCommitMessage(batch_id, t, 0, None, 0, skipped=True) for t in range(len(ROWS_PER_TASK))]
        else:
            messages = self.tasks(batch_id)
        protocol.commit(BatchContext(batch_id), messages)
        (self.location / "commits" / str(batch_id)).write_text('v1\n{"nextBatchWatermarkMs":0}\n')

    def status(self, **kwargs):
        return read_status(str(self.location), self.fake, **kwargs)


@pytest.fixture(autouse=True)
def _clean_failpoints():
    failpoints.disable()
    yield
    failpoints.disable()


def new_query(tmp_path, label: str = "q", retained: int = 1) -> Query:
    fake = FakeKafkaClients(tmp_path / f"{label}-kafka.db")
    fake.admin().create_topic("in", 1)
    fake.admin().create_topic("out", 3)
    produce_committed(fake, "in", [b"x%d" % i for i in range(INPUT_RECORDS)])
    return Query(fake, tmp_path / label, retained)


def test_a_healthy_query_reports_its_commits_and_no_lag(tmp_path):
    query = new_query(tmp_path, retained=3)
    for batch in range(3):
        query.run_batch(batch)
    status = query.status()
    assert status.query_id == QUERY_ID and status.last_committed_batch == 2
    assert (status.latest_checkpoint_id, status.latest_checkpoint_committed, status.pending) == (2, True, None)
    assert status.transactional_id_prefix == query.options.config.transactional_id_prefix
    assert status.settings_from == "statistics" and status.transaction_timeout_ms == 900000
    assert status.open_transactions == []
    assert [(p.topic, p.partition, p.lag) for p in status.lag] == [("in", 0, 0)]
    assert [(s.checkpoint_id, s.outcome, s.records, s.transactions) for s in status.history] == [
        (b, CheckpointOutcome.COMMITTED, 9, 3) for b in range(3)]
    assert all(s.timings is not None and s.timings.total_ms >= s.timings.commit_ms for s in status.history)
    assert attention_reasons(status) == []
    document = status.to_json()
    for key in ("query_id", "last_committed_batch", "latest_checkpoint", "pending_checkpoint",
                "open_transactions", "lag", "history"):
        assert key in document
    assert document["history"][0]["commit_parts_ms"].keys() == {"prepare", "store", "end_txn", "mark", "sweep"}


def _writes_of_one_batch(tmp_path) -> int:
    query = new_query(tmp_path, "count")
    query.run_batch(0)
    log = WriteLog()
    query.run_batch(1, CrashingStorage(open_state_storage(query.options.state_dir), log=log))
    return len(log.writes)


def test_status_is_right_after_a_crash_between_any_two_writes_and_after_the_restart(tmp_path):
    writes = _writes_of_one_batch(tmp_path)
    # _metadata, _committed, _statistics, then the 3 deletes of checkpoint 0 (the lifecycle subsumes
    # last, so no storage write falls between storing and committing: crash_after_storing covers that).
    assert writes >= 6
    seen = set()
    for crash_at in range(1, writes + 1):
        query = new_query(tmp_path, f"crash{crash_at}")
        query.run_batch(0)
        log = WriteLog()
        with pytest.raises(SimulatedCrash) as crash:
            query.run_batch(1, CrashingStorage(open_state_storage(query.options.state_dir), crash_at, log))
        keys = set(open_state_storage(query.options.state_dir).list_keys())
        stored, committed = "chk-1/_metadata" in keys, "chk-1/_committed" in keys

        status = query.status()
        assert status.last_committed_batch == 0  # Spark's commit log never got batch 1
        assert [p.lag for p in status.lag] == [query.source_offsets[-1] - 10]
        open_ids = sorted(t.transactional_id for t in status.open_transactions)
        if stored and not committed:
            assert status.pending is not None and status.pending.id == 1
            if str(crash.value).endswith("create chk-1/_committed"):
                seen.add("pending, transactions committed")  # EndTxn done, the mark not written
                assert open_ids == []
            else:
                seen.add("pending, transactions open")
                assert len(open_ids) == 3 and all(t.age_ms >= 0 and t.partitions for t in status.open_transactions)
            # A pending checkpoint is stale once it outlives the restart budget.
            later = query.status(now_ms=status.pending.stored_at_ms + status.restart_budget_ms + 1)
            assert any("checkpoint 1 " in r and "not confirmed" in r for r in attention_reasons(later))
        elif not stored:
            seen.add("not stored")
            assert status.pending is None and status.latest_checkpoint_id == 0
            assert len(open_ids) == 3  # pre-committed, never stored: the restart aborts them
        else:
            seen.add("committed")
            assert status.pending is None and open_ids == []
        assert attention_reasons(status) == []  # nothing is old yet

        # The restart: recovery first, then Spark replays batch 1 and goes on with batch 2.
        query.run_batch(1)
        query.run_batch(2)
        final = query.status()
        assert (final.last_committed_batch, final.pending, final.open_transactions) == (2, None, [])
        assert [p.lag for p in final.lag] == [0] and attention_reasons(final) == []
        newest = final.history[-1]
        assert newest.checkpoint_id == 2 and newest.outcome is CheckpointOutcome.COMMITTED
        assert newest.totals.recoveries == (1 if stored and not committed else 0)
    assert seen == {"pending, transactions committed", "not stored", "committed"}


def crash_after_storing(query: Query, batch: int) -> None:
    """The driver dies once ``batch`` is stored, before any of its transactions is committed."""
    failpoints.enable(failpoints.AFTER_CHECKPOINT_STORED, "raise")
    with pytest.raises(failpoints.FailpointCrash):
        query.run_batch(batch)
    failpoints.disable()


def test_a_recovery_is_recorded_with_its_checkpoint(tmp_path):
    query = new_query(tmp_path, retained=3)
    query.run_batch(0)
    crash_after_storing(query, 1)
    crashed = query.status()
    assert crashed.pending.id == 1 and len(crashed.open_transactions) == 3
    query.run_batch(1)
    history = {s.checkpoint_id: s for s in query.status().history}
    assert history[1].outcome is CheckpointOutcome.RECOVERED and history[1].records == 9
    assert history[1].timings is not None and history[1].totals.recoveries == 1


def test_a_lost_transaction_is_recorded_and_needs_attention(tmp_path):
    query = new_query(tmp_path, retained=3)
    query.run_batch(0)
    crash_after_storing(query, 1)
    taken = f"{query.options.config.transactional_id_prefix}-1-1"
    query.fake.producer(taken, {}).init_transactions(5)  # another producer fences batch 1's transaction
    with pytest.raises(Exception, match="1 transaction with 2 records was lost"):
        SparkSinkDriver(query.options).recover()
    status = query.status()
    lost = [s for s in status.history if s.lost_transactions]
    assert [(s.checkpoint_id, s.outcome, s.lost_transactions) for s in lost] == [
        (1, CheckpointOutcome.LOST, (taken,))]
    assert any("lost 1 transaction with 2 records" in r and taken in r for r in attention_reasons(status))


def test_prometheus_output_parses_and_follows_the_naming_rules(tmp_path):
    query = new_query(tmp_path, retained=3)
    for batch in range(3):
        query.run_batch(batch)
    families = {f.name: f for f in text_string_to_metric_families(exposition(query.status()))}
    assert all(name.startswith("kafka_eos_") for name in families)
    for counter in ("checkpoints_committed", "records_committed", "transactions_committed", "recoveries",
                    "lingering_transactions_aborted", "transactions_lost"):
        family = families[f"kafka_eos_{counter}"]
        assert family.type == "counter"
        assert [s.name for s in family.samples if s.name.endswith("_total")] == [f"kafka_eos_{counter}_total"]
    assert families["kafka_eos_records_committed"].samples[0].value == 27
    histogram = families["kafka_eos_commit_duration_seconds"]
    assert histogram.type == "histogram"
    buckets = [s for s in histogram.samples if s.name.endswith("_bucket")]
    counts = [s.value for s in buckets]
    assert counts == sorted(counts) and buckets[-1].labels["le"] == "+Inf" and counts[-1] == 3
    assert {s.labels["query_id"] for f in families.values() for s in f.samples} == {QUERY_ID}
    assert families["kafka_eos_open_transactions"].samples[0].value == 0
    assert families["kafka_eos_pending_checkpoints"].samples[0].value == 0
    lag = families["kafka_eos_source_lag_records"].samples
    assert [(s.labels["topic"], s.labels["partition"], s.value) for s in lag] == [("in", "0", 0)]
    phases = {s.labels["phase"] for s in families["kafka_eos_last_commit_phase_duration_seconds"].samples}
    assert phases == {"prepare", "store", "end_txn", "mark", "sweep"}


def test_the_command_exits_0_1_2_with_one_line_reasons(tmp_path, capsys, monkeypatch):
    query = new_query(tmp_path, retained=3)
    query.run_batch(0)
    args = ["status", "--checkpoint-location", str(query.location), "--bootstrap", query.fake.bootstrap_servers]
    assert cli.main(args + ["--json"]) == 0
    assert json.loads(capsys.readouterr().out)["pending_checkpoint"] is None
    assert cli.main(args) == 0
    assert "healthy" in capsys.readouterr().out

    # A task's transaction left open past half its timeout (status looks 600 s later): exit 1.
    config = query.options.config
    stuck = KafkaTransactionWriter(query.fake, config, f"{config.transactional_id_prefix}-9-0", 1)
    stuck.write({"value": "stuck", "partition": 0})
    stuck.pre_commit()
    later = status_module.wall_clock_ms() + 600_000
    monkeypatch.setattr(status_module, "wall_clock_ms", lambda: later)
    assert cli.main(args + ["--json"]) == 1
    captured = capsys.readouterr()
    document = json.loads(captured.out)
    assert len(document["open_transactions"]) == 1 and document["attention"]
    reasons = [line for line in captured.err.splitlines() if line.startswith("ATTENTION: ")]
    assert len(reasons) == 1 and "more than half of its timeout" in reasons[0]
    assert cli.main(args + ["--prometheus"]) == 1
    assert "kafka_eos_open_transactions" in capsys.readouterr().out

    # Nothing to read: exit 2 with the reason.
    assert cli.main(["status", "--checkpoint-location", str(tmp_path / "nowhere"), "--bootstrap",
                     query.fake.bootstrap_servers]) == 2
    assert "metadata" in capsys.readouterr().err
    assert cli.main(args + ["--state-dir", str(tmp_path / "empty-state")]) == 2
    assert "--state-dir" in capsys.readouterr().err


def test_the_plot_is_drawn(tmp_path, capsys):
    query = new_query(tmp_path, retained=3)
    for batch in range(3):
        query.run_batch(batch)
    plot = tmp_path / "status.png"
    assert cli.main(["status", "--checkpoint-location", str(query.location), "--bootstrap",
                     query.fake.bootstrap_servers, "--plot", str(plot)]) == 0
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


class _Progress:
    def __init__(self, query_id: str) -> None:
        self.id = query_id


class _ProgressEvent:
    def __init__(self, query_id: str) -> None:
        self.progress = _Progress(query_id)


def test_the_listener_publishes_its_query_metrics_for_the_textfile_collector(tmp_path, caplog):
    import pickle

    from connectors.monitoring.metrics_listener import KafkaEosMetricsListener

    query = new_query(tmp_path, retained=3)
    query.run_batch(0)
    textfile = tmp_path / "node-exporter" / "kafka_eos.prom"
    textfile.parent.mkdir()
    listener = KafkaEosMetricsListener(str(query.location), textfile=str(textfile),
                                       bootstrap=query.fake.bootstrap_servers)
    listener = pickle.loads(pickle.dumps(listener))  # as Spark Connect ships it to the server
    listener.onQueryProgress(_ProgressEvent("another-query"))
    assert not textfile.exists()
    listener.onQueryProgress(_ProgressEvent(QUERY_ID))
    families = {f.name: f for f in text_string_to_metric_families(textfile.read_text())}
    assert families["kafka_eos_checkpoints_committed"].samples[0].value == 1
    assert families["kafka_eos_source_lag_records"].samples[0].value == query.source_offsets[-1] - 10

    broken = KafkaEosMetricsListener(str(tmp_path / "nowhere"), textfile=str(textfile))
    broken.onQueryProgress(_ProgressEvent(QUERY_ID))  # logged, never raised into the query
    assert "were not published" in caplog.text
    with pytest.raises(ValueError, match="pushgateway"):
        KafkaEosMetricsListener(str(query.location))


def test_the_sample_alert_rules_use_only_metrics_that_exist(tmp_path):
    import re
    from pathlib import Path

    query = new_query(tmp_path, retained=3)
    query.run_batch(0)
    exposed = {s.name for f in text_string_to_metric_families(exposition(query.status())) for s in f.samples}
    rules = (Path(__file__).resolve().parents[3] / "examples" / "prometheus-alerts.yml").read_text()
    used = set(re.findall(r"\bkafka_eos_[a-z_]+", rules))
    assert used and used <= exposed, sorted(used - exposed)
