"""The Spark cluster launcher finds the processes under a daemon from /proc, as it does for the
executors (and their Python workers) under a Worker (no Spark needed)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from kafka_testkit.process_tree import descendants

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs /proc (Linux)")

# A parent that starts a child and a grandchild, then waits.
_TREE = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c",
    "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
    "print('ready', flush=True); time.sleep(60)"], stdout=sys.stdout)
time.sleep(60)
"""


def test_descendants_are_found_children_first_with_their_command_lines():
    parent = subprocess.Popen([sys.executable, "-c", _TREE], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert parent.stdout is not None and parent.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 30
        # A process's command line reads empty for a moment while it starts (before exec), so wait
        # for the grandchild's as well as for both processes.
        while ((len(found := descendants(parent.pid)) < 2 or "time.sleep(60)" not in found[-1].cmdline)
               and time.monotonic() < deadline):
            time.sleep(0.05)
        child, grandchild = found
        assert child.ppid == parent.pid and grandchild.ppid == child.pid
        assert "time.sleep(60)" in grandchild.cmdline
        assert descendants(grandchild.pid) == []
    finally:
        os.killpg(parent.pid, signal.SIGKILL)
        parent.wait()
