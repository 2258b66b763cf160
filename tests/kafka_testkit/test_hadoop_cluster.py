"""The Hadoop minicluster launcher's start-up errors carry the tail of its log (no JVM needed)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kafka_testkit.hadoop_cluster import HadoopClusterError, _wait_until_ready


def test_a_minicluster_that_exits_while_starting_is_reported_with_its_log(tmp_path):
    log_path = tmp_path / "minicluster.log"
    log_path.write_text("starting\njava.net.BindException: Address already in use\n")
    process = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    process.wait()
    with pytest.raises(HadoopClusterError, match=r"exited with code 3 while starting\n--- last 2 lines of .*\n"
                                                 r"starting\njava.net.BindException"):
        _wait_until_ready(process, tmp_path / "ready.json", 30, log_path)
