"""The job ``replay`` drives: a command template, and one run of it as a child process.

A template is a shell-like command line with placeholders::

    {python} {jobs}/copy_pipeline.py --bootstrap {bootstrap} --input {input}
        --output {output} --checkpoint-dir {checkpoint_dir} --bounded --metrics-file {metrics_file}

``{python}`` is this interpreter, ``{jobs}`` the folder of the kit's jobs, which ship in the
package (``connectors/tools/jobs/``; ``{examples}``, its former name, is the same folder); the
others are filled per scenario. A job must stop by itself once it has processed its input (``--bounded``),
resume from ``{checkpoint_dir}`` when restarted, exit 0 when done and non-zero on failure.
Failpoints reach the kit's examples as ``--failpoint NAME:ACTION@HIT`` and a custom job through
``KAFKA_EOS_FAILPOINTS`` (every job built on ``twophase`` reads it); executor task failures
through ``KAFKA_EOS_TASK_FAILURE_RATE`` / ``KAFKA_EOS_TASK_FAILURE_SEED``. The kit's examples also
take ``--transaction-timeout-ms``, ``--checkpoint-timeout-ms`` and ``--restart-budget-ms``.
The Spark job also gets the client settings of ``--command-config`` / ``--client-config``, in
the file of ``--kafka-options-file`` (:class:`PrivateSettingsFile`: 0600, in a 0700 folder,
removed after the replay), never on its command line, which any local user sees in ``ps``; a
run's recorded and logged command line masks any secret ``KEY=VALUE`` a custom job command
carries (:func:`connectors.tools.client_settings.masked_argv`).
``{metrics_file}`` is optional: without it there are no latency plots for the job.
``{hold_file}`` is optional too: a job that takes it waits, once its input is processed, until
that file exists before it exits (as the kit's jobs do, ``connectors/tools/jobs/job_hold.py``), which is
what lets the replay land its timed faults (kill -9, broker restart) on a running job by
construction. A job without it may finish before such a fault, which the replay then reports as
inconclusive.

Each run starts in a new session (its own process group), so ``kill -9`` reaches the job and
every process it spawned (a Spark driver's JVM), and nothing else.

A run's log is also its failpoints' record: the run gets ``KAFKA_EOS_FAILPOINT_LOG`` pointing at
its log, to which every failpoint that fires (in any process of the job built on ``twophase``)
appends ``failpoint NAME fired (...)`` before it acts, so even a Spark Python worker that kills
its whole job leaves the line its own output would lose. The log is opened in append mode, so the
job's output and those lines never overwrite each other.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shlex
import signal
import string
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from connectors.tools.client_settings import masked_argv
from connectors.tools.tool_errors import JobTemplateError
from twophase import failpoints
from twophase.checkpoint import wall_clock_ms

log = logging.getLogger(__name__)

#: The kit's jobs, in the installed package (connectors/tools/jobs/).
JOBS_DIR = Path(__file__).resolve().parent / "jobs"

PLACEHOLDERS = ("python", "jobs", "examples", "bootstrap", "input", "output", "checkpoint_dir", "metrics_file",
                "hold_file", "checkpoint_interval", "batch_records")
_REQUIRED = ("bootstrap", "input", "output", "checkpoint_dir")


@dataclass(frozen=True)
class Engine:
    script: str
    template: str
    #: Records per batch when the user does not say: a few dozen checkpoints for the demo's input.
    default_batch_records: int


ENGINES: dict[str, Engine] = {
    # A checkpoint after every {batch_records} input records, besides the time-triggered ones:
    # the number of checkpoints, and so of failpoint hits, is then a function of the input size
    # and the batch size, whatever the machine's speed (replay plans its hits from it).
    # INFO: each run's log then shows every checkpoint and recovery step.
    "inprocess": Engine(
        "copy_pipeline.py",
        "{python} {jobs}/copy_pipeline.py --bootstrap {bootstrap} --input {input} --output {output} "
        "--checkpoint-dir {checkpoint_dir} --bounded --metrics-file {metrics_file} --hold-until {hold_file} "
        "--checkpoint-interval {checkpoint_interval} --max-poll-records {batch_records} "
        "--checkpoint-every-records {batch_records} --log-level INFO",
        500),
    # Spark's micro-batches are its checkpoints: their size is maxOffsetsPerTrigger, so over a
    # loaded input their number is a function of the input size too.
    "spark": Engine(
        "spark_pipeline.py",
        "{python} {jobs}/spark_pipeline.py --bootstrap {bootstrap} --input {input} --output {output} "
        "--checkpoint-dir {checkpoint_dir} --bounded --max-offsets-per-trigger {batch_records} "
        "--metrics-file {metrics_file} --hold-until {hold_file}",
        2000),
}

TRANSACTION_LOST = re.compile(r"TransactionLostError")
#: The one TransactionLostError of a checkpoint, which counts every transaction it lost:
#: "checkpoint 0: 3 transactions with 1,999 records were lost ...".
_LOST_RECORDS = re.compile(r"(\d+) transactions? with ([\d,]+) records (?:was|were) lost")
#: A failpoint's line, from its logger or appended by it (KAFKA_EOS_FAILPOINT_LOG); the details in
#: parentheses (action, hit, pid) tell a firing's two lines from two firings.
_FAILPOINT_FIRED = re.compile(r"failpoint (\w+) fired(?: \((.*?hit \d+(?:, pid \d+)?)\))?")
_TASK_FAILURE_INJECTED = re.compile(r"injected task failure")


@dataclass(frozen=True)
class JobTemplate:
    """A job command line with placeholders; ``engine`` is ``inprocess``, ``spark`` or ``custom``."""

    text: str
    engine: str
    #: True when the job takes the kit's job flags (--transaction-timeout-ms and friends).
    takes_kit_flags: bool

    @classmethod
    def for_engine(cls, engine: str) -> "JobTemplate":
        if engine not in ENGINES:
            raise JobTemplateError(f"unknown engine {engine!r}; one of {', '.join(ENGINES)}")
        script = JOBS_DIR / ENGINES[engine].script
        if not script.is_file():
            raise JobTemplateError(f"the {engine} engine runs {script}, which does not exist: the kit's install "
                                   "is incomplete; reinstall it (pip install --force-reinstall pyspark-kafka-eos)")
        return cls(ENGINES[engine].template, engine, takes_kit_flags=True)

    @property
    def default_batch_records(self) -> int:
        return ENGINES[self.engine].default_batch_records if self.engine in ENGINES else 500

    @classmethod
    def custom(cls, text: str) -> "JobTemplate":
        try:
            names = {name for _, name, _, _ in string.Formatter().parse(text) if name is not None}
            shlex.split(text)
        except ValueError as exc:
            raise JobTemplateError(f"job command {text!r} cannot be parsed: {exc}") from None
        unknown = names - set(PLACEHOLDERS)
        if unknown:
            raise JobTemplateError(f"job command has unknown placeholders {sorted(unknown)}; "
                                   f"known: {', '.join('{' + p + '}' for p in PLACEHOLDERS)}")
        missing = [p for p in _REQUIRED if p not in names]
        if missing:
            raise JobTemplateError(
                f"job command must contain {', '.join('{' + p + '}' for p in missing)} so every scenario "
                "runs against its own output topic and checkpoint directory")
        return cls(text, "custom", takes_kit_flags=False)

    @property
    def takes_kafka_options(self) -> bool:
        """True when the job takes client settings in a file, ``--kafka-options-file FILE`` (the
        Spark job, which makes each its source's and sink's option ``kafka.KEY``)."""
        return self.engine == "spark"

    @property
    def writes_metrics(self) -> bool:
        return "{metrics_file}" in self.text

    @property
    def holds(self) -> bool:
        """True when the job waits for ``{hold_file}`` once its input is processed."""
        return "{hold_file}" in self.text

    def render(self, values: Mapping[str, str], extra_args: list[str] | None = None) -> list[str]:
        """The argv of one run: every placeholder filled (each as one argument), plus extras."""
        fill = {"python": sys.executable, "jobs": str(JOBS_DIR), "examples": str(JOBS_DIR), **values}
        missing = [name for name in PLACEHOLDERS if name not in fill and "{" + name + "}" in self.text]
        if missing:
            raise JobTemplateError(f"no value for placeholders {missing}")
        # Split first, then fill each word: a value with spaces stays one argument.
        argv = [word.format(**fill) for word in shlex.split(self.text)]
        return argv + list(extra_args or [])


class PrivateSettingsFile:
    """The job's client settings (maybe secrets: passwords, JAAS lines) in a JSON file only this
    user can read: 0600, in a folder of its own made 0700 by :func:`tempfile.mkdtemp`; both
    removed by :meth:`remove` (a context manager)."""

    def __init__(self, settings: Mapping[str, str]) -> None:
        self._folder = Path(tempfile.mkdtemp(prefix="kafka-eos-settings-"))
        self.path = self._folder / "client-settings.json"
        descriptor = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            json.dump(dict(settings), file)

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)
        try:
            self._folder.rmdir()
        except OSError:  # gone already, or not empty: leave what is not ours
            pass

    def __enter__(self) -> "PrivateSettingsFile":
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


@dataclass
class RunResult:
    """One run of the job."""

    argv: list[str]
    env_overrides: dict[str, str]
    log_path: Path
    start_ms: int
    end_ms: int = 0
    exit_code: int | None = None
    killed: bool = False
    timed_out: bool = False
    #: When a fault hit this run (the kill, the exit at a failpoint or any other failure, the
    #: broker going down), and when it was over (the broker back); wall-clock ms.
    fault_start_ms: int | None = None
    fault_end_ms: int | None = None
    failpoints_fired: list[str] = field(default_factory=list)
    transaction_lost: bool = False
    lost_records_reported: int = 0
    lost_transactions_reported: int = 0
    #: Executor task failures the run's log shows were injected (KAFKA_EOS_TASK_FAILURE_RATE).
    task_failures_injected: int = 0
    #: The started process (the job, or whatever launches it).
    pid: int | None = None

    @property
    def succeeded(self) -> bool:
        return self.exit_code == 0 and not self.killed and not self.timed_out

    def mark_fault(self, start_ms: int, end_ms: int) -> None:
        self.fault_start_ms, self.fault_end_ms = start_ms, end_ms

    def to_json(self) -> dict[str, object]:
        return {
            "argv": self.argv, "env": self.env_overrides, "log": str(self.log_path),
            "start_ms": self.start_ms, "end_ms": self.end_ms, "exit_code": self.exit_code,
            "killed": self.killed, "timed_out": self.timed_out, "fault_start_ms": self.fault_start_ms,
            "fault_end_ms": self.fault_end_ms,
            "failpoints_fired": self.failpoints_fired, "transaction_lost": self.transaction_lost,
            "lost_records_reported": self.lost_records_reported,
            "lost_transactions_reported": self.lost_transactions_reported,
            "task_failures_injected": self.task_failures_injected, "pid": self.pid,
        }

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def failpoints_fired(log_text: str) -> list[str]:
    """The failpoints a run's log shows fired, in order, each firing once although its line may
    be there twice (from the job's logger and appended by the failpoint)."""
    firings = dict.fromkeys((name, details) for name, details in _FAILPOINT_FIRED.findall(log_text))
    return [name for name, _details in firings]


class JobRun:
    """One started run of the job, in its own session; output goes to ``log_path``."""

    def __init__(self, argv: list[str], env_overrides: Mapping[str, str], log_path: Path) -> None:
        env = {k: v for k, v in os.environ.items() if k != failpoints.ENV_VAR}
        env.update(env_overrides)
        # Failpoints append their line to the log themselves (see the module docstring).
        env[failpoints.LOG_FILE_ENV] = str(log_path)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        # What is recorded and logged shows no secret client setting (the job gets them all).
        shown = masked_argv(argv)
        self.result = RunResult(shown, dict(env_overrides), log_path, start_ms=wall_clock_ms())
        log_path.write_bytes(f"$ {shlex.join(shown)}  # env {dict(env_overrides)}\n".encode())
        # Append mode: every write of the job lands at the end, after any line a failpoint appended.
        with open(log_path, "ab") as out:
            self._process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                             stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        self.result.pid = self._process.pid
        log.info("job started (pid %d): %s", self._process.pid, shlex.join(shown))

    @property
    def pid(self) -> int:
        return self._process.pid

    def running(self) -> bool:
        return self._process.poll() is None

    def kill(self) -> bool:
        """SIGKILL the run's whole process group; False if it had already exited."""
        if self._process.poll() is not None:
            return False
        now = wall_clock_ms()
        try:
            # The group id is the pid: the run was started as a session leader.
            os.killpg(self._process.pid, signal.SIGKILL)
        except ProcessLookupError:
            return False
        self.result.fault_start_ms = self.result.fault_end_ms = now
        self.result.killed = True
        log.info("job pid %d killed with SIGKILL", self._process.pid)
        return True

    def wait(self, timeout_s: float) -> RunResult:
        """Wait for the exit (killing the run if it takes longer than ``timeout_s``), then read
        what its log says about failpoints and lost transactions."""
        try:
            self._process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            log.error("job pid %d still running after %.0f s; killing it", self._process.pid, timeout_s)
            self.kill()
            self.result.killed = False
            self.result.timed_out = True
            self._process.wait()
        result = self.result
        result.end_ms = wall_clock_ms()
        result.exit_code = self._process.returncode
        text = result.log_path.read_text(errors="replace") if result.log_path.exists() else ""
        result.failpoints_fired = failpoints_fired(text)
        result.transaction_lost = bool(TRANSACTION_LOST.search(text))
        # The largest report (a restart that commits the checkpoint again reports the same loss).
        lost = [(int(records.replace(",", "")), int(transactions))
                for transactions, records in _LOST_RECORDS.findall(text)]
        result.lost_records_reported, result.lost_transactions_reported = max(lost, default=(0, 0))
        result.task_failures_injected = len(_TASK_FAILURE_INJECTED.findall(text))
        if result.fault_start_ms is None and result.exit_code not in (0, None):
            result.fault_start_ms = result.fault_end_ms = result.end_ms
        return result
