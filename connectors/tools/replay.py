"""``kafka-eos replay``: run a job under a matrix of injected faults, restart it after each failure
until its input is processed, and verify every scenario's output.

Every scenario writes to its own output topic and checkpoint directory, reading the same input.
Scenarios (one row each in the report):

- ``baseline``: no fault;
- one per failpoint of ``twophase.failpoints`` (``before_pre_commit`` ... ``after_commit``): the
  job dies abruptly (``os._exit``, or SIGKILL of its process group for the Spark example; no
  cleanup, like kill -9) the N-th time it reaches the point;
  ``during_restore`` first crashes after a pre-commit, then again while restoring;
- ``kill9``: SIGKILL to the job's process group at seeded random moments;
- ``task_failures``: executor tasks fail at a seeded rate (``KAFKA_EOS_TASK_FAILURE_RATE`` /
  ``KAFKA_EOS_TASK_FAILURE_SEED``); not applicable to the in-process engine, which has no tasks;
- ``broker_restart``: the broker goes down and comes back mid-run; only for a broker the tool
  started (or a fake cluster, which is made unavailable for a while);
- ``rolling_restart``: every node of a 3-node cluster the tool started (``--cluster``) is
  SIGKILLed and started again, one at a time, while the job runs, each only once the cluster is
  back in sync. The cluster keeps its quorum and in-sync replicas throughout, so the job must ride
  through without failing: a run that fails fails the scenario, whatever its output;
- ``txn_timeout``: a transaction outlives ``transaction.timeout.ms`` between pre-commit and
  commit, so the broker aborts it. The job must fail with ``TransactionLostError``; the verifier
  then shows the loss, reported as "loss detected and reported", never as silent loss.

All randomness (failpoint hit counts, kill moments, broker restart moment, task failure seeds)
comes from ``random.Random(f"{seed}:{scenario}")``, so adding a scenario does not change the
others, and the report states the absolute values used.

Every fault of the kit's engines lands on a running job by construction, never by winning a race
with the clock:

- failpoint hits are chosen among those the workload is certain to reach, computed up front from
  the input's record count and the batch size. The in-process job takes a checkpoint after every
  batch of records (as well as on its timer), so ``records // batch`` checkpoints come before the
  end of the input whatever the machine's speed, and every failpoint is reached at least once per
  checkpoint; a hit up to one less than that count crashes the job with a batch of input still to
  go. Spark's micro-batches are sized by ``maxOffsetsPerTrigger``, but failpoint hits are counted
  per Python process (write tasks in reused Python workers, the driver-side commit in its reused
  runner), so the replay picks hit 1 or 2, which the first two batches reach, and wants at least
  three batches. A custom job's checkpoints are unknown: its hits come from the baseline's
  checkpoint count, and a miss is reported as inconclusive;
- ``kill9`` and ``broker_restart`` are timed, at a seeded fraction of the baseline's duration after
  its first committed checkpoint, counted from the faulted run's own first committed checkpoint
  (start-up varies too much between runs to time faults from process start). The kit's jobs
  then take a hold file (``{hold_file}``, see ``connectors/tools/jobs/job_hold.py``): once their input
  is processed they wait for it, and the replay creates it only after the fault was delivered,
  so a fast run cannot finish before the fault. The report notes a kill that came after the last
  commit;
- the ``txn_timeout`` scenario delays the first commit that carries records (the first hit of the
  range above: in-process, hits 1 and 2 are the two writers' empty transactions of the
  checkpoint taken at start; in Spark, the first batch's commit) by more than the transaction
  timeout plus the broker's cleanup interval. Nothing can end the job before its first commit, so
  the delay is reached for certain, even on a machine so slow that a batch outlives the short
  timeout by itself (then the loss it reports is that one).
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

from connectors.kafka.clients import KafkaClients, TopicPartition
from connectors.kafka.clients.factory import clients_for
from connectors.servers.broker_discovery import (
    REAL_BROKER_HELP,
    SIMULATED_NOTICE,
    TXN_CLEANUP_INTERVAL_KEY,
    Broker,
    retry_transient,
)
from connectors.tools.client_settings import masked
from connectors.tools.tool_errors import UsageError
from connectors.tools.job_metrics import CheckpointEvent, JobMetrics, read_metrics
from connectors.tools.replay_jobs import JobRun, JobTemplate, PrivateSettingsFile, RunResult
from connectors.tools.loader import ensure_topic
from connectors.tools.jobs.stateful_queries import job_arguments
from connectors.tools.shape_checks import ShapeReport, check_shape_name
from connectors.tools.verify import ProgressCallback, VerifyReport, committed_record_count, verify, verify_shape
from twophase import failpoints
from twophase.checkpoint import wall_clock_ms
from twophase.errors import InvalidValueError

log = logging.getLogger(__name__)

FAILPOINT_SCENARIOS = tuple(failpoints.ALL)
SCENARIOS = ("baseline", *FAILPOINT_SCENARIOS, "kill9", "task_failures", "broker_restart", "rolling_restart",
             "txn_timeout")
DEMO_SCENARIOS = ("baseline", "after_pre_commit", "mid_commit", "kill9", "broker_restart", "txn_timeout")

PASSED, FAILED, SKIPPED, INCONCLUSIVE = "passed", "failed", "skipped", "inconclusive"

_TXN_TIMEOUT_MS = 3000
_TXN_TIMEOUT_MARGIN_MS = 2000
_DEFAULT_BROKER_CLEANUP_MS = 10_000  # Kafka's default transaction.abort.timed.out...interval.ms
#: The first hit a planned in-process or custom crash may take: a job's first checkpoint may come
#: on its timer before it has read anything, and with two writers that is two hits.
_FIRST_HIT = 3
#: Spark's hit counters are per Python process; every arrangement of workers reaches these.
_SPARK_HITS = (1, 2)
#: Batches a Spark run needs so that a crash at hit 2 still leaves input to process.
_SPARK_MIN_BATCHES = 3


def parse_scenarios(text: str) -> list[str]:
    """``all``, ``demo``, or a comma-separated list of scenario names."""
    if text.strip() == "all":
        return list(SCENARIOS)
    if text.strip() == "demo":
        return list(DEMO_SCENARIOS)
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown or not names:
        raise InvalidValueError(f"unknown scenarios {unknown or text!r}; choose from all, demo, or "
                                f"{', '.join(SCENARIOS)}")
    return list(dict.fromkeys(names))


@dataclass
class ReplayOptions:
    bootstrap: str
    input_topic: str
    template: JobTemplate
    work_dir: Path
    scenarios: Sequence[str] = SCENARIOS
    seed: int = 1
    id_field: str = "key"
    output_id_field: str | None = None
    check_order: bool = False
    #: A stateful query's shape (``shape_checks.SHAPES``): each scenario's output is checked by its
    #: invariant instead of record by record; the kit's Spark job then runs that shape's query.
    shape: str | None = None
    event_time_field: str = "timestamp"
    #: Output topic names are ``{output_prefix}-{scenario}``.
    output_prefix: str = "eos-replay-out"
    #: Seconds between checkpoints and records per batch, for templates that use
    #: {checkpoint_interval} / {batch_records}; None: the engine's default batch size.
    checkpoint_interval: float = 0.2
    batch_records: int | None = None
    kills: int = 3
    max_runs: int = 10
    run_timeout_s: float = 600.0
    broker: Broker | None = None
    broker_downtime_s: float = 3.0
    task_failure_rate: float = 0.2
    client_config: Mapping[str, str] = field(default_factory=dict)


@dataclass
class ScenarioResult:
    name: str
    fault: str
    status: str
    verdict: str
    output_topic: str | None = None
    runs: list[RunResult] = field(default_factory=list)
    verify: VerifyReport | ShapeReport | None = None
    #: (fault start, fault end, first checkpoint committed after the end) in wall-clock ms, one
    #: per fault; for a crash start and end are the same moment.
    recoveries: list[tuple[int, int, int | None]] = field(default_factory=list)
    checkpoints: list[CheckpointEvent] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    started_ms: int = 0
    ended_ms: int = 0

    @property
    def restarts(self) -> int:
        return max(0, len(self.runs) - 1)

    @property
    def recovery_ms(self) -> list[int]:
        return [done - start for start, _end, done in self.recoveries if done is not None]

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name, "fault": self.fault, "status": self.status, "verdict": self.verdict,
            "output_topic": self.output_topic, "restarts": self.restarts,
            "runs": [r.to_json() for r in self.runs],
            "verify": self.verify.to_json() if self.verify else None,
            "recoveries": [{"fault_start_ms": s, "fault_end_ms": e, "first_commit_ms": d,
                            "recovery_ms": None if d is None else d - s} for s, e, d in self.recoveries],
            "checkpoints": [c.__dict__ for c in self.checkpoints],
            "notes": self.notes, "started_ms": self.started_ms, "ended_ms": self.ended_ms,
        }


@dataclass
class ReplayResult:
    bootstrap: str
    broker_origin: str | None
    input_topic: str
    engine: str
    job_command: str
    seed: int
    scenarios: list[ScenarioResult]
    #: True when the cluster was the kit's embedded test cluster, not a Kafka broker.
    simulated: bool = False
    #: The command that ran the scenarios (``replay`` or ``demo``), which names the reports.
    command: str = "replay"
    #: The client settings the tool and the job ran with, secret values masked.
    client_config: dict[str, str] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return all(s.status in (PASSED, SKIPPED) for s in self.scenarios)

    def to_json(self) -> dict[str, object]:
        # On the embedded cluster the notice comes first and last, as on the console.
        notice = {"notice": SIMULATED_NOTICE, "real_broker": REAL_BROKER_HELP} if self.simulated else {}
        return {
            **notice,
            "command": self.command,
            "bootstrap": self.bootstrap, "broker": self.broker_origin, "simulated": self.simulated,
            "input_topic": self.input_topic, "engine": self.engine, "job_command": self.job_command,
            "seed": self.seed, "passed": self.passed, "client_config": self.client_config,
            "scenarios": [{**s.to_json(), "simulated": self.simulated} for s in self.scenarios],
            **({"closing_notice": SIMULATED_NOTICE} if self.simulated else {}),
        }


class Replay:
    """Runs the scenario matrix of :class:`ReplayOptions`; see the module docstring."""

    def __init__(self, options: ReplayOptions, *, progress: ProgressCallback | None = None,
                 events: Callable[[str], None] | None = None) -> None:
        self.options = options
        self.progress = progress
        self._events = events
        if options.client_config and options.template.engine == "inprocess":
            raise UsageError("--command-config and --client-config are not for --engine inprocess: "
                             "the in-process copy_pipeline takes no client settings; use --engine spark (the "
                             "default), or --job-command with a job that takes its own settings")
        self.clients: KafkaClients = clients_for(options.bootstrap, options.client_config)
        #: Seconds a fault-free run took and the checkpoints it made (from the baseline), to
        #: place kills and broker restarts, and a custom job's failpoint hits.
        self._baseline_s: float | None = None
        self._baseline_checkpoints = 0
        #: Records a read_committed reader finds in the input (counted in :meth:`run`), from
        #: which the kit's engines' failpoint hits are planned.
        self._input_records: int | None = None
        #: The job's client settings while :meth:`run` runs (--kafka-options-file).
        self._settings_file: PrivateSettingsFile | None = None
        #: The kit's Spark job's arguments for ``options.shape`` (its --transform and --output-mode).
        self._shape_args: list[str] = []
        if options.shape is not None:
            self._plan_shape(options)

    def _plan_shape(self, options: ReplayOptions) -> None:
        """A stateful shape: a custom job writes it itself; the kit's Spark job is told to, and its
        input (``kafka-eos load``'s) carries the key and event time at the job's fields, unless
        --id-field / --event-time-field say otherwise."""
        check_shape_name(options.shape or "")
        if options.shape == "join" and options.template.engine != "spark":
            raise UsageError("replay --shape join is not supported: replay feeds a job one input topic, and a join "
                             "has two; check a join's output with kafka-eos verify --shape join --right-input TOPIC")
        if options.template.engine == "inprocess":
            raise UsageError("--shape needs --engine spark or --job-command: the in-process engine only copies")
        if options.template.engine == "spark":
            self._shape_args, key, event_time = job_arguments(options.shape or "")
            if options.id_field == "key":
                options.id_field = key
            if options.event_time_field == "timestamp":
                options.event_time_field = event_time

    def _event(self, message: str) -> None:
        log.info("%s", message)
        if self._events:
            self._events(message)

    def run(self) -> ReplayResult:
        opts = self.options
        partitions = len(retry_transient(lambda: self._partitions(opts.input_topic), f"partitions of {opts.input_topic}"))
        self._input_records = retry_transient(lambda: committed_record_count(self.clients, opts.input_topic),
                                              f"records of {opts.input_topic}")
        if not self._input_records:
            # Every scenario would pass with nothing to copy: an empty PASSED proves nothing.
            raise UsageError(f"input topic {opts.input_topic!r} holds no committed records, so there is "
                             "nothing to replay; load records into it first (--load N, N >= 1)")
        if opts.client_config and not opts.template.takes_kafka_options:
            self._event("the client settings reach this tool's clients, not the job: the job command must "
                        "carry its own (e.g. its --kafka-option flags, or a properties file it reads)")
        order = sorted(opts.scenarios, key=lambda n: n != "baseline")  # baseline first: it times the job
        if opts.client_config and opts.template.takes_kafka_options:
            self._settings_file = PrivateSettingsFile(opts.client_config)
        try:
            results = [self._scenario(name, partitions) for name in order]
        finally:
            if self._settings_file is not None:
                self._settings_file.remove()
                self._settings_file = None
        return ReplayResult(opts.bootstrap, opts.broker.origin if opts.broker else None, opts.input_topic,
                            opts.template.engine, opts.template.text, opts.seed, results,
                            simulated=bool(opts.broker and opts.broker.simulated),
                            client_config=masked(opts.client_config))

    # -- one scenario ------------------------------------------------------------------------------

    def _not_applicable(self, name: str) -> str | None:
        opts = self.options
        if name == "task_failures" and opts.template.engine == "inprocess":
            return "not applicable: the in-process engine has no executor tasks (use --engine spark)"
        if name == "broker_restart":
            if opts.broker is None:
                return "skipped: no broker handle (the broker was not found by this tool)"
            if opts.broker.restart is None:
                return f"skipped: {opts.broker.restart_unavailable or 'the broker cannot be restarted'}"
        if name == "rolling_restart":
            if opts.broker is None:
                return "skipped: no broker handle (the broker was not found by this tool)"
            if opts.broker.bounce is None:
                return f"skipped: {opts.broker.bounce_unavailable or 'the cluster cannot be bounced'}"
        if name == "txn_timeout" and not opts.template.takes_kit_flags:
            return ("skipped: a custom job command must take --transaction-timeout-ms, "
                    "--checkpoint-timeout-ms and --restart-budget-ms for this scenario")
        return None

    def _scenario(self, name: str, partitions: int) -> ScenarioResult:
        opts = self.options
        rng = random.Random(f"{opts.seed}:{name}")
        fault = self._describe(name)
        reason = self._not_applicable(name)
        if reason is not None:
            self._event(f"{name}: {reason}")
            return ScenarioResult(name, fault, SKIPPED, reason)
        result = ScenarioResult(name, fault, INCONCLUSIVE, "", started_ms=wall_clock_ms())
        result.output_topic = f"{opts.output_prefix}-{name.replace('_', '-')}"
        # A topic created just now is empty (and may not answer offset requests yet).
        if not ensure_topic(self.clients, result.output_topic, partitions).created and \
                self._holds_records(result.output_topic):
            result.status = FAILED
            result.verdict = (f"output topic {result.output_topic} already holds records (from an earlier "
                              "run?); choose another output prefix")
            self._event(f"{name}: {result.verdict}")
            return result
        folder = opts.work_dir / name
        folder.mkdir(parents=True, exist_ok=True)
        metrics_file = folder / "metrics.jsonl"
        metrics_file.unlink(missing_ok=True)
        values = {"bootstrap": opts.bootstrap, "input": opts.input_topic, "output": result.output_topic,
                  "checkpoint_dir": str(folder / "checkpoints"), "metrics_file": str(metrics_file),
                  "checkpoint_interval": f"{opts.checkpoint_interval:g}",
                  "batch_records": str(opts.batch_records or opts.template.default_batch_records)}
        self._event(f"{name}: {fault}")
        if name in FAILPOINT_SCENARIOS:
            result.notes.append(self._hit_range()[2])
        if name == "txn_timeout":
            self._run_txn_timeout(result, values, folder)
        else:
            self._run_until_done(name, result, rng, values, folder)
        metrics = read_metrics(metrics_file)
        result.checkpoints = metrics.checkpoints
        result.recoveries = self._recoveries(result, metrics)
        if not opts.template.writes_metrics:
            result.notes.append("the job command has no {metrics_file}: no checkpoint timings")
        self._verify(result)
        result.ended_ms = wall_clock_ms()
        if name == "baseline" and result.status == PASSED:
            run = result.runs[-1]
            first = metrics.first_commit_after(run.start_ms)
            # From the first committed checkpoint on: faults are timed from there (see
            # _await_first_commit), and the start-up before it is the noisy part of a run.
            self._baseline_s = (run.end_ms - (first.committed_ms if first else run.start_ms)) / 1000
            self._baseline_checkpoints = len(result.checkpoints)
        self._event(f"{name}: {result.verdict}")
        return result

    def _partitions(self, topic: str) -> list[int]:
        admin = self.clients.admin()
        try:
            return admin.partitions(topic)
        finally:
            admin.close()

    def _holds_records(self, topic: str) -> bool:
        return retry_transient(lambda: self._holds_records_once(topic), f"end offsets of {topic}")

    def _holds_records_once(self, topic: str) -> bool:
        admin = self.clients.admin()
        try:
            partitions = [TopicPartition(topic, p) for p in admin.partitions(topic)]
            start = admin.list_offsets(partitions, "earliest", read_committed=False)
            end = admin.list_offsets(partitions, "latest", read_committed=False)
        finally:
            admin.close()
        return any(end[tp] > start[tp] for tp in partitions)

    def _describe(self, name: str) -> str:
        """The fault in general terms; a run's plan replaces it with the seeded specifics."""
        if name == "baseline":
            return "none"
        if name in FAILPOINT_SCENARIOS:
            return f"crash at failpoint {name}"
        return {"kill9": "kill -9 at random moments", "task_failures": "executor task failures",
                "broker_restart": "broker restart mid-run",
                "rolling_restart": "every node of the cluster SIGKILLed and restarted in turn, mid-run",
                "txn_timeout": "a transaction outlives transaction.timeout.ms"}[name]

    def _batch_records(self) -> int:
        return self.options.batch_records or self.options.template.default_batch_records

    def _hit_range(self) -> tuple[int, int, str]:
        """(first, last, why): failpoint hits that every run of the job reaches before the end of
        its input, whatever the machine's speed (see the module docstring), and a sentence for
        the report saying why."""
        engine = self.options.template.engine
        records, batch = self._input_records, self._batch_records()
        if engine == "inprocess" and records is not None:
            # One checkpoint after every `batch` records, each reaching every failpoint at least
            # once (mid_commit: between the example's two writers); timer checkpoints only add
            # hits. Up to one less than the count: a batch of input is still to come.
            count = records // batch
            if count < 2:
                return 1, 1, (f"Failpoint hit 1: the input holds {records} records, fewer than two batches "
                              f"of {batch}, so the crash may come after the last record.")
            last = count - 1
            first = min(_FIRST_HIT, last)
            return first, last, (f"Failpoint hits {first} to {last} are reached for certain: the job "
                                 f"checkpoints after each of the input's {count} batches of {batch} records.")
        if engine == "spark" and records is not None:
            batches = -(-records // batch)
            first, last = _SPARK_HITS
            if batches < _SPARK_MIN_BATCHES:
                return first, first, (f"Failpoint hit {first}: only {batches} micro-batches of {batch} records, "
                                      "so the crash may come in the last one.")
            return first, last, (f"Failpoint hits {first} to {last} are reached for certain: hits are counted "
                                 "per Python process (write tasks in reused workers, the commit in its reused "
                                 f"runner), and the first two of the input's {batches} micro-batches reach them.")
        last = max(_FIRST_HIT + 2, self._baseline_checkpoints // 4)
        return _FIRST_HIT, last, (f"Failpoint hits {_FIRST_HIT} to {last}: a custom job's checkpoints are unknown, "
                                  f"so up to a quarter of the baseline's {self._baseline_checkpoints} checkpoints; "
                                  "a hit the job never reaches shows as inconclusive.")

    def _fault_window_s(self) -> tuple[float, float]:
        """Seconds after a run's first committed checkpoint (or its start, for a job that writes
        no metrics) in which a fault should land to hit a running job."""
        if self._baseline_s is None:
            return 0.5, 4.0
        # In the first third: the baseline is usually the slowest run (cold page cache, first
        # topic metadata), and a fault planned near its middle can miss a run twice as fast.
        return 0.05 * self._baseline_s, 0.35 * self._baseline_s

    def _await_first_commit(self, run: JobRun, metrics_file: Path) -> None:
        """Wait until ``run`` has committed a checkpoint (or is held with its input processed,
        or ended), so that timed faults count from steady processing: start-up time (imports, a
        Spark session, cold caches) varies far more between runs than processing does. A resumed
        run with nothing left to process may commit nothing, and is then held."""
        if not self.options.template.writes_metrics:
            return
        deadline = time.monotonic() + self.options.run_timeout_s
        while run.running() and time.monotonic() < deadline:
            metrics = read_metrics(metrics_file)
            if metrics.first_commit_after(run.result.start_ms) or metrics.held_after(run.result.start_ms):
                return
            time.sleep(0.05)

    def _start(self, values: Mapping[str, str], folder: Path, run_number: int, env: Mapping[str, str],
               failpoint: str | None = None, extra: list[str] | None = None, hold: bool = False) -> JobRun:
        """Start run ``run_number``. With ``hold`` its hold file does not exist yet: a job that
        takes ``{hold_file}`` then waits at the end of its input until :meth:`_release`."""
        hold_file = self._hold_file(folder, run_number)
        hold_file.unlink(missing_ok=True)
        if not hold:
            hold_file.touch()
        values = {**values, "hold_file": str(hold_file)}
        args = list(extra or []) + self._shape_args
        if self._settings_file is not None:
            # Each setting as the job's option kafka.KEY of its source and sink; in a private
            # file, not on the command line that every local user sees.
            args += ["--kafka-options-file", str(self._settings_file.path)]
        run_env = dict(env)
        if failpoint is not None:
            if self.options.template.takes_kit_flags:
                # The kit's examples take --failpoint; the Spark one also makes a failpoint's exit
                # kill its whole process group (driver JVM and Python workers).
                args += ["--failpoint", failpoint]
            else:
                run_env[failpoints.ENV_VAR] = failpoint
        return JobRun(self.options.template.render(values, args), run_env, folder / f"run-{run_number:02d}.log")

    @staticmethod
    def _hold_file(folder: Path, run_number: int) -> Path:
        return folder / f"run-{run_number:02d}.release"

    def _release(self, folder: Path, run_number: int) -> None:
        """Let a held run exit: its fault was delivered (or could not be)."""
        self._hold_file(folder, run_number).touch()

    def _run_until_done(self, name: str, result: ScenarioResult, rng: random.Random,
                        values: Mapping[str, str], folder: Path) -> None:
        opts = self.options
        result.fault, plan = self._plan(name, rng)
        metrics_file = Path(values["metrics_file"])
        for number in range(1, opts.max_runs + 1):
            step = plan.pop(0) if plan else {}
            timed = "kill_after_s" in step or "broker_restart_after_s" in step or "rolling_after_s" in step
            run = self._start(values, folder, number, step.get("env", {}), step.get("failpoint"), hold=timed)
            if timed:
                self._await_first_commit(run, metrics_file)
            if "kill_after_s" in step:
                time.sleep(step["kill_after_s"])
                if not run.kill():
                    result.notes.append(f"run {number}: finished before the kill at {step['kill_after_s']:.2f} s")
                elif (held := read_metrics(metrics_file).held_after(run.result.start_ms)) is not None \
                        and run.result.fault_start_ms is not None and held <= run.result.fault_start_ms:
                    result.notes.append(f"run {number}: killed after it had processed all its input "
                                        "(it was held for the kill)")
            elif "broker_restart_after_s" in step:
                time.sleep(step["broker_restart_after_s"])
                if run.running():
                    assert opts.broker is not None and opts.broker.restart is not None
                    down = wall_clock_ms()
                    self._event(f"{name}: restarting the broker ({opts.broker.origin})")
                    opts.broker.restart(opts.broker_downtime_s)
                    up = wall_clock_ms()
                    run.result.mark_fault(down, up)
                    # The broker's own stop and start add to the planned downtime: say what it was.
                    result.fault = (f"broker restart {step['broker_restart_after_s']:.1f} s after "
                                    f"{'its first commit' if opts.template.writes_metrics else 'start'}, "
                                    f"down {(up - down) / 1000:.1f} s")
                else:
                    result.notes.append(f"run {number}: finished before the broker restart")
            elif "rolling_after_s" in step:
                time.sleep(step["rolling_after_s"])
                self._rolling_restart(name, result, run, number, step["order"])
            self._release(folder, number)
            outcome = run.wait(opts.run_timeout_s)
            result.runs.append(outcome)
            self._progress_event(name, outcome, number)
            if "failpoint" in step and not self._failpoint_hit(outcome, step["failpoint"]):
                result.notes.append(f"run {number}: failpoint {step['failpoint']} did not fire (no "
                                    f"'failpoint {_failpoint_name(step['failpoint'])} fired' in {outcome.log_path})")
            if outcome.succeeded:
                return
            if not step and not outcome.killed:
                result.notes.append(f"run {number}: unplanned failure, exit {outcome.exit_code}: "
                                    f"{outcome.log_tail(1)}")
        result.notes.append(f"the job did not finish within {opts.max_runs} runs")

    def _plan(self, name: str, rng: random.Random) -> tuple[str, list[dict]]:
        """The fault, described with its seeded specifics, and what each run of the scenario
        gets, in order; runs after the plan run clean."""
        opts = self.options
        if name == "baseline":
            return "none", []
        if name == failpoints.DURING_RESTORE:
            # The first crash leaves a checkpoint stored but not committed, so the restore has
            # work to do, and is reached, in every engine: the Spark sink restores (and so reaches
            # during_restore) only for such a checkpoint.
            hit = _pick_hit(rng, *self._hit_range()[:2])
            first = f"{failpoints.AFTER_CHECKPOINT_STORED}:exit@{hit}"
            second = f"{failpoints.DURING_RESTORE}:exit"
            return (f"crash at {failpoints.AFTER_CHECKPOINT_STORED} (hit {hit}), then at {name}",
                    [{"failpoint": first}, {"failpoint": second}])
        if name in FAILPOINT_SCENARIOS:
            hit = _pick_hit(rng, *self._hit_range()[:2])
            spec = f"{name}:exit@{hit}"
            return f"crash at {name} (hit {hit})", [{"failpoint": spec}]
        low, high = self._fault_window_s()
        since = "its first commit" if opts.template.writes_metrics else "start"
        if name == "kill9":
            delays = [rng.uniform(low, high) for _ in range(opts.kills)]
            return ("kill -9 at " + ", ".join(f"{d:.1f}" for d in delays) + f" s after {since} (one per run)",
                    [{"kill_after_s": d} for d in delays])
        if name == "broker_restart":
            delay = rng.uniform(low, high)
            return (f"broker down {opts.broker_downtime_s:g} s at {delay:.1f} s after {since}",
                    [{"broker_restart_after_s": delay}])
        if name == "rolling_restart":
            assert opts.broker is not None
            delay = rng.uniform(low, high)
            order = list(opts.broker.nodes)
            rng.shuffle(order)
            return (f"nodes {', '.join(map(str, order))} SIGKILLed in turn, each down {opts.broker_downtime_s:g} s, "
                    f"from {delay:.1f} s after {since}", [{"rolling_after_s": delay, "order": order}])
        if name == "task_failures":
            seed = rng.randrange(2**31)
            env = {"KAFKA_EOS_TASK_FAILURE_RATE": str(opts.task_failure_rate),
                   "KAFKA_EOS_TASK_FAILURE_SEED": str(seed)}
            # Every run: the engine retries failed tasks itself.
            return (f"task failure rate {opts.task_failure_rate:g} (seed {seed})",
                    [{"env": env} for _ in range(opts.max_runs)])
        raise InvalidValueError(f"no plan for scenario {name!r}")

    def _rolling_restart(self, name: str, result: ScenarioResult, run: JobRun, number: int,
                         order: Sequence[int]) -> None:
        """Bounce every node in the planned order while ``run`` runs (it is held at the end of its
        input, so it cannot finish first). A run that fails meanwhile is the scenario's failure."""
        opts = self.options
        assert opts.broker is not None and opts.broker.bounce is not None
        started = wall_clock_ms()
        for node_id in order:
            if not run.running():
                result.notes.append(f"run {number}: ended during the rolling restart, before node {node_id}")
                break
            self._event(f"{name}: SIGKILL node {node_id} and restart it ({opts.broker.origin})")
            opts.broker.bounce(node_id, opts.broker_downtime_s)
        run.result.mark_fault(started, wall_clock_ms())
        result.fault += f"; all done in {(wall_clock_ms() - started) / 1000:.1f} s"

    @staticmethod
    def _failpoint_hit(run: RunResult, failpoint: str) -> bool:
        """True when the run's log confirms that ``failpoint`` (a name, or a ``NAME:ACTION@HIT``
        spec) fired. Every failpoint appends its line to the run's log before it acts
        (``KAFKA_EOS_FAILPOINT_LOG``), so a job that dies by it still confirms it; an exit code
        alone does not (a job may die at 137 for other reasons)."""
        return _failpoint_name(failpoint) in run.failpoints_fired

    def _failpoints_never_fired(self, result: ScenarioResult) -> list[str]:
        """The failpoints a failpoint scenario planned that no run's log shows fired."""
        planned = ([failpoints.AFTER_CHECKPOINT_STORED, failpoints.DURING_RESTORE]
                   if result.name == failpoints.DURING_RESTORE else [result.name])
        return [name for name in planned if not any(self._failpoint_hit(run, name) for run in result.runs)]

    def _progress_event(self, name: str, outcome: RunResult, number: int) -> None:
        how = ("killed" if outcome.killed else "timed out" if outcome.timed_out
               else f"exit {outcome.exit_code}")
        fired = f", failpoint {', '.join(outcome.failpoints_fired)} fired" if outcome.failpoints_fired else ""
        self._event(f"{name}: run {number} {how} after {(outcome.end_ms - outcome.start_ms) / 1000:.1f} s{fired}")

    # -- the transaction-timeout scenario ----------------------------------------------------------

    def _cleanup_interval_ms(self) -> int:
        broker = self.options.broker
        if broker is not None and broker.txn_cleanup_interval_ms is not None:
            return broker.txn_cleanup_interval_ms
        def describe() -> str | None:
            admin = self.clients.admin()
            try:
                return admin.broker_config(TXN_CLEANUP_INTERVAL_KEY)
            finally:
                admin.close()

        value = retry_transient(describe, "broker configuration")
        return int(value) if value else _DEFAULT_BROKER_CLEANUP_MS

    def _run_txn_timeout(self, result: ScenarioResult, values: Mapping[str, str], folder: Path) -> None:
        opts = self.options
        # The broker aborts a timed-out transaction at its next cleanup pass, so the commit must
        # wait past the timeout plus one cleanup interval (plus a margin) to find it aborted.
        sleep_ms = _TXN_TIMEOUT_MS + self._cleanup_interval_ms() + _TXN_TIMEOUT_MARGIN_MS
        # The first commit that carries records (see the module docstring): a later one might
        # never come, should an earlier batch outlive the short timeout by itself.
        hit = _SPARK_HITS[0] if opts.template.engine == "spark" else _FIRST_HIT
        spec = f"{failpoints.BEFORE_COMMIT}:sleep({sleep_ms})@{hit}"
        # The guardrail wants transaction.timeout.ms >= checkpoint timeout + restart budget.
        flags = ["--transaction-timeout-ms", str(_TXN_TIMEOUT_MS),
                 "--checkpoint-timeout-ms", str(_TXN_TIMEOUT_MS), "--restart-budget-ms", "0"]
        result.fault = (f"transaction.timeout.ms={_TXN_TIMEOUT_MS}, the first commit with records "
                        f"(before_commit hit {hit}) delayed {sleep_ms} ms")
        first = self._start(values, folder, 1, {}, spec, flags).wait(opts.run_timeout_s)
        result.runs.append(first)
        self._progress_event(result.name, first, 1)
        if first.succeeded:
            return
        # A restart must not paper over the loss: restoring re-commits the stored transaction,
        # which the broker has aborted, so it must fail the same way.
        second = self._start(values, folder, 2, {}, None, flags).wait(opts.run_timeout_s)
        result.runs.append(second)
        self._progress_event(result.name, second, 2)

    # -- verification and verdicts -----------------------------------------------------------------

    @staticmethod
    def _recoveries(result: ScenarioResult, metrics: JobMetrics) -> list[tuple[int, int, int | None]]:
        """Each fault's start and end, and the first commit after it by a process the fault did
        not end (a broker restart leaves the job running; a kill or a failpoint's exit does not)."""
        recoveries: list[tuple[int, int, int | None]] = []
        for run in result.runs:
            if run.fault_start_ms is None:
                continue
            start, end = run.fault_start_ms, run.fault_end_ms or run.fault_start_ms
            first = (metrics.first_commit_after(end) if run.succeeded
                     else metrics.first_commit_after_death(run.start_ms, end, run.pid))
            recoveries.append((start, end, first.committed_ms if first else None))
        return recoveries

    def _verify(self, result: ScenarioResult) -> None:
        opts = self.options
        assert result.output_topic is not None
        report: VerifyReport | ShapeReport
        if opts.shape is not None:
            report = verify_shape(self.clients, opts.input_topic, result.output_topic, opts.shape,
                                  id_spec=opts.id_field, output_id_spec=opts.output_id_field or "key",
                                  event_time=opts.event_time_field)
        else:
            report = verify(self.clients, opts.input_topic, result.output_topic, id_spec=opts.id_field,
                            output_id_spec=opts.output_id_field, check_order=opts.check_order,
                            work_dir=opts.work_dir, progress=self.progress)
        result.verify = report
        if result.name == "txn_timeout":
            self._txn_timeout_verdict(result, report)
            return
        last = result.runs[-1] if result.runs else None
        finished = last is not None and last.succeeded
        if report.exactly_once and finished:
            result.status, result.verdict = PASSED, "exactly-once"
            never_fired = self._failpoints_never_fired(result) if result.name in FAILPOINT_SCENARIOS else []
            if never_fired:
                # Not a passed fault scenario: the fault it is about never happened.
                result.status = INCONCLUSIVE
                result.verdict = (f"inconclusive: failpoint {', '.join(never_fired)} never fired "
                                  "(exactly-once without it)")
            elif self._fault_missed(result):
                result.status = INCONCLUSIVE
                result.verdict = ("exactly-once, but no task failure was injected (another --seed may inject some)"
                                  if result.name == "task_failures" else
                                  "exactly-once, but the fault did not hit a running job")
            failed_runs = [run for run in result.runs if not run.succeeded]
            if result.name == "rolling_restart" and failed_runs:
                # The cluster kept its quorum and in-sync replicas: the query should not have failed.
                result.status = FAILED
                result.verdict = (f"exactly-once, but the query failed {len(failed_runs)} time(s) during the "
                                  f"rolling restart: {failed_runs[0].log_tail(1)}")
        elif not finished:
            result.status = FAILED
            result.verdict = "job did not finish" + ("" if report.exactly_once else "; NOT exactly-once")
        else:
            result.status, result.verdict = FAILED, "NOT exactly-once: " + _anomaly_text(report)

    def _fault_missed(self, result: ScenarioResult) -> bool:
        if result.name == "baseline":
            return False
        if result.name == "task_failures":
            return not any(run.task_failures_injected for run in result.runs)
        if result.name in FAILPOINT_SCENARIOS:
            return bool(self._failpoints_never_fired(result))
        return not any(run.fault_start_ms is not None for run in result.runs)

    @staticmethod
    def _txn_timeout_verdict(result: ScenarioResult, report: VerifyReport) -> None:
        reported = any(run.transaction_lost for run in result.runs)
        failed_runs = [run for run in result.runs if not run.succeeded]
        losses = report.count("lost_writes")
        # The job's one error per checkpoint counts every lost transaction, as `status` does.
        lost_records, lost_transactions = max(
            ((run.lost_records_reported, run.lost_transactions_reported) for run in result.runs), default=(0, 0))
        if reported and failed_runs and failed_runs[-1].transaction_lost:
            result.status = PASSED
            # The number is the Losses column's: what the scenario lost, next to why that passes.
            result.verdict = (f"{losses:,} record{'s' if losses != 1 else ''} lost, as the scenario intends: "
                              "loss detected and reported (TransactionLostError)")
            plural = "s" if lost_transactions != 1 else ""
            result.notes.append(f"the job reported {lost_transactions} lost transaction{plural} with "
                                f"{lost_records:,} records (as `kafka-eos status` counts them); verify "
                                f"counts {losses} records missing (the lost transaction{plural} plus the input "
                                "the stopped job never reached). A restart cannot recover them; re-producing "
                                "the input from where that checkpoint began does.")
            if report.count("duplicates") or report.count("aborted_reads") or report.count("unexpected"):
                result.status = FAILED
                result.verdict += "; NOT exactly-once otherwise: " + _anomaly_text(report)
        elif losses:
            result.status = FAILED
            result.verdict = f"SILENT LOSS: {losses} records missing and no TransactionLostError"
        else:
            result.status = INCONCLUSIVE
            result.verdict = "the transaction was not aborted in time (no loss, nothing to report)"


def _failpoint_name(failpoint: str) -> str:
    """``mid_commit`` of ``mid_commit:exit@2`` (or of ``mid_commit``)."""
    return failpoint.partition(":")[0]


def _pick_hit(rng: random.Random, first: int, last: int) -> int:
    """A hit count in [first, last] at the seeded fraction of that range: the same seed puts the
    fault at the same relative point of the run."""
    return first + int(rng.random() * (last - first + 1))


def _anomaly_text(report: VerifyReport) -> str:
    parts = [f"{a.records} {a.name}" for a in report.anomalies.values() if a.checked and a.records]
    if report.counts["output_unidentified"]:
        parts.append(f"{report.counts['output_unidentified']} output records without id")
    return ", ".join(parts) or "anomalies"
