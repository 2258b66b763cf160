"""kafka-eos replay over the fake cluster: a small scenario matrix with the in-process example job
run as real subprocesses, plus the checks that make a bad job fail.

No test here wins a race with the clock: failpoint hits are ones the input is certain to reach
(the in-process engine checkpoints every `batch_records` records), and timed faults land on a
job that is held, once its input is processed, until the fault has been delivered."""

import json
import os
import signal
import sys
import time

import pytest

from connectors.servers.broker_discovery import Broker, find_broker
from connectors.tools.replay_jobs import JobRun, JobTemplate
from connectors.tools.tool_errors import JobTemplateError
from connectors.tools.loader import load_input
from connectors.tools.replay import FAILED, PASSED, SKIPPED, Replay, ReplayOptions, ScenarioResult, parse_scenarios
from connectors.tools.report import COLUMNS, table_rows, write_reports
from connectors.tools.verify import verify

RECORDS = 4000
MATRIX = ["baseline", "after_pre_commit", "mid_commit", "during_restore", "kill9", "task_failures",
          "broker_restart", "txn_timeout"]


def options(tmp, bootstrap, **overrides):
    settings = dict(bootstrap=bootstrap, input_topic="in", template=JobTemplate.for_engine("inprocess"),
                    work_dir=tmp / "work", seed=3, batch_records=50, kills=1,
                    run_timeout_s=120, broker_downtime_s=1.0)
    settings.update(overrides)
    return ReplayOptions(**settings)


@pytest.fixture(scope="module")
def matrix(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("replay")
    broker = find_broker(f"fake-kafka://{tmp / 'kafka.db'}")
    from connectors.kafka.clients.factory import clients_for

    load_input(clients_for(broker.bootstrap_servers), "in", RECORDS, partitions=3, aborted=20)
    result = Replay(options(tmp, broker.bootstrap_servers, scenarios=MATRIX, broker=broker, batch_records=100)).run()
    return tmp, result


def by_name(result):
    return {s.name: s for s in result.scenarios}


def test_every_applicable_scenario_is_exactly_once(matrix):
    _tmp, result = matrix
    scenarios = by_name(result)
    assert list(scenarios) == MATRIX
    for name in ("baseline", "after_pre_commit", "mid_commit", "during_restore", "kill9", "broker_restart"):
        s = scenarios[name]
        assert s.status == PASSED and s.verdict == "exactly-once", (name, s.verdict, s.notes)
        assert s.verify.counts["input_records"] == RECORDS
        assert s.verify.counts["output_records"] == RECORDS
    assert result.passed


def test_faults_were_injected_and_recovered_from(matrix):
    _tmp, result = matrix
    scenarios = by_name(result)
    assert scenarios["baseline"].restarts == 0
    assert scenarios["after_pre_commit"].runs[0].failpoints_fired == ["after_pre_commit"]
    assert scenarios["during_restore"].runs[1].failpoints_fired == ["during_restore"]
    assert scenarios["during_restore"].restarts >= 2
    assert scenarios["kill9"].runs[0].killed
    for name in ("after_pre_commit", "mid_commit", "kill9"):
        s = scenarios[name]
        assert s.restarts >= 1
        assert s.recovery_ms and all(gap > 0 for gap in s.recovery_ms), name
        assert len(s.checkpoints) > 3, name
    outage = scenarios["broker_restart"].recoveries[0]
    assert outage[1] - outage[0] >= 1000  # the fake was down for the configured second


def test_the_in_process_engine_has_no_task_failures(matrix):
    _tmp, result = matrix
    s = by_name(result)["task_failures"]
    assert s.status == SKIPPED and s.verdict.startswith("not applicable")
    assert s.runs == []


def test_a_transaction_timeout_is_reported_as_lost_never_silently(matrix):
    _tmp, result = matrix
    s = by_name(result)["txn_timeout"]
    assert s.status == PASSED, (s.verdict, s.notes)
    # The row's number is the Losses column's, said to be the scenario's intent.
    assert s.verdict == (f"{s.verify.count('lost_writes'):,} records lost, as the scenario intends: "
                         "loss detected and reported (TransactionLostError)")
    assert s.runs[0].failpoints_fired == ["before_commit"]
    assert all(not run.succeeded and run.transaction_lost for run in s.runs)
    assert s.runs[0].lost_records_reported > 0
    assert s.verify.count("lost_writes") >= s.runs[0].lost_records_reported
    assert s.verify.count("duplicates") == 0


def test_reports_are_written(matrix):
    tmp, result = matrix
    files = write_reports(result, tmp / "reports")
    text = files.markdown.read_text()
    assert "| " + " | ".join(COLUMNS) + " |" in text
    for name in MATRIX:
        assert f"| {name} |" in text
    data = json.loads(files.json.read_text())
    assert data["passed"] is True and data["seed"] == 3
    assert [s["name"] for s in data["scenarios"]] == MATRIX
    assert files.plot is not None and files.plot.stat().st_size > 10_000
    rows = table_rows(result)
    assert len(rows) == len(MATRIX) and all(len(row) == len(COLUMNS) for row in rows)


# The example without transactions, as a custom job. Its checkpoints come every 50 records (and
# once on its timer, at the start), so the baseline's checkpoint count, from which the replay plans
# a custom job's hits, is the same on every machine, and every planned pre-commit flushes records.
AT_LEAST_ONCE_JOB = (
    "{python} {jobs}/copy_pipeline.py --bootstrap {bootstrap} --input {input} --output {output} "
    "--checkpoint-dir {checkpoint_dir} --bounded --delivery-guarantee at_least_once "
    "--max-poll-records 50 --checkpoint-every-records 50 --checkpoint-interval 3600 "
    "--metrics-file {metrics_file}")


def test_an_at_least_once_job_is_caught(tmp_path):
    """Replay must be able to fail: the same job without transactions duplicates records when it
    crashes after flushing and before its checkpoint completes."""
    broker = find_broker(f"fake-kafka://{tmp_path / 'kafka.db'}")
    from connectors.kafka.clients.factory import clients_for

    load_input(clients_for(broker.bootstrap_servers), "in", 1000, partitions=2, aborted=0)
    template = JobTemplate.custom(AT_LEAST_ONCE_JOB)
    result = Replay(options(tmp_path, broker.bootstrap_servers, template=template,
                            scenarios=["baseline", "after_pre_commit", "txn_timeout"])).run()
    baseline, crash, timeout = result.scenarios
    assert baseline.status == PASSED
    assert crash.runs[0].failpoints_fired == ["after_pre_commit"], crash.notes
    assert crash.status == FAILED and crash.verdict.startswith("NOT exactly-once")
    assert crash.verify.count("duplicates") > 0
    assert timeout.status == SKIPPED and "--transaction-timeout-ms" in timeout.verdict
    assert not result.passed


def test_silent_loss_is_called_silent_loss(tmp_path):
    from connectors.simulated_kafka import FakeKafkaClients
    from connectors.tools.replay_jobs import RunResult

    fake = FakeKafkaClients(tmp_path / "kafka.db")
    load_input(fake, "in", 10, partitions=1, aborted=0)
    fake.admin().create_topic("out", 1)
    scenario = ScenarioResult("txn_timeout", "x", "inconclusive", "", runs=[
        RunResult(["job"], {}, tmp_path / "log", 0, exit_code=0)])
    Replay._txn_timeout_verdict(scenario, verify(fake, "in", "out"))
    assert scenario.status == FAILED and scenario.verdict.startswith("SILENT LOSS: 10 records")


def test_a_broker_the_tool_did_not_start_is_never_restarted(tmp_path):
    foreign = Broker("fake-kafka://x", "KAFKA_BOOTSTRAP_SERVERS", owned=False,
                     restart_unavailable="the broker was not started by this tool")
    replay = Replay(options(tmp_path, f"fake-kafka://{tmp_path / 'kafka.db'}", broker=foreign))
    assert replay._not_applicable("broker_restart") == "skipped: the broker was not started by this tool"
    assert replay._not_applicable("kill9") is None


def test_seeds_make_the_faults_reproducible(tmp_path):
    import random

    def plans(seed):
        replay = Replay(options(tmp_path, f"fake-kafka://{tmp_path / 'kafka.db'}", seed=seed, kills=3))
        return [replay._plan(name, random.Random(f"{seed}:{name}"))
                for name in ("kill9", "mid_commit", "broker_restart")]

    assert plans(11) == plans(11)
    assert plans(11) != plans(12)


def test_a_seed_places_kills_at_the_same_fraction_of_the_baseline(tmp_path):
    import random

    def kill_delays(baseline_s):
        replay = Replay(options(tmp_path, f"fake-kafka://{tmp_path / 'kafka.db'}", seed=5, kills=3))
        replay._baseline_s = baseline_s
        _fault, plan = replay._plan("kill9", random.Random("5:kill9"))
        return [step["kill_after_s"] for step in plan]

    short, long = kill_delays(10.0), kill_delays(40.0)
    assert all(1.0 <= d <= 5.0 for d in short)  # within [10 %, 50 %] of the baseline
    assert long == pytest.approx([4 * d for d in short])


def test_scenario_lists():
    assert parse_scenarios("baseline, kill9") == ["baseline", "kill9"]
    assert "txn_timeout" in parse_scenarios("all") and "during_restore" in parse_scenarios("all")
    assert parse_scenarios("demo")[0] == "baseline"
    with pytest.raises(ValueError, match="unknown scenarios.*bogus"):
        parse_scenarios("baseline,bogus")


def test_kill_reaches_every_process_the_job_spawned(tmp_path):
    child_pid_file = tmp_path / "child.pid"
    script = ("import subprocess, sys, time; "
              "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); "
              f"open({str(child_pid_file)!r}, 'w').write(str(p.pid)); time.sleep(120)")
    run = JobRun([sys.executable, "-c", script], {}, tmp_path / "run.log")
    deadline = time.monotonic() + 30
    while not child_pid_file.exists() or not child_pid_file.read_text():
        assert time.monotonic() < deadline, "the job did not start its child"
        time.sleep(0.05)
    child = int(child_pid_file.read_text())
    assert run.kill()
    result = run.wait(10)
    assert result.killed and result.exit_code == -signal.SIGKILL and result.fault_start_ms
    deadline = time.monotonic() + 10
    while _alive(child):
        assert time.monotonic() < deadline, "the job's child survived the kill"
        time.sleep(0.05)


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A killed child of a dead parent is reaped by init; until then it is a zombie.
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split()[2] != "Z"


def test_a_run_that_hangs_is_killed_and_marked(tmp_path):
    run = JobRun([sys.executable, "-c", "import time; time.sleep(120)"], {}, tmp_path / "run.log")
    result = run.wait(0.5)
    assert result.timed_out and not result.killed and not result.succeeded


def test_job_templates():
    template = JobTemplate.custom("my-job --in {input} --out {output} --chk {checkpoint_dir} --b {bootstrap}")
    argv = template.render({"input": "a b", "output": "o", "checkpoint_dir": "/c", "bootstrap": "k:1"}, ["-x"])
    assert argv == ["my-job", "--in", "a b", "--out", "o", "--chk", "/c", "--b", "k:1", "-x"]
    assert not template.writes_metrics and not template.takes_kit_flags
    with pytest.raises(JobTemplateError, match="unknown placeholders.*'inptu'"):
        JobTemplate.custom("job {inptu} {input} {output} {checkpoint_dir} {bootstrap}")
    with pytest.raises(JobTemplateError, match=r"must contain \{checkpoint_dir\}"):
        JobTemplate.custom("job {input} {output} {bootstrap}")
    with pytest.raises(JobTemplateError, match="cannot be parsed"):
        JobTemplate.custom("job 'unclosed {input}")
    assert JobTemplate.for_engine("inprocess").writes_metrics


def test_only_the_log_confirms_that_a_failpoint_fired(tmp_path):
    """A failpoint appends its line to the run's log before it acts (KAFKA_EOS_FAILPOINT_LOG), so a
    Spark Python worker that kills its whole job still confirms it; an exit code alone does not
    (tests/connectors/tools/test_demo_story.py runs the kill)."""
    from connectors.tools.replay_jobs import RunResult

    killed = RunResult(["job"], {}, tmp_path / "log", 0, exit_code=-signal.SIGKILL)
    exited = RunResult(["job"], {}, tmp_path / "log", 0, exit_code=137)
    logged = RunResult(["job"], {}, tmp_path / "log", 0, exit_code=-signal.SIGKILL, failpoints_fired=["mid_commit"])
    assert not Replay._failpoint_hit(killed, "mid_commit") and not Replay._failpoint_hit(exited, "mid_commit")
    assert Replay._failpoint_hit(logged, "mid_commit:exit@2")


def test_an_output_topic_with_records_from_an_earlier_run_is_refused(tmp_path):
    from connectors.kafka.clients.factory import clients_for

    bootstrap = f"fake-kafka://{tmp_path / 'kafka.db'}"
    clients = clients_for(bootstrap)
    load_input(clients, "in", 100, partitions=1, aborted=0)
    load_input(clients, "old-baseline", 5, partitions=1, aborted=0)
    result = Replay(options(tmp_path, bootstrap, scenarios=["baseline"], output_prefix="old")).run()
    (baseline,) = result.scenarios
    assert baseline.status == FAILED and "already holds records" in baseline.verdict
    assert baseline.runs == [] and not result.passed


def test_metrics_files_of_both_engines_are_read(tmp_path):
    from connectors.tools.job_metrics import read_metrics

    path = tmp_path / "metrics.jsonl"
    path.write_text(
        '{"event":"start","pid":7,"time_ms":1000}\n'
        '{"event":"checkpoint","pid":7,"checkpoint_id":2,"trigger_ms":1000,"stored_ms":1010,"committed_ms":1040,'
        '"records":50}\n'
        '{"batchId": 3, "numInputRows": 2000, "durationMs": {"triggerExecution": 2582}, '
        '"timestamp": "2026-11-22T03:17:50.153Z"}\n'
        '{"event":"held","pid":7,"time_ms":5000}\n'
        '{"event":"checkpoint","pid":7,"checkpo'  # torn by a kill
    )
    ours, spark = read_metrics(path).checkpoints
    assert (ours.checkpoint_id, ours.latency_ms, ours.records) == (2, 40, 50)
    assert (spark.checkpoint_id, spark.latency_ms, spark.records) == (3, 2582, 2000)
    assert spark.trigger_ms == 1795317470153
    assert read_metrics(path).held_after(4000) == 5000 and read_metrics(path).held_after(5001) is None
    assert read_metrics(tmp_path / "absent.jsonl").checkpoints == []


def test_the_recovery_after_a_kill_is_a_commit_by_another_process(tmp_path):
    """A job killed right after a commit may stamp that commit in the kill's millisecond, or one
    later: it is not the recovery. CI once measured a recovery of 0 ms that way."""
    from connectors.tools.job_metrics import read_metrics

    def line(pid, checkpoint_id, committed_ms):
        return (f'{{"event":"checkpoint","pid":{pid},"checkpoint_id":{checkpoint_id},"trigger_ms":{committed_ms - 5},'
                f'"stored_ms":{committed_ms - 1},"committed_ms":{committed_ms},"records":10}}\n')

    path = tmp_path / "metrics.jsonl"
    path.write_text(line(7, 1, 1000) + line(7, 2, 2000) + line(7, 3, 2001) + line(9, 3, 2600))
    metrics = read_metrics(path)
    assert metrics.first_commit_after(2000).committed_ms == 2000
    # Killed at 2000: the commits stamped at 2000 and 2001 are the dying run's own.
    assert metrics.first_commit_after_death(500, 2000, pid=7).committed_ms == 2600
    # Started through a launcher (pid 3): the job's pid is known by its commits before the kill.
    assert metrics.first_commit_after_death(500, 2000, pid=3).committed_ms == 2600
    # A fault that ends no process (a broker restart) takes the first commit from its end on.
    assert metrics.first_commit_after(2001).committed_ms == 2001
    # Spark's progress lines name no process: only a later one counts.
    spark = tmp_path / "spark.jsonl"
    spark.write_text('{"batchId": 3, "numInputRows": 5, "durationMs": {"triggerExecution": 0}, '
                     '"timestamp": "2026-11-22T03:17:50.153Z"}\n'
                     '{"batchId": 4, "numInputRows": 5, "durationMs": {"triggerExecution": 0}, '
                     '"timestamp": "2026-11-22T03:17:51.000Z"}\n')
    death = read_metrics(spark).checkpoints[0].committed_ms
    assert read_metrics(spark).first_commit_after_death(0, death, pid=3).checkpoint_id == 4


def test_failpoint_hits_are_planned_from_the_input_and_the_batch_size(tmp_path):
    def hits(engine, records, batch):
        template = JobTemplate.for_engine(engine) if engine != "custom" else JobTemplate.custom(AT_LEAST_ONCE_JOB)
        replay = Replay(options(tmp_path, f"fake-kafka://{tmp_path / 'kafka.db'}", template=template,
                                batch_records=batch))
        replay._input_records = records
        return replay._hit_range()[:2]

    # In-process: one checkpoint per batch, and a crash at most one batch before the end.
    assert hits("inprocess", 4000, 50) == (3, 79)
    assert hits("inprocess", 150, 50) == (2, 2)
    assert hits("inprocess", 60, 50) == (1, 1)
    # Spark: per-process hit counters, so hits 1 and 2 only, with three batches or more.
    assert hits("spark", 20_000, 2000) == (1, 2)
    assert hits("spark", 3000, 2000) == (1, 1)
    # A custom job: from the baseline's checkpoints (none measured here).
    assert hits("custom", 1000, 50) == (3, 5)


@pytest.mark.parametrize("failpoint", ["before_pre_commit", "after_pre_commit", "after_checkpoint_stored",
                                       "before_commit", "mid_commit", "after_commit"])
def test_the_last_hit_the_replay_may_plan_is_reached_with_input_to_spare(tmp_path, failpoint):
    """The in-process engine's template, as the replay runs it, at the far end of the hit range:
    the crash comes for certain, with at least one batch of input still unprocessed."""
    from connectors.kafka.clients.factory import clients_for

    bootstrap = f"fake-kafka://{tmp_path / 'kafka.db'}"
    clients = clients_for(bootstrap)
    load_input(clients, "in", 600, partitions=3, aborted=10)
    clients.admin().create_topic("out", 3)
    replay = Replay(options(tmp_path, bootstrap))
    replay._input_records = 600
    _first, last, _why = replay._hit_range()
    assert last == 600 // 50 - 1
    release = tmp_path / "release"
    release.touch()
    argv = replay.options.template.render({
        "bootstrap": bootstrap, "input": "in", "output": "out", "checkpoint_dir": str(tmp_path / "chk"),
        "metrics_file": str(tmp_path / "metrics.jsonl"), "hold_file": str(release),
        "checkpoint_interval": "0.2", "batch_records": "50"}, ["--failpoint", f"{failpoint}:exit@{last}"])
    run = JobRun(argv, {}, tmp_path / "run.log").wait(120)
    assert run.exit_code == 137 and run.failpoints_fired == [failpoint], run.log_tail()
    committed = verify(clients, "in", "out").counts["output_records"]
    assert committed <= 600 - 50, f"only {600 - committed} records were left at the crash"


@pytest.mark.parametrize("engine", ["inprocess", pytest.param("spark", marks=pytest.mark.spark)])
def test_a_held_job_waits_for_its_release(tmp_path, engine):
    """Both examples, as the replay runs them: once the input is processed the job says so in its
    metrics and stays alive until its hold file exists."""
    from connectors.kafka.clients.factory import clients_for
    from connectors.tools.job_metrics import read_metrics

    if engine == "spark":
        pytest.importorskip("pyspark")
    bootstrap = f"fake-kafka://{tmp_path / 'kafka.db'}"
    clients = clients_for(bootstrap)
    load_input(clients, "in", 30, partitions=1, aborted=0)
    clients.admin().create_topic("out", 1)
    release, metrics = tmp_path / "release", tmp_path / "metrics.jsonl"
    argv = JobTemplate.for_engine(engine).render({
        "bootstrap": bootstrap, "input": "in", "output": "out", "checkpoint_dir": str(tmp_path / "chk"),
        "metrics_file": str(metrics), "hold_file": str(release), "checkpoint_interval": "0.2",
        "batch_records": "10"})
    run = JobRun(argv, {}, tmp_path / "run.log")
    try:
        deadline = time.monotonic() + 300
        while not read_metrics(metrics).held_ms:
            assert run.running(), run.result.log_tail()
            assert time.monotonic() < deadline, "the job never reported that it was held"
            time.sleep(0.05)
        # Held: everything is committed, and the job is still there for a fault to hit.
        assert verify(clients, "in", "out", id_spec="key", output_id_spec="json:id" if engine == "spark" else None
                      ).exactly_once
        assert run.running()
        assert len(read_metrics(metrics).checkpoints) >= 3
        release.touch()
        assert run.wait(120).succeeded, run.result.log_tail()
    finally:
        run.kill()


def test_a_timed_kill_finds_the_job_running_however_fast_it_is(tmp_path, monkeypatch):
    """30 records take the job a few milliseconds, and each kill comes a second after the run's
    first commit: the hold keeps every run alive until it is killed."""
    bootstrap = f"fake-kafka://{tmp_path / 'kafka.db'}"
    from connectors.kafka.clients.factory import clients_for

    load_input(clients_for(bootstrap), "in", 30, partitions=1, aborted=0)
    monkeypatch.setattr(Replay, "_fault_window_s", lambda self: (1.0, 1.0))
    result = Replay(options(tmp_path, bootstrap, scenarios=["kill9"], kills=2, batch_records=10)).run()
    (kill9,) = result.scenarios
    assert [run.killed for run in kill9.runs] == [True, True, False]
    assert kill9.status == PASSED and kill9.verdict == "exactly-once", kill9.notes


def test_rolling_restart_is_skipped_with_the_reason_without_a_cluster(tmp_path):
    broker = find_broker(f"fake-kafka://{tmp_path / 'kafka.db'}")
    from connectors.kafka.clients.factory import clients_for

    load_input(clients_for(broker.bootstrap_servers), "in", 100, partitions=1, aborted=0)
    result = Replay(options(tmp_path, broker.bootstrap_servers, scenarios=["rolling_restart"], broker=broker)).run()
    (scenario,) = result.scenarios
    assert scenario.status == SKIPPED and "3+ nodes" in scenario.verdict


def test_rolling_restart_bounces_every_node_while_the_job_runs(tmp_path, monkeypatch):
    """On the fake cluster a node's bounce is a short outage of the whole (simulated) cluster. The
    in-process job does not ride through an outage mid-processing, as Spark's retries do on a real
    cluster, so the bounces are placed by construction where it has nothing in flight: once the run
    is held at the end of its input."""
    from connectors.tools.job_metrics import read_metrics

    def await_hold(self, run, metrics_file):
        deadline = time.monotonic() + 120
        while run.running() and time.monotonic() < deadline:
            if read_metrics(metrics_file).held_after(run.result.start_ms):
                return
            time.sleep(0.05)

    monkeypatch.setattr(Replay, "_await_first_commit", await_hold)
    monkeypatch.setattr(Replay, "_fault_window_s", lambda self: (0.0, 0.0))
    broker = find_broker(f"fake-kafka://{tmp_path / 'kafka.db'}")
    bounced = []

    def bounce(node_id, downtime_s):
        bounced.append(node_id)
        broker.restart(downtime_s)

    broker.bounce, broker.nodes, broker.bounce_unavailable = bounce, (1, 2, 3), None
    from connectors.kafka.clients.factory import clients_for

    load_input(clients_for(broker.bootstrap_servers), "in", 1000, partitions=2, aborted=0)
    result = Replay(options(tmp_path, broker.bootstrap_servers, scenarios=["baseline", "rolling_restart"],
                            broker=broker, broker_downtime_s=0.2)).run()
    baseline, rolling = result.scenarios
    assert sorted(bounced) == [1, 2, 3], (rolling.notes, [r.log_tail(5) for r in rolling.runs])
    assert rolling.runs[0].fault_start_ms is not None
    assert rolling.verify.exactly_once, rolling.verdict
