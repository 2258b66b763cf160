"""``kafka-eos-worker-python``: the Python for the processes Spark starts for the kit's data source, which
imports pyspark from the installed package instead of from the ``pyspark.zip`` Spark puts first
on their path (connectors/worker_python.py)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from connectors import worker_python


def _site(tmp_path: Path, version: str = "installed") -> tuple[Path, Path]:
    """A site-packages folder holding a pyspark package with its own pyspark.zip inside."""
    site = tmp_path / "site-packages"
    package = site / "pyspark"
    (package / "python" / "lib").mkdir(parents=True)
    (package / "__init__.py").write_text(f"WHERE = {version!r}\n")
    zip_file = package / "python" / "lib" / "pyspark.zip"
    with zipfile.ZipFile(zip_file, "w") as archive:
        archive.writestr("pyspark/__init__.py", "WHERE = 'zip'\n")
    return site, zip_file


def test_the_zip_inside_the_installed_package_is_dropped(tmp_path: Path) -> None:
    site, zip_file = _site(tmp_path)
    assert worker_python.shadowing_zips([str(zip_file), "/usr/lib/python3.11", str(site)]) == [str(zip_file)]


def test_a_zip_of_another_spark_home_stays(tmp_path: Path) -> None:
    site, _ = _site(tmp_path / "a")
    _, other_zip = _site(tmp_path / "b")  # a pyspark whose folder is not on the path
    assert worker_python.shadowing_zips([str(other_zip), str(site)]) == []


def test_no_zip_no_change(tmp_path: Path) -> None:
    site, _ = _site(tmp_path)
    assert worker_python.shadowing_zips([str(site), "/usr/lib/python3.11"]) == []


def test_run_module_imports_the_installed_package(tmp_path: Path) -> None:
    site, zip_file = _site(tmp_path)
    (tmp_path / "probe").mkdir()
    (tmp_path / "probe" / "probe_module.py").write_text(
        "import sys, pyspark\nprint(pyspark.WHERE, sys.argv[1:], __name__)\n")
    code = ("import sys; sys.path[:0] = sys.argv[1:4]; sys.argv = ['kafka-eos-worker-python', '-m', 'probe_module', 'x', 'y'];"
            "from connectors.worker_python import main; main()")
    done = subprocess.run([sys.executable, "-c", code, str(zip_file), str(tmp_path / "probe"), str(site)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["installed", "['x',", "'y']", "__main__"]


def test_only_this_interpreter_on_a_local_master(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    launcher = tmp_path / "kafka-eos-worker-python"
    launcher.write_text("#!/bin/sh\n")
    launcher.chmod(0o755)
    monkeypatch.setattr(worker_python, "path", lambda: str(launcher))
    monkeypatch.delenv(worker_python.DISABLE_ENV, raising=False)
    assert worker_python.for_data_source(sys.executable, "local[2]") == str(launcher)
    assert worker_python.for_data_source(sys.executable, "yarn") is None
    assert worker_python.for_data_source(str(tmp_path / "other-python"), "local[2]") is None
    monkeypatch.setenv(worker_python.DISABLE_ENV, "0")
    assert worker_python.for_data_source(sys.executable, "local[2]") is None


def test_no_launcher_installed_keeps_the_session_python(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker_python, "path", lambda: sys.executable)
    monkeypatch.delenv(worker_python.DISABLE_ENV, raising=False)
    assert worker_python.for_data_source(sys.executable, "local[2]") is None


def test_turned_off_path_is_the_plain_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(worker_python.DISABLE_ENV, "0")
    assert worker_python.path() == sys.executable


def _python_beside(folder: Path, *launchers: str) -> str:
    """An interpreter path in ``folder`` with these launchers installed beside it."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in launchers:
        (folder / name).write_text("#!/bin/sh\n")
        (folder / name).chmod(0o755)
    return str(folder / "python")


def test_path_is_the_launcher_beside_the_interpreter_under_its_new_name_first(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(worker_python.DISABLE_ENV, raising=False)
    both = _python_beside(tmp_path / "both", worker_python.COMMAND, worker_python.DEPRECATED_COMMAND)
    monkeypatch.setattr(sys, "executable", both)
    assert worker_python.path() == str(tmp_path / "both" / "kafka-eos-worker-python")
    # An install made before the rename (not reinstalled since) has only the old name.
    old = _python_beside(tmp_path / "old", worker_python.DEPRECATED_COMMAND)
    monkeypatch.setattr(sys, "executable", old)
    assert worker_python.path() == str(tmp_path / "old" / "kafka-eos-python")
    none = _python_beside(tmp_path / "none")
    monkeypatch.setattr(sys, "executable", none)
    assert worker_python.path() == none


def test_the_old_command_warns_once_then_runs_the_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker_python, "_deprecation_warned", False)
    with pytest.warns(DeprecationWarning, match="kafka-eos-worker-python") as warned:
        assert worker_python.warn_if_old_name("/venv/bin/kafka-eos-python")
        assert worker_python.warn_if_old_name("/venv/bin/kafka-eos-python")
    assert len(warned) == 1
    assert not worker_python.warn_if_old_name("/venv/bin/kafka-eos-worker-python")


def test_both_commands_are_console_scripts() -> None:
    import tomllib

    scripts = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts[worker_python.COMMAND] == "connectors.worker_python:main"
    # The old name runs main() too, which every version of the kit has: a job whose PYTHONPATH puts
    # an older kit's connectors first (the upgrade test's old query) still finds it.
    assert scripts[worker_python.DEPRECATED_COMMAND] == "connectors.worker_python:main"
