"""Ending a launched process: SIGTERM first, SIGKILL (or the launcher's own kill) only past the
grace period; and the log tail every launcher's errors carry."""

from __future__ import annotations

import subprocess
import sys

from connectors.servers.child_process import log_tail, stop_gracefully

_IGNORES_SIGTERM = ("import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                    "print('ready', flush=True); time.sleep(120)")


def test_a_process_that_ends_on_sigterm_is_not_killed():
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    assert stop_gracefully(process, 30, "sleeper") is True
    assert process.returncode == -15  # SIGTERM


def test_a_process_that_ignores_sigterm_is_killed_past_the_grace_period():
    process = subprocess.Popen([sys.executable, "-c", _IGNORES_SIGTERM], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stdout.readline().strip() == "ready"
    killed = []
    assert stop_gracefully(process, 0.2, "stubborn", kill=lambda: (killed.append(True), process.kill())) is False
    assert killed == [True] and process.returncode == -9


def test_an_ended_process_is_left_alone():
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    assert stop_gracefully(process, 1, "done", kill=lambda: (_ for _ in ()).throw(AssertionError("killed"))) is True


def test_the_log_tail_names_its_file_and_keeps_the_last_lines(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("\n".join(f"line {i}" for i in range(100)))
    assert log_tail(log, 2) == f"--- last 2 lines of {log} ---\nline 98\nline 99"
    assert log_tail(tmp_path / "missing.log", 2, missing="(no broker log)") == "(no broker log)"
    assert log_tail(None, 2) == "(no log)"
