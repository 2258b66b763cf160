"""Where a writer's transactional producers come from: the sink's producer pool (a Flink role).

A write task needs a producer of its transactional id that is initialised (FindCoordinator, then
InitProducerId, which fences every earlier producer of the id and aborts its open transaction) and
in a transaction. Creating and initialising a producer costs a task several round trips to the
brokers; using a ready one costs next to nothing (``bench/README.md`` has the figures). The pool
starts that work in the background when a task starts, so the round trips overlap with computing
the task's first rows (reading them from Kafka, for a copy), instead of following it.

Flink's pool goes further and recycles a producer for a later checkpoint. librdkafka cannot: a
producer's transaction is ended by the driver's EndTxn, from another process, and a handle that
still believes its transaction open can neither begin another nor be initialised again.
Initialising, while a task of batch N writes, the producer its slot will use in batch N+1 pays only
when the same worker runs that slot again, which Spark does not arrange: measured on
``local[2]`` with 4 slots, 1 task in 5 found its producer ready, and the other 4 paid an
InitProducerId each for nothing. What does pay is making each InitProducerId fast
(``ConfluentProducer.start_transaction`` looks up the topic first).
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Mapping

from connectors.kafka.clients import KafkaClients, ProducerClient

log = logging.getLogger(__name__)


class InitialisingProducer:
    """A producer being made ready in the background; :meth:`take` waits for it."""

    def __init__(self, transactional_id: str, future: Future[ProducerClient]) -> None:
        self.transactional_id = transactional_id
        self._future = future

    def take(self, timeout_s: float) -> ProducerClient:
        """The producer, initialised and in a transaction. Raises what its initialisation raised
        (fenced, unauthorised, a timeout the broker refuses)."""
        return self._future.result(timeout=timeout_s)

    def discard(self) -> None:
        """Release a producer that will not be used (the task wrote nothing, or failed first).
        Nothing was produced, so the broker holds no transaction for it."""
        def close(done: Future[ProducerClient]) -> None:
            if done.exception() is None:
                done.result().close()

        self._future.add_done_callback(close)


class ProducerPool:
    """Transactional producers of one process. Thread-safe; one per process is enough."""

    def __init__(self, max_workers: int = 4) -> None:
        self._max_workers = max_workers
        self._executor: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def initialise(self, clients: KafkaClients, transactional_id: str, config: Mapping[str, str],
                timeout_s: float, topic: str | None = None) -> InitialisingProducer:
        """Start making a producer of ``transactional_id`` ready: created, initialised, and in a
        transaction. Initialising fences every earlier producer of the id, so initialise only when
        the caller is about to write under it (a task of the batch that owns the id)."""
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=self._max_workers,
                                                    thread_name_prefix="kafka-eos-producer")
            executor = self._executor
        return InitialisingProducer(transactional_id,
                                executor.submit(self._ready, clients, transactional_id, dict(config), timeout_s,
                                                topic))

    @staticmethod
    def _ready(clients: KafkaClients, transactional_id: str, config: dict[str, str],
               timeout_s: float, topic: str | None = None) -> ProducerClient:
        started = time.monotonic()
        producer = clients.producer(transactional_id, config)
        try:
            producer.start_transaction(timeout_s, topic)
        except BaseException:
            producer.close()
            raise
        log.debug("producer of %s ready in %.0f ms", transactional_id, (time.monotonic() - started) * 1000)
        return producer


#: The pool of this process (a Spark Python worker runs one task at a time, many over its life).
PRODUCERS = ProducerPool()
