"""Issue 27: every lost transaction of a checkpoint is counted, in transactions and records, by the
one TransactionLostError, the checkpoint's statistics, ``kafka-eos status`` (table and --json), its
Prometheus metrics and the replay's reading of a job's log; and status says that a restart cannot
bring them back. Transactions time out on the fake cluster by moving its clock."""

import json
import pickle
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from connectors.kafka.sink.committer import KafkaCommitter  # noqa: E402
from connectors.kafka.kafka_errors import TransactionLostError  # noqa: E402
from connectors.kafka.sink.writer import KafkaTransactionWriter  # noqa: E402
from connectors.spark.sink_driver import BatchContext, SparkSinkDriver  # noqa: E402
from connectors.tools import cli  # noqa: E402
from connectors.tools import replay_jobs  # noqa: E402
from connectors.monitoring.prometheus_metrics import exposition  # noqa: E402
from connectors.monitoring.status import attention_reasons  # noqa: E402
# The status tests' query double, found whichever test module pytest collects first.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "monitoring"))
from test_status import QUERY_ID, ROWS_PER_TASK, new_query  # noqa: E402
from twophase.checkpoint_statistics import CheckpointOutcome  # noqa: E402
from twophase.errors import KafkaEosError  # noqa: E402

TIMEOUT_MS = 900_000  # the sink's eos.transactionTimeoutMs in test_status.Query
LOST_RECORDS = sum(ROWS_PER_TASK)  # 3 + 2 + 4


def lose_batch(query, batch_id: int) -> TransactionLostError:
    """Batch ``batch_id``'s three tasks pre-commit; the broker's clock passes their timeout before
    the driver's commit, so the broker aborts all three; the commit must find and count them all."""
    (query.location / "offsets" / str(batch_id)).write_text(
        'v1\n{"batchWatermarkMs":0,"batchTimestampMs":0,"conf":{}}\n'
        + json.dumps({"in": {"0": query.source_offsets[batch_id]}}) + "\n")
    protocol = SparkSinkDriver(query.options)
    protocol.recover()
    messages = query.tasks(batch_id)
    query.fake.advance_time(TIMEOUT_MS + 1_000)
    # The loss itself, not a CheckpointCommitError: that one says a restore commits the
    # checkpoint, which no restore can do for a lost transaction.
    with pytest.raises(TransactionLostError) as failed:
        protocol.commit(BatchContext(batch_id), messages)
    return failed.value


def test_three_lost_transactions_of_one_checkpoint_are_all_counted_everywhere(tmp_path, capsys):
    query = new_query(tmp_path, retained=3)
    query.run_batch(0)
    prefix = query.options.config.transactional_id_prefix
    ids = [f"{prefix}-{task}-1" for task in range(len(ROWS_PER_TASK))]

    # The one error: every transaction, with its records and producer, and the totals.
    error = lose_batch(query, 1)
    assert isinstance(error, KafkaEosError)
    assert error.checkpoint_id == 1 and error.transaction_count == 3 and error.record_count == LOST_RECORDS
    assert sorted((t.transactional_id, t.record_count) for t in error.lost) == sorted(zip(ids, ROWS_PER_TASK))
    assert all(t.producer_id >= 0 and t.partitions for t in error.lost)
    message = str(error)
    assert "\n" not in message
    assert message.startswith(f"checkpoint 1: 3 transactions with {LOST_RECORDS} records were lost (aborted by "
                              "the broker before commit, e.g. past transaction.timeout.ms): ")
    assert all(f"{tid} ({rows} record" in message for tid, rows in zip(ids, ROWS_PER_TASK))
    assert "a restart cannot bring them back" in message and "transaction.timeout.ms" in message
    copy = pickle.loads(pickle.dumps(error))  # crosses process boundaries intact
    assert (str(copy), copy.lost, copy.checkpoint_id) == (message, error.lost, 1)

    # A restart commits the checkpoint again and loses the same three, never fewer.
    with pytest.raises(TransactionLostError) as again:
        SparkSinkDriver(query.options).recover()
    assert (again.value.transaction_count, again.value.record_count) == (3, LOST_RECORDS)

    # The statistics.
    status = query.status()
    lost = status.history[-1]
    assert (lost.checkpoint_id, lost.outcome) == (1, CheckpointOutcome.LOST)
    assert sorted((t.transactional_id, t.records) for t in lost.lost) == sorted(zip(ids, ROWS_PER_TASK))
    assert (lost.transactions, lost.records, lost.lost_records) == (3, LOST_RECORDS, LOST_RECORDS)
    totals = lost.totals
    assert (totals.lost_transactions, totals.lost_records) == (3, LOST_RECORDS)
    assert (totals.transactions, totals.records) == (3, LOST_RECORDS)  # batch 0's only: lost is not committed

    # status: one reason for the loss, no advice to restart (the lost checkpoint is pending, and
    # older than the restart budget), the offsets its input began and ended at.
    later = query.status(now_ms=status.pending.stored_at_ms + status.restart_budget_ms + 1)
    assert later.pending is not None and later.pending.id == 1
    reasons = attention_reasons(later)
    assert len(reasons) == 1 and not any("restart the query so that it commits it" in r for r in reasons)
    reason = reasons[0]
    assert reason.startswith(f"checkpoint 1 lost 3 transactions with {LOST_RECORDS} records")
    assert all(tid in reason for tid in ids)
    assert "A restart cannot recover a lost transaction" in reason
    assert 'startingOffsets={"in": {"0": 10}}' in reason and "eos.transactionTimeoutMs" in reason

    args = ["status", "--checkpoint-location", str(query.location), "--bootstrap", query.fake.bootstrap_servers]
    assert cli.main(args + ["--json"]) == 1
    captured = capsys.readouterr()
    document = json.loads(captured.out)
    entry = document["history"][-1]
    assert entry["outcome"] == "lost" and sorted(entry["lost_transactions"]) == sorted(ids)
    assert entry["lost_records"] == LOST_RECORDS and len(entry["lost"]) == 3
    assert entry["lost_input"] == {"from_offsets": {"in": {"0": 10}}, "to_offsets": {"in": {"0": 20}}}
    assert (document["totals"]["lost_transactions"], document["totals"]["lost_records"]) == (3, LOST_RECORDS)
    assert any(line.startswith("ATTENTION: checkpoint 1 lost 3 transactions") for line in captured.err.splitlines())

    assert cli.main(args) == 1
    table = capsys.readouterr().out
    assert f"3 transactions lost ({LOST_RECORDS} records)" in table

    # The metrics.
    families = {f.name: f for f in text_string_to_metric_families(exposition(query.status()))}
    def value(name: str) -> float:
        return families[name].samples[0].value
    assert value("kafka_eos_transactions_lost") == 3 and value("kafka_eos_records_lost") == LOST_RECORDS
    assert value("kafka_eos_records_committed") == LOST_RECORDS  # batch 0's
    assert families["kafka_eos_records_lost"].samples[0].labels["query_id"] == QUERY_ID


def test_the_committer_attempts_every_end_txn_and_raises_one_error_for_all_lost(tmp_path):
    query = new_query(tmp_path)
    config = query.options.config
    writers = [KafkaTransactionWriter(query.fake, config, f"{config.transactional_id_prefix}-{slot}-0", 0)
               for slot in range(4)]
    committables = []
    for slot, writer in enumerate(writers):
        for i in range(slot + 1):
            writer.write({"value": f"{slot}-{i}", "partition": slot % 3})
        committables.append(writer.pre_commit())
    # Three are taken over by newer producers (fenced, so aborted); one is still committable.
    for committable in committables[1:]:
        query.fake.producer(committable.transactional_id, {}).init_transactions(TIMEOUT_MS)
    from twophase.checkpoint import CompletedCheckpoint
    from twophase.checkpoint_store import FileCheckpointStore
    from twophase.lifecycle import CommitLifecycle

    lifecycle = CommitLifecycle(FileCheckpointStore(str(tmp_path / "committer-chk")),
                                [KafkaCommitter(query.fake, config, "sink")])  # the Spark driver's
    with pytest.raises(TransactionLostError) as lost:
        lifecycle.complete(CompletedCheckpoint(0, 0, 0, {"sink": [c.to_json() for c in committables]}))
    assert lost.value.transaction_count == 3 and lost.value.record_count == 2 + 3 + 4
    assert "its other 1 transaction did commit" in str(lost.value)
    assert query.fake.txn_control().list_open_transactions("") == []  # every EndTxn was attempted


def test_the_replay_reads_the_whole_loss_from_a_jobs_log(tmp_path):
    log = tmp_path / "run.log"
    line = ("kafka-eos: checkpoint 0: 3 transactions with 1,999 records were lost (aborted by the broker before "
            "commit, e.g. past transaction.timeout.ms): ...")
    log.write_text("\n".join(["ERROR checkpoint 0: transaction p-0-0 (producer id 1, epoch 0, 658 records) is lost",
                              line, line.replace("kafka-eos: ", "TransactionLostError: ")]) + "\n")
    run = replay_jobs.JobRun.__new__(replay_jobs.JobRun)  # its log parsing only, without starting a process

    class _Done:
        returncode = 1

        def wait(self, timeout=None):
            return 1

    run._process = _Done()
    run.result = replay_jobs.RunResult(["job"], {}, log, 0)
    result = run.wait(1)
    assert result.transaction_lost
    assert (result.lost_transactions_reported, result.lost_records_reported) == (3, 1999)


def test_the_in_process_engine_counts_the_losses_of_every_sink_of_a_checkpoint(tmp_path):
    """Two sinks of one checkpoint both lose their transaction (the first committed alone, then the
    other): both are attempted, both losses are in the one error, and the statistics record both."""
    from twophase.checkpoint_statistics import CommitFigures, read_statistics
    from twophase.checkpoint_store import FileCheckpointStore
    from twophase.coordinator import CheckpointCoordinator
    from twophase.participants import CommittingParticipant
    from twophase.transaction_endings import Ending, TransactionCommitter
    from connectors.kafka.kafka_errors import LostTransaction

    class Losing(CommittingParticipant[str], TransactionCommitter[str]):
        def __init__(self, name: str) -> None:
            self.name = name
            self.committer = self
            self.attempted: list[str] = []

        def snapshot_state(self, checkpoint_id):
            return None

        def committables(self, checkpoint_id, state):
            return [(checkpoint_id, f"{self.name}-txn")]

        def attempt_endings(self, committables, commit):
            self.attempted += [c for _, c in committables]
            return [Ending.lost_with(c, LostTransaction(c, 7, 0, 5, (f"{self.name}-0",)), OSError("gone"))
                    for _, c in committables]

        def lingering_transactions(self, keep):
            return []

        def figures(self, committables):
            return CommitFigures(records=5 * len(committables), transactions=len(committables))

    store = FileCheckpointStore(str(tmp_path / "chk"))
    coordinator = CheckpointCoordinator(store)
    sinks = [Losing("a"), Losing("b")]
    for sink in sinks:
        coordinator.register(sink)
    coordinator.restore()
    checkpoint_id = 1
    with pytest.raises(TransactionLostError) as failed:
        coordinator.trigger_checkpoint()
    assert sorted(t.transactional_id for t in failed.value.lost) == ["a-txn", "b-txn"]
    assert failed.value.record_count == 10
    assert [s.attempted for s in sinks] == [["a-txn"], ["b-txn"]]
    recorded = read_statistics(store, checkpoint_id)
    assert recorded is not None and sorted(t.transactional_id for t in recorded.lost) == ["a-txn", "b-txn"]
    assert not store.is_committed(checkpoint_id)
