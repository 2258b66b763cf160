"""Hard bounces of a local 3-node cluster's nodes on a cadence: one node SIGKILLed, kept down a
moment, started again, and the next bounce only once every replica is in sync again, so the
cluster keeps its quorum and ISR. The rolling-restart tests and the soak (``bench/soak.py``) use it.

The cadence is wall-clock, but what a test judges never depends on it: a bounce lands on whatever
the query is doing, and the test counts what it saw."""

from __future__ import annotations

import logging
import random
import threading
import time
from dataclasses import dataclass
from typing import Callable

from connectors.servers.local_cluster import LocalKafkaCluster

log = logging.getLogger(__name__)


@dataclass
class Bounce:
    node_id: int
    killed_at: float
    revived_at: float | None = None
    requested: bool = False


class Bouncer(threading.Thread):
    """SIGKILLs one node every ``period_s`` and starts it again, each time only once the cluster is
    healthy (every replica in sync), so the cluster keeps its quorum and ISR. ``kill_now`` takes the
    next turn for a chosen node (and holds it down longer)."""

    def __init__(self, cluster: LocalKafkaCluster, *, period_s: float = 20.0, downtime_s: float = 2.0,
                 seed: int = 19) -> None:
        super().__init__(name="bouncer", daemon=True)
        self.cluster = cluster
        self.period_s = period_s
        self.downtime_s = downtime_s
        self._rng = random.Random(seed)
        self._stop_event = threading.Event()
        self._wake = threading.Event()
        self._requests: list[tuple[int, float, threading.Event]] = []
        self._checks: dict[int, tuple[Callable[[], bool] | None, Callable[[], None] | None, dict[str, bool]]] = {}
        self._lock = threading.Lock()
        self.bounces: list[Bounce] = []
        self.errors: list[str] = []

    def kill_now(self, node_id: int, downtime_s: float, before_kill: Callable[[], bool] | None = None,
                 after_kill: Callable[[], None] | None = None) -> bool:
        """Have node ``node_id`` killed at the next turn (after the bounce under way, if any), kept
        down ``downtime_s`` and started again. ``before_kill`` is asked right before the kill; the
        kill is skipped when it says False. ``after_kill`` is called as soon as the node is down,
        before its downtime (a test releases what it held for the kill). Returns whether the node
        was killed."""
        done = threading.Event()
        outcome: dict[str, bool] = {}
        with self._lock:
            self._requests.append((node_id, downtime_s, done))
            self._checks[id(done)] = (before_kill, after_kill, outcome)
        self._wake.set()
        done.wait()
        return outcome.get("killed", False)

    def run(self) -> None:
        while not self._stop_event.is_set():
            self._wake.wait(self.period_s)
            self._wake.clear()
            if self._stop_event.is_set():
                return
            with self._lock:
                request = self._requests.pop(0) if self._requests else None
            try:
                if request is not None:
                    node_id, downtime_s, done = request
                    before_kill, after_kill, outcome = self._checks.pop(id(done))
                    try:
                        if before_kill is None or before_kill():
                            self._bounce(node_id, downtime_s, requested=True, after_kill=after_kill)
                            outcome["killed"] = True
                    finally:
                        done.set()
                else:
                    self._bounce(self._rng.choice(sorted(self.cluster.nodes)), self.downtime_s)
            except Exception as exc:  # a node that does not come back: the test reports it
                log.exception("bounce failed")
                self.errors.append(repr(exc))

    def _bounce(self, node_id: int, downtime_s: float, *, requested: bool = False,
                after_kill: Callable[[], None] | None = None) -> None:
        bounce = Bounce(node_id, time.monotonic(), requested=requested)
        self.bounces.append(bounce)
        log.info("bouncer: SIGKILL node %d%s", node_id, " (requested)" if requested else "")
        self.cluster.kill(node_id)
        if after_kill is not None:
            after_kill()
        # A stop request ends the downtime early: every node must be up when the test ends.
        self._stop_event.wait(downtime_s)
        self.cluster.revive(node_id)
        bounce.revived_at = time.monotonic()
        self.cluster.wait_until_healthy(180)

    def stop(self) -> None:
        self._stop_event.set()
        self._wake.set()
        self.join(timeout=300)
        with self._lock:
            for _, _, done in self._requests:
                done.set()
        for node_id in sorted(self.cluster.nodes):
            if not self.cluster.nodes[node_id].running:
                self.cluster.revive(node_id)
