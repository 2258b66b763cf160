"""The proof on a secured cluster, as a user runs it: ``kafka-eos load`` and ``kafka-eos replay
--engine spark`` against a SASL_SSL (SCRAM-SHA-512) broker that denies by default, as an
application user holding only the ACLs the two commands and the job need, its settings given once
in a Java client properties file (``--command-config``), the file Kafka's own tools take:
``sasl.jaas.config`` spread over lines with backslash continuations, a JKS truststore made with
``keytool -importcert`` from the brokers' CA.

The same settings must reach every client the commands make and the Spark job that ``replay``
runs (in a private file, never on its command line), and no secret may land in the reports or on
the console. The ``client-config`` cases give the same settings as ``--client-config KEY=VALUE``
flags instead of a file; the ``librdkafka-names`` cases give the same credentials in librdkafka's
names (``sasl.username``, ``ssl.ca.location``).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import javaproperties
import pytest

from connectors.kafka.authorization import PREFIXED, TOPIC, TRANSACTIONAL_ID, AclRequirement

pytestmark = pytest.mark.spark

RECORDS = 3000
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"


def _keytool() -> str | None:
    java_home = os.environ.get("JAVA_HOME", "").strip()
    if java_home and (Path(java_home) / "bin" / "keytool").is_file():
        return str(Path(java_home) / "bin" / "keytool")
    return shutil.which("keytool")


def _jks_truststore(ca_pem: str, path: Path) -> str:
    """A JKS truststore at ``path`` holding the brokers' CA; returns its password."""
    keytool = _keytool()
    if keytool is None:
        pytest.skip("no keytool (it comes with the Java runtime Kafka needs): neither on PATH nor in JAVA_HOME/bin")
    password = secrets.token_urlsafe(12)
    made = subprocess.run([keytool, "-importcert", "-noprompt", "-alias", "kafka-ca", "-file", ca_pem,
                           "-keystore", str(path), "-storetype", "JKS", "-storepass", password],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120)
    assert made.returncode == 0, made.stderr + made.stdout
    return password


def _java_properties(app_config: dict[str, str], ca_pem: str, folder: Path) -> tuple[str, list[str]]:
    """The application user's settings in Java's names, as an operator writes them for Kafka's
    tools; and the secrets in it."""
    store = folder / "truststore.jks"
    store_password = _jks_truststore(ca_pem, store)
    user, password = app_config["sasl.username"], app_config["sasl.password"]
    text = (
        "# the application user, as for kafka-console-producer.sh --command-config\n"
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism: SCRAM-SHA-512\n"
        f"sasl.jaas.config={SCRAM} required \\\n"
        f'    username="{user}" \\\n'
        f'    password="{password}";\n'
        "! a JKS truststore, which librdkafka cannot read itself\n"
        f"ssl.truststore.location={store}\n"
        f"ssl.truststore.password={store_password}\n"
    )
    return text, [password, store_password]


def _librdkafka_properties(app_config: dict[str, str], ca_pem: str, folder: Path) -> tuple[str, list[str]]:
    text = (
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        f"sasl.username={app_config['sasl.username']}\n"
        f"sasl.password={app_config['sasl.password']}\n"
        f"ssl.ca.location={ca_pem}\n"
    )
    return text, [app_config["sasl.password"]]


NAMES = {"java-names": _java_properties, "librdkafka-names": _librdkafka_properties}


def _kafka_eos(*argv: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "connectors.tools.command", *argv], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=timeout, env={**os.environ, "COLUMNS": "200"})


#: How the settings are given: a properties file, or one --client-config flag each.
GIVEN = ("command-config", "client-config")


def _settings_flags(given: str, text: str, properties: Path) -> list[str]:
    if given == "command-config":
        return ["--command-config", str(properties)]
    return [flag for key, value in javaproperties.loads(text).items()
            for flag in ("--client-config", f"{key}={value}")]


@pytest.mark.parametrize("given", GIVEN)
@pytest.mark.parametrize("names", sorted(NAMES))
def test_load_and_replay_on_a_secured_cluster(secured_kafka, tmp_path, names, given):
    run = uuid.uuid4().hex[:8]
    app = secured_kafka.application(f"prover-{run}")
    input_topic = f"it-secured-replay-{run}"
    # What load, replay (its own clients and the Spark job) and verify need, and nothing else: the
    # input and replay's output topics, created and written by them; the loader's and the job's
    # transactional ids (kafka-eos-loader-..., kafka-eos-<hash of the checkpoint location>-...).
    topic_operations = ("CREATE", "WRITE", "READ", "DESCRIBE")
    secured_kafka.acl.grant(app.principal, [
        *(AclRequirement(op, TOPIC, input_topic) for op in topic_operations),
        *(AclRequirement(op, TOPIC, f"{input_topic}-eos-", PREFIXED) for op in topic_operations),
        AclRequirement("WRITE", TRANSACTIONAL_ID, "kafka-eos-", PREFIXED),
        AclRequirement("DESCRIBE", TRANSACTIONAL_ID, "kafka-eos-", PREFIXED),
    ])
    text, secret_values = NAMES[names](app.config, secured_kafka.admin_config["ssl.ca.location"], tmp_path)
    properties = tmp_path / "prover.properties"
    properties.write_text(text, encoding="utf-8")
    bootstrap = secured_kafka.bootstrap_servers
    settings = _settings_flags(given, text, properties)

    loaded = _kafka_eos("load", "--bootstrap", bootstrap, "--topic", input_topic, "--records", str(RECORDS),
                        "--partitions", "3", *settings, timeout=300)
    assert loaded.returncode == 0, loaded.stdout + loaded.stderr[-4000:]
    assert f"loaded {RECORDS} committed records" in loaded.stdout

    reports = tmp_path / "reports"
    replayed = _kafka_eos("replay", "--engine", "spark", "--bootstrap", bootstrap, "--input", input_topic,
                          "--scenarios", "baseline", "--batch-records", "1000", *settings,
                          "--run-timeout", "600", "--reports-dir", str(reports), timeout=1200)
    console = replayed.stdout + replayed.stderr
    (folder,) = [p for p in reports.iterdir() if p.name != "work"]
    data = json.loads((folder / "report.json").read_text())
    logs = "\n".join(p.read_text(errors="replace")[-3000:] for p in (reports / "work").rglob("run-*.log"))
    assert replayed.returncode == 0, console[-4000:] + logs
    (baseline,) = data["scenarios"]
    assert baseline["status"] == "passed" and baseline["verdict"] == "exactly-once", baseline
    assert baseline["verify"]["exactly_once"] is True
    assert baseline["verify"]["counts"]["input_records"] == RECORDS
    assert data["passed"] is True and data["simulated"] is False
    # The job got every setting in a private file (--kafka-options-file), none on its command line,
    # which every local user sees in ps.
    argv = baseline["runs"][0]["argv"]
    assert "--kafka-options-file" in argv and "--kafka-option" not in argv, argv
    assert not any("SASL_SSL" in arg for arg in argv), argv
    assert data["client_config"]["security.protocol"] == "SASL_SSL"
    # No secret in the reports, on the console, or in the runs' recorded command lines.
    shown = {"report.md": (folder / "report.md").read_text(), "report.json": json.dumps(data), "console": console,
             "run logs' command lines": "\n".join(p.read_text(errors="replace").splitlines()[0]
                                                  for p in (reports / "work").rglob("run-*.log"))}
    for where, content in shown.items():
        for secret in secret_values:
            assert secret not in content, f"a secret is in the {where}"
    assert "****" in shown["report.md"]
