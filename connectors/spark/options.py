"""Options of the ``kafka-eos`` format: Spark's Kafka connector names, plus our ``eos.*`` ones.

Spark hands options over case-insensitively (lower-cased keys), so every lookup here is by
lower-case name, and error messages use the documented spelling. An unknown option is echoed as
the user typed it where that is known (the foreachBatch helper, direct calls) and said to be
lower-cased where Spark passed it, with the closest valid option (``difflib``).
"""

from __future__ import annotations

import difflib
import json
import logging
import os
import posixpath
import re
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
from connectors.kafka.source import (
    BATCH_GROUP_ID_PREFIX,
    NO_MATCH_STRATEGIES,
    STREAMING_GROUP_ID_PREFIX,
    KafkaSourceConfig,
    parse_offsets_json,
    unique_group_id,
)
from connectors.spark.spark_errors import KafkaEosOptionError
from twophase.errors import UnsupportedStateLocationError
from twophase.storage.state_storage import canonical_location

log = logging.getLogger(__name__)

# Spark's own options that reach a data source; never ours to refuse.
_SPARK_INTERNAL = {"checkpointlocation", "path", "queryname"}

SOURCE_OPTIONS = (
    "kafka.bootstrap.servers", "kafka.*", "subscribe", "subscribePattern", "assign",
    "startingOffsets", "endingOffsets", "startingOffsetsByTimestamp", "startingTimestamp",
    "startingOffsetsByTimestampStrategy", "endingOffsetsByTimestamp", "endingTimestamp",
    "maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay",
    "minPartitions", "maxRecordsPerPartition", "eos.maxPartitions", "eos.minRecordsPerTask", "eos.taskSlots", "failOnDataLoss", "includeHeaders",
    "groupIdPrefix", "kafkaConsumer.pollTimeoutMs", "eos.commitOffsetsToGroup",
    "fetchOffset.numRetries", "fetchOffset.retryIntervalMs", "eos.brokerRetryTimeoutMs",
)
SINK_OPTIONS = (
    "kafka.bootstrap.servers", "kafka.*", "topic", "includeHeaders",
    "eos.deliveryGuarantee", "eos.transactionalIdPrefix", "eos.transactionTimeoutMs",
    "eos.checkpointTimeoutMs", "eos.restartBudgetMs", "eos.stateDir", "eos.retainedCheckpoints",
    "eos.adoptExistingQuery", "eos.brokerRetryTimeoutMs", "eos.writeTasks",
)
STATE_DIR_NAME = "kafka-eos"
#: Options of earlier releases that no longer do anything, each with what to do: refused in one
#: line rather than accepted without effect.
REMOVED_SINK_OPTIONS = {
    "eos.commitParallelism": "remove it: a batch's EndTxn requests all go out in one round, pipelined on each "
                             "transaction coordinator's connection, so there is nothing to tune",
}


def offsets_option(value: str, option: str) -> dict[TopicPartition, int]:
    """The offsets JSON of Spark option ``option`` (the source's ``parse_offsets_json``), its
    error the options' one-line error."""
    try:
        return parse_offsets_json(value, option)
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


#: eos.minRecordsPerTask's default. Every read task of a query that writes to the kit's sink is a
#: write task too, with a producer's set-up and a transaction of its own (~40-80 ms and a Python
#: round trip), while a task copies ~130k records a second: below ~25k records, a second task costs
#: more than it saves, and on a cluster with fewer free cores than tasks it adds a wave
#: (bench/README.md, issue 38). Sized by records, not by cores: the planner runs in a Python process
#: that has no SparkContext, and executors come and go.
DEFAULT_MIN_RECORDS_PER_TASK = 25_000
#: How many records a batch needs per task slot to be spread over every slot (eos.taskSlots): a
#: task's producer set-up and transaction cost ~40-80 ms, the time a task takes to copy ~8,000
#: records at ~130k a second (bench/HISTORY.md, issue 38). With at least that many records each, a
#: slot's task does more work than its set-up costs, and the batch's time falls with every slot.
RECORDS_PER_SLOT_TASK = 8_000
#: maxTriggerDelay's default, as Spark's (KafkaSourceProvider.DEFAULT_MAX_TRIGGER_DELAY).
DEFAULT_MAX_TRIGGER_DELAY = "15m"
#: kafkaConsumer.pollTimeoutMs's default: the kit's reader stall timeout (Spark's is 120000,
#: spark.network.timeout); a read that a lost broker stalls fails sooner, and Spark retries it.
DEFAULT_POLL_TIMEOUT_MS = 30_000

# Spark's time strings (JavaUtils.timeStringAs): a whole number and an optional unit, ms without one.
_DURATION = re.compile(r"^(\d+)\s*([a-z]+)?$")
_DURATION_UNIT_MS = {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000,
                     "d": 86_400_000}


def _duration_ms(options: Mapping[str, str], name: str, default: str) -> int:
    raw = _get(options, name) or default
    match = _DURATION.match(raw.strip().lower())
    if match is None or (match.group(2) or "ms") not in _DURATION_UNIT_MS:
        raise KafkaEosOptionError(f"option {name} must be a duration like 15m, 30s or 500ms "
                                  f"(units: {', '.join(_DURATION_UNIT_MS)}), got {raw!r}")
    return int(int(match.group(1)) * _DURATION_UNIT_MS[match.group(2) or "ms"])


def _timestamp(options: Mapping[str, str], name: str) -> int | None:
    raw = _get(options, name)
    if raw is None:
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        raise KafkaEosOptionError(f"option {name} must be one timestamp in ms since the epoch, "
                                  f"e.g. 1700000000000, got {raw!r}") from None
    if value < 0:
        raise KafkaEosOptionError(f"option {name} must be a timestamp >= 0 (ms since the epoch), got {value}")
    return value


def _client_config(options: Mapping[str, str]) -> dict[str, str]:
    """``kafka.*`` options minus the prefix: the Kafka clients' settings, in librdkafka's names or
    Java's client's, checked here so that a query fails with one line before its first batch.
    Returned in librdkafka's names, trust and key stores as given (their files are local to each
    node, where the clients convert them; see connectors/kafka/clients/java_client_settings.py)."""
    # Imported here: this function is the one place of this module that knows the clients' settings.
    from connectors.kafka.clients.java_client_settings import check_client_config
    from connectors.kafka.kafka_errors import UnsupportedClientSettingError

    config = {}
    for key, value in options.items():
        if key.lower().startswith("kafka.") and key.lower() != "kafka.bootstrap.servers":
            config[key[len("kafka."):].lower()] = str(value)
    try:
        return {key: str(value) for key, value in check_client_config(config).items()}
    except UnsupportedClientSettingError as exc:
        raise KafkaEosOptionError(str(exc)) from exc


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
    #: minOffsetsPerTrigger: a trigger with fewer new offsets than this runs no batch, until
    #: max_trigger_delay_ms has passed since the last batch (Spark's KafkaMicroBatchStream).
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60 * 1000
    #: maxRecordsPerPartition: no read task holds more offsets than this.
    max_records_per_partition: int | None = None
    #: The group.id of this query's readers: <groupIdPrefix>-<uuid>-executor, made once per query
    #: on the driver and pickled with the reader to the executors (kafka.group.id wins).
    group_id: str = ""
    #: kafkaConsumer.pollTimeoutMs: a read that makes no progress this long fails (and is retried).
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS
    #: eos.minRecordsPerTask: a batch has at most one read task per this many records (0: one
    #: task per Kafka partition, as Spark's source plans).
    min_records_per_task: int = DEFAULT_MIN_RECORDS_PER_TASK
    #: eos.taskSlots: how many tasks Spark runs at once (the kit's JVM provider gives Spark's
    #: defaultParallelism when the scan is built); None where nobody said, and then the read tasks
    #: follow eos.minRecordsPerTask alone.
    task_slots: int | None = None


def _starting_offsets(options: Mapping[str, str], streaming: bool) -> str | dict[TopicPartition, int]:
    starting = (_get(options, "startingOffsets") or ("latest" if streaming else "earliest")).strip()
    if starting.lower() in ("earliest", "latest"):
        return starting.lower()
    return offsets_option(starting, "startingOffsets")


def _timestamps_json(options: Mapping[str, str], name: str) -> dict[TopicPartition, int] | None:
    raw = _get(options, name)
    if raw is None:
        return None
    try:
        return parse_offsets_json(raw, name)
    except ValueError:
        raise KafkaEosOptionError(f'option {name} must be JSON like {{"topicA":{{"0":1700000000000,'
                                  f'"1":1700000000000}}}} (ms since the epoch), got {raw!r}') from None


def _check_timestamp_order(start: int | dict[TopicPartition, int] | None,
                           end: int | dict[TopicPartition, int] | None) -> None:
    """As Spark's checkOffsetLimitValidity: per-partition start and end timestamps name the same
    partitions, and no start is after its end; a global start is not after a global end."""
    if isinstance(start, int) and isinstance(end, int) and start > end:
        raise KafkaEosOptionError(f"option startingTimestamp ({start}) must not be after endingTimestamp ({end})")
    if isinstance(start, dict) and isinstance(end, dict):
        if set(start) != set(end):
            raise KafkaEosOptionError(
                "options startingOffsetsByTimestamp and endingOffsetsByTimestamp must name the same "
                f"partitions, got {sorted(map(str, start))} and {sorted(map(str, end))}")
        for tp in sorted(start):
            if start[tp] > end[tp]:
                raise KafkaEosOptionError(f"option startingOffsetsByTimestamp of {tp} ({start[tp]}) must not be "
                                          f"after its endingOffsetsByTimestamp ({end[tp]})")


def _check_read_limits_supported(options: Mapping[str, str]) -> None:
    """Refuse the read limits where Spark gives a Python streaming source none (4.0, 4.1): a batch
    would read all that is available, which a job that sets them does not expect."""
    from connectors.spark.spark_versions import STREAM_ADMISSION_CONTROL_SINCE, has_stream_admission_control

    if has_stream_admission_control():
        return
    for name in ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay"):
        if _get(options, name) is not None:
            import pyspark

            since = ".".join(map(str, STREAM_ADMISSION_CONTROL_SINCE))
            raise KafkaEosOptionError(
                f"option {name} needs Spark {since} or later on the kafka-eos source (Spark lets a Python streaming "
                f"source limit its batches from {since} on); this is Spark {pyspark.__version__}. Remove it, or read "
                "with Spark's own source, format(\"kafka\") with kafka.isolation.level=read_committed, which takes it")


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
    starting_offsets = _starting_offsets(options, streaming)
    starting_timestamp = _timestamp(options, "startingTimestamp")
    starting_timestamps = _timestamps_json(options, "startingOffsetsByTimestamp")
    strategy = (_get(options, "startingOffsetsByTimestampStrategy") or "error").strip().lower()
    if strategy not in NO_MATCH_STRATEGIES:
        raise KafkaEosOptionError(f"option startingOffsetsByTimestampStrategy must be one of "
                                  f"{', '.join(NO_MATCH_STRATEGIES)}, got {strategy!r}")
    ending: str | dict[TopicPartition, int] | None = None
    ending_timestamp: int | None = None
    ending_timestamps: dict[TopicPartition, int] | None = None
    if streaming:
        for batch_only in ("endingOffsets", "endingOffsetsByTimestamp"):
            if _get(options, batch_only) is not None:
                raise KafkaEosOptionError(f"option {batch_only} is for batch queries (spark.read) only")
        if _get(options, "endingTimestamp") is not None:
            # Spark's streaming source does not read it either (validateStreamOptions lets it by).
            log.warning("option endingTimestamp is ignored by streaming queries: it bounds batch reads only")
    else:
        ending_raw = (_get(options, "endingOffsets") or "latest").strip()
        ending = ending_raw.lower() if ending_raw.lower() in ("earliest", "latest") \
            else offsets_option(ending_raw, "endingOffsets")
        ending_timestamp = _timestamp(options, "endingTimestamp")
        ending_timestamps = _timestamps_json(options, "endingOffsetsByTimestamp")
        _check_timestamp_order(starting_timestamp if starting_timestamp is not None else starting_timestamps,
                               ending_timestamp if ending_timestamp is not None else ending_timestamps)
        for trigger_only in ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay"):
            if _get(options, trigger_only) is not None:
                # As Spark's batch source: a warning, not a failure, so a copied job runs as it did.
                log.warning("option %s is ignored by batch queries: it paces micro-batches only", trigger_only)
    max_per_trigger = min_per_trigger = None
    max_trigger_delay_ms = _duration_ms({}, "maxTriggerDelay", DEFAULT_MAX_TRIGGER_DELAY)
    if streaming:
        max_per_trigger = _int(options, "maxOffsetsPerTrigger", None, 1)
        min_per_trigger = _int(options, "minOffsetsPerTrigger", None, 1)
        if max_per_trigger is not None and min_per_trigger is not None and min_per_trigger > max_per_trigger:
            raise KafkaEosOptionError(f"option minOffsetsPerTrigger ({min_per_trigger}) must not be higher than "
                                      f"maxOffsetsPerTrigger ({max_per_trigger})")
        max_trigger_delay_ms = _duration_ms(options, "maxTriggerDelay", DEFAULT_MAX_TRIGGER_DELAY)
        _check_read_limits_supported(options)
    client_config = _client_config(options)
    prefix = _get(options, "groupIdPrefix")
    if prefix is not None and "group.id" in client_config:
        log.warning("option groupIdPrefix is ignored: kafka.group.id is set")
    prefix = prefix if prefix is not None else STREAMING_GROUP_ID_PREFIX if streaming else BATCH_GROUP_ID_PREFIX
    try:
        config = KafkaSourceConfig(
            bootstrap_servers=servers,
            subscribe=[t.strip() for t in subscribe.split(",") if t.strip()] if subscribe else (),
            subscribe_pattern=pattern,
            assign=assign,
            starting_offsets=starting_offsets,
            starting_timestamps=starting_timestamps,
            starting_timestamp=starting_timestamp,
            starting_timestamp_strategy=strategy,
            ending_offsets=ending,
            ending_timestamps=ending_timestamps,
            ending_timestamp=ending_timestamp,
            fail_on_data_loss=_bool(options, "failOnDataLoss", True),
            commit_offsets_to_group=_get(options, "eos.commitOffsetsToGroup"),
            client_config=client_config,
            broker_retry=_broker_retry(options, source=True),
            group_id_prefix=prefix,
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
    poll_timeout_ms = _int(options, "kafkaConsumer.pollTimeoutMs", DEFAULT_POLL_TIMEOUT_MS, 1)
    assert poll_timeout_ms is not None
    min_records_per_task = _int(options, "eos.minRecordsPerTask", DEFAULT_MIN_RECORDS_PER_TASK, 0)
    assert min_records_per_task is not None
    return SourceOptions(
        config=config,
        max_offsets_per_trigger=max_per_trigger,
        min_partitions=min_partitions,
        max_partitions=max_partitions,
        include_headers=_bool(options, "includeHeaders", False),
        min_offsets_per_trigger=min_per_trigger,
        max_trigger_delay_ms=max_trigger_delay_ms,
        max_records_per_partition=_int(options, "maxRecordsPerPartition", None, 1),
        group_id=unique_group_id(prefix),
        poll_timeout_ms=poll_timeout_ms,
        min_records_per_task=min_records_per_task,
        task_slots=_int(options, "eos.taskSlots", None, 1),
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
    #: eos.writeTasks, the foreachBatch helper's: at most this many write tasks (so transactions)
    #: a batch; None ("auto"): as many as Spark runs at once (connectors/spark/write_planning.py).
    write_tasks: int | None = None


def _state_location(value: str, option: str) -> str:
    """The canonical spelling of a location the kit opens itself (see twophase.storage.state_storage)."""
    try:
        return canonical_location(value)
    except UnsupportedStateLocationError as exc:
        raise KafkaEosOptionError(f"option {option}: {exc}") from None


def state_dir_under(location: str) -> str:
    """The sink's default state folder in a query's ``checkpointLocation``:
    ``<checkpointLocation>/kafka-eos`` (a URI joined as a URI, a path as a local path)."""
    is_uri = ":" in location.split("/", 1)[0]
    return posixpath.join(location, STATE_DIR_NAME) if is_uri else os.path.join(location, STATE_DIR_NAME)


WRITE_TASKS_OPTION = "eos.writeTasks"


def _write_tasks(options: Mapping[str, str], plans_write_tasks: bool) -> int | None:
    """eos.writeTasks: "auto" (None) or an integer >= 1. It takes effect where the write's task
    count is planned: the foreachBatch helper coalesces its batch, and format("kafka-eos") through
    the kit's JVM provider asks Spark for its rows clustered by key (jvm/src/kafkaeos/spark/
    WritePlanning.java reads the same option); without the provider, Spark writes one task per
    partition of the plan it hands the sink, and the option is refused rather than ignored."""
    raw = _get(options, WRITE_TASKS_OPTION)
    if raw is None or raw.strip().lower() == "auto":
        return None
    if not plans_write_tasks:
        raise KafkaEosOptionError(
            f"option {WRITE_TASKS_OPTION} needs the kit's JVM provider on format('kafka-eos'), which register() "
            "could not put into this session (its warning says why); use the foreachBatch sink "
            "(exactly_once_foreach_batch), or coalesce the DataFrame")
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise KafkaEosOptionError(f"option {WRITE_TASKS_OPTION} must be auto (as many as Spark runs at once) "
                                  f"or an integer >= 1, got {raw!r}")
    return value


def parse_sink_options(options: Mapping[str, str], *, streaming: bool, plans_write_tasks: bool = False) -> SinkOptions:
    """``plans_write_tasks``: the entry plans its write tasks, so takes eos.writeTasks (the
    foreachBatch helper; format("kafka-eos") through the kit's JVM provider)."""
    for name, what_to_do in REMOVED_SINK_OPTIONS.items():
        if any(key.lower() == name.lower() for key in options):
            raise KafkaEosOptionError(f"option {name} is no longer supported (it never had an effect); {what_to_do}")
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
        write_tasks=_write_tasks(options, plans_write_tasks),
    )
