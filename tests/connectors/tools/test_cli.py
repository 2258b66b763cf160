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

from connectors.kafka.kafka_errors import KafkaConnectorError
from connectors.servers import broker_discovery as broker_module
from connectors.simulated_kafka import FakeKafkaClients
from connectors.tools import cli, replay_jobs
from connectors.servers.broker_discovery import SIMULATED_NOTICE
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


def test_demo_without_any_broker_runs_on_simulated_kafka_loudly_labelled(capsys, monkeypatch, tmp_path):
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


def test_replay_never_falls_back_to_simulated_kafka(capsys, monkeypatch, tmp_path):
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
    command = ("{python} {jobs}/copy_pipeline.py --bootstrap {bootstrap} --input {input} --output {output} "
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


def test_an_engine_whose_job_is_missing_is_a_clear_error(fake, capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(replay_jobs, "JOBS_DIR", tmp_path / "no-jobs")
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


# -- client settings: --command-config FILE and --client-config KEY=VALUE (issue 35) ---------------

from connectors.tools import client_settings, demo as demo_module, replay as replay_module  # noqa: E402
from connectors.tools.client_settings import MASK, masked, masked_argv, read_properties  # noqa: E402

JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="prover" password="pa=ss";'
PROPERTIES = (
    "# a client properties file, as kafka-console-producer.sh --command-config takes it\n"
    "security.protocol=SASL_SSL\n"
    "! another comment\n"
    "sasl.mechanism: SCRAM-SHA-512\n"
    "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
    '    username="prover" \\\n'
    '    password="pa\\=ss";\n'
    "ssl.truststore.location /etc/kafka/truststore.jks\n"
    "ssl.truststore.password = tr\\u00fcst\n"
    "client.id=\n"
)
SECRETS = ("pa=ss", "trüst")


@pytest.fixture
def properties(tmp_path):
    path = tmp_path / "client.properties"
    path.write_text(PROPERTIES, encoding="utf-8")
    return path


def test_a_command_config_file_is_read_as_java_util_properties_reads_it(properties):
    assert read_properties(properties) == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.jaas.config": JAAS,
        "ssl.truststore.location": "/etc/kafka/truststore.jks", "ssl.truststore.password": "trüst", "client.id": "",
    }


def test_a_file_that_is_not_utf8_is_read_as_latin1_as_java_reads_it(tmp_path):
    path = tmp_path / "latin1.properties"
    path.write_bytes("sasl.password=gr\u00fcn\n".encode("iso-8859-1"))
    assert read_properties(path) == {"sasl.password": "grün"}


def test_client_config_entries_override_the_file_and_the_last_repeat_wins(properties):
    args = cli.build_parser().parse_args([
        "verify", "--bootstrap", "b:9092", "--input", "i", "--output", "o", "--client-config", "sasl.mechanism=PLAIN",
        "--command-config", str(properties), "--client-config", "linger.ms=5", "--client-config", "linger.ms=7",
        "--client-config", "ssl.endpoint.identification.algorithm="])
    settings = cli._settings(args)
    assert settings.values["sasl.mechanism"] == "PLAIN"  # whatever the order on the command line
    assert settings.values["linger.ms"] == "7" and settings.values["ssl.endpoint.identification.algorithm"] == ""
    assert settings.values["sasl.jaas.config"] == JAAS
    assert settings.sources == (f"--command-config {properties}", "--client-config")


def test_bootstrap_servers_of_a_file_is_left_to_the_bootstrap_option(tmp_path):
    path = tmp_path / "with-bootstrap.properties"
    path.write_text("bootstrap.servers=elsewhere:9092\nsecurity.protocol=SSL\n")
    args = cli.build_parser().parse_args(["load", "--bootstrap", "b:9092", "--topic", "t",
                                          "--command-config", str(path)])
    assert cli._settings(args).values == {"security.protocol": "SSL"}


def test_secret_values_are_masked(properties):
    shown = masked(read_properties(properties))
    assert shown["sasl.jaas.config"] == shown["ssl.truststore.password"] == MASK
    assert shown["security.protocol"] == "SASL_SSL" and shown["ssl.truststore.location"] == "/etc/kafka/truststore.jks"
    assert masked({"sasl.password": "x", "sasl.oauthbearer.client.secret": "y", "ssl.key.pem": "z",
                   "SSL.KEYSTORE.PASSWORD": "w"}) == dict.fromkeys(
        ("sasl.password", "sasl.oauthbearer.client.secret", "ssl.key.pem", "SSL.KEYSTORE.PASSWORD"), MASK)
    assert masked_argv(["job.py", "--bootstrap", "b:1", "--kafka-option", "sasl.password=p=w",
                        "--kafka-option=sasl.jaas.config=x y", "--option", "kafka.ssl.key.password=k",
                        "--kafka-option", "sasl.username=prover"]) == [
        "job.py", "--bootstrap", "b:1", "--kafka-option", f"sasl.password={MASK}",
        f"--kafka-option=sasl.jaas.config={MASK}", "--option", f"kafka.ssl.key.password={MASK}",
        "--kafka-option", "sasl.username=prover"]


COMMANDS_WITH_KAFKA = {
    "verify": ["--bootstrap", "b:9092", "--input", "i", "--output", "o"],
    "load": ["--bootstrap", "b:9092", "--topic", "t"],
    "create-topic": ["--bootstrap", "b:9092", "--topic", "t"],
    "replay": ["--bootstrap", "b:9092", "--input", "i"],
    "demo": ["--bootstrap", "b:9092"],
    "transactions": ["--bootstrap", "b:9092", "--prefix", "p"],
    "status": ["--bootstrap", "b:9092", "--checkpoint-location", "/tmp/chk"],
}


@pytest.mark.parametrize("command", sorted(COMMANDS_WITH_KAFKA))
def test_every_command_that_talks_to_kafka_takes_both_options(command, properties):
    args = cli.build_parser().parse_args([command, *COMMANDS_WITH_KAFKA[command], "--command-config", str(properties),
                                          "--client-config", "sasl.mechanism=SCRAM-SHA-256"])
    values = cli._settings(args).values
    assert values["sasl.mechanism"] == "SCRAM-SHA-256" and values["security.protocol"] == "SASL_SSL"


@pytest.mark.parametrize("argv, flag, valid", [
    (["--client-config", "foo"], "--client-config", "is not KEY=VALUE"),
    (["--client-config", "=x"], "--client-config", "is not KEY=VALUE"),
    (["--client-config", "sasl.password:hunter2"], "--client-config", "a secret's setting is not KEY=VALUE"),
    (["--command-config", "/no/such/client.properties"], "--command-config", "no such file"),
    (["--command-config", "/"], "--command-config", "not a file"),
])
@pytest.mark.parametrize("command", ["load", "replay", "demo", "verify"])
def test_bad_client_settings_are_one_line_naming_the_option(capsys, command, argv, flag, valid):
    with pytest.raises(SystemExit) as exit_info:
        cli.main([command, *COMMANDS_WITH_KAFKA[command], *argv])
    assert exit_info.value.code == 2
    (line,) = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert flag in line and valid in line and "hunter2" not in line
    assert "properties file" in line or "security.protocol=SASL_SSL" in line


def test_a_malformed_escape_in_a_command_config_is_one_line_naming_the_option(capsys, tmp_path):
    path = tmp_path / "bad.properties"
    path.write_text("sasl.password=\\u12\n")
    with pytest.raises(SystemExit):
        cli.main(["load", "--bootstrap", "b:9092", "--topic", "t", "--command-config", str(path)])
    (line,) = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert "--command-config" in line and "a \\u escape must be followed by four hex digits" in line
    assert "u12" not in line  # the value, which may be a secret, is not shown


def test_an_unreadable_command_config_is_one_line_naming_the_option(capsys, properties, monkeypatch):
    def refuse(self):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "read_bytes", refuse)  # as root, chmod 000 would not stop the read
    with pytest.raises(SystemExit):
        cli.main(["load", "--bootstrap", "b:9092", "--topic", "t", "--command-config", str(properties)])
    (line,) = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert "--command-config" in line and "cannot be read (Permission denied)" in line


@pytest.fixture
def seen_configs(monkeypatch):
    """Every configuration clients_for is called with, by the CLI, the demo and the replay."""
    seen = []
    real = cli.clients_for

    def recording(bootstrap, config=None):
        seen.append(dict(config or {}))
        return real(bootstrap, config)

    for module in (cli, demo_module, replay_module):
        monkeypatch.setattr(module, "clients_for", recording)
    return seen


@pytest.mark.parametrize("command, argv", [
    ("load", ["--topic", "t2", "--records", "10"]),
    ("verify", ["--input", "in", "--output", "out"]),
    ("create-topic", ["--topic", "t3"]),
    ("transactions", ["--prefix", "p"]),
    ("status", ["--checkpoint-location", "/nonexistent/chk"]),
])
def test_the_settings_reach_clients_for(fake, capsys, properties, seen_configs, command, argv):
    run(capsys, command, "--bootstrap", fake.bootstrap_servers, *argv, "--command-config", str(properties),
        "--client-config", "client.id=prover")
    assert seen_configs and all(c == {**read_properties(properties), "client.id": "prover"} for c in seen_configs)


FAKE_SPARK_JOB = '''\
"""Stands in for the Spark job: records its --kafka-options-file settings and the file's and its
folder's permissions, then runs the in-process copy."""
import json, os, stat, sys
argv, seen, args = sys.argv[1:], {}, []
while argv:
    word = argv.pop(0)
    if word == "--kafka-options-file":
        path = argv.pop(0)
        with open(path) as settings:
            seen = {"path": path, "settings": json.load(settings),
                    "mode": stat.S_IMODE(os.stat(path).st_mode),
                    "folder_mode": stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode)}
    elif word == "--max-offsets-per-trigger":
        args += ["--max-poll-records", argv.pop(0)]
    else:
        args.append(word)
with open(os.environ["FAKE_SPARK_OPTIONS"], "a") as out:
    out.write(json.dumps(seen) + "\\n")
copy = os.path.join(os.environ["REAL_JOBS"], "copy_pipeline.py")
os.execv(sys.executable, [sys.executable, copy, *args, "--checkpoint-every-records", "100"])
'''


@pytest.fixture
def fake_spark_example(tmp_path, monkeypatch):
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "spark_pipeline.py").write_text(FAKE_SPARK_JOB)
    options = tmp_path / "spark-options.jsonl"
    monkeypatch.setenv("FAKE_SPARK_OPTIONS", str(options))
    monkeypatch.setenv("REAL_JOBS", str(replay_jobs.JOBS_DIR))
    monkeypatch.setattr(replay_jobs, "JOBS_DIR", jobs)
    return options


@pytest.mark.parametrize("command", ["replay", "demo"])
def test_replay_and_demo_give_the_settings_to_their_clients_and_the_job_without_showing_secrets(
        command, capsys, tmp_path, properties, seen_configs, fake_spark_example):
    bootstrap = f"fake-kafka://{tmp_path / 'kafka.db'}"
    which = (["--input", "in", "--load", "500"] if command == "replay" else ["--records", "500"])
    code, out, err = run(capsys, command, "--bootstrap", bootstrap, *which, "--engine", "spark",
                         "--scenarios", "baseline,after_pre_commit", "--batch-records", "100",
                         "--command-config", str(properties), "--client-config", "client.id=prover",
                         "--reports-dir", str(tmp_path / "reports"))
    expected = {**read_properties(properties), "client.id": "prover"}
    assert code == 0, out + err
    assert seen_configs and all(c == expected for c in seen_configs)
    # Every run of the job got every setting, in a file only this user can read, removed after.
    runs = [json.loads(line) for line in fake_spark_example.read_text().splitlines()]
    assert len(runs) == 3  # the baseline, the crashed run and its restart
    assert all(seen["settings"] == expected for seen in runs)
    assert all(seen["mode"] == 0o600 and seen["folder_mode"] == 0o700 for seen in runs)
    assert not any(os.path.exists(seen["path"]) or os.path.exists(os.path.dirname(seen["path"])) for seen in runs)
    # The reports, the console and the runs' logs show the settings with their secrets masked.
    folder, data = the_report(tmp_path / "reports")
    assert data["client_config"] == masked(expected)
    recorded = [" ".join(r["argv"]) for s in data["scenarios"] for r in s["runs"]]
    # No setting on the job's command line (which ps shows every local user): only the file's name.
    assert all("--kafka-options-file " in a and "sasl" not in a and "SASL_SSL" not in a for a in recorded)
    markdown = (folder / "report.md").read_text()
    assert "`sasl.jaas.config=****`" in markdown and "`security.protocol=SASL_SSL`" in markdown
    logs = "".join(p.read_text() for p in (tmp_path / "reports" / "work").rglob("run-*.log"))
    for secret in SECRETS:
        for where, text in {"report.md": markdown, "report.json": (folder / "report.json").read_text(),
                            "console": out + err, "run logs": logs}.items():
            assert secret not in text and json.dumps(secret)[1:-1] not in text, where


@pytest.mark.parametrize("command, argv", [("replay", ["--input", "in"]), ("demo", [])])
def test_settings_without_a_named_cluster_are_a_usage_error(command, argv, capsys, monkeypatch, tmp_path):
    no_broker_anywhere(monkeypatch)
    code, _, err = run(capsys, command, *argv, "--client-config", "security.protocol=SSL",
                       "--reports-dir", str(tmp_path))
    assert code == 2
    assert "--client-config need --bootstrap" in err


@pytest.mark.parametrize("command, argv", [("replay", ["--input", "in"]), ("demo", [])])
def test_settings_for_the_in_process_engine_say_what_to_use_instead(fake, capsys, tmp_path, command, argv):
    code, _, err = run(capsys, command, "--bootstrap", fake.bootstrap_servers, *argv, "--engine", "inprocess",
                       "--client-config", "security.protocol=SSL", "--reports-dir", str(tmp_path))
    assert code == 2
    assert "--client-config are not for --engine inprocess" in err and "--engine spark" in err
    assert not list(tmp_path.rglob("*.log")), "nothing was started"


def test_the_replay_itself_refuses_settings_for_the_in_process_engine(fake, tmp_path):
    options = replay_module.ReplayOptions(bootstrap=fake.bootstrap_servers, input_topic="in",
                                          template=replay_jobs.JobTemplate.for_engine("inprocess"), work_dir=tmp_path,
                                          client_config={"security.protocol": "SSL"})
    with pytest.raises(cli.UsageError, match="not for --engine inprocess"):
        replay_module.Replay(options)


def test_broker_keeps_the_broker_it_starts_until_sigterm_then_stops_it(capsys, tmp_path, monkeypatch):
    import signal
    import threading

    stopped, asked = [], []

    def started(*, environ, kafka_version):
        asked.append((environ.get("KAFKA_BOOTSTRAP_SERVERS"), kafka_version))
        return broker_module.Broker("127.0.0.1:9", "Apache Kafka 4.4.0 from Maven Central", owned=True,
                                    _stop=lambda: stopped.append(True))

    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "elsewhere:9092")  # ignored: broker starts one
    monkeypatch.setattr(cli, "find_broker", started)
    monkeypatch.setattr(cli, "check_reachable", lambda bootstrap: None)
    bootstrap_file = tmp_path / "bootstrap"

    def terminate_once_written():
        for _ in range(500):
            if bootstrap_file.exists():
                break
            threading.Event().wait(0.01)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=terminate_once_written, daemon=True).start()
    code, out, err = run(capsys, "broker", "--kafka-version", "4.4.0", "--bootstrap-file", str(bootstrap_file))
    assert code == 0 and stopped == [True] and asked == [(None, "4.4.0")]
    assert bootstrap_file.read_text() == "127.0.0.1:9\n"
    assert "Kafka at 127.0.0.1:9: Apache Kafka 4.4.0 from Maven Central" in out and "broker stopped" in err
    assert signal.getsignal(signal.SIGTERM) is not cli._stop_on_sigterm  # the handler is put back
