"""A lean install (issue 27): the core dependencies are what the sink and the source need on Spark
executors; the command-line tools need the `tools` extra, and without it `kafka-eos` says in one
line how to install it."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from connectors.tools import command

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parents[3]


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=\[ ;]", r, maxsplit=1)[0].lower() for r in requirements}


def test_the_core_dependencies_are_what_executors_need():
    # cryptography: Java's trust and key stores read into PEM files on each executor (keystores.py).
    assert _names(_project()["dependencies"]) == {"pyspark", "pyarrow", "confluent-kafka", "kafka-python", "tenacity",
                                                  "cryptography"}


def test_the_tools_extra_holds_the_cli_packages_and_the_tests_install_it():
    extras = _project()["optional-dependencies"]
    assert {"rich", "matplotlib", "prometheus-client", "testcontainers", "docker"} <= _names(extras["tools"])
    assert "pyspark-kafka-eos[tools]" in extras["test"]
    assert _project()["scripts"]["kafka-eos"] == "connectors.tools.command:main"


def test_kafka_eos_without_the_tools_extra_says_how_to_install_it(monkeypatch, capsys):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name in ("rich", "matplotlib") else real(name, *a))
    assert command.main(["demo"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "rich, matplotlib not installed" in err and "pip install 'pyspark-kafka-eos[tools]'" in err


def test_kafka_eos_with_the_tools_extra_runs_the_cli(capsys):
    assert command.missing_tools_modules() == []
    try:
        command.main(["--help"])
    except SystemExit as exit_:
        assert exit_.code == 0
    assert "verify" in capsys.readouterr().out
