"""Ending a process this program started, and the tail of its log: what every launcher needs (the
local Kafka broker here; the test kit's Spark, Hadoop and S3 servers).

Only the process given is signalled (by its ``Popen``, so never a reused PID); a launcher that
also owns a process group or daemons says how to kill them (``kill``) and cleans up after.
"""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path
from typing import Callable

log = logging.getLogger(__name__)


def stop_gracefully(process: subprocess.Popen[bytes], grace_s: float, what: str, *,
                    kill: Callable[[], None] | None = None, kill_wait_s: float = 10.0) -> bool:
    """SIGTERM ``process``, wait up to ``grace_s`` for it to end, else ``kill()`` it (by default
    SIGKILL to the process alone) and wait up to ``kill_wait_s``. Returns whether it ended within
    the grace period (True also when it had ended already). ``what`` names it in the log."""
    if process.poll() is not None:
        return True
    process.terminate()
    try:
        process.wait(timeout=grace_s)
        return True
    except subprocess.TimeoutExpired:
        log.warning("%s: pid %d still running %.0f s after SIGTERM; killing it", what, process.pid, grace_s)
    try:
        (kill or process.kill)()
    except ProcessLookupError:
        pass  # it ended meanwhile
    process.wait(timeout=kill_wait_s)
    return False


def log_tail(path: Path | None, lines: int, *, missing: str = "(no log)") -> str:
    """The last ``lines`` lines of the log at ``path``, headed by its name, for error messages."""
    if path is None or not path.is_file():
        return missing
    text = path.read_text(errors="replace").splitlines()
    return f"--- last {min(lines, len(text))} lines of {path} ---\n" + "\n".join(text[-lines:])
