"""A batch's pre-committed transactions as a cluster's write tasks hand them to the driver, without
a Spark job: ``count`` tasks, each writing its records through the sink's own task-side writer
(``KafkaTransactionWriter``) under the sink's pool id for its task slot, pre-committing and closing
its producer, as an executor does when its task ends. What a 1,000-slot cluster's batch leaves for
the driver's commit round, prepared by a few threads of one process (the producers' InitProducerId
and flush are the slow part, not what is measured).
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ThreadPoolExecutor

from connectors.kafka.clients import KafkaClients, ProduceBatch
from connectors.kafka.sink.internal.transactional_ids import TransactionalIdPool
from connectors.kafka.sink.writer import KafkaTransactionWriter
from connectors.spark.commit_message import KafkaCommitMessage
from connectors.spark.options import SinkOptions


def prepare_transactions(clients: KafkaClients, options: SinkOptions, checkpoint_id: int, count: int,
                         partitions: int, *, threads: int = 16) -> list[KafkaCommitMessage]:
    """The commit messages of ``count`` write tasks of checkpoint ``checkpoint_id``: task ``i``
    writes one record, ``b"task-<i>"``, into partition ``i % partitions`` of the sink's topic."""
    config = options.config
    assert config.topic is not None and config.transactional_id_prefix is not None
    pool = TransactionalIdPool(config.transactional_id_prefix)

    def task(slot: int) -> KafkaCommitMessage:
        writer = KafkaTransactionWriter(clients, config, pool.transactional_id(slot, checkpoint_id), checkpoint_id)
        try:
            writer.write_batch(ProduceBatch(topic=config.topic, values=[f"task-{slot}".encode()],
                                            partitions=[slot % partitions]))
            committable = writer.pre_commit()
        except BaseException:
            writer.abort()
            raise
        return KafkaCommitMessage(checkpoint_id, slot, 0, committable.to_json(), committable.record_count)

    with ThreadPoolExecutor(threads) as workers:
        return list(workers.map(task, range(count)))


def commit_batch(bootstrap: str, topic: str, state_dir: str, query_id: str, count: int, partitions: int) -> None:
    """What a driver does with such a batch: the sink driver's steps before the tasks, ``count``
    prepared transactions, and the batch's commit, in this process (which a failpoint of
    ``KAFKA_EOS_FAILPOINTS`` may kill in the commit round)."""
    from pyspark.sql.types import BinaryType, StructField, StructType

    from connectors.kafka.clients.factory import clients_for
    from connectors.spark.batch_context import BatchContext
    from connectors.spark.options import parse_sink_options
    from connectors.spark.sink_driver import SparkSinkDriver

    options = parse_sink_options({"kafka.bootstrap.servers": bootstrap, "topic": topic, "eos.stateDir": state_dir},
                                 streaming=False)
    context = BatchContext(0, query_id)
    with SparkSinkDriver(options) as driver:
        driver.before_tasks(StructType([StructField("value", BinaryType())]), context, run_starts=True)
        driver.commit(context, prepare_transactions(clients_for(bootstrap), options, 0, count, partitions))


def main(argv: list[str] | None = None) -> int:
    """``python -m kafka_testkit.prepared_transactions``: one batch of prepared transactions,
    committed by a driver of its own (the process a test kills in the commit round)."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--query-id", required=True)
    parser.add_argument("--transactions", type=int, required=True)
    parser.add_argument("--partitions", type=int, required=True)
    args = parser.parse_args(argv)
    commit_batch(args.bootstrap, args.topic, args.state_dir, args.query_id, args.transactions, args.partitions)
    return 0


if __name__ == "__main__":
    sys.exit(main())
