"""Where the source's readers come from: one warm consumer per Python worker process and cluster.

Creating a librdkafka consumer costs a task its bootstrap connection, the cluster's metadata and
the first fetch session, about a tenth of a second on a local broker: for a micro-batch of a few
thousand records, more than reading them. A reader serves any number of reads one after the other
(partitions are assigned and unassigned incrementally), and a Spark Python worker runs one task
at a time over a long life, so the source keeps its reader between tasks, as Spark's own Kafka
source keeps its consumers in the executors. A reader idle for ``IDLE_TIMEOUT_S`` is closed the
next time the pool is used, so a worker that stops reading gives its connections back.
"""

from __future__ import annotations

import logging
import threading
import time
from contextlib import contextmanager
from typing import Any, Iterator, Mapping

from connectors.kafka.clients import KafkaClients, RecordReader

log = logging.getLogger(__name__)

#: Spark's own consumer cache evicts after 5 minutes idle (spark.kafka.consumer.cache.timeout).
IDLE_TIMEOUT_S = 300.0
#: Idle readers kept per cluster and settings: one per task a process runs at once.
MAX_IDLE = 2


def _key(clients: KafkaClients, read_committed: bool, config: Mapping[str, Any]) -> tuple[Any, ...]:
    return (type(clients).__qualname__, getattr(clients, "bootstrap_servers", None), read_committed,
            tuple(sorted((str(k), str(v)) for k, v in config.items())))


class ReaderPool:
    """The readers of one process. Thread-safe; one per process is enough."""

    def __init__(self) -> None:
        self._idle: dict[tuple[Any, ...], list[tuple[float, RecordReader]]] = {}
        self._lock = threading.Lock()

    @contextmanager
    def reader(self, clients: KafkaClients, read_committed: bool,
               config: Mapping[str, Any]) -> Iterator[RecordReader]:
        """A reader for the duration of one read: an idle one of the same cluster and settings,
        else a new one. It goes back to the pool when the read ends, and is closed if the read
        failed (its state is unknown then)."""
        key = _key(clients, read_committed, config)
        reader = self._take(key)
        if reader is None:
            reader = clients.reader(read_committed=read_committed, config=dict(config))
        try:
            yield reader
        except BaseException:
            reader.close()
            raise
        self._give_back(key, reader)

    def _take(self, key: tuple[Any, ...]) -> RecordReader | None:
        expired: list[RecordReader] = []
        found = None
        with self._lock:
            now = time.monotonic()
            for k, entries in self._idle.items():
                expired += [r for since, r in entries if now - since > IDLE_TIMEOUT_S]
                entries[:] = [(since, r) for since, r in entries if now - since <= IDLE_TIMEOUT_S]
            entries = self._idle.get(key)
            if entries:
                found = entries.pop()[1]
        for reader in expired:
            reader.close()
        return found

    def _give_back(self, key: tuple[Any, ...], reader: RecordReader) -> None:
        with self._lock:
            entries = self._idle.setdefault(key, [])
            if len(entries) < MAX_IDLE:
                entries.append((time.monotonic(), reader))
                return
        reader.close()

    def close(self) -> None:
        with self._lock:
            readers = [r for entries in self._idle.values() for _, r in entries]
            self._idle.clear()
        for reader in readers:
            reader.close()


#: The pool of this process (a Spark Python worker runs one task at a time, many over its life).
READERS = ReaderPool()
