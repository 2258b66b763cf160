"""Retries of the requests a running query makes to the brokers, bounded by time.

A Kafka cluster of three or more brokers keeps serving while one of them restarts: partitions get
new leaders and transaction coordinators move within a broker session timeout (about 10 s). The
clients see that as transient errors (a request to the node that went away times out, its broker
handle is destroyed, the node a listing names is gone from the metadata). ``BrokerRetryPolicy``
retries those (``RetriableKafkaError``) with tenacity until a time bound, so a query rides through
a rolling restart and fails only when the cluster stays unavailable for longer than the bound,
then with one line naming what could not be reached (``KafkaUnreachableError``).

``RetryingClusterAdmin`` puts every call of a ``ClusterAdmin`` under such a policy; the source's
planning and the sink's guardrails go through it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, TypeVar

from tenacity import RetryCallState, Retrying, retry_if_exception_type, stop_after_attempt, stop_after_delay
from tenacity import wait_exponential

from connectors.kafka.clients import ClusterAdmin, OffsetSpec, TopicPartition
from connectors.kafka.kafka_errors import KafkaUnreachableError, RetriableKafkaError
from twophase.errors import InvalidValueError

log = logging.getLogger(__name__)

T = TypeVar("T")

#: The option that bounds the retries, named in the error when the bound is reached.
TIMEOUT_OPTION = "eos.brokerRetryTimeoutMs"
DEFAULT_TIMEOUT_MS = 60_000
#: Spark's Kafka source retries its offset lookups every fetchOffset.retryIntervalMs; here that is
#: the first wait, doubled up to ``_MAX_INTERVAL_S`` so a long outage costs few requests.
DEFAULT_RETRY_INTERVAL_MS = 200
_MAX_INTERVAL_S = 2.0


@dataclass(frozen=True)
class BrokerRetryPolicy:
    """How long, and how often, a request is tried again after a transient broker error."""

    #: Give up once this long has passed since the first attempt (eos.brokerRetryTimeoutMs).
    timeout_ms: int = DEFAULT_TIMEOUT_MS
    #: The first wait between attempts (fetchOffset.retryIntervalMs); later waits double.
    retry_interval_ms: int = DEFAULT_RETRY_INTERVAL_MS
    #: At most this many retries, whatever time is left (fetchOffset.numRetries); None: time only.
    max_retries: int | None = None

    def __post_init__(self) -> None:
        if self.timeout_ms < 0:
            raise InvalidValueError(f"{TIMEOUT_OPTION} must be >= 0 ms, got {self.timeout_ms}")
        if self.retry_interval_ms < 0:
            raise InvalidValueError(f"fetchOffset.retryIntervalMs must be >= 0 ms, got {self.retry_interval_ms}")
        if self.max_retries is not None and self.max_retries < 0:
            raise InvalidValueError(f"fetchOffset.numRetries must be >= 0, got {self.max_retries}")

    @classmethod
    def from_seconds(cls, timeout_s: float) -> "BrokerRetryPolicy":
        return cls(timeout_ms=int(timeout_s * 1000))

    def call(self, fn: Callable[[], T], what: str) -> T:
        """``fn()``, tried again on ``RetriableKafkaError`` within the bounds. When they are
        reached, raises ``KafkaUnreachableError`` naming ``what`` (e.g. ``latest offsets of
        topic t``), the bound and the last error, on one line."""
        started = time.monotonic()
        stop = stop_after_delay(self.timeout_ms / 1000)
        if self.max_retries is not None:
            stop = stop | stop_after_attempt(self.max_retries + 1)
        interval_s = self.retry_interval_ms / 1000
        retrying = Retrying(
            retry=retry_if_exception_type(RetriableKafkaError),
            stop=stop,
            wait=wait_exponential(multiplier=interval_s, min=interval_s, max=max(interval_s, _MAX_INTERVAL_S)),
            before_sleep=lambda state: _log_retry(what, state),
            reraise=True,
        )
        attempts = 0

        def attempt() -> T:
            nonlocal attempts
            attempts += 1
            return fn()

        try:
            return retrying(attempt)
        except RetriableKafkaError as last:
            elapsed = time.monotonic() - started
            bound = f"{TIMEOUT_OPTION}={self.timeout_ms}"
            if self.max_retries is not None:
                bound += f", fetchOffset.numRetries={self.max_retries}"
            last_line = (str(last).splitlines() or [type(last).__name__])[0]
            # Without the chain: the last error is in this one's message, and a query's failure
            # should show one line, not the same outage twice.
            raise KafkaUnreachableError(
                f"Kafka unreachable: {what} failed {attempts} time(s) over {elapsed:.1f} s ({bound}); "
                f"last error: {last_line}",
                what=what, code=last.code, last_error=last,
            ) from None


def _log_retry(what: str, state: RetryCallState) -> None:
    outcome = state.outcome
    error = outcome.exception() if outcome is not None else None
    log.warning("%s failed (attempt %d): %s; retrying", what, state.attempt_number, error)


class RetryingClusterAdmin:
    """A ``ClusterAdmin`` whose every call is retried under a ``BrokerRetryPolicy``.

    After a failed attempt the next one uses a new admin client from ``make_admin``: a client that
    saw its broker's node vanish may keep a stale view of it, and a new one costs one bootstrap
    round trip, only on the rare failure."""

    def __init__(self, make_admin: Callable[[], ClusterAdmin], policy: BrokerRetryPolicy) -> None:
        self._make_admin = make_admin
        self.policy = policy
        self._admin: ClusterAdmin | None = None

    def _call(self, what: str, call: Callable[[ClusterAdmin], T]) -> T:
        def attempt() -> T:
            if self._admin is None:
                self._admin = self._make_admin()
            admin = self._admin
            try:
                return call(admin)
            except RetriableKafkaError:
                self._discard(admin)
                raise

        return self.policy.call(attempt, what)

    def _discard(self, admin: ClusterAdmin) -> None:
        if self._admin is admin:
            self._admin = None
        try:
            admin.close()
        except Exception as exc:  # closing a client that failed must not hide why it failed
            log.debug("closing an admin client after a failed request: %r", exc)

    def list_topics(self) -> list[str]:
        return self._call("listing topics", lambda admin: admin.list_topics())

    def partitions(self, topic: str) -> list[int]:
        return self._call(f"describing topic {topic}", lambda admin: admin.partitions(topic))

    def create_topic(self, topic: str, partitions: int, config: Mapping[str, str] | None = None) -> None:
        # Creating is idempotent (an existing topic is not an error), so a retry is safe.
        self._call(f"creating topic {topic}", lambda admin: admin.create_topic(topic, partitions, config))

    def list_offsets(self, partitions: Iterable[TopicPartition], spec: OffsetSpec,
                     read_committed: bool = True) -> dict[TopicPartition, int]:
        parts = list(partitions)
        topics = sorted({tp.topic for tp in parts})
        what = f"listing {spec} offsets of {len(parts)} partition(s) of {', '.join(topics) or 'no topic'}"
        return self._call(what, lambda admin: admin.list_offsets(parts, spec, read_committed))

    def broker_config(self, name: str) -> str | None:
        return self._call(f"reading the brokers' {name}", lambda admin: admin.broker_config(name))

    def commit_group_offsets(self, group_id: str, offsets: Mapping[TopicPartition, int]) -> None:
        # For lag dashboards only, and the caller logs a failure: one attempt, so a broker restart
        # never holds up a checkpoint's completion for it.
        if self._admin is None:
            self._admin = self._make_admin()
        admin = self._admin
        try:
            admin.commit_group_offsets(group_id, offsets)
        except RetriableKafkaError:
            self._discard(admin)
            raise

    def close(self) -> None:
        admin, self._admin = self._admin, None
        if admin is not None:
            admin.close()
