"""A batch's pre-committed transactions as a cluster's write tasks hand them to the driver, without
a Spark job: ``count`` tasks, each writing its records through the sink's own task-side writer
(``KafkaTransactionWriter``) under the sink's pool id for its task slot, pre-committing and closing
its producer, as an executor does when its task ends. What a 1,000-slot cluster's batch leaves for
the driver's commit round, prepared by a few threads of one process (the producers' InitProducerId
and flush are the slow part, not what is measured).
"""

from __future__ import annotations

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
