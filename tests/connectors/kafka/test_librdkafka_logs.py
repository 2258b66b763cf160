"""librdkafka's own log lines (``%3|...|FAIL|...``, ``%6|...|BGQUEUE|...``) go through Python logging,
as every other line of the kit does, for each kind of handle: none reaches the process's stderr,
which librdkafka writes to directly (so the handle runs in a child process here)."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

_CHILD = r"""
import logging, sys, time
logging.basicConfig(stream=sys.stdout, level=logging.DEBUG, format="LOGGED %(name)s %(message)s")
from connectors.kafka.clients._confluent.admin import ConfluentClusterAdmin
from connectors.kafka.clients._confluent.reader import ConfluentRecordReader
from connectors.kafka.clients._confluent.producer import ConfluentProducer

kind, bootstrap = sys.argv[1], sys.argv[2]
seen = []
logging.getLogger("connectors.kafka.clients._confluent.librdkafka").addFilter(lambda r: seen.append(r) or True)
if kind == "admin":
    handle = ConfluentClusterAdmin(bootstrap, {})
    serve = handle._client
elif kind == "reader":
    handle = ConfluentRecordReader(bootstrap, True, {})
    serve = lambda: handle._consumer.poll(0)
else:
    handle = ConfluentProducer(bootstrap, None, {})
    serve = lambda: handle._producer.poll(0)
deadline = time.monotonic() + 30
while not seen and time.monotonic() < deadline:  # a bound for a failure, not a timing
    serve()
    time.sleep(0.05)
handle.close()
"""


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize("kind", ["admin", "reader", "producer"])
def test_a_handles_log_lines_go_through_python_logging_not_stderr(kind: str) -> None:
    bootstrap = f"127.0.0.1:{_closed_port()}"  # nothing listens: librdkafka logs the refused connection
    child = subprocess.run([sys.executable, "-c", _CHILD, kind, bootstrap], capture_output=True, text=True,
                           timeout=120)
    assert child.returncode == 0, child.stderr
    assert "LOGGED connectors.kafka.clients._confluent.librdkafka" in child.stdout, child.stdout + child.stderr
    assert "Connection refused" in child.stdout, child.stdout
    assert not [line for line in child.stderr.splitlines() if line.startswith("%")], child.stderr
