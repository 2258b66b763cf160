"""The kafka-eos console script: exit statuses, reports, and a clear message (never a traceback)
for every expected bad input.

Nothing here depends on the terminal pytest runs in: the CLI's consoles are replaced by fixed-width
ones writing to memory (no TTY, 200 columns, as in CI), and verdicts are read from the JSON report
where there is one."""

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from connectors.kafka.errors import KafkaConnectorError
from kafka_testkit.fake_cluster import FakeKafkaClients
from connectors.tools import broker as broker_module
from connectors.tools import cli, replay_jobs
from connectors.tools.broker import SIMULATED_NOTICE
from connectors.tools.loader import load_input
from kafka_testkit.topic_records import produce_committed, read_all

SCRIPT = Path(sys.executable).with_name("kafka-eos")


@pytest.fixture
def fake(tmp_path):
    clients = FakeKafkaClients(tmp_path / "kafka.db")
    load_input(clients, "in", 200, partitions=2, aborted=5)
    clients.admin().create_topic("out", 2)
    return clients


def copy_all(fake, skip=(), extra=()):
    records = [r for r in read_all(fake, "in") if r.key.decode() not in skip]
    values = [r.value + b"|copied" for r in records] + [f'{{"id": "{i}"}}'.encode() for i in extra]
    produce_committed(fake, "out", values, key_of=lambda v: str(json.JSONDecoder().raw_decode(v.decode())[0]["id"]).encode(),
                      txn_id="copier")


@pytest.fixture(autouse=True)
def consoles(monkeypatch):
    """The CLI's stdout and stderr consoles, 200 columns wide and not a terminal, wherever pytest
    runs (rich would otherwise use the terminal's width, or 80 columns without one)."""
    out, err = io.StringIO(), io.StringIO()
    monkeypatch.setattr(cli, "out", Console(file=out, width=200))
    monkeypatch.setattr(cli, "err", Console(file=err, width=200, log_path=False))
    return out, err


def run(capsys, *argv):
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    out, err = cli.out.file.getvalue(), cli.err.file.getvalue()
    assert "Traceback" not in captured.err + captured.out + out + err
    return code, out, err


def no_broker_anywhere(monkeypatch):
    for name in ("KAFKA_BOOTSTRAP_SERVERS", "KAFKA_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(broker_module, "_docker_answers", lambda: False)
    monkeypatch.setenv(broker_module.KAFKA_VERSION_ENV, "off")


def the_report(reports_dir):
    (folder,) = [p for p in Path(reports_dir).iterdir() if p.name != "work"]
    return folder, json.loads((folder / "report.json").read_text())


def test_verify_passes_a_faithful_copy_and_writes_the_json_report(fake, capsys, tmp_path):
    copy_all(fake)
    report_path = tmp_path / "r" / "verify.json"
    code, out, _ = run(capsys, "verify", "--bootstrap", fake.bootstrap_servers, "--input", "in",
                       "--output", "out", "--json-report", str(report_path))
    assert code == 0
    assert out.startswith("EXACTLY-ONCE")
    data = json.loads(report_path.read_text())
    assert data["exactly_once"] is True and data["counts"]["input_records"] == 200


def test_verify_exits_1_on_anomalies_and_prints_json_on_request(fake, capsys):
    copy_all(fake, skip={"7"}, extra=[3])
    code, out, _ = run(capsys, "verify", "--bootstrap", fake.bootstrap_servers, "--input", "in",
                       "--output", "out", "--id-field", "json:id", "--json")
    assert code == 1
    data = json.loads(out)
    assert data["exactly_once"] is False
    assert data["anomalies"]["lost_writes"]["records"] == 1
    assert data["anomalies"]["duplicates"]["records"] == 1


@pytest.mark.parametrize("argv, message", [
    (["--id-field", "json"], "'json' is not valid: use 'key'"),
    (["--id-field", "value:id"], "json:<field>"),
    (["--output-id-field", "header:"], "header:<name>"),
])
def test_malformed_id_fields_are_usage_errors(fake, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["verify", "--bootstrap", fake.bootstrap_servers, "--input", "in", "--output", "out", *argv])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_an_id_field_the_records_lack_is_a_clear_error(fake, capsys):
    copy_all(fake)
    code, _, err = run(capsys, "verify", "--bootstrap", fake.bootstrap_servers, "--input", "in",
                       "--output", "out", "--id-field", "header:rid")
    assert code == 2
    assert "no record of 'in' has an id at header:rid" in err


@pytest.mark.parametrize("topics, missing", [(("nope", "out"), "nope"), (("in", "absent"), "absent")])
def test_unknown_input_or_output_topics_are_clear_errors(fake, capsys, topics, missing):
    code, _, err = run(capsys, "verify", "--bootstrap", fake.bootstrap_servers, "--input", topics[0],
                       "--output", topics[1])
    assert code == 2
    assert f"topic '{missing}' does not exist" in err


def test_a_broker_that_does_not_answer_is_a_clear_error(fake, capsys):
    fake.set_available(False)
    code, _, err = run(capsys, "verify", "--bootstrap", fake.bootstrap_servers, "--input", "in", "--output", "out",
                       "--retry-timeout", "1")
    assert code == 2
    assert "Kafka did not answer" in err and "unavailable" in err


def test_permission_errors_say_what_is_missing(fake, capsys, monkeypatch):
    def refuse(*_args, **_kwargs):
        raise KafkaConnectorError("admin: describe topic in: TOPIC_AUTHORIZATION_FAILED: Not authorized")

    monkeypatch.setattr(cli, "verify", refuse)
    code, _, err = run(capsys, "verify", "--bootstrap", fake.bootstrap_servers, "--input", "in", "--output", "out")
    assert code == 2
    assert "permission denied by Kafka" in err and "--client-config" in err


def test_an_unreachable_broker_fails_fast_with_a_clear_message():
    """The installed console script, as a user runs it: bounded retries, then one message."""
    result = subprocess.run([str(SCRIPT), "verify", "--bootstrap", "127.0.0.1:1", "--input", "a", "--output", "b"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "cannot reach Kafka at 127.0.0.1:1" in result.stderr
    assert "attempts" in result.stderr
    assert "Traceback" not in result.stderr


def test_demo_that_requires_a_broker_says_exactly_what_to_provide(capsys, monkeypatch, tmp_path):
    no_broker_anywhere(monkeypatch)
    code, _, err = run(capsys, "demo", "--require-broker", "--reports-dir", str(tmp_path))
    assert code == 2
    for what in ("KAFKA_BOOTSTRAP_SERVERS=host:port", "Docker engine", "KAFKA_HOME=<path>", "Kafka 3.9/4.x",
                 "mvn and Java", "Maven Central"):
        assert what in err
    assert "no Docker engine answered; KAFKA_HOME is not set; Kafka from Maven Central did not start: " in err
    assert "KAFKA_EOS_KAFKA_VERSION=off" in err
    assert not any(tmp_path.glob("*/report.json"))


def test_demo_without_any_broker_runs_on_the_embedded_cluster_loudly_labelled(capsys, monkeypatch, tmp_path):
    no_broker_anywhere(monkeypatch)
    code, out, _ = run(capsys, "demo", "--engine", "inprocess", "--records", "1500", "--batch-records", "50",
                       "--scenarios", "baseline,after_pre_commit,broker_restart",
                       "--reports-dir", str(tmp_path / "reports"))
    assert code == 0, out
    folder, data = the_report(tmp_path / "reports")
    # JSON: the notice first and last, every scenario labelled, the real-broker way named.
    keys = list(data)
    assert (keys[0], keys[-1]) == ("notice", "closing_notice")
    assert data["notice"] == data["closing_notice"] == SIMULATED_NOTICE
    assert "KAFKA_BOOTSTRAP_SERVERS" in data["real_broker"] and "KAFKA_HOME" in data["real_broker"]
    assert data["simulated"] is True and data["passed"] is True
    scenarios = {s["name"]: s for s in data["scenarios"]}
    assert all(s["simulated"] for s in scenarios.values())
    assert [scenarios[n]["verdict"] for n in ("baseline", "after_pre_commit")] == ["exactly-once"] * 2
    restart = scenarios["broker_restart"]
    assert restart["status"] == "skipped" and "needs a real broker" in restart["verdict"]
    assert restart["runs"] == []
    # Markdown: the notice is the first and the last line.
    lines = (folder / "report.md").read_text().strip().splitlines()
    assert SIMULATED_NOTICE in lines[0] and SIMULATED_NOTICE in lines[-1]
    assert "| exactly-once (simulated Kafka) |" in (folder / "report.md").read_text()
    # Console: the notice is the first and the last line too, with the way to a real broker.
    printed = [line for line in out.splitlines() if line.strip()]
    assert printed[0] == printed[-1] == SIMULATED_NOTICE
    assert printed[1].startswith("No Kafka broker was found (Tried: KAFKA_BOOTSTRAP_SERVERS is not set")
    assert "To run against a real broker" in out and "--require-broker" in out


def test_replay_never_falls_back_to_the_embedded_cluster(capsys, monkeypatch, tmp_path):
    no_broker_anywhere(monkeypatch)
    code, _, err = run(capsys, "replay", "--input", "in", "--scenarios", "baseline", "--reports-dir", str(tmp_path))
    assert code == 2
    assert "No Kafka broker available" in err


def test_demo_on_the_fake_cluster_prints_the_table_and_writes_reports(capsys, tmp_path):
    code, out, _ = run(capsys, "demo", "--bootstrap", f"fake-kafka://{tmp_path / 'kafka.db'}", "--records", "1500",
                       "--engine", "inprocess", "--scenarios", "baseline,after_pre_commit,task_failures",
                       "--batch-records", "50", "--reports-dir", str(tmp_path / "reports"))
    assert code == 0, out
    folder, data = the_report(tmp_path / "reports")
    assert {p.name for p in folder.iterdir()} == {"report.md", "report.json", "commit-latency.png"}
    assert [s["status"] for s in data["scenarios"]] == ["passed", "passed", "skipped"]
    assert data["simulated"] is True and data["notice"] == SIMULATED_NOTICE
    # The table as printed, at the fixed width.
    assert "Scenario" in out and "Recovery time" in out and "PASSED" in out
    assert "after_pre_commit" in out and "not applicable" in out


def test_replay_exits_1_when_a_scenario_is_not_exactly_once(capsys, tmp_path):
    """The example without transactions, checkpointing every 50 records: the crash after a
    pre-commit always comes after records were flushed, so they are always duplicated."""
    bootstrap = f"fake-kafka://{tmp_path / 'kafka.db'}"
    command = ("{python} {examples}/copy_pipeline.py --bootstrap {bootstrap} --input {input} --output {output} "
               "--checkpoint-dir {checkpoint_dir} --bounded --delivery-guarantee at_least_once "
               "--max-poll-records 50 --checkpoint-every-records 50 --checkpoint-interval 3600 "
               "--metrics-file {metrics_file}")
    code, _, _ = run(capsys, "replay", "--bootstrap", bootstrap, "--input", "in", "--load", "1000",
                     "--job-command", command, "--scenarios", "baseline,after_pre_commit",
                     "--reports-dir", str(tmp_path / "reports"))
    assert code == 1
    _folder, data = the_report(tmp_path / "reports")
    baseline, crash = data["scenarios"]
    assert baseline["status"] == "passed"
    assert crash["runs"][0]["failpoints_fired"] == ["after_pre_commit"]
    assert crash["status"] == "failed" and crash["verdict"].startswith("NOT exactly-once")
    assert crash["verify"]["anomalies"]["duplicates"]["records"] > 0
    assert data["passed"] is False


def test_replay_of_a_missing_input_topic_says_how_to_load_one(fake, capsys, tmp_path):
    code, _, err = run(capsys, "replay", "--bootstrap", fake.bootstrap_servers, "--input", "missing",
                       "--scenarios", "baseline", "--reports-dir", str(tmp_path))
    assert code == 2
    assert "input topic 'missing' does not exist" in err and "--load N" in err


def test_an_engine_whose_example_is_missing_is_a_clear_error(fake, capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(replay_jobs, "EXAMPLES_DIR", tmp_path / "no-examples")
    code, _, err = run(capsys, "replay", "--bootstrap", fake.bootstrap_servers, "--input", "in",
                       "--engine", "spark", "--reports-dir", str(tmp_path))
    assert code == 2
    assert "spark_pipeline.py, which does not exist" in err


@pytest.mark.parametrize("argv, message", [
    (["--scenarios", "baseline,bogus"], "unknown scenarios ['bogus']"),
    (["--job-command", "job {input}"], "must contain {bootstrap}, {output}, {checkpoint_dir}"),
    (["--engine", "flink"], "invalid choice: 'flink'"),
])
def test_bad_replay_options(fake, capsys, tmp_path, argv, message):
    try:
        code = cli.main(["replay", "--bootstrap", fake.bootstrap_servers, "--input", "in",
                         "--reports-dir", str(tmp_path), *argv])
    except SystemExit as exit_info:
        code = exit_info.code
    assert code == 2
    assert message in capsys.readouterr().err + cli.err.file.getvalue()  # argparse, or the CLI


def test_load_writes_unique_ids(capsys, tmp_path):
    bootstrap = f"fake-kafka://{tmp_path / 'kafka.db'}"
    code, out, _ = run(capsys, "load", "--bootstrap", bootstrap, "--topic", "t", "--records", "300",
                       "--partitions", "3", "--aborted", "7")
    assert code == 0 and "loaded 300 committed records and 7 aborted" in out
    keys = [r.key for r in read_all(FakeKafkaClients(tmp_path / "kafka.db"), "t")]
    assert sorted(keys) == sorted(str(i).encode() for i in range(300))


def test_the_console_script_is_installed():
    assert SCRIPT.exists(), "pip install -e . creates the kafka-eos script"
    result = subprocess.run([str(SCRIPT), "--help"], capture_output=True, text=True, timeout=60,
                            env={**os.environ, "COLUMNS": "200"})
    assert result.returncode == 0
    for command in ("verify", "load", "replay", "demo"):
        assert command in result.stdout


class _FakeLaunched:
    """What a launcher entry point returns: a broker with start/stop/pid/description."""

    started: list[tuple[str, str | None]] = []

    def __init__(self, source, work_dir, *, extra_config):
        self.source, self.stopped = source, False
        self.description = f"Apache Kafka {source or '4.9.9'} from Maven Central"

    def start(self):
        _FakeLaunched.started.append(self.source)
        return "127.0.0.1:19092"

    def stop(self):
        self.stopped = True

    pid = 4242


class _FakeEntryPoint:
    value = "tests:_FakeLaunched"

    def load(self):
        return _FakeLaunched


def test_without_any_other_broker_kafka_comes_from_maven_central_and_is_named(monkeypatch):
    no_broker_anywhere(monkeypatch)
    monkeypatch.delenv(broker_module.KAFKA_VERSION_ENV)
    launched = []
    monkeypatch.setattr(broker_module, "_launcher", lambda name: launched.append(name) or _FakeEntryPoint())
    _FakeLaunched.started = []
    found = broker_module.find_broker(kafka_version="3.9")
    assert launched == ["maven-central"] and _FakeLaunched.started == ["3.9"]
    assert found.origin == "Apache Kafka 3.9 from Maven Central, started by the kit on 127.0.0.1:19092 (pid 4242)"
    assert found.owned and found.bootstrap_servers == "127.0.0.1:19092"


def test_kafka_home_comes_before_maven_central(monkeypatch, tmp_path):
    no_broker_anywhere(monkeypatch)
    monkeypatch.setenv("KAFKA_HOME", str(tmp_path))
    launched = []
    monkeypatch.setattr(broker_module, "_launcher", lambda name: launched.append(name) or _FakeEntryPoint())
    broker_module.find_broker()
    assert launched == ["kafka-home"]


@pytest.mark.parametrize("version", ["latest", "4.x", "4.1.0.1", ""])
def test_a_bad_kafka_version_is_one_line_naming_the_option(capsys, version):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["demo", "--kafka-version", version])
    assert exit_info.value.code == 2
    (line,) = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert "--kafka-version" in line and "4 (the newest 4.x), 3.9" in line
