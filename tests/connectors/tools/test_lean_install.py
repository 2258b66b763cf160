"""A lean install (issue 27): the core dependencies are what the sink and the source need on Spark
executors; the command-line tools need the `tools` extra, and without it `kafka-eos` says in one
line how to install it."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
import subprocess
import sys
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
    # pandas: pyspark's mapInArrow, with which the foreachBatch sink writes, checks for it on the
    # driver (issue 53).
    assert _names(_project()["dependencies"]) == {"pyspark", "pyarrow", "confluent-kafka", "kafka-python", "tenacity",
                                                  "cryptography", "pandas"}


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


def _without(monkeypatch, *names):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in names else real(name, *a))


def test_version_needs_no_tools_extra_and_is_the_installed_distributions(monkeypatch, capsys):
    _without(monkeypatch, "rich")
    assert command.main(["--version"]) == 0
    assert capsys.readouterr().out == f"kafka-eos {importlib.metadata.version('pyspark-kafka-eos')} (pyspark-kafka-eos)\n"


def test_help_without_the_tools_extra_lists_every_command_and_names_the_extra(monkeypatch, capsys):
    _without(monkeypatch, "rich", "matplotlib")
    assert command.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert all(f"  {name} " in out for name in command.COMMAND_HELP)
    assert "'tools' extra" in out and "rich, matplotlib missing" in out and command.INSTALL in out


def test_help_without_the_tools_extra_imports_none_of_it():
    """In a process where the extra's packages cannot be imported at all."""
    probe = ("import importlib.abc, sys\n"
             f"BLOCKED = {command.TOOLS_MODULES!r}\n"
             "class Block(importlib.abc.MetaPathFinder):\n"
             "    def find_spec(self, name, path=None, target=None):\n"
             "        if name.split('.')[0] in BLOCKED: raise ImportError(name)\n"
             "sys.meta_path.insert(0, Block())\n"
             "import importlib.util\n"
             "real = importlib.util.find_spec\n"
             "importlib.util.find_spec = lambda name, *a: None if name.split('.')[0] in BLOCKED else real(name, *a)\n"
             "from connectors.tools import command\n"
             "code = command.main(['--help'])\n"
             "print(code, sorted(m for m in sys.modules if m.split('.')[0] in BLOCKED or m == 'connectors.tools.cli'))\n")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "0 []"


def test_the_full_parser_has_the_commands_of_the_lean_help():
    from connectors.tools import cli

    parser = cli.build_parser()
    (commands,) = [a for a in parser._actions if a.dest == "command"]
    assert set(commands.choices) == set(command.COMMAND_HELP)
    assert {a.help for a in commands._choices_actions} == set(command.COMMAND_HELP.values())
