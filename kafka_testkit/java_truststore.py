"""Java client settings for a secured cluster: a JKS truststore made with ``keytool -importcert``
from the brokers' CA (PEM), and the Java-named ``kafka.*`` settings of a SCRAM user, as a job on
Spark's own Kafka connector is configured (``kafka.sasl.jaas.config``, ``kafka.ssl.truststore.*``).

The drop-in tests hand exactly these settings to both ``format("kafka")`` and ``format("kafka-eos")``.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from pathlib import Path

SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"


class TruststoreError(RuntimeError):
    """keytool is missing, or failed; the message is one line."""


def keytool() -> str:
    java_home = os.environ.get("JAVA_HOME", "").strip()
    if java_home and (Path(java_home) / "bin" / "keytool").is_file():
        return str(Path(java_home) / "bin" / "keytool")
    found = shutil.which("keytool")
    if not found:
        raise TruststoreError("no keytool (it comes with the Java runtime): neither on PATH nor in JAVA_HOME/bin")
    return found


def jks_truststore(ca_pem: str | os.PathLike[str], path: str | os.PathLike[str],
                   password: str | None = None) -> tuple[Path, str]:
    """A JKS truststore at ``path`` holding the CA certificate ``ca_pem``; returns it and its password."""
    password = password or secrets.token_urlsafe(12)
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.unlink(missing_ok=True)
    result = subprocess.run([keytool(), "-importcert", "-noprompt", "-alias", "kafka-ca", "-file", str(ca_pem),
                             "-keystore", str(target), "-storetype", "JKS", "-storepass", password],
                            capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120)
    if result.returncode != 0:
        raise TruststoreError(f"keytool -importcert failed with exit code {result.returncode}: "
                              f"{(result.stderr or result.stdout).strip().splitlines()[-1:]}")
    return target, password


def scram_jaas_config(username: str, password: str) -> str:
    return f'{SCRAM_LOGIN_MODULE} required username="{username}" password="{password}";'


def java_scram_settings(librdkafka_config: dict[str, str], truststore: Path,
                        truststore_password: str) -> dict[str, str]:
    """Java client settings (no ``kafka.`` prefix) for the SCRAM user of ``librdkafka_config``
    (``sasl.username``, ``sasl.password``, ``sasl.mechanism``): SASL_SSL, a JAAS line, a JKS truststore."""
    return {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": librdkafka_config.get("sasl.mechanism", "SCRAM-SHA-512"),
        "sasl.jaas.config": scram_jaas_config(librdkafka_config["sasl.username"], librdkafka_config["sasl.password"]),
        "ssl.truststore.location": str(truststore),
        "ssl.truststore.password": truststore_password,
    }
