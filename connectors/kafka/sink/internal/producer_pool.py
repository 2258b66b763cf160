"""Where a writer's transactional producers come from: the sink's producer pool (a Flink role).

A write task needs a producer of its transactional id that is initialised (FindCoordinator, then
InitProducerId, which fences every earlier producer of the id and aborts its open transaction) and
in a transaction. Creating and initialising a producer costs a task several round trips to the
brokers; using a ready one costs next to nothing (``bench/README.md`` has the figures). The pool
starts that work in the background when a task starts, so the round trips overlap with computing
the task's first rows (reading them from Kafka, for a copy), instead of following it. Only the
connecting part starts then: InitProducerId registers the transactional id on the broker, so it
waits until the task has a row (a task with none, common behind a shuffle, leaves no id behind).
On a local broker the connecting part is ~15 ms of the ~19 ms (issue 52).

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
from concurrent.futures import CancelledError, Future
from typing import Mapping

from connectors.kafka.clients import KafkaClients, ProducerClient

log = logging.getLogger(__name__)


class InitialisingProducer:
    """A producer being made ready in the background, in two stages. It is created and connected
    (its topic looked up) at once; InitProducerId, which registers its transactional id on the
    broker and fences the id's earlier producers, waits for :meth:`initialise`, called when the
    task has a row to write. :meth:`take` waits for it."""

    def __init__(self, transactional_id: str, topic: str | None) -> None:
        self.transactional_id = transactional_id
        self._topic = topic
        self._wanted = threading.Event()
        self._discarded = False
        self._future: Future[ProducerClient] = Future()

    def initialise(self, topic: str | None = None) -> None:
        """The task has rows: let InitProducerId go. ``topic``: the topic of the first row, looked
        up first when none was known at the start."""
        if self._topic is None:
            self._topic = topic
        self._wanted.set()

    def take(self, timeout_s: float) -> ProducerClient:
        """The producer, initialised and in a transaction. Raises what its initialisation raised
        (fenced, unauthorised, a timeout the broker refuses)."""
        self.initialise()
        return self._future.result(timeout=timeout_s)

    def discard(self) -> None:
        """Release a producer that will not be used (the task wrote nothing, or failed first).
        Nothing was produced, so the broker holds no transaction for it."""
        self._discarded = True
        self._wanted.set()

        def close(done: Future[ProducerClient]) -> None:
            if done.exception() is None:
                done.result().close()

        self._future.add_done_callback(close)

    def run(self, clients: KafkaClients, config: dict[str, str], timeout_s: float) -> None:
        """The background work (a thread of its own): create and connect, wait to be wanted, initialise."""
        started = time.monotonic()
        producer: ProducerClient | None = None
        try:
            producer = clients.producer(self.transactional_id, config)
            looked_up = self._topic
            if looked_up is not None:
                producer.look_up(looked_up, timeout_s)
            # Every path of a task ends in take() or discard(), so this wait ends.
            self._wanted.wait()
            if self._discarded:
                producer.close()
                self._future.set_exception(CancelledError(f"producer of {self.transactional_id} discarded"))
                return
            waited = time.monotonic()
            producer.start_transaction(timeout_s, None if self._topic == looked_up else self._topic)
        except BaseException as exc:
            if producer is not None:
                producer.close()
            self._future.set_exception(exc)
            return
        log.debug("producer of %s ready %.0f ms after it was wanted (%.0f ms after it was asked for)",
                  self.transactional_id, (time.monotonic() - waited) * 1000, (time.monotonic() - started) * 1000)
        self._future.set_result(producer)


class ProducerPool:
    """Transactional producers of one process. Thread-safe; one per process is enough."""

    def prepare(self, clients: KafkaClients, transactional_id: str, config: Mapping[str, str],
                timeout_s: float, topic: str | None = None) -> InitialisingProducer:
        """Start making a producer of ``transactional_id``: created and connected now, initialised
        (and in a transaction) once the caller calls ``initialise()`` or ``take()`` on it.
        Initialising fences every earlier producer of the id, so a caller lets it go only when it
        is about to write under the id (a task of the batch that owns the id, with a row)."""
        producer = InitialisingProducer(transactional_id, topic)
        # A thread of its own, not a bounded pool's: it waits for the task's first row, and no
        # other producer may queue behind that wait. A daemon, so it never holds the process up.
        threading.Thread(target=producer.run, args=(clients, dict(config), timeout_s),
                         name=f"kafka-eos-producer-{transactional_id}", daemon=True).start()
        return producer

    def initialise(self, clients: KafkaClients, transactional_id: str, config: Mapping[str, str],
                   timeout_s: float, topic: str | None = None) -> InitialisingProducer:
        """``prepare`` and let the initialisation go at once."""
        producer = self.prepare(clients, transactional_id, config, timeout_s, topic)
        producer.initialise()
        return producer


#: The pool of this process (a Spark Python worker runs one task at a time, many over its life).
PRODUCERS = ProducerPool()
