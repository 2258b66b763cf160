"""The demo console tells one story (issue 27): the titles name the command that ran, the
transaction-timeout row says its loss is intended and reported, every failpoint's firing is
confirmed from the job's log (even when the job dies by it before its output is flushed), a
failpoint that never fired makes its scenario inconclusive, an empty plot panel says so, and a
replay of no records is refused.

Everything runs on the embedded (fake) cluster with the in-process example or tiny Python jobs."""

import io
import json
import signal
import sys
import textwrap
from pathlib import Path

import pytest
from rich.console import Console

from connectors.kafka.clients.factory import clients_for
from connectors.simulated_kafka import FakeKafkaClients
from connectors.tools import cli
from connectors.tools.replay_jobs import JobRun, JobTemplate, RunResult, failpoints_fired
from connectors.tools.loader import load_input
from connectors.tools.replay import INCONCLUSIVE, PASSED, Replay, ReplayOptions, ReplayResult, ScenarioResult
from connectors.tools.report import markdown, overall, plot, table_rows, title
from connectors.tools.verify import verify
from twophase import failpoints


@pytest.fixture(autouse=True)
def consoles(monkeypatch):
    out, err = io.StringIO(), io.StringIO()
    monkeypatch.setattr(cli, "out", Console(file=out, width=200))
    monkeypatch.setattr(cli, "err", Console(file=err, width=200, log_path=False))
    return out, err


def run_cli(capsys, *argv):
    try:
        code = cli.main(list(argv))
    except SystemExit as exit_info:  # argparse
        code = exit_info.code
    captured = capsys.readouterr()
    out, err = cli.out.file.getvalue(), cli.err.file.getvalue()
    assert "Traceback" not in captured.err + captured.out + out + err
    return code, out, captured.err + err


def the_report(reports_dir):
    (folder,) = [p for p in Path(reports_dir).iterdir() if p.name != "work"]
    return folder, json.loads((folder / "report.json").read_text())


# -- failpoints confirmed from the job's log -----------------------------------------------------

def test_a_failpoint_that_kills_its_whole_job_still_leaves_its_line_in_the_log(tmp_path):
    """As in the Spark example: the failpoint fires in a helper process whose output never reaches
    the job's log (here: a pipe nobody reads), and its exit SIGKILLs the job's whole process group.
    The line the failpoint appends to the run's log (KAFKA_EOS_FAILPOINT_LOG) is still there."""
    helper = textwrap.dedent("""
        import logging, os
        logging.basicConfig(level=logging.INFO)
        os.environ["KAFKA_EOS_FAILPOINT_KILL_GROUP"] = str(os.getpgid(0))
        from twophase import failpoints
        failpoints.enable("mid_commit", "exit@2")
        failpoints.hit("mid_commit", checkpoint_id=1)
        failpoints.hit("mid_commit", checkpoint_id=2)
    """)
    job = textwrap.dedent(f"""
        import subprocess, sys, time
        # The helper's output goes to a pipe this job never reads, like a Spark worker's through the JVM.
        subprocess.Popen([sys.executable, "-c", {helper!r}], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        time.sleep(60)
    """)
    run = JobRun([sys.executable, "-c", job], {}, tmp_path / "run-01.log").wait(60)
    assert run.exit_code == -signal.SIGKILL and not run.timed_out, run.log_tail()
    assert run.failpoints_fired == ["mid_commit"], run.log_tail()
    assert "failpoint mid_commit fired (exit@2, hit 2, pid " in run.log_tail()
    assert run.to_json()["failpoints_fired"] == ["mid_commit"]


def test_the_job_output_and_the_appended_lines_never_overwrite_each_other(tmp_path):
    """The run's log is opened in append mode: the job's own writes and a failpoint's appended
    line all land, in order."""
    job = textwrap.dedent("""
        import logging, sys
        logging.basicConfig(level=logging.INFO, stream=sys.stderr)
        print("before", flush=True)
        from twophase import failpoints
        failpoints.enable("after_commit", "sleep(1)")
        failpoints.hit("after_commit")
        print("after " + "x" * 200, flush=True)
    """)
    run = JobRun([sys.executable, "-c", job], {}, tmp_path / "run.log").wait(60)
    assert run.succeeded, run.log_tail()
    header, _, output = run.log_path.read_text().partition("  # env {}\n")
    assert header.startswith("$ ")
    lines = output.splitlines()
    assert lines[0] == "before"
    assert sum("failpoint after_commit fired (sleep(1), hit 1" in line for line in lines) == 2  # logger + appended
    assert lines[-1] == "after " + "x" * 200
    # Two lines of one firing are one firing.
    assert run.failpoints_fired == ["after_commit"]


def test_failpoints_fired_counts_firings_not_lines():
    text = ("12:00 WARNING twophase.failpoints: failpoint before_commit fired (sleep(5), hit 1, pid 7) x=1\n"
            "failpoint before_commit fired (sleep(5), hit 1, pid 7) x=1\n"
            "failpoint before_commit fired (sleep(5), hit 2, pid 7) x=2\n"
            "failpoint during_restore fired (exit, hit 1, pid 9)\n")
    assert failpoints_fired(text) == ["before_commit", "before_commit", "during_restore"]
    assert failpoints_fired("nothing here") == []


def test_without_the_log_file_variable_a_failpoint_writes_no_file(tmp_path, monkeypatch):
    monkeypatch.delenv(failpoints.LOG_FILE_ENV, raising=False)
    failpoints.enable("after_commit", "sleep(0)")
    try:
        failpoints.hit("after_commit")
    finally:
        failpoints.disable()
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setenv(failpoints.LOG_FILE_ENV, str(tmp_path / "fired.log"))
    failpoints.enable("after_commit", "sleep(0)")
    try:
        failpoints.hit("after_commit", checkpoint_id=4)
    finally:
        failpoints.disable()
    (line,) = (tmp_path / "fired.log").read_text().splitlines()
    assert line.startswith("failpoint after_commit fired (sleep(0), hit 1, pid ") and line.endswith("checkpoint_id=4")


def test_an_exit_code_alone_does_not_confirm_a_failpoint(tmp_path):
    """Exit 137 or a SIGKILL may have other causes: only the log line confirms the firing."""
    killed = RunResult(["job"], {}, tmp_path / "log", 0, exit_code=-signal.SIGKILL)
    exited = RunResult(["job"], {}, tmp_path / "log", 0, exit_code=137)
    logged = RunResult(["job"], {}, tmp_path / "log", 0, exit_code=-signal.SIGKILL, failpoints_fired=["mid_commit"])
    assert not Replay._failpoint_hit(killed, "mid_commit:exit@2")
    assert not Replay._failpoint_hit(exited, "mid_commit")
    assert Replay._failpoint_hit(logged, "mid_commit:exit@2") and Replay._failpoint_hit(logged, "mid_commit")
    assert not Replay._failpoint_hit(logged, "after_commit")


# A custom job that checkpoints only every 50 records, over 20 records: the replay plans a custom
# job's crash at hit 3 or later, which this input never reaches.
SPARSE_JOB = (
    "{python} {jobs}/copy_pipeline.py --bootstrap {bootstrap} --input {input} --output {output} "
    "--checkpoint-dir {checkpoint_dir} --bounded --max-poll-records 50 --checkpoint-every-records 50 "
    "--checkpoint-interval 3600 --metrics-file {metrics_file}")


def test_a_failpoint_that_never_fired_makes_its_scenario_inconclusive(tmp_path):
    bootstrap = f"fake-kafka://{tmp_path / 'kafka.db'}"
    load_input(clients_for(bootstrap), "in", 20, partitions=1, aborted=0)
    result = Replay(ReplayOptions(bootstrap=bootstrap, input_topic="in", template=JobTemplate.custom(SPARSE_JOB),
                                  work_dir=tmp_path / "work", scenarios=["baseline", "mid_commit"],
                                  run_timeout_s=120)).run()
    baseline, crash = result.scenarios
    assert baseline.status == PASSED
    assert crash.runs and all(run.succeeded for run in crash.runs)
    assert crash.runs[0].failpoints_fired == []
    assert crash.status == INCONCLUSIVE
    assert crash.verdict == "inconclusive: failpoint mid_commit never fired (exactly-once without it)"
    assert any("did not fire" in note for note in crash.notes)
    assert not result.passed
    word, why = overall(result)
    assert word == "FAILED" and "mid_commit inconclusive (inconclusive: failpoint mid_commit never fired" in why


def test_the_demo_lists_every_failpoint_that_fired_and_tells_one_story(capsys, tmp_path):
    """The in-process demo over the demo's fault scenarios (but the broker restart): every failpoint
    scenario's crash run lists its failpoint in report.json, the transaction-timeout row gives the
    loss the Losses column shows as intended and reported, and everything is titled demo."""
    code, out, _ = run_cli(capsys, "demo", "--bootstrap", f"fake-kafka://{tmp_path / 'kafka.db'}",
                           "--engine", "inprocess", "--records", "1500", "--batch-records", "50",
                           "--scenarios", "baseline,after_pre_commit,mid_commit,during_restore,txn_timeout",
                           "--reports-dir", str(tmp_path / "reports"))
    assert code == 0, out
    folder, data = the_report(tmp_path / "reports")
    assert data["command"] == "demo"
    scenarios = {s["name"]: s for s in data["scenarios"]}
    assert scenarios["after_pre_commit"]["runs"][0]["failpoints_fired"] == ["after_pre_commit"]
    assert scenarios["mid_commit"]["runs"][0]["failpoints_fired"] == ["mid_commit"]
    restore = [run["failpoints_fired"] for run in scenarios["during_restore"]["runs"]]
    assert restore[:2] == [["after_checkpoint_stored"], ["during_restore"]]
    assert scenarios["txn_timeout"]["runs"][0]["failpoints_fired"] == ["before_commit"]
    assert all(s["status"] == "passed" for s in scenarios.values())
    # The transaction-timeout row: its loss, as the Losses column counts it, intended and reported.
    lost = scenarios["txn_timeout"]["verify"]["anomalies"]["lost_writes"]["records"]
    assert lost > 0
    verdict = scenarios["txn_timeout"]["verdict"]
    assert verdict == (f"{lost:,} records lost, as the scenario intends: loss detected and reported "
                       "(TransactionLostError)")
    # One story on the console: the title says demo, and the PASSED line says the loss was intended.
    assert "kafka-eos demo: inprocess engine, seed 1" in out and "kafka-eos replay" not in out
    (passed_line,) = [line for line in out.splitlines() if line.startswith("PASSED")]
    assert f"txn_timeout lost {lost:,} records, as it intends, and the loss was detected and reported" in passed_line
    assert "exactly-once in baseline, after_pre_commit, mid_commit, during_restore" in passed_line
    text = (folder / "report.md").read_text()
    assert "# kafka-eos demo report" in text and "kafka-eos replay" not in text
    assert f"| {lost} | 0 | " in text and f"| {verdict} (simulated Kafka) |" in text
    assert "- Overall: **PASSED**: exactly-once in " in text


def test_replay_is_titled_replay(capsys, tmp_path):
    bootstrap = f"fake-kafka://{tmp_path / 'kafka.db'}"
    code, out, _ = run_cli(capsys, "replay", "--bootstrap", bootstrap, "--input", "in", "--load", "300",
                           "--engine", "inprocess", "--scenarios", "baseline", "--batch-records", "50",
                           "--reports-dir", str(tmp_path / "reports"))
    assert code == 0, out
    folder, data = the_report(tmp_path / "reports")
    assert data["command"] == "replay"
    assert "kafka-eos replay: inprocess engine, seed 1" in out and "kafka-eos demo" not in out
    assert "# kafka-eos replay report" in (folder / "report.md").read_text()


# -- the transaction-timeout verdict and the overall line ----------------------------------------

def _txn_timeout_result(tmp_path, simulated=True):
    fake = FakeKafkaClients(tmp_path / "kafka.db")
    load_input(fake, "in", 1999, partitions=1, aborted=0)
    fake.admin().create_topic("out", 1)
    lost_run = RunResult(["job"], {}, tmp_path / "log", 0, exit_code=1, transaction_lost=True,
                         failpoints_fired=["before_commit"])
    scenario = ScenarioResult("txn_timeout", "transaction.timeout.ms=3000", "inconclusive", "", runs=[lost_run])
    scenario.verify = verify(fake, "in", "out")
    Replay._txn_timeout_verdict(scenario, scenario.verify)
    return ReplayResult("fake-kafka://x", None, "in", "inprocess", "job {metrics_file}", 1, [scenario],
                        simulated=simulated)


def test_the_transaction_timeout_row_says_its_loss_is_intended_and_reported(tmp_path):
    result = _txn_timeout_result(tmp_path)
    (scenario,) = result.scenarios
    assert scenario.status == PASSED
    assert scenario.verdict == ("1,999 records lost, as the scenario intends: loss detected and reported "
                                "(TransactionLostError)")
    (row,) = table_rows(result)
    assert row[6] == "1999" and row[-1].startswith("1,999 records lost, as the scenario intends")
    assert overall(result) == ("PASSED", "txn_timeout lost 1,999 records, as it intends, and the loss was "
                                         "detected and reported")
    assert "- Overall: **PASSED**: txn_timeout lost 1,999 records" in markdown(result)


# -- titles and the plot -------------------------------------------------------------------------

def _capture_figure(monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figures = []
    real_close = plt.close
    monkeypatch.setattr(plt, "close", lambda fig=None: figures.append(fig) or real_close(fig))
    return figures


def test_a_panel_without_commits_says_so(tmp_path, monkeypatch):
    figures = _capture_figure(monkeypatch)
    result = _txn_timeout_result(tmp_path)  # its one run committed no checkpoint
    result.command = "demo"
    (scenario,) = result.scenarios
    scenario.recoveries = [(5_000, 5_000, None)]
    assert plot(result, tmp_path / "plot.png") == tmp_path / "plot.png"
    (fig,) = figures
    (ax,) = [ax for ax in fig.axes if ax.get_visible()]
    texts = [t.get_text() for t in ax.texts]
    assert texts == ["no commits to plot\n(no checkpoint committed)"]
    assert list(ax.get_yticks()) == [] and ax.get_ylabel() == ""
    assert "kafka-eos demo: per-checkpoint commit latency" in fig._suptitle.get_text()


def test_a_panel_with_commits_has_its_latency_axis(tmp_path, monkeypatch):
    from connectors.tools.job_metrics import CheckpointEvent

    figures = _capture_figure(monkeypatch)
    result = _txn_timeout_result(tmp_path)
    (scenario,) = result.scenarios
    run = scenario.runs[0]
    run.start_ms, run.end_ms = 0, 10_000
    scenario.checkpoints = [CheckpointEvent(pid=7, checkpoint_id=1, trigger_ms=1_000, stored_ms=1_010,
                                            committed_ms=1_040, records=50)]
    plot(result, tmp_path / "plot.png")
    (fig,) = figures
    (ax,) = [ax for ax in fig.axes if ax.get_visible()]
    assert list(ax.texts) == [] and ax.get_ylabel() == "latency (ms)"
    assert "kafka-eos replay: per-checkpoint commit latency" in fig._suptitle.get_text()


def test_titles_follow_the_command(tmp_path):
    result = _txn_timeout_result(tmp_path)
    assert title(result) == "kafka-eos replay" and markdown(result).count("# kafka-eos replay report") == 1
    result.command = "demo"
    assert title(result) == "kafka-eos demo" and "# kafka-eos demo report" in markdown(result)
    assert result.to_json()["command"] == "demo"


# -- no records, no PASSED -----------------------------------------------------------------------

@pytest.mark.parametrize("argv, option", [
    (["demo", "--records", "0"], "--records"),
    (["demo", "--records", "-5"], "--records"),
    (["replay", "--input", "in", "--load", "0"], "--load"),
    (["demo", "--batch-records", "0"], "--batch-records"),
])
def test_zero_records_are_refused_in_one_line_naming_the_option(capsys, tmp_path, argv, option):
    code, out, err = run_cli(capsys, *argv, "--reports-dir", str(tmp_path))
    assert code == 2
    (line,) = [line for line in err.splitlines() if "error:" in line]
    assert f"argument {option}: " in line and "must be >= 1" in line
    assert not any(tmp_path.iterdir())


def test_load_may_still_skip_the_aborted_transaction():
    args = cli.build_parser().parse_args(["load", "--bootstrap", "b", "--topic", "t", "--aborted", "0"])
    assert args.aborted == 0


def test_replay_of_an_empty_input_topic_is_refused(capsys, tmp_path):
    bootstrap = f"fake-kafka://{tmp_path / 'kafka.db'}"
    clients_for(bootstrap).admin().create_topic("empty", 1)
    code, _, err = run_cli(capsys, "replay", "--bootstrap", bootstrap, "--input", "empty", "--engine", "inprocess",
                           "--scenarios", "baseline", "--reports-dir", str(tmp_path / "reports"))
    assert code == 2
    assert "input topic 'empty' holds no committed records, so there is nothing to replay" in err
    assert not list((tmp_path / "reports").glob("*/report.json"))
