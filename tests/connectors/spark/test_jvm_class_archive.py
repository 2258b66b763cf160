"""The driver's JVM class archive: used only when complete, recorded by a JVM of its own and moved
into place only once that JVM has exited cleanly (a truncated archive stops a JVM from starting)."""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path

import pytest

from connectors.spark import jvm_class_archive
from connectors.spark.jvm_class_archive import create, java_options, with_java_options
from connectors.spark.spark_errors import ClassArchiveError


def test_an_archive_that_is_missing_or_empty_is_not_used(tmp_path: Path, caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.WARNING)
    assert java_options(tmp_path / "missing.jsa") == ""
    assert "kafka-eos jvm-class-archive" in caplog.text
    (tmp_path / "empty.jsa").write_bytes(b"")
    assert java_options(tmp_path / "empty.jsa") == ""


def test_an_archive_that_exists_is_mapped_and_verified(tmp_path: Path):
    archive = tmp_path / "driver.jsa"
    archive.write_bytes(b"x" * 10)
    options = java_options(archive).split()
    assert f"-XX:SharedArchiveFile={archive}" in options
    assert "-XX:+VerifySharedSpaces" in options  # a damaged archive is then ignored, not fatal


def test_the_users_java_options_are_kept():
    assert with_java_options(" -Dx=1 ", "-XX:SharedArchiveFile=a") == "-Dx=1 -XX:SharedArchiveFile=a"
    assert with_java_options(None, "-XX:SharedArchiveFile=a") == "-XX:SharedArchiveFile=a"


def _fake_recorder(write: bytes | None, returncode: int):
    def run(command, **kwargs):
        partial = Path(command[command.index("--record") + 1])
        if write is not None:
            partial.write_bytes(write)
        return subprocess.CompletedProcess(command, returncode, "", "recording stderr tail")
    return run


def test_a_recorded_archive_is_moved_into_place_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(jvm_class_archive.subprocess, "run", _fake_recorder(b"archive", 0))
    (tmp_path / "driver.jsa").write_bytes(b"old")
    archive = create(tmp_path / "driver.jsa")
    assert archive.read_bytes() == b"archive"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["driver.jsa"]


@pytest.mark.parametrize("write, returncode", [(b"half an archive", 1), (None, 0), (b"", 0)])
def test_a_failed_recording_leaves_no_archive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              write: bytes | None, returncode: int):
    monkeypatch.setattr(jvm_class_archive.subprocess, "run", _fake_recorder(write, returncode))
    with pytest.raises(ClassArchiveError, match="recording the JVM class archive failed"):
        create(tmp_path / "driver.jsa")
    assert list(tmp_path.iterdir()) == []
