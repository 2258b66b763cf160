"""The real Kafka clients behind the seam of ``clients.py``.

librdkafka (confluent-kafka) carries the data path and the cluster admin; the transaction control
plane that librdkafka lacks (EndTxn for another process's transaction, ListTransactions,
DescribeTransactions) comes from ``txn_control.py``.

Nothing here retries on its own: a transient condition surfaces as ``RetriableKafkaError`` (or its
subclass ``BrokerUnavailableError``) and the caller decides, with tenacity, whether to try again.
The only waits are bounded waits for an expected state (statistics after ``init_transactions``, a
created topic in metadata, a read range to complete, room in the producer queue).
"""

from __future__ import annotations

import concurrent.futures
import itertools
import json
import logging
import re
import time
import uuid
from typing import Any, Callable, Iterable, Iterator, Mapping

from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME as _CK_LOG_APPEND_TIME
from confluent_kafka import (
    ConsumerGroupTopicPartitions,
    IsolationLevel,
    KafkaError,
    KafkaException,
    TopicCollection,
)
from confluent_kafka import Consumer as _Consumer
from confluent_kafka import Producer as _Producer
from confluent_kafka import TopicPartition as _CkTopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, OffsetSpec as _CkOffsetSpec
from confluent_kafka.admin import ResourceType

from connectors.kafka.authorization import (
    AUTHORIZATION_ERROR_NAMES,
    CLUSTER,
    CLUSTER_NAME,
    GROUP,
    TOPIC,
    Denied,
    authorization_error,
    transactional_id_error,
)
from connectors.kafka.clients import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    ConsumedBatch,
    ConsumedRecord,
    Headers,
    OffsetSpec,
    ProduceBatch,
    ProducerIdentity,
    TopicPartition,
    TransactionControl,
)
from connectors.kafka.errors import (
    BrokerUnavailableError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    KafkaAuthorizationError,
    KafkaConnectorError,
    OffsetOutOfRangeError,
    ProducerFencedError,
    RecordTooLargeError,
    RetriableKafkaError,
    TransactionalIdNotFoundError,
    TransactionTimeoutRefusedError,
    UnknownTopicError,
)

log = logging.getLogger(__name__)
# librdkafka's own log lines (configuration warnings, broker state) go through Python logging
# rather than straight to stderr, so applications control them like any other library's.
_librdkafka_log = logging.getLogger("connectors.kafka.librdkafka")

# Kafka's TRANSACTIONAL_ID_NOT_FOUND; confluent-kafka 2.16 has no constant for it.
_TRANSACTIONAL_ID_NOT_FOUND = 105

_FENCED_CODES = frozenset({KafkaError._FENCED, KafkaError.PRODUCER_FENCED})
_TXN_ID_UNKNOWN_CODES = frozenset({KafkaError.INVALID_PRODUCER_ID_MAPPING, _TRANSACTIONAL_ID_NOT_FOUND})
_TOO_LARGE_CODES = frozenset({KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE})
_UNKNOWN_TOPIC_CODES = frozenset(
    {
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._UNKNOWN_TOPIC,
        KafkaError._UNKNOWN_PARTITION,
        KafkaError.UNKNOWN_TOPIC_ID,
    }
)
_OUT_OF_RANGE_CODES = frozenset({KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET})
_UNAVAILABLE_CODES = frozenset(
    {
        KafkaError._TRANSPORT,
        # A request in flight to a node that left the cluster's metadata (it went down): another
        # node serves its partitions once the cluster has moved them.
        KafkaError._DESTROY_BROKER,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._TIMED_OUT,
        KafkaError._MSG_TIMED_OUT,
        KafkaError._TIMED_OUT_QUEUE,
        KafkaError._RESOLVE,
        KafkaError.REQUEST_TIMED_OUT,
    }
)
_RETRIABLE_CODES = frozenset(
    {
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.NOT_COORDINATOR,
        KafkaError.CONCURRENT_TRANSACTIONS,
        # Leadership moving (a just-created topic, a restarting broker): librdkafka does not
        # always flag these retriable in admin results.
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.REQUEST_TIMED_OUT,
    }
)

# Kafka's internal topics, which the Java admin's listTopics() leaves out too.
_INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})

# A statistics event every 100 ms keeps identity() fast after init_transactions; librdkafka only
# reports the producer id and epoch there (object ``eos``).
_STATS_INTERVAL_MS = 100
_IDENTITY_WAIT_S = 5.0
# Produce calls between two poll(0): serves queued statistics and error reports so they cannot
# pile up in a producer that writes for a long time without flushing.
_POLL_EVERY = 1000
_QUEUE_FULL_WAIT_S = 60.0
_ADMIN_TIMEOUT_S = 30.0
# Reads a query makes at every batch (metadata, offsets, configs). A request queued for a node that
# went down waits out its whole timeout even after the cluster moved its partitions, so these are
# short and retried by the caller (broker_retry.py) with a new client.
_READ_TIMEOUT_S = 10.0


def map_kafka_error(err: KafkaError | None, context: str, denied: Denied | None = None) -> KafkaConnectorError:
    """Translate a librdkafka error into the connector's error types. ``context`` says what was
    being done (and for whom), so the message stands on its own in a log; ``denied`` says what a
    refused request needed, when the caller knows (the principal, the operation, the resource)."""
    if err is None:
        return KafkaConnectorError(f"{context}: unknown Kafka error")
    code = err.code()
    message = f"{context}: {err.name()}: {err.str()}"
    if code in AUTHORIZATION_ERROR_NAMES and denied is not None:
        return denied(err.name())
    if code == KafkaError.INVALID_TRANSACTION_TIMEOUT:
        return TransactionTimeoutRefusedError.exceeding(
            None, how=f"refused by {context} with INVALID_TRANSACTION_TIMEOUT: {err.str()}")
    if code in _FENCED_CODES:
        return ProducerFencedError(message)
    if code == KafkaError.INVALID_PRODUCER_EPOCH:
        return InvalidProducerEpochError(message)
    if code in (KafkaError.INVALID_TXN_STATE, KafkaError._STATE):
        return InvalidTxnStateError(message)
    if code in _TXN_ID_UNKNOWN_CODES:
        return TransactionalIdNotFoundError(message)
    if code in _TOO_LARGE_CODES:
        return RecordTooLargeError(message)
    if code in _UNKNOWN_TOPIC_CODES:
        return UnknownTopicError(message)
    if code in _OUT_OF_RANGE_CODES:
        return OffsetOutOfRangeError(message)
    if code in _UNAVAILABLE_CODES:
        return BrokerUnavailableError(message, code=err.name())
    if code in _RETRIABLE_CODES or (err.retriable() and not err.fatal()):
        return RetriableKafkaError(message, code=err.name())
    return KafkaConnectorError(message)


def _map_exception(exc: KafkaException, context: str, denied: Denied | None = None) -> KafkaConnectorError:
    err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
    mapped = map_kafka_error(err, context, denied)
    mapped.__cause__ = exc
    return mapped


def _base_config(bootstrap_servers: str) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap_servers, "logger": _librdkafka_log}


class _TransactionErrorLog:
    """One producer's librdkafka log lines, forwarded to Python logging.

    A transaction that fails with an abortable error (for instance AddPartitionsToTxn refused with
    TOPIC_AUTHORIZATION_FAILED) is reported by librdkafka only in a ``TXNERR`` log line, ending with
    the error's name in parentheses, and by purging the queued records (``_PURGE_QUEUE``): no error
    callback, no exception until a commit the two-phase commit never makes here. The name is kept,
    so that a failed flush can say why its records were purged."""

    _ERROR_NAME = re.compile(r"\((?P<name>[A-Z_]+)\)\s*$")

    def __init__(self) -> None:
        self.error_name: str | None = None

    def log(self, level: int, fmt: str, *args: Any) -> None:
        _librdkafka_log.log(level, fmt, *args)
        # confluent-kafka calls log(level, "%s [%s] %s", facility, client name, message).
        if len(args) == 3 and args[0] == "TXNERR":
            match = self._ERROR_NAME.search(str(args[2]))
            if match is not None:
                self.error_name = match["name"]


class ConfluentProducer:
    """A librdkafka producer behind the ``ProducerClient`` seam.

    Delivery reports come through one producer-level callback that only fires for failures
    (``delivery.report.only.error``): a per-record Python callback would cost more than the
    produce call itself.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        transactional_id: str | None,
        config: Mapping[str, Any],
    ) -> None:
        self.transactional_id = transactional_id
        self._who = f"producer[{transactional_id or 'non-transactional'}]"
        self._delivery_errors: list[KafkaError] = []
        self._delivery_error_count = 0
        self._delivery_error_topic: str | None = None
        # The client's own settings: who it authenticates as, and its transaction timeout, for
        # the messages of refused requests.
        self._config = dict(config)
        self._fatal_error: KafkaError | None = None
        self._stats_seq = 0
        self._stats_json: str | None = None
        self._identity: ProducerIdentity | None = None
        self._initialised = transactional_id is None
        # Statistics numbered above this describe the producer after its last init or abort.
        self._stats_seq_at_init = 0
        self._produced_since_poll = 0
        self._txn_log = _TransactionErrorLog()
        conf: dict[str, Any] = _base_config(bootstrap_servers)
        conf["logger"] = self._txn_log
        conf.update({"enable.idempotence": True, "linger.ms": 5})
        conf.update(config)
        conf.update(
            {
                "statistics.interval.ms": _STATS_INTERVAL_MS,
                "stats_cb": self._on_stats,
                "error_cb": self._on_error,
                "on_delivery": self._on_delivery,
                "delivery.report.only.error": True,
            }
        )
        if transactional_id is not None:
            conf["transactional.id"] = transactional_id
        try:
            self._producer: _Producer | None = _Producer(conf)
        except KafkaException as exc:
            raise _map_exception(exc, f"{self._who}: create") from exc
        log.debug("%s: created (bootstrap %s)", self._who, bootstrap_servers)

    # -- librdkafka callbacks (served from poll/flush on the calling thread) -------------------
    # They must not catch exceptions: confluent-kafka may call them while a fatal KafkaException
    # is pending, and swallowing what that provokes would also swallow the fatal error.

    def _on_stats(self, stats_json: str) -> None:
        # Keep the raw string: parsing every 100 ms would cost more than the rare identity() call.
        self._stats_json = stats_json
        self._stats_seq += 1

    def _on_error(self, err: KafkaError) -> None:
        # Fatal errors arrive as exceptions from flush/poll (see _call), and are kept here too in
        # case that exception is lost; the rest are transport errors and the like, which
        # librdkafka recovers from on its own.
        if err.fatal() and err.code() != KafkaError._FATAL:
            self._fatal_error = err
        log.warning("%s: %s: %s", self._who, err.name(), err.str())

    def _on_delivery(self, err: KafkaError | None, msg: Any) -> None:
        if err is None:
            return
        self._delivery_error_count += 1
        if not self._delivery_errors:
            log.error(
                "%s: delivery to %s-%s failed: %s: %s",
                self._who,
                msg.topic(),
                msg.partition(),
                err.name(),
                err.str(),
            )
            self._delivery_errors.append(err)
            self._delivery_error_topic = msg.topic()

    # -- the one way into librdkafka -------------------------------------------------------------

    def _client(self) -> _Producer:
        if self._producer is None:
            raise KafkaConnectorError(f"{self._who}: used after close()")
        return self._producer

    def _call(self, context: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Call into librdkafka and translate what it raises.

        confluent-kafka 2.16 raises a fatal error (e.g. _FENCED) from flush/poll and then still
        serves delivery reports; the callback's first call into the C API then fails with
        SystemError, whose cause is the fatal KafkaException."""
        try:
            return fn(*args, **kwargs)
        except KafkaException as exc:
            raise self._mapped(exc, context) from exc
        except SystemError as exc:
            cause = _kafka_exception_in(exc) or self._queued_fatal()
            if cause is not None:
                raise self._mapped(cause, context) from exc
            lost = self._fatal_without_exception(context)
            if lost is None:
                raise
            raise lost from exc

    def _queued_fatal(self) -> KafkaException | None:
        # A fatal error raised by an earlier call may still be queued: the next poll raises it.
        if self._producer is None:
            return None
        try:
            self._producer.poll(0)
        except KafkaException as queued:
            return queued
        except SystemError as queued:
            return _kafka_exception_in(queued)
        return None

    def _fatal_without_exception(self, context: str) -> KafkaConnectorError | None:
        """What went wrong when confluent-kafka 2.16 returns NULL "without setting an exception".

        It does so now and then when a producer is fenced (one fencing in six on Kafka 4.0), and
        a call can meet the bare _FATAL before the error behind it is queued: the fatal error is
        lost on the way, but the error callback or the failed deliveries still say what it was.
        A transactional producer whose records fail with an old epoch has been fenced
        (librdkafka raises _FENCED for exactly that)."""
        if self._fatal_error is not None:
            return self._map(self._fatal_error, context)
        if self.transactional_id is not None:
            for err in self._delivery_errors:
                if err.code() in _FENCED_CODES or err.code() == KafkaError.INVALID_PRODUCER_EPOCH:
                    return ProducerFencedError(
                        f"{self._who}: {context}: fenced by a newer producer instance "
                        f"({err.name()}: {err.str()})")
        return None

    def _mapped(self, exc: KafkaException, context: str, topic: str | None = None) -> KafkaConnectorError:
        err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
        self._remember_fatal(exc)
        # librdkafka reports a fatal state as a bare _FATAL; the cause (e.g. _FENCED) is the
        # fatal error raised earlier, or the one still queued for the next poll.
        if err is not None and err.code() == KafkaError._FATAL:
            if self._fatal_error is None:
                self._remember_fatal(self._queued_fatal())
            if self._fatal_error is not None:
                err = self._fatal_error
            else:
                fenced = self._fatal_without_exception(context)
                if fenced is not None:
                    fenced.__cause__ = exc
                    return fenced
        mapped = self._map(err, context, topic)
        mapped.__cause__ = exc
        return mapped

    def _map(self, err: KafkaError | None, context: str, topic: str | None = None) -> KafkaConnectorError:
        """``map_kafka_error`` with what this producer knows: a refused request lacked an ACL on its
        transactional id or on the topic it wrote to; a refused timeout is its own."""
        if err is not None and err.code() == KafkaError.INVALID_TRANSACTION_TIMEOUT:
            return TransactionTimeoutRefusedError.exceeding(
                self._config.get("transaction.timeout.ms"),
                how=f"the brokers refused it at InitProducerId of transactional id {self.transactional_id!r} "
                    "with INVALID_TRANSACTION_TIMEOUT")
        transactional_id = self.transactional_id

        def denied(error_name: str) -> KafkaAuthorizationError:
            if error_name == "TRANSACTIONAL_ID_AUTHORIZATION_FAILED" and transactional_id is not None:
                return transactional_id_error(self._config, transactional_id, error_name=error_name,
                                              doing=f"{self._who} {context}")
            if error_name == "CLUSTER_AUTHORIZATION_FAILED":
                # Brokers before 3.0 want IDEMPOTENT_WRITE on the cluster from idempotent producers
                # (later ones accept WRITE on any topic instead, KIP-679).
                return authorization_error(self._config, ("IDEMPOTENT_WRITE",), CLUSTER, CLUSTER_NAME,
                                           error_name=error_name, doing=f"{self._who} {context}")
            # Producing needs the topic's metadata (DESCRIBE) and WRITE; the broker does not say
            # which of the two is missing, and WRITE implies DESCRIBE.
            return authorization_error(self._config, ("WRITE", "DESCRIBE"), TOPIC, topic or "(the topic written to)",
                                       error_name=error_name, doing=f"{self._who} produced to {topic or 'it'}")

        return map_kafka_error(err, f"{self._who}: {context}", denied)

    def _remember_fatal(self, exc: KafkaException | None) -> None:
        # The bare _FATAL says only that there is a fatal error; what is kept is the error itself.
        if exc is not None and exc.args and isinstance(exc.args[0], KafkaError):
            err = exc.args[0]
            if err.fatal() and err.code() != KafkaError._FATAL:
                self._fatal_error = err

    def _raise_fatal(self, context: str) -> None:
        if self._fatal_error is not None:
            raise self._map(self._fatal_error, context)

    # -- ProducerClient ------------------------------------------------------------------------

    def init_transactions(self, timeout_s: float) -> ProducerIdentity:
        self._init(timeout_s)
        identity = self.identity()
        log.info(
            "%s: initialised: producer id %d, epoch %d",
            self._who,
            identity.producer_id,
            identity.producer_epoch,
        )
        return identity

    def _init(self, timeout_s: float) -> None:
        producer = self._client()
        self._identity = None
        self._reset_delivery_errors()
        self._call("init_transactions", producer.init_transactions, timeout_s)
        self._initialised = True
        self._mark_identity_changed()

    def _mark_identity_changed(self) -> None:
        # Statistics queued before now may describe the producer before the change: serve them,
        # so that only statistics generated afterwards count for identity().
        self._call("identity", self._client().poll, 0)
        self._stats_seq_at_init = self._stats_seq

    def begin_transaction(self) -> None:
        producer = self._client()
        self._raise_fatal("begin_transaction")
        self._reset_delivery_errors()
        self._call("begin_transaction", producer.begin_transaction)

    def start_transaction(self, timeout_s: float) -> None:
        self._init(timeout_s)
        self.begin_transaction()
        log.debug("%s: initialised and in a transaction", self._who)

    def produce(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        partition: int | None = None,
        headers: Headers | None = None,
        timestamp_ms: int | None = None,
    ) -> None:
        producer = self._client()
        kwargs: dict[str, Any] = {"value": value, "key": key}
        if partition is not None:
            kwargs["partition"] = partition
        if headers:
            kwargs["headers"] = list(headers)
        if timestamp_ms is not None:
            kwargs["timestamp"] = timestamp_ms
        try:
            producer.produce(topic, **kwargs)
        except BufferError:
            self._produce_when_room(producer, topic, kwargs)
        except KafkaException as exc:
            raise self._mapped(exc, f"produce to {topic}", topic) from exc
        self._produced_since_poll += 1
        if self._produced_since_poll >= _POLL_EVERY:
            self._produced_since_poll = 0
            self._call(f"produce to {topic}", producer.poll, 0)

    def _produce_when_room(self, producer: _Producer, topic: str, kwargs: dict[str, Any]) -> None:
        # Back-pressure, not a retry: the local queue (queue.buffering.max.*) is full and drains as
        # brokers acknowledge. Serving delivery reports frees room; the wait is bounded.
        deadline = time.monotonic() + _QUEUE_FULL_WAIT_S
        while True:
            self._call(f"produce to {topic}", producer.poll, 0.05)
            try:
                producer.produce(topic, **kwargs)
                return
            except BufferError:
                if time.monotonic() >= deadline:
                    raise BrokerUnavailableError(
                        f"{self._who}: produce queue still full after {_QUEUE_FULL_WAIT_S:.0f} s "
                        f"({len(producer)} records unacknowledged)",
                        code="_QUEUE_FULL",
                    ) from None
            except KafkaException as exc:
                raise self._mapped(exc, f"produce to {topic}", topic) from exc

    def produce_batch(self, batch: ProduceBatch) -> None:
        producer = self._client()
        count = len(batch.values)
        keys = batch.keys if batch.keys is not None else itertools.repeat(None, count)
        if batch.topics is None and batch.partitions is None and batch.headers is None:
            topic = batch.topic
            if topic is None:
                raise ValueError("a batch without a topics column needs its topic")
            self._produce_plain(producer, topic, batch.values, keys)
            return
        topics = batch.topics if batch.topics is not None else itertools.repeat(batch.topic, count)
        partitions = batch.partitions if batch.partitions is not None else itertools.repeat(None, count)
        headers = batch.headers if batch.headers is not None else itertools.repeat(None, count)
        for topic, value, key, partition, record_headers in zip(topics, batch.values, keys, partitions, headers):
            self.produce(topic, value, key, partition, record_headers)

    def _produce_plain(self, producer: _Producer, topic: str, values: Any, keys: Any) -> None:
        # The hot loop of the sink: the C call and nothing else per record. Polls between chunks
        # serve statistics and error reports, as produce() does every _POLL_EVERY records.
        produce = producer.produce
        pairs = zip(values, keys)
        while True:
            chunk = list(itertools.islice(pairs, _POLL_EVERY))
            if not chunk:
                return
            for value, key in chunk:
                try:
                    produce(topic, value, key)
                except BufferError:
                    self._produce_when_room(producer, topic, {"value": value, "key": key})
                except KafkaException as exc:
                    raise self._mapped(exc, f"produce to {topic}", topic) from exc
            self._call(f"produce to {topic}", producer.poll, 0)

    def flush(self, timeout_s: float) -> None:
        producer = self._client()
        remaining = self._call("flush", producer.flush, timeout_s)
        self._produced_since_poll = 0
        self._raise_fatal("flush")
        if self._delivery_errors:
            first = self._delivery_errors[0]
            count = self._delivery_error_count
            cause = self._txn_log.error_name
            if first.code() == KafkaError._PURGE_QUEUE and cause is not None and hasattr(KafkaError, cause):
                # Purged because the transaction failed: its cause is the error worth reporting.
                first = KafkaError(getattr(KafkaError, cause), f"the transaction failed: {cause}")
            if self.transactional_id is None:
                # A non-transactional producer has no transaction that stays doomed: report the
                # failures once.
                self._reset_delivery_errors()
            raise self._map(first, f"flush ({count} records failed delivery)", topic=self._delivery_error_topic)
        if remaining > 0:
            raise BrokerUnavailableError(
                f"{self._who}: flush timed out after {timeout_s} s with {remaining} records "
                "unacknowledged",
                code="_TIMED_OUT",
            )

    def identity(self) -> ProducerIdentity:
        if self._identity is not None:
            return self._identity
        producer = self._client()
        if not self._initialised:
            # librdkafka acquires no producer id for a transactional producer before
            # init_transactions; waiting for one would only time out.
            raise InvalidTxnStateError(f"{self._who}: identity() before init_transactions()")
        # Only statistics generated after the last init or abort describe the current producer;
        # after a while of producing, the newest of them is already here.
        self._call("identity", producer.poll, 0)
        wanted_seq = self._stats_seq_at_init + 1
        deadline = time.monotonic() + _IDENTITY_WAIT_S
        last_eos: dict[str, Any] | None = None
        while time.monotonic() < deadline:
            if self._stats_seq < wanted_seq or self._stats_json is None:
                self._call("identity", producer.poll, 0.02)
                continue
            eos = json.loads(self._stats_json).get("eos")
            wanted_seq = self._stats_seq + 1
            if not isinstance(eos, dict):
                raise KafkaConnectorError(
                    f"{self._who}: librdkafka statistics carry no 'eos' object; is idempotence "
                    "enabled?"
                )
            last_eos = eos
            if eos.get("idemp_state") == "Assigned" and int(eos.get("producer_id", -1)) >= 0:
                self._identity = ProducerIdentity(
                    producer_id=int(eos["producer_id"]), producer_epoch=int(eos["producer_epoch"])
                )
                return self._identity
        self._raise_fatal("identity")
        raise KafkaConnectorError(
            f"{self._who}: no producer id in librdkafka statistics within {_IDENTITY_WAIT_S} s "
            f"(last eos: {last_eos})"
        )

    def abort_transaction(self, timeout_s: float) -> None:
        producer = self._client()
        self._identity = None
        try:
            self._call("abort_transaction", producer.abort_transaction, timeout_s)
        finally:
            self._reset_delivery_errors()
        self._mark_identity_changed()

    def close(self) -> None:
        # Dropping the last reference destroys the librdkafka handle without touching the open
        # transaction; Producer.close() would abort it, which the two-phase commit must not do.
        if self._producer is not None:
            log.debug("%s: released (an open transaction stays open)", self._who)
        self._producer = None

    def _reset_delivery_errors(self) -> None:
        self._delivery_errors.clear()
        self._delivery_error_count = 0
        self._delivery_error_topic = None
        self._txn_log.error_name = None


def _kafka_exception_in(exc: BaseException | None) -> KafkaException | None:
    """The KafkaException an exception was raised from, if any (cause/context chain)."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, KafkaException):
            return exc
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None


class ConfluentRecordReader:
    """Reads explicit offset ranges with one long-lived librdkafka consumer.

    The consumer never joins a group and never commits: its random group id only satisfies
    librdkafka. Partitions are (un)assigned incrementally, so one consumer serves many reads
    (creating one costs far more than a small read).
    """

    def __init__(
        self,
        bootstrap_servers: str,
        read_committed: bool,
        config: Mapping[str, Any],
        stall_timeout_s: float = 30.0,
    ) -> None:
        self.read_committed = read_committed
        self.stall_timeout_s = stall_timeout_s
        self._isolation = "read_committed" if read_committed else "read_uncommitted"
        conf: dict[str, Any] = _base_config(bootstrap_servers)
        # librdkafka's 1000 ms default backoff after a fetch halves throughput of range reads.
        conf["fetch.queue.backoff.ms"] = 10
        # A range that ends in a commit marker (every range the sink wrote does) only completes
        # with the EOF of an empty fetch at the LSO, which the broker holds for fetch.wait.max.ms
        # (500 ms by default); a reassigned partition also waits for the fetch in flight.
        conf["fetch.wait.max.ms"] = 50
        conf.update(config)
        self._config = dict(config)
        conf.update(
            {
                "group.id": f"eos-reader-{uuid.uuid4().hex}",
                "isolation.level": self._isolation,
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "enable.partition.eof": True,
                # Offsets are always explicit; an out-of-range one must fail, not silently jump.
                "auto.offset.reset": "error",
            }
        )
        try:
            self._consumer: _Consumer | None = _Consumer(conf)
        except KafkaException as exc:
            raise _map_exception(exc, "reader: create") from exc
        self._assigned: set[TopicPartition] = set()
        # Each read() bumps this; an older, abandoned read generator must not touch the newer
        # read's assignment when it is finally closed or garbage collected.
        self._read_seq = 0

    def _client(self) -> _Consumer:
        if self._consumer is None:
            raise KafkaConnectorError("reader: used after close()")
        return self._consumer

    def _unassign(self, partitions: Iterable[TopicPartition]) -> None:
        parts = [tp for tp in partitions if tp in self._assigned]
        if not parts or self._consumer is None:
            return
        self._consumer.incremental_unassign([_CkTopicPartition(tp.topic, tp.partition) for tp in parts])
        self._assigned.difference_update(parts)

    def read(self, ranges: Mapping[TopicPartition, tuple[int, int]]) -> Iterator[ConsumedRecord]:
        for batch in self.read_batches(ranges):
            yield from batch.records()

    def read_batches(
        self, ranges: Mapping[TopicPartition, tuple[int, int]], include_headers: bool = True
    ) -> Iterator[ConsumedBatch]:
        consumer = self._client()
        self._read_seq += 1
        read_seq = self._read_seq
        # A read abandoned half way leaves its partitions assigned; start from a clean slate.
        self._unassign(list(self._assigned))
        pending: dict[tuple[str, int], tuple[int, int]] = {}
        for tp, (start, end) in ranges.items():
            if start < 0 or end < start:
                raise ValueError(f"invalid offset range [{start}, {end}) for {tp}")
            if end > start:
                pending[(tp.topic, tp.partition)] = (start, end)
        if not pending:
            return
        assignment = [_CkTopicPartition(t, p, start) for (t, p), (start, _) in pending.items()]
        consumer.incremental_assign(assignment)
        self._assigned.update(TopicPartition(t, p) for t, p in pending)
        try:
            yield from self._consume(consumer, pending, read_seq, include_headers)
        finally:
            if self._read_seq == read_seq:
                self._unassign([TopicPartition(t, p) for t, p in pending])

    def _consume(
        self,
        consumer: _Consumer,
        pending: dict[tuple[str, int], tuple[int, int]],
        read_seq: int,
        include_headers: bool,
    ) -> Iterator[ConsumedBatch]:
        eof_seen: dict[tuple[str, int], int] = {}
        last_progress = time.monotonic()

        def finish(key: tuple[str, int]) -> None:
            del pending[key]
            self._unassign([TopicPartition(*key)])

        while pending:
            if self._read_seq != read_seq:
                raise KafkaConnectorError(
                    "reader: a newer read() started before this one finished; one reader serves "
                    "one read at a time"
                )
            messages = consumer.consume(num_messages=10000, timeout=0.05)
            if messages:
                last_progress = time.monotonic()
            records = [msg for msg in messages if msg.error() is None]
            if len(records) < len(messages):
                events = [msg for msg in messages if msg.error() is not None]
            else:
                events = []
            yield from self._batches(records, pending, include_headers, finish)
            for msg in events:
                key = (msg.topic(), msg.partition())
                bounds = pending.get(key)
                if bounds is None:
                    # Finished partition, or a stale event of an earlier assignment.
                    continue
                err = msg.error()
                if err.code() == KafkaError._PARTITION_EOF:
                    # The EOF offset is the end of what this isolation level can see (LSO under
                    # read_committed). A range ending in aborted records or control markers
                    # yields no record at end-1, so EOF is what ends it.
                    eof_offset = msg.offset()
                    eof_seen[key] = eof_offset
                    if eof_offset is not None and eof_offset >= bounds[1]:
                        finish(key)
                    continue
                self._raise_consumer_error(err, key, bounds)
            if pending and not messages:
                self._finish_by_position(consumer, pending, finish)
                if pending and time.monotonic() - last_progress > self.stall_timeout_s:
                    raise self._stalled(consumer, pending, eof_seen)

    @staticmethod
    def _batches(
        records: list[Any],
        pending: dict[tuple[str, int], tuple[int, int]],
        include_headers: bool,
        finish: Callable[[tuple[str, int]], None],
    ) -> Iterator[ConsumedBatch]:
        """The records of one consume() call that fall in their ranges, a batch per partition.

        The source's per-record cost is here, so it is built from list comprehensions over the
        messages (one C call each per column), not from a loop of appends."""
        if not records:
            return
        partitions = [msg.partition() for msg in records]
        topics = {msg.topic() for msg in records}
        if len(topics) == 1 and min(partitions) == max(partitions):
            groups: dict[tuple[str, int], list[Any]] = {(topics.pop(), partitions[0]): records}
        else:
            groups = {}
            for msg, partition in zip(records, partitions):
                groups.setdefault((msg.topic(), partition), []).append(msg)
        for key, group in groups.items():
            bounds = pending.get(key)
            if bounds is None:
                # Finished partition, or a stale message of an earlier assignment.
                continue
            start, end = bounds
            offsets = [msg.offset() for msg in group]
            lowest, highest = min(offsets), max(offsets)
            if highest >= end - 1:
                finish(key)
            if lowest < start or highest >= end:
                inside = [i for i, offset in enumerate(offsets) if start <= offset < end]
                if not inside:
                    continue
                group = [group[i] for i in inside]
                offsets = [offsets[i] for i in inside]
            timestamps = [msg.timestamp() for msg in group]
            yield ConsumedBatch(
                topic=key[0],
                partition=key[1],
                offsets=offsets,
                keys=[msg.key() for msg in group],
                values=[msg.value() for msg in group],
                timestamps_ms=[ts for _, ts in timestamps],
                timestamp_types=[TIMESTAMP_LOG_APPEND_TIME if ts_type == _CK_LOG_APPEND_TIME
                                 else TIMESTAMP_CREATE_TIME for ts_type, _ in timestamps],
                headers=[tuple(headers) if headers else () for headers in
                         (msg.headers() for msg in group)] if include_headers else None,
            )

    def _finish_by_position(
        self,
        consumer: _Consumer,
        pending: dict[tuple[str, int], tuple[int, int]],
        finish: Callable[[tuple[str, int]], None],
    ) -> None:
        # Belt and braces for EOF: when the consumer sits idle, its position past the range's end
        # (it skipped control markers and aborted records) also proves the range complete.
        positions = consumer.position([_CkTopicPartition(t, p) for t, p in pending])
        for tp in positions:
            key = (tp.topic, tp.partition)
            if key in pending and tp.offset >= 0 and tp.offset >= pending[key][1]:
                finish(key)

    def _raise_consumer_error(
        self, err: KafkaError, key: tuple[str, int], bounds: tuple[int, int]
    ) -> None:
        context = f"reader ({self._isolation}) {key[0]}-{key[1]} [{bounds[0]}, {bounds[1]})"
        if err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
            # The driver planned the range (DESCRIBE was allowed): what is refused is the fetch.
            raise authorization_error(self._config, ("READ",), TOPIC, key[0], error_name=err.name(),
                                      doing=f"the reader fetched {key[0]}-{key[1]}")
        if err.code() in _OUT_OF_RANGE_CODES or err.code() in _UNKNOWN_TOPIC_CODES or err.fatal():
            raise map_kafka_error(err, context)
        # Transport errors and the like: librdkafka reconnects; the stall timeout bounds the wait.
        log.warning("%s: %s: %s", context, err.name(), err.str())

    def _stalled(
        self,
        consumer: _Consumer,
        pending: dict[tuple[str, int], tuple[int, int]],
        eof_seen: dict[tuple[str, int], int],
    ) -> KafkaConnectorError:
        # An assigned partition of a missing topic produces no event at all, only silence.
        for topic in sorted({t for t, _ in pending}):
            try:
                metadata = consumer.list_topics(topic=topic, timeout=5)
            except KafkaException:
                continue
            found = metadata.topics.get(topic)
            if found is None or (
                found.error is not None and found.error.code() in _UNKNOWN_TOPIC_CODES
            ):
                return UnknownTopicError(f"reader ({self._isolation}): topic {topic} does not exist")
        positions = {
            (tp.topic, tp.partition): tp.offset
            for tp in consumer.position([_CkTopicPartition(t, p) for t, p in pending])
        }
        details = []
        for (t, p), (s, e) in sorted(pending.items()):
            eof = eof_seen.get((t, p))
            reason = (
                f"the partition ends at {eof}, before the range's end"
                if eof is not None
                else "no records or end of partition received"
            )
            details.append(f"{t}-{p} [{s}, {e}) at position {positions.get((t, p))}: {reason}")
        hint = " (under read_committed the end is the LSO)" if self.read_committed else ""
        return RetriableKafkaError(
            f"reader ({self._isolation}): no progress for {self.stall_timeout_s:.0f} s before the "
            f"ranges were complete{hint}: {'; '.join(details)}",
            code="READ_TIMED_OUT",
        )

    def close(self) -> None:
        if self._consumer is not None:
            consumer, self._consumer = self._consumer, None
            self._assigned.clear()
            consumer.close()


class ConfluentClusterAdmin:
    """Cluster administration through librdkafka's AdminClient."""

    def __init__(self, bootstrap_servers: str, config: Mapping[str, Any]) -> None:
        # No Python logger here: the admin handle is never polled, so forwarded log lines would
        # pile up in its queue.
        conf: dict[str, Any] = {"bootstrap.servers": bootstrap_servers}
        conf.update(config)
        self._config = dict(config)
        try:
            self._admin: AdminClient | None = AdminClient(conf)
        except KafkaException as exc:
            raise _map_exception(exc, "admin: create") from exc
        self._broker_configs: dict[str, str | None] | None = None

    def _client(self) -> AdminClient:
        if self._admin is None:
            raise KafkaConnectorError("admin: used after close()")
        return self._admin

    def list_topics(self) -> list[str]:
        try:
            metadata = self._client().list_topics(timeout=_READ_TIMEOUT_S)
        except KafkaException as exc:
            raise _map_exception(exc, "admin: list topics") from exc
        return sorted(name for name in metadata.topics if name not in _INTERNAL_TOPICS)

    def partitions(self, topic: str) -> list[int]:
        # DescribeTopics, not a metadata request for the topic: the latter may auto-create it.
        future = self._client().describe_topics(
            TopicCollection([topic]), request_timeout=_READ_TIMEOUT_S
        )[topic]
        try:
            description = future.result()
        except KafkaException as exc:
            raise _map_exception(exc, f"admin: describe topic {topic}",
                                 self._denied(("DESCRIBE",), TOPIC, topic, f"describing topic {topic}")) from exc
        return sorted(p.id for p in description.partitions)

    def create_topic(
        self, topic: str, partitions: int, config: Mapping[str, str] | None = None
    ) -> None:
        new_topic = NewTopic(
            topic,
            num_partitions=partitions,
            replication_factor=-1,  # the broker's default.replication.factor
            config=dict(config or {}),
        )
        future = self._client().create_topics(
            [new_topic], operation_timeout=_ADMIN_TIMEOUT_S, request_timeout=_ADMIN_TIMEOUT_S
        )[topic]
        try:
            future.result()
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if not (isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_ALREADY_EXISTS):
                raise _map_exception(exc, f"admin: create topic {topic}",
                                     self._denied(("CREATE",), TOPIC, topic, f"creating topic {topic}")) from exc
            # Creating is idempotent: setup code re-runs after crashes.
            log.info("admin: topic %s already exists", topic)
        self._wait_for_leaders(topic, partitions)

    def _wait_for_leaders(self, topic: str, partitions: int) -> None:
        # CreateTopics returns before every broker's metadata shows the topic; a producer that
        # looks it up at once could see UNKNOWN_TOPIC_OR_PART.
        deadline = time.monotonic() + _ADMIN_TIMEOUT_S
        while True:
            metadata = self._client().list_topics(topic=topic, timeout=_ADMIN_TIMEOUT_S)
            found = metadata.topics.get(topic)
            if (
                found is not None
                and found.error is None
                and len(found.partitions) >= partitions
                and all(p.leader >= 0 for p in found.partitions.values())
            ):
                return
            if time.monotonic() >= deadline:
                raise BrokerUnavailableError(
                    f"admin: topic {topic} created but its partitions have no leader after "
                    f"{_ADMIN_TIMEOUT_S:.0f} s",
                    code="LEADER_NOT_AVAILABLE",
                )
            time.sleep(0.05)

    def list_offsets(
        self,
        partitions: Iterable[TopicPartition],
        spec: OffsetSpec,
        read_committed: bool = True,
    ) -> dict[TopicPartition, int]:
        parts = list(dict.fromkeys(partitions))
        if not parts:
            return {}
        if spec == "earliest":
            ck_spec = _CkOffsetSpec.earliest()
        elif spec == "latest":
            ck_spec = _CkOffsetSpec.latest()
        elif isinstance(spec, int) and not isinstance(spec, bool):
            ck_spec = _CkOffsetSpec.for_timestamp(spec)
        else:
            raise ValueError(f"offset spec must be 'earliest', 'latest' or a timestamp: {spec!r}")
        result = self._list_offsets(parts, ck_spec, read_committed)
        if isinstance(spec, int):
            # No record at or after the timestamp: Kafka answers -1, the seam promises the end.
            missing = [tp for tp, offset in result.items() if offset < 0]
            if missing:
                result.update(self._list_offsets(missing, _CkOffsetSpec.latest(), read_committed))
        # librdkafka reports a partition whose leader just went down as a success with offset -1001
        # (OFFSET_INVALID) now and then: never hand that on as a position.
        invalid = sorted(str(tp) for tp, offset in result.items() if offset < 0)
        if invalid:
            raise RetriableKafkaError(f"admin: list offsets of {', '.join(invalid)}: no valid offset (a leader "
                                      "moving?)", code="LEADER_NOT_AVAILABLE")
        return result

    def _list_offsets(
        self, parts: list[TopicPartition], ck_spec: Any, read_committed: bool
    ) -> dict[TopicPartition, int]:
        isolation = IsolationLevel.READ_COMMITTED if read_committed else IsolationLevel.READ_UNCOMMITTED
        request = {_CkTopicPartition(tp.topic, tp.partition): ck_spec for tp in parts}
        try:
            futures = self._client().list_offsets(
                request, isolation_level=isolation, request_timeout=_READ_TIMEOUT_S
            )
        except KafkaException as exc:
            raise _map_exception(exc, "admin: list offsets") from exc
        result: dict[TopicPartition, int] = {}
        for ck_tp, future in futures.items():
            tp = TopicPartition(ck_tp.topic, ck_tp.partition)
            try:
                result[tp] = future.result().offset
            except KafkaException as exc:
                err = exc.args[0] if exc.args else None
                if isinstance(err, KafkaError) and err.code() == KafkaError._NOENT:
                    # "No leaders found": a missing topic, or a partition without a leader.
                    self.partitions(tp.topic)  # raises UnknownTopicError for the former
                    raise RetriableKafkaError(
                        f"admin: list offsets of {tp}: no leader", code="LEADER_NOT_AVAILABLE"
                    ) from exc
                raise _map_exception(exc, f"admin: list offsets of {tp}",
                                     self._denied(("DESCRIBE",), TOPIC, tp.topic, f"listing offsets of {tp}")) from exc
        return result

    def broker_config(self, name: str) -> str | None:
        if self._broker_configs is None:
            self._broker_configs = self._describe_broker_configs()
        return self._broker_configs.get(name)

    def _describe_broker_configs(self) -> dict[str, str | None]:
        # Any live broker will do: every broker of a cluster has the limits that matter here. All
        # are asked at once and the first answer wins, because the metadata still names a node for
        # a few seconds after it went down, and a request to it waits for the whole timeout.
        admin = self._client()
        try:
            brokers = sorted(admin.list_topics(timeout=_READ_TIMEOUT_S).brokers)
        except KafkaException as exc:
            raise _map_exception(exc, "admin: cluster metadata") from exc
        if not brokers:
            raise BrokerUnavailableError("admin: cluster metadata lists no broker")
        # librdkafka takes one BROKER resource per call: one call per broker, all in flight at once.
        by_future = {}
        for broker in brokers:
            resource = ConfigResource(ResourceType.BROKER, str(broker))
            by_future[admin.describe_configs([resource], request_timeout=_READ_TIMEOUT_S)[resource]] = broker
        failures: list[str] = []
        for future in concurrent.futures.as_completed(by_future):
            broker = by_future[future]
            try:
                entries = future.result()
            except KafkaException as exc:
                mapped = _map_exception(exc, f"admin: describe configs of broker {broker}",
                                        self._denied(("DESCRIBE_CONFIGS",), CLUSTER, CLUSTER_NAME,
                                                     f"reading the configuration of broker {broker}"))
                if not isinstance(mapped, RetriableKafkaError):
                    raise mapped from exc
                failures.append(str(mapped))
                continue
            return {entry_name: entry.value for entry_name, entry in entries.items()}
        raise BrokerUnavailableError(f"admin: describe configs: no broker of {brokers} answered: "
                                     + "; ".join(failures), code="BROKER_NOT_AVAILABLE")

    def commit_group_offsets(self, group_id: str, offsets: Mapping[TopicPartition, int]) -> None:
        if not offsets:
            return
        request = ConsumerGroupTopicPartitions(
            group_id,
            [_CkTopicPartition(tp.topic, tp.partition, offset) for tp, offset in offsets.items()],
        )
        future = self._client().alter_consumer_group_offsets(
            [request], request_timeout=_ADMIN_TIMEOUT_S
        )[group_id]
        doing = f"committing offsets to consumer group {group_id}"
        try:
            result = future.result()
        except KafkaException as exc:
            raise _map_exception(exc, f"admin: commit offsets of group {group_id}",
                                 self._denied(("READ",), GROUP, group_id, doing)) from exc
        for ck_tp in result.topic_partitions or []:
            if ck_tp.error is not None:
                raise map_kafka_error(
                    ck_tp.error,
                    f"admin: commit offset of group {group_id} for {ck_tp.topic}-{ck_tp.partition}",
                    self._denied(("READ",), TOPIC, ck_tp.topic, doing),
                )

    def _denied(self, operations: tuple[str, ...], resource_type: str, name: str, doing: str) -> Denied:
        """What a refused admin request needed, for ``map_kafka_error``."""
        def denied(error_name: str) -> KafkaAuthorizationError:
            return authorization_error(self._config, operations, resource_type, name, error_name=error_name,
                                       doing=doing)
        return denied

    def close(self) -> None:
        # AdminClient has no close(); dropping it destroys the handle.
        self._admin = None


class RealKafkaClients:
    """``KafkaClients`` for a real cluster. ``config`` is librdkafka client configuration passed
    to every client (security settings, timeouts); per-client ``config`` arguments override it."""

    def __init__(
        self,
        bootstrap_servers: str,
        config: Mapping[str, Any] | None = None,
        reader_stall_timeout_s: float = 30.0,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.config: dict[str, Any] = dict(config or {})
        self.reader_stall_timeout_s = reader_stall_timeout_s

    def _merged(self, config: Mapping[str, Any] | None) -> dict[str, Any]:
        merged = dict(self.config)
        merged.update(config or {})
        return merged

    def producer(
        self, transactional_id: str | None, config: Mapping[str, str] | None = None
    ) -> ConfluentProducer:
        return ConfluentProducer(self.bootstrap_servers, transactional_id, self._merged(config))

    def reader(
        self, read_committed: bool = True, config: Mapping[str, str] | None = None
    ) -> ConfluentRecordReader:
        return ConfluentRecordReader(
            self.bootstrap_servers,
            read_committed,
            self._merged(config),
            stall_timeout_s=self.reader_stall_timeout_s,
        )

    def admin(self) -> ConfluentClusterAdmin:
        return ConfluentClusterAdmin(self.bootstrap_servers, self.config)

    def txn_control(self) -> TransactionControl:
        from connectors.kafka.txn_control import KafkaPythonTransactionControl

        return KafkaPythonTransactionControl(self.bootstrap_servers, self.config)
