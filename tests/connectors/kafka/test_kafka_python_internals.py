"""kafka-python's private API is reached from one module, checked against the release pyproject
pins (its real-broker test: integration_tests/test_kafka_python_internals_on_real_kafka.py)."""

import re
from pathlib import Path

from connectors.kafka.clients._kafka_python import admin_internals

ROOT = Path(__file__).resolve().parents[3]
PRIVATE = re.compile(r"\._manager\b|\._find_coordinator_ids?\b|\._coordinators\b")


def test_only_admin_internals_reaches_kafka_pythons_private_api():
    reaching = [path.relative_to(ROOT).as_posix()
                for folder in ("connectors", "twophase", "kafka_testkit", "integration_tests", "bench", "examples")
                for path in sorted((ROOT / folder).rglob("*.py")) if PRIVATE.search(path.read_text())]
    assert reaching == ["connectors/kafka/clients/_kafka_python/admin_internals.py"]


def test_the_pinned_kafka_python_is_the_checked_release():
    [bound] = re.findall(r'"kafka-python>=([\d.]+),<([\d.]+)"', (ROOT / "pyproject.toml").read_text())
    lowest, below = (tuple(int(part) for part in version.split(".")) for version in bound)
    checked = [tuple(int(part) for part in version.split(".")) for version in admin_internals.CHECKED_VERSIONS]
    assert lowest in checked and all(lowest <= version < below for version in checked)
    assert below[:2] == (lowest[0], lowest[1] + 1), "the pin admits no release of a later minor version"
    assert admin_internals.installed_version() in admin_internals.CHECKED_VERSIONS
