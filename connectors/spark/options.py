"""Options of the ``kafka-eos`` format: Spark's Kafka connector names, plus our ``eos.*`` ones.

Spark hands options over case-insensitively (lower-cased keys), so every lookup here is by
lower-case name, and error messages use the documented spelling. An unknown option is echoed as
the user typed it where that is known (the foreachBatch helper, direct calls) and said to be
lower-cased where Spark passed it, with the closest valid option (``difflib``).
"""

from __future__ import annotations

import difflib
import json
import os
import posixpath
from dataclasses import dataclass
from typing import Mapping

from connectors.kafka.clients.broker_retry import (
    DEFAULT_RETRY_INTERVAL_MS,
    DEFAULT_TIMEOUT_MS,
    TIMEOUT_OPTION,
    BrokerRetryPolicy,
)
from connectors.kafka.clients import TopicPartition
from connectors.kafka.sink.config import (
    DEFAULT_CHECKPOINT_TIMEOUT_MS,
    DEFAULT_RESTART_BUDGET_MS,
    DEFAULT_TRANSACTION_TIMEOUT_MS,
    DeliveryGuarantee,
    KafkaSinkConfig,
    default_transactional_id_prefix,
)
from connectors.kafka.source import KafkaSourceConfig, parse_offsets_json as _parse_offsets_json
from connectors.spark.errors import KafkaEosOptionError
from twophase.state_storage import canonical_location
from twophase.errors import UnsupportedStateLocationError

# Spark's own options that reach a data source; never ours to refuse.
_SPARK_INTERNAL = {"checkpointlocation", "path", "queryname"}

SOURCE_OPTIONS = (
    "kafka.bootstrap.servers", "kafka.*", "subscribe", "subscribePattern", "assign",
    "startingOffsets", "endingOffsets", "startingOffsetsByTimestamp", "maxOffsetsPerTrigger",
    "minPartitions", "eos.maxPartitions", "failOnDataLoss", "includeHeaders", "eos.commitOffsetsToGroup",
    "fetchOffset.numRetries", "fetchOffset.retryIntervalMs", "eos.brokerRetryTimeoutMs",
)
SINK_OPTIONS = (
    "kafka.bootstrap.servers", "kafka.*", "topic", "includeHeaders",
    "eos.deliveryGuarantee", "eos.transactionalIdPrefix", "eos.transactionTimeoutMs", "eos.commitParallelism",
    "eos.checkpointTimeoutMs", "eos.restartBudgetMs", "eos.stateDir", "eos.retainedCheckpoints",
    "eos.adoptExistingQuery", "eos.brokerRetryTimeoutMs",
)
STATE_DIR_NAME = "kafka-eos"


def parse_offsets_json(value: str, option: str) -> dict[TopicPartition, int]:
    try:
        return _parse_offsets_json(value, option)
    except ValueError as exc:
        raise KafkaEosOptionError(str(exc)) from None


def _lowercased_by_spark(options: Mapping[str, str]) -> bool:
    """Whether ``options`` came through Spark, which keeps option names lower-cased only
    (pyspark's ``CaseInsensitiveDict``): what the user typed is then known only in lower case."""
    return type(options).__name__ == "CaseInsensitiveDict"


def unknown_option_message(typed: list[str], valid: tuple[str, ...], role: str, *, lowercased: bool = False) -> str:
    """One line: each unknown option as typed with the closest valid one (where one is close),
    then every valid option. ``lowercased``: Spark passed the names lower-cased, so the user's
    spelling is lost, and the message says so."""
    exact = {name.lower(): name for name in valid if not name.endswith("*")}
    named = []
    for key in typed:
        close = difflib.get_close_matches(key.lower(), list(exact), n=1, cutoff=0.6)
        named.append(f"{key!r} (did you mean {exact[close[0]]!r}?)" if close else repr(key))
    plural = "s" if len(typed) > 1 else ""
    spelling = f" (name{plural} as Spark passes {'them' if plural else 'it'}, lower-cased)" if lowercased else ""
    return (f"unknown kafka-eos {role} option{plural} {', '.join(named)}{spelling}; "
            f"valid {role} options: {', '.join(valid)}")


def _check_known(options: Mapping[str, str], valid: tuple[str, ...], role: str) -> None:
    exact = {name.lower() for name in valid if not name.endswith("*")}
    prefixes = tuple(name[:-1].lower() for name in valid if name.endswith("*"))
    unknown = sorted((key for key in options
                      if key.lower() not in exact and key.lower() not in _SPARK_INTERNAL
                      and not key.lower().startswith(prefixes)), key=str.lower)
    if unknown:
        raise KafkaEosOptionError(unknown_option_message(unknown, valid, role,
                                                         lowercased=_lowercased_by_spark(options)))


def _by_lower_case_name(options: Mapping[str, str]) -> dict[str, str]:
    return {key.lower(): value for key, value in options.items()}


def _get(options: Mapping[str, str], name: str) -> str | None:
    value = options.get(name.lower())
    if value is None:
        value = options.get(name)
    return None if value is None else str(value)


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = _get(options, name)
    if raw is None:
        return default
    if raw.strip().lower() in ("true", "false"):
        return raw.strip().lower() == "true"
    raise KafkaEosOptionError(f"option {name} must be true or false, got {raw!r}")


def _int(options: Mapping[str, str], name: str, default: int | None, minimum: int) -> int | None:
    raw = _get(options, name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise KafkaEosOptionError(f"option {name} must be an integer >= {minimum}, got {raw!r}") from None
    if value < minimum:
        raise KafkaEosOptionError(f"option {name} must be an integer >= {minimum}, got {value}")
    return value


def _client_config(options: Mapping[str, str]) -> dict[str, str]:
    """``kafka.*`` options minus the prefix, passed to the Kafka clients as they are."""
    config = {}
    for key, value in options.items():
        if key.lower().startswith("kafka.") and key.lower() != "kafka.bootstrap.servers":
            config[key[len("kafka."):].lower()] = str(value)
    for forbidden, reason in (
        ("group.id", "offsets live in Spark's checkpoint, not in a consumer group "
                     "(eos.commitOffsetsToGroup mirrors them to a group for lag monitoring)"),
        ("enable.auto.commit", "offsets live in Spark's checkpoint"),
        ("transactional.id", "the sink names its transactions itself (eos.transactionalIdPrefix)"),
        ("isolation.level", "the source always reads read_committed, the only level that keeps "
                            "aborted records out"),
    ):
        if forbidden in config:
            raise KafkaEosOptionError(f"option kafka.{forbidden} is not supported: {reason}")
    return config


def _bootstrap(options: Mapping[str, str]) -> str:
    servers = _get(options, "kafka.bootstrap.servers")
    if not servers:
        raise KafkaEosOptionError("option kafka.bootstrap.servers is required, e.g. 'host1:9092,host2:9092'")
    return servers


def _broker_retry(options: Mapping[str, str], *, source: bool) -> BrokerRetryPolicy:
    """eos.brokerRetryTimeoutMs bounds, in time, the retries of requests a broker restart fails;
    the source also takes Spark's fetchOffset.numRetries (a bound in attempts, none by default)
    and fetchOffset.retryIntervalMs (the first wait)."""
    # The sink's commit retries need some time (0 would give up a commit at its first hiccup).
    timeout_ms = _int(options, TIMEOUT_OPTION, DEFAULT_TIMEOUT_MS, 0 if source else 1)
    assert timeout_ms is not None
    if not source:
        return BrokerRetryPolicy(timeout_ms=timeout_ms)
    interval_ms = _int(options, "fetchOffset.retryIntervalMs", DEFAULT_RETRY_INTERVAL_MS, 0)
    assert interval_ms is not None
    return BrokerRetryPolicy(timeout_ms=timeout_ms, retry_interval_ms=interval_ms,
                             max_retries=_int(options, "fetchOffset.numRetries", None, 0))


@dataclass(frozen=True)
class SourceOptions:
    config: KafkaSourceConfig
    max_offsets_per_trigger: int | None
    min_partitions: int | None
    #: eos.maxPartitions: at most this many read tasks a batch; ranges share a task beyond it.
    max_partitions: int | None
    include_headers: bool


def parse_source_options(options: Mapping[str, str], streaming: bool) -> SourceOptions:
    _check_known(options, SOURCE_OPTIONS, "source")
    options = _by_lower_case_name(options)
    servers = _bootstrap(options)
    subscribe = _get(options, "subscribe")
    pattern = _get(options, "subscribePattern")
    assign_raw = _get(options, "assign")
    assign = None
    if assign_raw is not None:
        try:
            parsed = json.loads(assign_raw)
            assign = {str(t): [int(p) for p in ps] for t, ps in parsed.items()}
        except (ValueError, TypeError, AttributeError):
            raise KafkaEosOptionError(
                f'option assign must be JSON like {{"topicA":[0,1],"topicB":[2,4]}}, got {assign_raw!r}'
            ) from None
    starting = _get(options, "startingOffsets") or ("latest" if streaming else "earliest")
    starting_offsets = starting if starting in ("earliest", "latest") else parse_offsets_json(starting, "startingOffsets")
    by_time_raw = _get(options, "startingOffsetsByTimestamp")
    starting_timestamps = None
    if by_time_raw is not None:
        starting_timestamps = parse_offsets_json(by_time_raw, "startingOffsetsByTimestamp")
    ending_raw = _get(options, "endingOffsets")
    if ending_raw is not None and streaming:
        raise KafkaEosOptionError("option endingOffsets is for batch queries (spark.read) only")
    ending: str | dict[TopicPartition, int] | None = None
    if not streaming:
        ending_raw = ending_raw or "latest"
        ending = ending_raw if ending_raw in ("earliest", "latest") else parse_offsets_json(ending_raw, "endingOffsets")
    max_per_trigger = _int(options, "maxOffsetsPerTrigger", None, 1)
    if max_per_trigger is not None and not streaming:
        raise KafkaEosOptionError("option maxOffsetsPerTrigger is for streaming queries only")
    try:
        config = KafkaSourceConfig(
            bootstrap_servers=servers,
            subscribe=[t.strip() for t in subscribe.split(",") if t.strip()] if subscribe else (),
            subscribe_pattern=pattern,
            assign=assign,
            starting_offsets=starting_offsets,
            starting_timestamps=starting_timestamps,
            ending_offsets=ending,
            fail_on_data_loss=_bool(options, "failOnDataLoss", True),
            commit_offsets_to_group=_get(options, "eos.commitOffsetsToGroup"),
            client_config=_client_config(options),
            broker_retry=_broker_retry(options, source=True),
        )
    except KafkaEosOptionError:
        raise
    except ValueError as exc:
        raise KafkaEosOptionError(str(exc)) from exc
    min_partitions = _int(options, "minPartitions", None, 1)
    max_partitions = _int(options, "eos.maxPartitions", None, 1)
    if min_partitions is not None and max_partitions is not None and max_partitions < min_partitions:
        raise KafkaEosOptionError(f"option eos.maxPartitions must be >= minPartitions ({min_partitions}), "
                                  f"got {max_partitions}")
    return SourceOptions(
        config=config,
        max_offsets_per_trigger=max_per_trigger,
        min_partitions=min_partitions,
        max_partitions=max_partitions,
        include_headers=_bool(options, "includeHeaders", False),
    )


@dataclass(frozen=True)
class SinkOptions:
    config: KafkaSinkConfig
    state_dir: str
    retained_checkpoints: int
    include_headers: bool
    #: The query's checkpointLocation (canonical), where Spark keeps its query id and commit log.
    checkpoint_location: str | None = None
    #: eos.adoptExistingQuery: the query committed batches before it used this sink's state.
    adopt_existing_query: bool = False
    #: A streaming query's sink (writeStream), not a batch write.
    streaming: bool = False


def _state_location(value: str, option: str) -> str:
    """The canonical spelling of a location the kit opens itself (see twophase.state_storage)."""
    try:
        return canonical_location(value)
    except UnsupportedStateLocationError as exc:
        raise KafkaEosOptionError(f"option {option}: {exc}") from None


def state_dir_under(location: str) -> str:
    """The sink's default state folder in a query's ``checkpointLocation``:
    ``<checkpointLocation>/kafka-eos`` (a URI joined as a URI, a path as a local path)."""
    is_uri = ":" in location.split("/", 1)[0]
    return posixpath.join(location, STATE_DIR_NAME) if is_uri else os.path.join(location, STATE_DIR_NAME)


def parse_sink_options(options: Mapping[str, str], *, streaming: bool) -> SinkOptions:
    _check_known(options, SINK_OPTIONS, "sink")
    options = _by_lower_case_name(options)
    servers = _bootstrap(options)
    topic = _get(options, "topic")
    guarantee_raw = _get(options, "eos.deliveryGuarantee") or DeliveryGuarantee.EXACTLY_ONCE.value
    try:
        guarantee = DeliveryGuarantee.parse(guarantee_raw)
    except ValueError as exc:
        raise KafkaEosOptionError(f"option eos.deliveryGuarantee: {exc}") from None
    client = _client_config(options)
    # Kafka users will reach for the producer's own name; both spellings mean the same setting.
    alias = client.pop("transaction.timeout.ms", None)
    ours = _int(options, "eos.transactionTimeoutMs", None, 1)
    from_alias = _int({"kafka.transaction.timeout.ms": alias}, "kafka.transaction.timeout.ms", None, 1) \
        if alias is not None else None
    if ours is not None and from_alias is not None and ours != from_alias:
        raise KafkaEosOptionError(
            f"eos.transactionTimeoutMs={ours} and kafka.transaction.timeout.ms={from_alias} disagree; set one")
    transaction_timeout = ours or from_alias or DEFAULT_TRANSACTION_TIMEOUT_MS

    state_dir_raw = _get(options, "eos.stateDir")
    checkpoint_location = _get(options, "checkpointLocation")
    sink_identity = f"{servers}|{topic or '<per-record topics>'}"
    location = _state_location(checkpoint_location, "checkpointLocation") if checkpoint_location else None
    if streaming and not location and (guarantee is DeliveryGuarantee.EXACTLY_ONCE or not state_dir_raw):
        raise KafkaEosOptionError(
            "the exactly-once kafka-eos sink needs the query's checkpointLocation option "
            "(.option('checkpointLocation', ...) on writeStream): its state lives there (or in "
            "eos.stateDir) and is bound to the query id Spark keeps there. Spark does not show "
            "spark.sql.streaming.checkpointLocation to data sources"
        )
    if state_dir_raw:
        state_dir = _state_location(state_dir_raw, "eos.stateDir")
    elif streaming:
        state_dir = state_dir_under(location or "")
    else:
        state_dir = os.path.join(os.path.expanduser("~"), ".kafka-eos", "batch-writes",
                                 default_transactional_id_prefix("batch", sink_identity))
    prefix = _get(options, "eos.transactionalIdPrefix") or default_transactional_id_prefix(state_dir, sink_identity)
    try:
        config = KafkaSinkConfig(
            bootstrap_servers=servers,
            topic=topic,
            delivery_guarantee=guarantee,
            transactional_id_prefix=prefix,
            transaction_timeout_ms=transaction_timeout,
            checkpoint_timeout_ms=_int(options, "eos.checkpointTimeoutMs", DEFAULT_CHECKPOINT_TIMEOUT_MS, 1) or 0,
            restart_budget_ms=_int(options, "eos.restartBudgetMs", DEFAULT_RESTART_BUDGET_MS, 0) or 0,
            commit_parallelism=_int(options, "eos.commitParallelism", 8, 1) or 0,
            # The sink's requests to the brokers (guardrails, EndTxn, listings) retry within it.
            commit_retry_timeout_s=_broker_retry(options, source=False).timeout_ms / 1000,
            client_config=client,
        )
    except KafkaEosOptionError:
        raise
    except ValueError as exc:
        raise KafkaEosOptionError(str(exc)) from exc
    return SinkOptions(
        config=config,
        state_dir=state_dir,
        retained_checkpoints=_int(options, "eos.retainedCheckpoints", 3, 1) or 3,
        include_headers=_bool(options, "includeHeaders", True),
        checkpoint_location=location,
        adopt_existing_query=_bool(options, "eos.adoptExistingQuery", False),
        streaming=streaming,
    )
