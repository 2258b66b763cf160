"""Named crash points in the two-phase-commit protocol.

A failpoint is a place in the protocol where a crash is interesting: every window of the crash
table in the design doc has one. They cost one dictionary lookup of an empty dict when nothing is
enabled, so they stay in production code.

Enable them from code with :func:`enable`, or for a whole process (including Spark's Python
workers, which inherit the environment) with ``KAFKA_EOS_FAILPOINTS``::

    KAFKA_EOS_FAILPOINTS="after_pre_commit:exit"
    KAFKA_EOS_FAILPOINTS="mid_commit:exit@3,before_commit:sleep(250)"

Each entry is ``NAME:ACTION[@HIT]``. ACTION is ``raise`` (raise :class:`FailpointCrash`),
``exit`` (``os._exit(137)``: no cleanup, no flush, like ``kill -9``) or ``sleep(MS)``.
``@HIT`` fires the action only on the HIT-th time the point is reached (1-based); without it the
action fires every time.

``exit`` ends the process that reaches the point. Where that process is a helper of a bigger job
(a Spark Python worker running the driver-side commit), set ``KAFKA_EOS_FAILPOINT_KILL_GROUP`` to
the job's process group id to SIGKILL that whole group instead: the job dies as if its host lost
power. (Spark's worker daemon puts workers in a group of their own, so "the caller's group" would
not reach the driver.)

Set ``KAFKA_EOS_FAILPOINT_LOG`` to a file and every firing also appends its log line there,
written straight to the file before the action: a process killed by its own failpoint (or a
Spark Python worker, whose output reaches the job's log through a JVM thread the kill ends first)
still leaves the line. ``kafka-eos replay`` points it at each run's log, so the log confirms
which failpoint fired.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import threading
import time
from dataclasses import dataclass

from twophase.errors import FailpointCrash, InvalidValueError

log = logging.getLogger(__name__)

ENV_VAR = "KAFKA_EOS_FAILPOINTS"
KILL_GROUP_ENV = "KAFKA_EOS_FAILPOINT_KILL_GROUP"
LOG_FILE_ENV = "KAFKA_EOS_FAILPOINT_LOG"
EXIT_CODE = 137

BEFORE_PRE_COMMIT = "before_pre_commit"
AFTER_PRE_COMMIT = "after_pre_commit"
AFTER_CHECKPOINT_STORED = "after_checkpoint_stored"
BEFORE_COMMIT = "before_commit"
MID_COMMIT = "mid_commit"
AFTER_COMMIT = "after_commit"
DURING_RESTORE = "during_restore"

ALL = (
    BEFORE_PRE_COMMIT,
    AFTER_PRE_COMMIT,
    AFTER_CHECKPOINT_STORED,
    BEFORE_COMMIT,
    MID_COMMIT,
    AFTER_COMMIT,
    DURING_RESTORE,
)
ACTIONS = ("raise", "exit", "sleep(MS)")

_ENTRY = re.compile(r"^(?P<name>[a-z_]+):(?P<action>raise|exit|sleep\((?P<ms>\d+)\))(?:@(?P<hit>\d+))?$")


@dataclass(frozen=True)
class FailpointAction:
    kind: str  # "raise" | "exit" | "sleep"
    sleep_ms: int = 0
    hit: int | None = None  # fire only on this hit (1-based); None: every hit

    def __str__(self) -> str:
        action = f"sleep({self.sleep_ms})" if self.kind == "sleep" else self.kind
        return action if self.hit is None else f"{action}@{self.hit}"


_active: dict[str, FailpointAction] = {}
_hits: dict[str, int] = {}
_lock = threading.Lock()


def parse(spec: str) -> dict[str, FailpointAction]:
    """Parse a ``KAFKA_EOS_FAILPOINTS`` value; raise ValueError naming the bad entry."""
    result: dict[str, FailpointAction] = {}
    for raw in re.split(r"[,;]", spec):
        entry = raw.strip()
        if not entry:
            continue
        match = _ENTRY.match(entry)
        if match is None:
            raise InvalidValueError(
                f"{ENV_VAR}: bad entry {entry!r}; expected NAME:ACTION[@HIT] with NAME one of "
                f"{', '.join(ALL)} and ACTION one of {', '.join(ACTIONS)}"
            )
        name = match["name"]
        if name not in ALL:
            raise InvalidValueError(f"{ENV_VAR}: unknown failpoint {name!r}; valid names: {', '.join(ALL)}")
        hit = int(match["hit"]) if match["hit"] else None
        if hit is not None and hit < 1:
            raise InvalidValueError(f"{ENV_VAR}: {entry!r}: @HIT must be >= 1")
        action = match["action"]
        if action.startswith("sleep"):
            result[name] = FailpointAction("sleep", int(match["ms"]), hit)
        else:
            result[name] = FailpointAction(action, 0, hit)
    return result


def enable(name: str, action: str | FailpointAction) -> None:
    """Enable one failpoint, e.g. ``enable("mid_commit", "exit@2")``."""
    parsed = action if isinstance(action, FailpointAction) else parse(f"{name}:{action}")[name]
    if name not in ALL:
        raise InvalidValueError(f"unknown failpoint {name!r}; valid names: {', '.join(ALL)}")
    with _lock:
        _active[name] = parsed
        _hits[name] = 0


def disable(name: str | None = None) -> None:
    """Disable one failpoint, or all of them."""
    with _lock:
        if name is None:
            _active.clear()
            _hits.clear()
        else:
            _active.pop(name, None)
            _hits.pop(name, None)


def load_from_env(environ: dict[str, str] | None = None) -> None:
    """(Re)load failpoints from ``KAFKA_EOS_FAILPOINTS``; done once at import."""
    spec = (environ if environ is not None else os.environ).get(ENV_VAR, "")
    parsed = parse(spec)
    with _lock:
        _active.clear()
        _hits.clear()
        _active.update(parsed)
    if parsed:
        log.warning("failpoints enabled: %s", ", ".join(f"{k}:{v}" for k, v in parsed.items()))


def active() -> dict[str, FailpointAction]:
    with _lock:
        return dict(_active)


def hit(name: str, **context: object) -> None:
    """Mark that the protocol reached failpoint ``name``; fire its action if enabled."""
    if not _active:
        return
    action = _active.get(name)
    if action is None:
        return
    with _lock:
        _hits[name] = _hits.get(name, 0) + 1
        count = _hits[name]
    if action.hit is not None and count != action.hit:
        return
    details = " ".join(f"{k}={v}" for k, v in context.items())
    # The pid tells a test which process to fault while this one is held in a sleep.
    log.warning("failpoint %s fired (%s, hit %d, pid %d) %s", name, action, count, os.getpid(), details)
    _append_to_log_file(f"failpoint {name} fired ({action}, hit {count}, pid {os.getpid()}) {details}")
    if action.kind == "sleep":
        time.sleep(action.sleep_ms / 1000)
    elif action.kind == "raise":
        raise FailpointCrash(name)
    else:
        # Die like kill -9 would: no finally blocks, no client flush. Only the log line above is
        # flushed, so that whoever replays failures can tell which point fired.
        for handler in logging.getLogger().handlers:
            handler.flush()
        group = os.environ.get(KILL_GROUP_ENV)
        if group:
            os.killpg(int(group), signal.SIGKILL)
        os._exit(EXIT_CODE)


def _append_to_log_file(line: str) -> None:
    """Append ``line`` to ``KAFKA_EOS_FAILPOINT_LOG``, if set: one unbuffered ``O_APPEND`` write,
    in the kernel before the action runs, so that even a SIGKILL right after leaves it."""
    path = os.environ.get(LOG_FILE_ENV)
    if not path:
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{line.rstrip()}\n".encode())
        finally:
            os.close(fd)
    except OSError as exc:  # a confirmation channel must never change what the failpoint does
        log.warning("could not append to %s=%s: %s", LOG_FILE_ENV, path, exc)


load_from_env()
