"""Option parsing and sink schema checks of the kafka-eos format (no Spark session needed)."""

import re
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructField, StructType  # noqa: E402

from connectors.kafka.clients import TopicPartition  # noqa: E402
from connectors.spark import options as options_module  # noqa: E402
from connectors.spark.options import SINK_OPTIONS, SOURCE_OPTIONS, parse_sink_options, parse_source_options  # noqa: E402
from connectors.spark.spark_errors import KafkaEosOptionError, SinkSchemaError
from connectors.spark.datasource_readers import OffsetRange, plan_read_tasks  # noqa: E402
from connectors.spark.schema import check_sink_schema

BOOT = {"kafka.bootstrap.servers": "localhost:9092"}


def lower(options):
    """Spark hands options over with lower-cased keys."""
    return {k.lower(): v for k, v in options.items()}


def source(streaming=True, **options):
    return parse_source_options(lower({**BOOT, **options}), streaming=streaming)


def sink(streaming=True, **options):
    base = {**BOOT, "topic": "out", "checkpointLocation": "/tmp/chk-a"}
    return parse_sink_options(lower({**base, **options}), streaming=streaming)


def test_source_defaults_like_spark():
    parsed = source(subscribe="a, b")
    assert parsed.config.subscribe == ["a", "b"]
    assert parsed.config.starting_offsets == "latest"  # streaming default
    assert source(streaming=False, subscribe="a").config.starting_offsets == "earliest"
    assert source(streaming=False, subscribe="a").config.ending_offsets == "latest"
    assert parsed.config.fail_on_data_loss and not parsed.include_headers


def test_source_json_options():
    parsed = source(assign='{"t":[0,2]}', startingOffsets='{"t":{"0":5,"2":-2}}',
                    startingOffsetsByTimestamp='{"t":{"0":1700000000000}}', maxOffsetsPerTrigger="1000")
    assert parsed.config.assign == {"t": [0, 2]}
    assert parsed.config.starting_offsets == {TopicPartition("t", 0): 5, TopicPartition("t", 2): -2}
    assert parsed.config.starting_timestamps == {TopicPartition("t", 0): 1700000000000}
    assert parsed.max_offsets_per_trigger == 1000


@pytest.mark.parametrize("options, fragment", [
    ({"subscrbe": "a"}, r"unknown kafka-eos source option 'subscrbe' \(did you mean 'subscribe'\?\); "
                        r"valid source options: .*subscribePattern"),
    ({}, "exactly one of subscribe, subscribePattern, assign"),
    ({"subscribe": "a", "assign": '{"a":[0]}'}, "exactly one of"),
    ({"assign": "[1,2]"}, "option assign must be JSON like"),
    ({"subscribe": "a", "startingOffsets": "beginning"}, "startingOffsets must be"),
    ({"subscribe": "a", "endingOffsets": "latest"}, "endingOffsets is for batch queries"),
    ({"subscribe": "a", "maxOffsetsPerTrigger": "0"}, "maxOffsetsPerTrigger must be an integer >= 1"),
    ({"subscribe": "a", "failOnDataLoss": "maybe"}, "failOnDataLoss must be true or false"),
    ({"subscribe": "a", "kafka.isolation.level": "read_uncommitted"}, "kafka.isolation.level is not supported"),
])
def test_bad_source_options(options, fragment):
    with pytest.raises(KafkaEosOptionError, match=fragment):
        source(**options)


def test_missing_bootstrap_servers():
    with pytest.raises(KafkaEosOptionError, match="kafka.bootstrap.servers is required"):
        parse_source_options({"subscribe": "a"}, streaming=True)


def test_sink_defaults_and_prefix_per_query():
    a, b = sink(), sink(checkpointLocation="/tmp/chk-b")
    assert a.config.exactly_once and a.config.transaction_timeout_ms == 15 * 60 * 1000
    assert a.state_dir == "/tmp/chk-a/kafka-eos"
    assert a.config.transactional_id_prefix.startswith("kafka-eos-")
    assert a.config.transactional_id_prefix != b.config.transactional_id_prefix
    assert sink().config.transactional_id_prefix == a.config.transactional_id_prefix  # stable across restarts


def test_a_removed_option_is_refused_in_one_line_saying_what_to_do():
    with pytest.raises(KafkaEosOptionError, match=r"^option eos.commitParallelism is no longer supported .*; remove it: "):
        sink(**{"eos.COMMITPARALLELISM": "4"})


def test_sink_our_options():
    parsed = sink(**{"eos.transactionalIdPrefix": "orders-job", "eos.transactionTimeoutMs": "700000",
                     "eos.deliveryGuarantee": "at_least_once",
                     "kafka.linger.ms": "20"})
    assert parsed.config.transactional_id_prefix == "orders-job"
    assert parsed.config.transaction_timeout_ms == 700000
    assert not parsed.config.exactly_once
    assert parsed.config.client_config == {"linger.ms": "20"}
    assert sink(**{"kafka.transaction.timeout.ms": "800000"}).config.transaction_timeout_ms == 800000


@pytest.mark.parametrize("options, fragment", [
    ({"eos.deliveryGuarantee": "twice"}, "eos.deliveryGuarantee: delivery guarantee must be one of exactly_once"),
    ({"eos.transactionTimeoutMs": "700000", "kafka.transaction.timeout.ms": "800000"}, "disagree"),
    ({"checkpointLocation": "wasbs://c@acct.blob.core.windows.net/chk"},
     r"option checkpointLocation: .*the scheme 'wasbs' is not supported. Azure Blob Storage is served through ABFS"),
    ({"eos.stateDir": "ftp://host/state"}, r"option eos.stateDir: .*'ftp' is not supported.*s3://bucket/path"),
    ({"eos.stateDir": "s3a:///no-bucket"}, r"option eos.stateDir: .*names no bucket"),
    ({"eos.adoptExistingQuery": "yes"}, "option eos.adoptExistingQuery must be true or false"),
    ({"eos.queryId": "q"}, "(?i)unknown kafka-eos sink option 'eos.queryId'"),
    ({"kafka.transactional.id": "x"}, "kafka.transactional.id is not supported"),
    ({"eos.checkpointId": "3"}, "(?i)unknown kafka-eos sink option 'eos.checkpointId'"),
    ({"topicc": "x"}, r"unknown kafka-eos sink option 'topicc' \(did you mean 'topic'\?\)"),
])
def test_bad_sink_options(options, fragment):
    with pytest.raises(KafkaEosOptionError, match=fragment):
        sink(**options)


@pytest.mark.parametrize("checkpoint, state_dir, expected", [
    ("s3a://bucket/chk/q1", None, "s3://bucket/chk/q1/kafka-eos"),
    ("s3://bucket/chk/q1/", None, "s3://bucket/chk/q1/kafka-eos"),
    ("abfss://c@acct.dfs.core.windows.net/chk", None, "abfss://c@acct.dfs.core.windows.net/chk/kafka-eos"),
    ("gs://bucket/chk", None, "gs://bucket/chk/kafka-eos"),
    ("hdfs://nn:8020/chk", None, "hdfs://nn:8020/chk/kafka-eos"),
    ("dbfs:/chk/q1", None, "/dbfs/chk/q1/kafka-eos"),
    ("file:///tmp/chk-f", None, "/tmp/chk-f/kafka-eos"),
    ("/tmp/chk-a", "s3a://bucket/state", "s3://bucket/state"),
])
def test_state_follows_the_checkpoint_location_on_any_filesystem(checkpoint, state_dir, expected):
    extra = {"eos.stateDir": state_dir} if state_dir else {}
    parsed = sink(checkpointLocation=checkpoint, **extra)
    assert parsed.state_dir == expected
    assert parsed.streaming and parsed.checkpoint_location == sink(checkpointLocation=checkpoint).checkpoint_location


def test_spark_scheme_aliases_keep_the_transactional_id_prefix():
    # s3a:// and s3:// name the same objects: the same state, so the same transactional ids.
    assert sink(checkpointLocation="s3a://b/chk").config.transactional_id_prefix == \
        sink(checkpointLocation="s3://b/chk").config.transactional_id_prefix


def test_streaming_sink_needs_a_checkpoint_location():
    with pytest.raises(KafkaEosOptionError, match="needs the query's checkpointLocation"):
        parse_sink_options(lower({**BOOT, "topic": "out"}), streaming=True)
    # Even with eos.stateDir: the query id, which the state is bound to, lives in checkpointLocation.
    with pytest.raises(KafkaEosOptionError, match="bound to the query id"):
        parse_sink_options(lower({**BOOT, "topic": "out", "eos.stateDir": "/tmp/s"}), streaming=True)


def test_batch_sink_has_a_durable_default_state_dir():
    parsed = parse_sink_options(lower({**BOOT, "topic": "out"}), streaming=False)
    assert ".kafka-eos" in parsed.state_dir


KEY_VALUE = [StructField("key", BinaryType()), StructField("value", StringType())]


def test_sink_schema_rules():
    check_sink_schema(StructType(KEY_VALUE), "out")
    check_sink_schema(StructType([*KEY_VALUE, StructField("topic", StringType()),
                                  StructField("partition", IntegerType()),
                                  StructField("headers", ArrayType(StructType([
                                      StructField("key", StringType()), StructField("value", BinaryType())])))]),
                      None)
    with pytest.raises(SinkSchemaError, match="Required attribute 'value' not found"):
        check_sink_schema(StructType([StructField("key", BinaryType())]), "out")
    with pytest.raises(SinkSchemaError, match="value attribute type must be string or binary, got int"):
        check_sink_schema(StructType([StructField("value", IntegerType())]), "out")
    with pytest.raises(SinkSchemaError, match="topic option required"):
        check_sink_schema(StructType(KEY_VALUE), None)
    with pytest.raises(SinkSchemaError, match="headers attribute type"):
        check_sink_schema(StructType([*KEY_VALUE, StructField("headers", ArrayType(StringType()))]), "out")


def test_read_tasks_honour_min_partitions():
    a, b = TopicPartition("t", 0), TopicPartition("t", 1)
    tasks = plan_read_tasks({a: (0, 100), b: (10, 12)}, min_partitions=5)
    assert len(tasks) >= 5 and all(len(task.ranges) == 1 for task in tasks)
    pieces = [r for task in tasks for r in task.ranges]
    covered = sorted((p.topic, p.partition, p.start, p.end) for p in pieces)
    assert sum(p.end - p.start for p in pieces) == 102
    assert [c for c in covered if c[1] == 0][0][2] == 0 and max(c[3] for c in covered if c[1] == 0) == 100
    assert plan_read_tasks({a: (5, 5)}, None) == []


def test_max_partitions_groups_ranges_into_balanced_tasks_covering_every_offset_once():
    tps = [TopicPartition("t", p) for p in range(5)]
    ranges = {tps[0]: (0, 100), tps[1]: (0, 60), tps[2]: (0, 50), tps[3]: (7, 7), tps[4]: (40, 80)}
    tasks = plan_read_tasks(ranges, None, max_partitions=2)
    assert len(tasks) == 2
    assert sorted(r for task in tasks for r in task.ranges) == sorted(
        OffsetRange("t", tp.partition, s, e) for tp, (s, e) in ranges.items() if e > s)
    assert sorted(sum(r.size for r in task.ranges) for task in tasks) == [110, 140]
    # Within a task, in partition order; fewer ranges than the limit: one range per task.
    assert all(list(task.ranges) == sorted(task.ranges, key=lambda r: r.partition) for task in tasks)
    assert [len(t.ranges) for t in plan_read_tasks(ranges, None, max_partitions=8)] == [1, 1, 1, 1]
    # minPartitions splits first, then maxPartitions groups.
    split = plan_read_tasks({tps[0]: (0, 100)}, min_partitions=4, max_partitions=4)
    assert [(r.start, r.end) for t in split for r in t.ranges] == [(0, 25), (25, 50), (50, 75), (75, 100)]


def test_min_records_per_task_option_is_checked():
    assert source(subscribe="in").min_records_per_task == 25_000
    assert source(subscribe="in", **{"eos.minRecordsPerTask": "0"}).min_records_per_task == 0
    with pytest.raises(KafkaEosOptionError, match="option eos.minRecordsPerTask must be an integer >= 0, got -1"):
        source(subscribe="in", **{"eos.minRecordsPerTask": "-1"})



def test_task_slots_option_is_checked():
    assert source(subscribe="in").task_slots is None
    assert source(subscribe="in", **{"eos.taskSlots": "64"}).task_slots == 64
    with pytest.raises(KafkaEosOptionError, match="option eos.taskSlots must be an integer >= 1, got 0"):
        source(subscribe="in", **{"eos.taskSlots": "0"})


def test_max_partitions_option_is_checked():
    assert source(subscribe="in", **{"eos.maxPartitions": "2"}).max_partitions == 2
    assert source(subscribe="in").max_partitions is None
    with pytest.raises(KafkaEosOptionError, match="option eos.maxPartitions must be an integer >= 1, got 0"):
        source(subscribe="in", **{"eos.maxPartitions": "0"})
    with pytest.raises(KafkaEosOptionError, match=r"option eos.maxPartitions must be >= minPartitions \(4\), got 2"):
        source(subscribe="in", minPartitions="4", **{"eos.maxPartitions": "2"})


def test_broker_retry_options():
    opts = source(subscribe="in", **{"eos.brokerRetryTimeoutMs": "5000", "fetchOffset.numRetries": "3",
                     "fetchOffset.retryIntervalMs": "50"})
    policy = opts.config.broker_retry
    assert (policy.timeout_ms, policy.max_retries, policy.retry_interval_ms) == (5000, 3, 50)
    default = source(subscribe="in").config.broker_retry
    assert (default.timeout_ms, default.max_retries) == (60_000, None)
    assert sink(**{"eos.brokerRetryTimeoutMs": "5000"}).config.commit_retry_timeout_s == 5.0


@pytest.mark.parametrize("options, fragment", [
    ({"eos.brokerRetryTimeoutMs": "soon"}, "eos.brokerRetryTimeoutMs must be an integer >= 0"),
    ({"fetchOffset.numRetries": "-1"}, "fetchOffset.numRetries must be an integer >= 0"),
    ({"fetchOffset.retryIntervalMs": "1.5"}, "fetchOffset.retryIntervalMs must be an integer >= 0"),
])
def test_bad_broker_retry_options(options, fragment):
    with pytest.raises(KafkaEosOptionError, match=fragment):
        source(subscribe="in", **options)
    with pytest.raises(KafkaEosOptionError, match="eos.brokerRetryTimeoutMs must be an integer >= 1"):
        sink(**{"eos.brokerRetryTimeoutMs": "0"})


def test_an_unknown_option_is_echoed_as_typed_with_the_closest_valid_one():
    with pytest.raises(KafkaEosOptionError) as raised:
        parse_sink_options({**BOOT, "eos.transactionalIdPrefx": "p"}, streaming=False)
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith("unknown kafka-eos sink option 'eos.transactionalIdPrefx' "
                              "(did you mean 'eos.transactionalIdPrefix'?); valid sink options: ")
    assert "eos.deliveryGuarantee" in message and "lower-cased" not in message


def test_an_option_spark_lowercased_is_said_to_be_lowercased():
    from pyspark.sql.datasource import CaseInsensitiveDict

    options = CaseInsensitiveDict({**BOOT, "subscribe": "in", "startingOffset": "earliest"})
    with pytest.raises(KafkaEosOptionError, match=r"^unknown kafka-eos source option 'startingoffset' "
                                                  r"\(did you mean 'startingOffsets'\?\) "
                                                  r"\(name as Spark passes it, lower-cased\); valid source options: "):
        parse_source_options(options, streaming=True)


def test_every_unknown_option_is_named_in_one_line_and_far_ones_get_no_guess():
    with pytest.raises(KafkaEosOptionError) as raised:
        parse_sink_options({**BOOT, "Topicc": "t", "zzz": "1"}, streaming=True)
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith("unknown kafka-eos sink options 'Topicc' (did you mean 'topic'?), 'zzz'; ")


def test_options_as_typed_are_read_case_insensitively():
    parsed = parse_sink_options({**BOOT, "TOPIC": "t", "eos.TransactionalIdPrefix": "p",
                                 "checkpointLocation": "/tmp/chk"}, streaming=True)
    assert parsed.config.topic == "t" and parsed.config.transactional_id_prefix == "p"


def test_spark_source_options_have_sparks_defaults():
    streaming, batch = source(subscribe="in"), source(streaming=False, subscribe="in")
    for parsed in (streaming, batch):
        assert parsed.config.starting_timestamp is None and parsed.config.starting_timestamps is None
        assert parsed.config.starting_timestamp_strategy == "error"
        assert parsed.min_offsets_per_trigger is None and parsed.max_records_per_partition is None
        assert parsed.poll_timeout_ms == 30_000  # the kit's reader stall timeout, not Spark's 120000
    assert streaming.max_trigger_delay_ms == 15 * 60 * 1000
    # Spark's generated group ids: spark-kafka-source for streaming, spark-kafka-relation for batch.
    assert streaming.config.group_id_prefix == "spark-kafka-source"
    assert streaming.group_id.startswith("spark-kafka-source-") and streaming.group_id.endswith("-executor")
    assert batch.group_id.startswith("spark-kafka-relation-")
    assert streaming.group_id != source(subscribe="in").group_id  # one group per query


def test_timestamp_options_parse_with_sparks_precedence_fields():
    parsed = source(streaming=False, subscribe="in", startingTimestamp="1000", endingTimestamp=" 2000 ",
                    startingOffsetsByTimestamp='{"in":{"0":5}}', endingOffsetsByTimestamp='{"in":{"0":9}}',
                    startingOffsetsByTimestampStrategy="LATEST")
    config = parsed.config
    assert (config.starting_timestamp, config.ending_timestamp) == (1000, 2000)
    assert config.starting_timestamps == {TopicPartition("in", 0): 5}
    assert config.ending_timestamps == {TopicPartition("in", 0): 9}
    assert config.starting_timestamp_strategy == "latest"


def test_trigger_and_partition_options_parse():
    parsed = source(subscribe="in", minOffsetsPerTrigger="10", maxOffsetsPerTrigger="100", maxTriggerDelay="2m",
                    maxRecordsPerPartition="5000", groupIdPrefix="orders", **{"kafkaConsumer.pollTimeoutMs": "120000"})
    assert (parsed.min_offsets_per_trigger, parsed.max_offsets_per_trigger) == (10, 100)
    assert parsed.max_trigger_delay_ms == 120_000
    assert parsed.max_records_per_partition == 5000
    assert parsed.group_id.startswith("orders-")
    assert parsed.poll_timeout_ms == 120_000


@pytest.mark.parametrize("delay, ms", [("15m", 900_000), ("30s", 30_000), ("500", 500), ("500ms", 500),
                                       ("1h", 3_600_000), ("2min", 120_000), ("1d", 86_400_000), (" 10S ", 10_000)])
def test_max_trigger_delay_takes_sparks_time_strings(delay, ms):
    assert source(subscribe="in", minOffsetsPerTrigger="1", maxTriggerDelay=delay).max_trigger_delay_ms == ms


@pytest.mark.parametrize("options, fragment", [
    ({"startingTimestamp": "yesterday"}, "option startingTimestamp must be one timestamp in ms since the epoch"),
    ({"startingTimestamp": "-5"}, "option startingTimestamp must be a timestamp >= 0"),
    ({"startingOffsetsByTimestamp": "[1]"}, r'option startingOffsetsByTimestamp must be JSON like \{"topicA"'),
    ({"startingOffsetsByTimestampStrategy": "earliest"},
     "option startingOffsetsByTimestampStrategy must be one of error, latest, got 'earliest'"),
    ({"endingOffsetsByTimestamp": '{"in":{"0":1}}'}, "option endingOffsetsByTimestamp is for batch queries"),
    ({"minOffsetsPerTrigger": "0"}, "option minOffsetsPerTrigger must be an integer >= 1"),
    ({"minOffsetsPerTrigger": "200", "maxOffsetsPerTrigger": "100"},
     r"option minOffsetsPerTrigger \(200\) must not be higher than maxOffsetsPerTrigger \(100\)"),
    ({"maxTriggerDelay": "soon"}, "option maxTriggerDelay must be a duration like 15m, 30s or 500ms"),
    ({"maxTriggerDelay": "5 weeks"}, "option maxTriggerDelay must be a duration"),
    ({"maxRecordsPerPartition": "0"}, "option maxRecordsPerPartition must be an integer >= 1"),
    ({"kafkaConsumer.pollTimeoutMs": "fast"}, "option kafkaConsumer.pollTimeoutMs must be an integer >= 1"),
])
def test_bad_spark_option_values_are_named_in_one_line(options, fragment):
    with pytest.raises(KafkaEosOptionError, match=fragment) as raised:
        source(subscribe="in", **options)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize("options, fragment", [
    ({"startingTimestamp": "2000", "endingTimestamp": "1000"},
     r"option startingTimestamp \(2000\) must not be after endingTimestamp \(1000\)"),
    ({"startingOffsetsByTimestamp": '{"in":{"0":5}}', "endingOffsetsByTimestamp": '{"in":{"1":9}}'},
     "must name the same partitions"),
    ({"startingOffsetsByTimestamp": '{"in":{"0":5}}', "endingOffsetsByTimestamp": '{"in":{"0":4}}'},
     r"startingOffsetsByTimestamp of in-0 \(5\) must not be after its endingOffsetsByTimestamp \(4\)"),
])
def test_batch_timestamps_are_checked_as_sparks_offset_limits(options, fragment):
    with pytest.raises(KafkaEosOptionError, match=fragment):
        source(streaming=False, subscribe="in", **options)


def test_trigger_options_of_a_batch_read_warn_and_are_ignored_as_in_spark(caplog):
    import logging

    with caplog.at_level(logging.WARNING, logger="connectors.spark.options"):
        parsed = source(streaming=False, subscribe="in", maxOffsetsPerTrigger="10", minOffsetsPerTrigger="5",
                        maxTriggerDelay="1m")
    assert parsed.max_offsets_per_trigger is None and parsed.min_offsets_per_trigger is None
    for option in ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay"):
        assert f"option {option} is ignored by batch queries" in caplog.text


def test_ending_timestamp_of_a_streaming_query_is_ignored_as_in_spark(caplog):
    import logging

    with caplog.at_level(logging.WARNING, logger="connectors.spark.options"):
        parsed = source(subscribe="in", endingTimestamp="1000")
    assert parsed.config.ending_timestamp is None and parsed.config.ending_offsets is None
    assert "option endingTimestamp is ignored by streaming queries" in caplog.text


def test_poll_timeout_becomes_the_readers_stall_timeout():
    from connectors.spark.datasource_readers import KafkaEosBatchReader

    reader = KafkaEosBatchReader(source(streaming=False, subscribe="in", **{"kafkaConsumer.pollTimeoutMs": "45000"}))
    assert reader.clients.reader_stall_timeout_s == 45.0  # RealKafkaClients: nothing connects yet


# docs/options.md's table of Spark's options, checked against the code: every option it lists is
# accepted where it says, and every test it names exists. Docs and code cannot drift apart.
DOCS = Path(__file__).resolve().parents[3] / "docs" / "options.md"


def spark_options_table():
    """The rows of the first table of docs/options.md: option, roles, queries, example, test."""
    lines = DOCS.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| option |"))
    header = [cell.strip() for cell in lines[start].strip("|").split("|")]
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = dict(zip(header, (cell.strip() for cell in line.strip().strip("|").split(" | "))))
        rows.append(cells)
    return header, rows


def backticked(cell):
    return re.findall(r"`([^`]+)`", cell)


def test_every_spark_option_in_the_docs_is_accepted_and_proven_by_a_test_that_exists():
    header, rows = spark_options_table()
    assert header[:4] == ["option", "source / sink", "queries", "example"] and header[-1] == "proven by"
    listed = set()
    for row in rows:
        [option] = backticked(row["option"])
        listed.add(option)
        example = (backticked(row["example"]) or [None])[0]
        for role in [r.strip() for r in row["source / sink"].split(",")]:
            for streaming in {"streaming": [True], "batch": [False]}.get(row["queries"], [True, False]):
                if option.startswith("kafka.") and option != "kafka.bootstrap.servers":
                    # Client settings: their values are connectors/spark/options.py _client_config's
                    # (docs/options.md's Java client settings section); here, the name is accepted.
                    name = option.replace("*", "linger.ms")
                    options_module._check_known({name: "1"}, SOURCE_OPTIONS if role == "source" else SINK_OPTIONS,
                                                role)
                    continue
                given = {} if example is None else {option: example}
                if role == "source":
                    base = {"subscribe": "in"} if option not in ("subscribe", "subscribePattern", "assign") else {}
                    source(streaming=streaming, **base, **given)
                else:
                    assert role == "sink", row
                    sink(streaming=streaming, **given)
        for proof in backticked(row["proven by"]):
            path, _, name = proof.partition("::")
            test_file = DOCS.parents[1] / path
            assert test_file.is_file(), f"{option}: {path} does not exist"
            assert re.search(rf"^def {re.escape(name.split('[')[0])}\(", test_file.read_text(), re.M), \
                f"{option}: {path} has no test {name}"
        assert backticked(row["proven by"]), f"{option}: no test named"
    # Spark's source and sink options (Structured Streaming + Kafka Integration Guide, 4.x, and
    # KafkaSourceProvider): all in the table.
    spark_options = {
        "assign", "subscribe", "subscribePattern", "kafka.bootstrap.servers", "startingTimestamp",
        "startingOffsetsByTimestamp", "startingOffsets", "endingTimestamp", "endingOffsetsByTimestamp",
        "endingOffsets", "failOnDataLoss", "kafkaConsumer.pollTimeoutMs", "fetchOffset.numRetries",
        "fetchOffset.retryIntervalMs", "maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay",
        "minPartitions", "maxRecordsPerPartition", "groupIdPrefix", "kafka.group.id", "includeHeaders",
        "startingOffsetsByTimestampStrategy", "topic", "kafka.*",
    }
    assert spark_options <= listed, sorted(spark_options - listed)


@pytest.mark.parametrize("streaming", [True, False])
def test_write_tasks_needs_an_entry_that_plans_write_tasks_and_is_refused_in_one_line_elsewhere(tmp_path, streaming):
    """The foreachBatch helper and format("kafka-eos") behind the JVM provider take eos.writeTasks;
    format("kafka-eos") without the provider refuses it rather than ignoring it."""
    from connectors.spark.datasource import KafkaEosDataSource, KafkaEosPythonSource

    assert KafkaEosPythonSource.plans_write_tasks and not KafkaEosDataSource.plans_write_tasks
    options = {"kafka.bootstrap.servers": "b:9092", "topic": "t", "checkpointLocation": str(tmp_path / "chk"),
               "eos.writeTasks": "4"}
    with pytest.raises(KafkaEosOptionError, match=r"^option eos\.writeTasks needs the kit's JVM provider"):
        parse_sink_options(options, streaming=streaming)
    assert parse_sink_options(options, streaming=streaming, plans_write_tasks=True).write_tasks == 4
    assert parse_sink_options({**options, "eos.writeTasks": "auto"}, streaming=streaming).write_tasks is None
    assert parse_sink_options(options, streaming=False, plans_write_tasks=True).write_tasks == 4
