"""What every librdkafka (confluent-kafka) handle of the kit shares: its base configuration, where
its log lines go, and how its errors become the connector's, through the one table of
``clients/error_table.py``."""

from __future__ import annotations

import functools
import logging
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from connectors.kafka.authorization import Denied
from connectors.kafka.clients.error_table import error_type, kafka_error
from connectors.kafka.kafka_errors import KafkaConnectorError

#: librdkafka's own log lines (configuration warnings, broker state) go through Python logging
#: rather than straight to stderr, so applications control them like any other library's.
LIBRDKAFKA_LOG = logging.getLogger("connectors.kafka.clients._confluent.librdkafka")


#: librdkafka's first reconnect backoff (its default: 100 ms; the Java client's: 50 ms). Over
#: half of it, librdkafka also holds back any new connection a handle wants for its cluster
#: (``still suppressed for 49ms`` in its debug log). A handle just made hits that once: the
#: bootstrap connection is dropped for one to the broker the metadata names, which then waits
#: ~50 ms. A write task makes a producer for every transaction, so it paid those 50 ms in every
#: task of every batch (55 of a task's 58 ms of producer set-up). At 20 ms the wait is librdkafka's
#: floor of 11 ms; backoffs after a broker failure still grow to reconnect.backoff.max.ms (10 s).
#: A ``kafka.reconnect.backoff.ms`` option wins over it.
RECONNECT_BACKOFF_MS = 20


def base_config(bootstrap_servers: str) -> dict[str, Any]:
    """What every handle starts from. Its log lines go to :data:`LIBRDKAFKA_LOG` when the handle is
    polled, so every handle of the kit is polled on each use."""
    return {"bootstrap.servers": bootstrap_servers, "reconnect.backoff.ms": RECONNECT_BACKOFF_MS,
            "logger": LIBRDKAFKA_LOG}


@functools.cache
def has_builtin_feature(feature: str) -> bool:
    """Whether the installed librdkafka was built with ``feature`` (one of its ``builtin.features``,
    e.g. ``sasl_gssapi``). librdkafka's documented check: a handle asked for a feature its build
    lacks is refused at creation. The probe connects nowhere (no bootstrap servers), and logs
    nothing (log_level 0: it would say that it has no bootstrap servers)."""
    try:
        Producer({"builtin.features": feature, "log_level": 0})
    except KafkaException:
        return False
    return True


def _table_key(err: KafkaError) -> int | str:
    # librdkafka's positive codes are Kafka's; its negative ones are local errors, known by name.
    code = err.code()
    return code if code >= 0 else err.name()


def error_type_of(err: KafkaError) -> type[KafkaConnectorError] | None:
    """The connector error type a librdkafka error becomes; None where the table has none."""
    return error_type(_table_key(err))


def map_kafka_error(err: KafkaError | None, context: str, denied: Denied | None = None) -> KafkaConnectorError:
    """Translate a librdkafka error into the connector's error types. ``context`` says what was
    being done (and for whom), so the message stands on its own in a log; ``denied`` says what a
    refused request needed, when the caller knows (the principal, the operation, the resource)."""
    if err is None:
        return KafkaConnectorError(f"{context}: unknown Kafka error")
    return kafka_error(_table_key(err), err.name(), f"{context}: {err.name()}: {err.str()}",
                       retriable=err.retriable() and not err.fatal(), denied=denied)


def map_exception(exc: KafkaException, context: str, denied: Denied | None = None) -> KafkaConnectorError:
    err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
    mapped = map_kafka_error(err, context, denied)
    mapped.__cause__ = exc
    return mapped


def kafka_exception_in(exc: BaseException | None) -> KafkaException | None:
    """The KafkaException an exception was raised from, if any (cause/context chain)."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, KafkaException):
            return exc
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None
