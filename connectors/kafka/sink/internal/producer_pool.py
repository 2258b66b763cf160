"""Where a writer's transactional producers come from: the sink's producer pool (a Flink role).

A write task needs a producer of its transactional id that is initialised (FindCoordinator, then
InitProducerId, which fences every earlier producer of the id and aborts its open transaction) and
in a transaction. Creating and initialising a producer costs a task several round trips to the
brokers; using a ready one costs next to nothing (``bench/README.md`` has the figures). The pool
starts that work in the background when a task starts, so the round trips overlap with computing
the task's first rows (reading them from Kafka, for a copy), instead of following it.

Flink's pool goes further and recycles a producer for a later checkpoint. librdkafka cannot: a
producer's transaction is ended by the driver's EndTxn, from another process, and a handle that
still believes its transaction open can neither begin another nor be initialised again. What the
pool does instead is prepare, while a task of batch N writes, the producer of the id its slot
will use in batch N+1 (:meth:`ProducerPool.prepare_ahead`), and hand it to the task of N+1 if
that task runs in the same worker (:meth:`ProducerPool.take_ahead`). Spark does not promise that,
so a miss costs one InitProducerId, which the producer of the task that did run fences. It is
safe because of when it happens:

- the id's previous transaction, batch N-1's (ids alternate by batch parity), was committed
  before batch N's tasks started, so the early InitProducerId aborts nothing that counts;
- the task of batch N waits for that InitProducerId to be answered before it returns, so it is
  over before batch N+1 can start: it never fences a producer of N+1 that writes;
- a prepared producer is taken only for the id and batch it was prepared for; one that another
  worker fenced in between fails its first write, and Spark retries the task (under an id of
  its own).
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Mapping

from connectors.kafka.clients import KafkaClients, ProducerClient

log = logging.getLogger(__name__)


class PreparedProducer:
    """A producer being made ready in the background; :meth:`take` waits for it."""

    def __init__(self, transactional_id: str, future: Future[ProducerClient]) -> None:
        self.transactional_id = transactional_id
        self._future = future

    def take(self, timeout_s: float) -> ProducerClient:
        """The producer, initialised and in a transaction. Raises what its initialisation raised
        (fenced, unauthorised, a timeout the broker refuses)."""
        return self._future.result(timeout=timeout_s)

    def wait(self, timeout_s: float) -> None:
        """Return once the producer is ready or failed (its InitProducerId answered)."""
        try:
            self._future.exception(timeout=timeout_s)
        except Exception as exc:  # a timeout here is no reason to fail the task that waits
            log.warning("producer of %s was not ready within %.0f s: %r", self.transactional_id, timeout_s, exc)

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
        #: transactional id -> (the checkpoint it was prepared for, the producer)
        self._ahead: dict[str, tuple[int, PreparedProducer]] = {}

    def prepare(self, clients: KafkaClients, transactional_id: str, config: Mapping[str, str],
                timeout_s: float) -> PreparedProducer:
        """Start making a producer of ``transactional_id`` ready: created, initialised, and in a
        transaction. Initialising fences every earlier producer of the id, so prepare only when
        the caller is about to write under it (a task of the batch that owns the id)."""
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=self._max_workers,
                                                    thread_name_prefix="kafka-eos-producer")
            executor = self._executor
        return PreparedProducer(transactional_id,
                                executor.submit(self._ready, clients, transactional_id, dict(config), timeout_s))

    def prepare_ahead(self, clients: KafkaClients, transactional_id: str, checkpoint_id: int,
                      config: Mapping[str, str], timeout_s: float) -> PreparedProducer:
        """Start preparing the producer a task of checkpoint ``checkpoint_id`` will want (see the
        module doc for when that is safe). The caller waits for it (:meth:`PreparedProducer.wait`)
        before its own task ends."""
        prepared = self.prepare(clients, transactional_id, config, timeout_s)
        with self._lock:
            replaced = self._ahead.pop(transactional_id, None)
            self._ahead[transactional_id] = (checkpoint_id, prepared)
        if replaced is not None:
            replaced[1].discard()
        return prepared

    def take_ahead(self, transactional_id: str, checkpoint_id: int) -> PreparedProducer | None:
        """The producer prepared ahead for this id and checkpoint, if this process has it."""
        with self._lock:
            entry = self._ahead.pop(transactional_id, None)
        if entry is None:
            return None
        if entry[0] != checkpoint_id:
            entry[1].discard()
            return None
        return entry[1]

    @staticmethod
    def _ready(clients: KafkaClients, transactional_id: str, config: dict[str, str],
               timeout_s: float) -> ProducerClient:
        started = time.monotonic()
        producer = clients.producer(transactional_id, config)
        try:
            producer.start_transaction(timeout_s)
        except BaseException:
            producer.close()
            raise
        log.debug("producer of %s ready in %.0f ms", transactional_id, (time.monotonic() - started) * 1000)
        return producer


#: The pool of this process (a Spark Python worker runs one task at a time, many over its life).
PRODUCERS = ProducerPool()
