"""kafka-eos replay --shape: the kit's Spark job is told which stateful query to run, and a user's
job (--job-command) is verified by its shape's invariant, on the fake cluster."""

import sys
import textwrap

import pytest

from connectors.servers.broker_discovery import find_broker
from connectors.tools.loader import load_input
from connectors.tools.replay import FAILED, PASSED, Replay, ReplayOptions
from connectors.tools.replay_jobs import JobTemplate
from connectors.tools.tool_errors import UsageError

# A user's running count: two batches of the input, each group's count so far after each
# (update mode); with "twice" it writes its second batch twice, as an at-least-once sink may.
JOB = textwrap.dedent('''
    import json, sys
    from collections import Counter
    from connectors.kafka.clients import TopicPartition
    from connectors.kafka.clients.factory import clients_for

    bootstrap, source, sink, twice = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "twice"
    clients = clients_for(bootstrap)
    admin = clients.admin()
    tps = [TopicPartition(source, p) for p in admin.partitions(source)]
    start, end = admin.list_offsets(tps, "earliest", True), admin.list_offsets(tps, "latest", True)
    reader = clients.reader(read_committed=True)
    groups = [json.loads(r.value)["group"] for r in reader.read({tp: (start[tp], end[tp]) for tp in tps})]
    batches = [groups[: len(groups) // 2], groups[len(groups) // 2:]]
    counts = Counter()
    for number, batch in enumerate(batches + batches[1:] if twice else batches):
        if number < 2:
            counts.update(batch)
        producer = clients.producer(f"b{number}", {})
        identity = producer.init_transactions(10)
        producer.begin_transaction()
        for group in sorted(set(batch)):
            producer.produce(sink, json.dumps({"key": group, "count": counts[group]}).encode(), key=group.encode())
        producer.flush(10)
        producer.close()
        clients.txn_control().end_txn(f"b{number}", identity, True)
''')


@pytest.fixture
def broker(tmp_path):
    found = find_broker(f"fake-kafka://{tmp_path / 'kafka.db'}")
    from connectors.kafka.clients.factory import clients_for

    load_input(clients_for(found.bootstrap_servers), "in", 400, aborted=0)
    return found


def options(tmp_path, broker, template, **overrides):
    settings = dict(bootstrap=broker.bootstrap_servers, input_topic="in", template=template, work_dir=tmp_path / "work",
                    scenarios=["baseline"], run_timeout_s=120, broker=broker)
    settings.update(overrides)
    return ReplayOptions(**settings)


def test_the_spark_engine_runs_the_shape_and_verifies_it_at_the_loaders_fields(tmp_path, broker):
    replay = Replay(options(tmp_path, broker, JobTemplate.for_engine("spark"), shape="windowed-count"))
    assert replay._shape_args == ["--transform", "windowed-count", "--output-mode", "append"]
    assert replay.options.id_field == "json:group" and replay.options.event_time_field == "json:seq"
    replay = Replay(options(tmp_path, broker, JobTemplate.for_engine("spark"), shape="dedup"))
    assert replay._shape_args[:2] == ["--transform", "dedup"] and replay.options.id_field == "json:id"


@pytest.mark.parametrize("shape, engine, message", [
    ("join", "spark", "--shape join is not one the kit's Spark job writes from one input topic"),
    ("running-count", "inprocess", "--shape needs --engine spark or --job-command"),
    ("join", "custom", "replay --shape join is not supported: replay feeds a job one input topic"),
])
def test_shapes_the_engine_cannot_run_are_refused_in_one_line(tmp_path, broker, shape, engine, message):
    template = (JobTemplate.custom("job {bootstrap} {input} {output} {checkpoint_dir}") if engine == "custom"
                else JobTemplate.for_engine(engine))
    with pytest.raises(UsageError, match=message):
        Replay(options(tmp_path, broker, template, shape=shape))


@pytest.mark.parametrize("mode, status", [("once", PASSED), ("twice", FAILED)])
def test_a_users_stateful_job_is_verified_by_its_shape(tmp_path, broker, mode, status):
    job = tmp_path / "count_job.py"
    job.write_text(JOB)
    template = JobTemplate.custom(f"{sys.executable} {job} {{bootstrap}} {{input}} {{output}} {mode} "
                                  "--checkpoint {checkpoint_dir}")
    result = Replay(options(tmp_path, broker, template, shape="running-count", id_field="json:group")).run()
    (scenario,) = result.scenarios
    assert scenario.status == status, scenario.verdict
    assert scenario.verify.shape == "running-count"
    if status == FAILED:
        assert scenario.verify.count("duplicates") > 0, scenario.verify.summary_lines()
