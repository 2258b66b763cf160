"""The transactional producer of the data path: librdkafka behind the ``ProducerClient`` seam.

Nothing here retries on its own: a transient condition surfaces as ``RetriableKafkaError`` (or its
subclass ``BrokerUnavailableError``) and the caller decides, with tenacity, whether to try again.
The only waits are bounded waits for an expected state (statistics after ``init_transactions``,
room in the producer queue).
"""

from __future__ import annotations

import itertools
import json
import logging
import re
import time
from typing import Any, Callable, Mapping

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka import Producer as _Producer

from connectors.kafka.authorization import CLUSTER, CLUSTER_NAME, TOPIC, authorization_error, transactional_id_error
from connectors.kafka.clients import Headers, ProduceBatch, ProducerIdentity
from connectors.kafka.clients.java_client_settings import DEFAULT_PARTITIONER
from connectors.kafka.kafka_errors import (
    BrokerUnavailableError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    KafkaAuthorizationError,
    KafkaConnectorError,
    ProducerFencedError,
    TransactionTimeoutRefusedError,
)
from connectors.kafka.clients._confluent.librdkafka import (
    LIBRDKAFKA_LOG,
    base_config,
    error_type_of,
    kafka_exception_in,
    map_exception,
    map_kafka_error,
)
from twophase.errors import InvalidValueError

log = logging.getLogger(__name__)

# A statistics event every 20 ms keeps identity() fast after init_transactions; librdkafka only
# reports the producer id and epoch there (object ``eos``), and a task's pre-commit waits for the
# first event after its init (at 100 ms, a small task waited ~25 ms for it). An event is only
# kept as text until identity() parses one.
_STATS_INTERVAL_MS = 20
_IDENTITY_WAIT_S = 5.0
# Produce calls between two poll(0): serves queued statistics and error reports so they cannot
# pile up in a producer that writes for a long time without flushing.
_POLL_EVERY = 1000
_QUEUE_FULL_WAIT_S = 60.0


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
        LIBRDKAFKA_LOG.log(level, fmt, *args)
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
        conf: dict[str, Any] = base_config(bootstrap_servers)
        conf["logger"] = self._txn_log
        # Java's default partitioning (murmur2 of the key, records without a key spread sticky and
        # evenly), so keyed records land where a Java producer puts them; a user's
        # kafka.partitioner (or kafka.partitioner.class, translated) wins.
        conf.update({"enable.idempotence": True, "linger.ms": 5, "partitioner": DEFAULT_PARTITIONER})
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
            raise map_exception(exc, f"{self._who}: create") from exc
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
            cause = kafka_exception_in(exc) or self._queued_fatal()
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
            return kafka_exception_in(queued)
        return None

    def _fatal_without_exception(self, context: str) -> KafkaConnectorError | None:
        """What went wrong when confluent-kafka 2.16 returns NULL "without setting an exception".

        It does so now and then when a producer is fenced (design/exactly-once-protocol.md), and a
        call can meet the bare _FATAL before the error behind it is queued: the fatal error is
        lost on the way, but the error callback or the failed deliveries still say what it was.
        A transactional producer whose records fail with an old epoch has been fenced
        (librdkafka raises _FENCED for exactly that)."""
        if self._fatal_error is not None:
            return self._map(self._fatal_error, context)
        if self.transactional_id is not None:
            for err in self._delivery_errors:
                if error_type_of(err) in (ProducerFencedError, InvalidProducerEpochError):
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

    def look_up(self, topic: str, timeout_s: float) -> None:
        # librdkafka looks up the transaction coordinator at once only if a broker connection
        # is up; on a handle just made it often is not, and the lookup is retried after 500 ms
        # (half of the inits measured on a local broker took 510 ms instead of 60). The
        # topic's metadata, which the first produce needs anyway, waits for a connection. The
        # first answer comes over the bootstrap connection, which librdkafka then replaces by
        # one to the broker it names; the second waits for that one (0 of 30 inits slow).
        for _ in range(2):
            self._call("metadata", self._client().list_topics, topic, timeout_s)

    def start_transaction(self, timeout_s: float, topic: str | None = None) -> None:
        if topic is not None:
            self.look_up(topic, timeout_s)
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
                raise InvalidValueError("a batch without a topics column needs its topic")
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
