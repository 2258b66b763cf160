"""Faults for the tests of a 3-node cluster (whose nodes ``kafka_testkit.node_bouncer`` bounces): a
Spark job whose log lines trigger faults, a query restarted when killed, the coordinator of a
transaction, and a job's Python workers found by PID.

The faults that matter land by construction, while the job is held in a failpoint's sleep that
the job itself announces."""

from __future__ import annotations

import json
import logging
import os
import queue
import re
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from kafka.admin import KafkaAdminClient

from connectors.kafka.clients._kafka_python import admin_internals
from connectors.kafka.clients import KafkaClients
from kafka_testkit.process_tree import descendants
from spark_job import kit_lines, spark_job_environment

log = logging.getLogger(__name__)

_FIRED = re.compile(r"failpoint (?P<name>\w+) fired \((?P<action>[^,]+), hit (?P<hit>\d+), pid (?P<pid>\d+)\)")


def find_coordinator(bootstrap: str, transactional_id: str) -> int:
    """The node id FindCoordinator names for ``transactional_id`` (kafka-python's admin plumbing,
    as the kit's transaction control plane uses it)."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="it-find-coordinator")
    try:
        async def find() -> dict[str, int]:
            return await admin_internals.transaction_coordinators(admin, [transactional_id])

        return int(admin_internals.run(admin, find)[transactional_id])
    finally:
        admin.close()


def python_workers(job_pid: int) -> list[int]:
    """PIDs of the job's Python workers: the processes pyspark's daemon forked."""
    processes = descendants(job_pid)
    daemons = {p.pid for p in processes if "pyspark.daemon" in p.cmdline}
    return [p.pid for p in processes if p.ppid in daemons]


@dataclass
class Fired:
    name: str
    hit: int
    pid: int
    line: str


@dataclass
class WatchedJob:
    """The Spark example, running, with every stderr line kept and failpoint lines handed to
    ``on_fired`` (called on the reader thread; it may block: the job is held meanwhile)."""

    command: list[str]
    env: dict[str, str] | None = None
    on_fired: Callable[[Fired], None] | None = None
    lines: list[str] = field(default_factory=list)
    fired: list[Fired] = field(default_factory=list)
    callback_errors: list[str] = field(default_factory=list)

    def start(self) -> "WatchedJob":
        self.process = subprocess.Popen(self.command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                        env=spark_job_environment(self.env), start_new_session=True)
        self._queue: queue.Queue[Fired | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, name="job-stderr", daemon=True)
        # Faults run on a thread of their own: the reader keeps draining stderr meanwhile, so a
        # full pipe never stalls the job.
        self._faults = threading.Thread(target=self._deliver, name="job-faults", daemon=True)
        self._reader.start()
        self._faults.start()
        return self

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line.rstrip("\n"))
            match = _FIRED.search(line)
            if match is None:
                continue
            fired = Fired(match["name"], int(match["hit"]), int(match["pid"]), line.strip())
            self.fired.append(fired)
            self._queue.put(fired)
        self._queue.put(None)

    def _deliver(self) -> None:
        while (fired := self._queue.get()) is not None:
            if self.on_fired is None:
                continue
            try:
                self.on_fired(fired)
            except Exception as exc:
                log.exception("fault on %s failed", fired.line)
                self.callback_errors.append(f"{fired.line}: {exc!r}")

    def wait(self, timeout_s: float = 1200) -> int:
        try:
            code = self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            code = self.process.wait()
        self._reader.join(timeout=60)
        self._faults.join(timeout=300)
        return code

    @property
    def stderr(self) -> str:
        return "\n".join(self.lines)


def produce_chunk(clients: KafkaClients, topic: str, label: str, count: int) -> list[str]:
    """``count`` more orders with ids of their own, produced with retries that ride through a bounce."""
    ids = [f"{label}-{i}" for i in range(count)]
    producer = clients.producer(None, {"enable.idempotence": "true", "message.timeout.ms": "120000"})
    try:
        for order_id in ids:
            producer.produce(topic, json.dumps({"id": order_id, "seq": 0, "customer": "acme", "amount": 1.0}).encode(),
                             key=order_id.encode())
        producer.flush(180)
    finally:
        producer.close()
    return ids


class RunningQuery:
    """The Spark example unbounded, restarted when the test kills it; a query that ends by itself is
    a failure, counted (and restarted, to keep measuring)."""

    def __init__(self, command: list[str], log_dir: Path, env: dict[str, str] | None = None) -> None:
        self.command = command
        self.log_dir = log_dir
        self.env = env
        self.runs = 0
        self.failures: list[str] = []
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.runs += 1
        out = open(self.log_dir / f"run-{self.runs}.log", "wb")
        self.process = subprocess.Popen(self.command, stdout=subprocess.DEVNULL, stderr=out,
                                        env=spark_job_environment(self.env), start_new_session=True)
        out.close()

    def check(self) -> None:
        """Count and restart a query that ended by itself."""
        assert self.process is not None
        code = self.process.poll()
        if code is not None:
            text = (self.log_dir / f"run-{self.runs}.log").read_text(errors="replace")
            self.failures.append(f"run {self.runs} exit {code}: {kit_lines(text)[-1:] or text[-800:]}")
            log.error("the query failed by itself: %s", self.failures[-1])
            self.start()

    def kill(self) -> None:
        assert self.process is not None
        self.check()
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        self.start()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def wait_for_output(self, clients: KafkaClients, sink: str, expected: int, bound_s: float = 600.0) -> None:
        """Until ``sink`` holds ``expected`` distinct records (read_committed), counting and
        restarting a query that ends by itself meanwhile; ``bound_s`` only bounds a broken run."""
        from kafka_io import read_committed_values

        deadline = time.monotonic() + bound_s
        while len(set(read_committed_values(clients, sink))) < expected:
            self.check()
            assert time.monotonic() < deadline, f"the output did not catch up: {self.failures}"
            time.sleep(2)
        self.check()
