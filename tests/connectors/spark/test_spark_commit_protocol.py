"""The driver side of the Spark sink without Spark: tasks' transactions are opened by the same
writer executors use, and the commit protocol is crashed at its failpoints."""

import pytest

pytest.importorskip("pyspark")

from connectors.kafka.kafka_errors import TransactionLostError  # noqa: E402
from connectors.kafka.sink.internal.transactional_ids import TransactionalIdPool  # noqa: E402
from connectors.kafka.sink.writer import KafkaTransactionWriter  # noqa: E402
from connectors.spark.sink_driver import BatchContext, SparkSinkDriver  # noqa: E402
from connectors.spark.options import parse_sink_options  # noqa: E402
from connectors.spark.datasource_writers import KafkaCommitMessage  # noqa: E402
from kafka_testkit.topic_records import read_all  # noqa: E402
from connectors.simulated_kafka import FakeKafkaClients  # noqa: E402
from twophase import failpoints  # noqa: E402


@pytest.fixture(autouse=True)
def _clean_failpoints():
    failpoints.disable()
    yield
    failpoints.disable()


@pytest.fixture
def fake(tmp_path):
    clients = FakeKafkaClients(tmp_path / "kafka.db")
    clients.admin().create_topic("out", 3)
    return clients


@pytest.fixture
def options(fake, tmp_path):
    return parse_sink_options({"kafka.bootstrap.servers": fake.bootstrap_servers, "topic": "out",
                               "checkpointlocation": str(tmp_path / "chk")}, streaming=True)


def task_writer(fake, options, task, batch_id):
    """The writer of one executor task, under the id the sink's pool gives it."""
    pool = TransactionalIdPool(options.config.transactional_id_prefix)
    return KafkaTransactionWriter(fake, options.config, pool.transactional_id(task, batch_id), batch_id)


def run_tasks(fake, options, batch_id, rows_per_task=(3, 2, 4), tag="v"):
    """What executors do for one micro-batch: one transaction per task, pre-committed."""
    messages = []
    for task, rows in enumerate(rows_per_task):
        writer = task_writer(fake, options, task, batch_id)
        for i in range(rows):
            writer.write({"value": f"{tag}{batch_id}-{task}-{i}", "partition": task})
        committable = writer.pre_commit()
        messages.append(KafkaCommitMessage(batch_id, task, 0, committable.to_json(), committable.record_count))
    return messages


def visible(fake):
    return sorted(r.value.decode() for r in read_all(fake, "out"))


def expected(batches, rows_per_task=(3, 2, 4), tag="v"):
    return sorted(f"{tag}{b}-{t}-{i}" for b in batches for t, n in enumerate(rows_per_task) for i in range(n))


def test_commit_stores_then_commits_every_task(fake, options):
    SparkSinkDriver(options).commit(BatchContext(0), run_tasks(fake, options, 0))
    assert visible(fake) == expected([0])
    protocol = SparkSinkDriver(options)
    assert protocol.lifecycle.store.is_committed(0)
    assert protocol.recover() == 0


@pytest.mark.parametrize("failpoint", ["after_checkpoint_stored", "before_commit", "mid_commit"])
def test_crash_between_store_and_commit_is_completed_by_recover(fake, tmp_path, failpoint):
    # The first transaction is committed alone, so a raised mid_commit really leaves the batch half
    # committed.
    options = parse_sink_options({"kafka.bootstrap.servers": fake.bootstrap_servers, "topic": "out",
                                  "checkpointlocation": str(tmp_path / "chk")},
                                 streaming=True)
    messages = run_tasks(fake, options, 0)
    failpoints.enable(failpoint, "raise")
    with pytest.raises(failpoints.FailpointCrash):
        SparkSinkDriver(options).commit(BatchContext(0), messages)
    failpoints.disable()
    assert visible(fake) != expected([0])  # open transactions hold the LSO back
    # The restarted query's streamWriter() recovers before the replay's tasks write.
    assert SparkSinkDriver(options).recover() == 0
    assert visible(fake) == expected([0])
    # The replay of batch 0 writes nothing (its tasks see decided_through=0) and commits nothing.
    SparkSinkDriver(options).commit(BatchContext(0), [KafkaCommitMessage(0, t, 0, None, 0, skipped=True) for t in range(3)])
    assert visible(fake) == expected([0])


def test_replayed_committed_batch_aborts_whatever_its_tasks_wrote(fake, options):
    SparkSinkDriver(options).commit(BatchContext(0), run_tasks(fake, options, 0))
    late = run_tasks(fake, options, 0, tag="again")  # tasks that did not know batch 0 was done
    SparkSinkDriver(options).commit(BatchContext(0), late)
    assert visible(fake) == expected([0])
    assert fake.txn_control().list_open_transactions("") == []


def test_tasks_that_guessed_the_wrong_batch_fail_it(fake, options):
    messages = run_tasks(fake, options, 5)
    with pytest.raises(RuntimeError, match=r"wrote under checkpoint ids \[5\]"):
        SparkSinkDriver(options).commit(BatchContext(4), messages)
    assert fake.txn_control().list_open_transactions("") == []
    assert visible(fake) == []


def test_lingering_transactions_are_swept_after_a_commit(fake, options):
    crashed = task_writer(fake, options, 7, 0)  # a task count that changed
    crashed.write({"value": "orphan", "partition": 0})
    crashed.pre_commit()
    SparkSinkDriver(options).commit(BatchContext(0), run_tasks(fake, options, 0))
    assert fake.txn_control().list_open_transactions("") == []
    assert "orphan" not in visible(fake)


def test_stored_transaction_taken_over_raises_transaction_lost(fake, options):
    messages = run_tasks(fake, options, 0)
    failpoints.enable("after_checkpoint_stored", "raise")
    with pytest.raises(failpoints.FailpointCrash):
        SparkSinkDriver(options).commit(BatchContext(0), messages)
    failpoints.disable()
    taken = messages[1].committable["transactional_id"]
    fake.producer(taken, {}).init_transactions(5)
    with pytest.raises(TransactionLostError) as error:
        SparkSinkDriver(options).recover()
    assert error.value.transactional_id == taken and error.value.record_count == 2


def test_batch_abort_aborts_pre_committed_tasks(fake, options):
    messages = run_tasks(fake, options, 3)
    SparkSinkDriver(options).fail(BatchContext(3), messages + [None])
    assert fake.txn_control().list_open_transactions("") == []
    assert visible(fake) == []
