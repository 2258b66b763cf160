"""The version matrix of ``.ci/run``: the kit's wheel on each pyspark line, at both ends of its
dependency ranges, on real Kafka, installed as a user installs it.

    python3 kafka_testkit/version_matrix.py --wheel dist/pyspark_kafka_eos-0.2.0-py3-none-any.whl --work /tmp/m

For each line of :data:`LINES` (the newest patch of each), two venvs (the next line's are installed
while this line's tests run):

- the **job venv**: the wheel with **no extra** and that pyspark, what ``pip install
  pyspark-kafka-eos`` gives on a cluster. Every Spark job of the tests, its driver and its workers,
  runs on its Python (``KAFKA_EOS_JOB_PYTHON``, kafka_testkit/job_python.py), so a job that needs
  what only an extra brings fails here at its first batch, as it would for a user;
- the **tools venv**: the wheel with its ``test`` extra and ``pyspark[connect]`` of that version, at
  the same ends: pytest and the tests themselves, the command-line tools that load and verify, and
  Spark Connect's client, which only the Connect test uses (its client and server run here).

Then, for each line:

1. **lowest**: pyarrow, pandas, confluent-kafka and kafka-python pinned in both venvs to the
   lowest versions both the kit's ranges and that pyspark allow (:func:`lowest_pins`), then the
   compact set, ``KAFKA_EOS_INTEGRATION=versions`` (integration_tests/conftest.py's
   ``VERSION_SET``: the quick starts, a driver SIGKILL mid-commit, executor task failures, Spark's
   own source feeding the sink, and on 4.x ``format("kafka-eos")`` both ways and the JVM provider's
   behaviour);
2. **highest**, on the lines of :data:`HIGHEST_LINES` only: the same four upgraded to the newest the
   ranges allow, then the quick starts (``-k quickstart``). On 4.x the newest the ranges allow are
   the same on every line, and 4.3's main suite (README command 2) runs at them.

With ``--kafka-eos`` (an installed ``kafka-eos``), one broker started by ``kafka-eos broker`` serves
every run, and is stopped by its PID at the end, also on failure; without it each run's tests start
their own.

The tests import the installed wheel, not the checkout: pytest's ``pythonpath`` is replaced by a
folder that holds only the test kit. Spark's Kafka connector of each line comes from Maven
Central (``spark_kafka_connector.py``), the brokers too. Prints one line per run and a table, and
exits 1 if any run failed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script: the test kit is not on the path
    sys.path.insert(0, str(REPO))

from kafka_testkit.job_python import JOB_PYTHON_ENV  # noqa: E402
#: The pyspark lines CI runs, newest patch of each; 4.3 also runs the main suite.
LINES = ("3.5.9", "4.0.5", "4.1.4", "4.2.1", "4.3.0")
#: The lines that also run at the highest ends. 3.5's differ from 4.x's (LINE_CONSTRAINTS); on 4.x
#: they are the same on every line, and 4.3's main suite (README command 2, whose venv pip resolves
#: to the newest) runs every test at them, so 4.0-4.2 run at the lowest only.
HIGHEST_LINES = ("3.5.9",)
#: The dependencies whose range ends are tested on each line.
ENDS = ("pyarrow", "pandas", "confluent-kafka", "kafka-python")
#: Upgraded with the ends at the highest, without being an end of the kit's ranges.
HIGHEST_ALSO = ("numpy",)
#: What a line needs beyond the kit's ranges and pyspark's own, which pip cannot see: pyarrow 26
#: needs NumPy 2, which pyspark 3.5's connect extra keeps below 2 (pyarrow declares no numpy
#: requirement; connectors/spark/spark_versions.py refuses the pair in one line).
LINE_CONSTRAINTS = {"3.5": ("pyarrow<26",)}
#: The kit's distribution, and pyspark's extra the tools venv adds (Spark Connect's client).
KIT = "pyspark-kafka-eos"
PYSPARK_EXTRA = "connect"
#: What the job venv must not hold: each comes with an extra of the kit's (test, tools) or pyspark's
#: (connect), never with ``pip install pyspark-kafka-eos``.
NOT_IN_A_PLAIN_INSTALL = ("pytest", "rich", "matplotlib", "testcontainers", "grpc")


@dataclass
class Run:
    line: str
    end: str
    suite: str
    versions: dict[str, str] = field(default_factory=dict)
    code: int | None = None
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return self.code == 0

    def line_of_report(self) -> str:
        versions = ", ".join(f"{name} {version}" for name, version in self.versions.items())
        outcome = "passed" if self.passed else f"FAILED (exit {self.code})"
        return f"pyspark {self.line}, {self.end} ends ({versions}): {self.suite} {outcome} in {self.seconds:.0f} s"


def lowest_pins() -> list[str]:
    """In a venv with the kit and pyspark installed: ``name==version`` for each of :data:`ENDS`,
    the highest of the lower bounds that the kit (any extra) and pyspark (its connect extra)
    declare for it."""
    import importlib.metadata

    from packaging.requirements import Requirement
    from packaging.version import Version

    bounds: dict[str, list[Version]] = {name: [] for name in ENDS}
    declared = [(KIT, None), ("pyspark", PYSPARK_EXTRA)]
    for distribution, extra in declared:
        for text in importlib.metadata.requires(distribution) or []:
            requirement = Requirement(text)
            name = requirement.name.lower()
            if name not in bounds:
                continue
            if extra is not None and requirement.marker is not None \
                    and not requirement.marker.evaluate({"extra": extra}):
                continue
            bounds[name] += [Version(spec.version) for spec in requirement.specifier
                             if spec.operator in (">=", "==", "~=")]
    missing = [name for name, found in bounds.items() if not found]
    if missing:
        raise SystemExit(f"version matrix: no lower bound declared for {', '.join(missing)}: the kit's ranges must "
                         "name one for each dependency whose ends are tested")
    return [f"{name}=={max(found)}" for name, found in bounds.items()]


def _constraints(line: str) -> list[str]:
    return list(LINE_CONSTRAINTS.get(".".join(line.split(".")[:2]), ()))


def _pip(python: Path, *args: str) -> None:
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *args], check=True)


def _installed(python: Path) -> dict[str, str]:
    script = ("import importlib.metadata as m, json, sys; "
              f"print(json.dumps({{n: m.version(n) for n in {['pyspark', *ENDS]!r}}}))")
    out = subprocess.run([str(python), "-c", script], check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def _imported_kit(python: Path, cwd: Path) -> str:
    out = subprocess.run([str(python), "-c", "import connectors; print(connectors.__file__)"], check=True,
                         capture_output=True, text=True, cwd=cwd).stdout.strip()
    if str(REPO) in out:
        raise SystemExit(f"version matrix: the venv imports the checkout's kit ({out}), not the wheel")
    return out


#: How much of a failed run's pytest output a ``--log`` run prints: its failures and short summary.
FAILED_TAIL_LINES = 200


def _pytest(venvs: LineVenvs, test_kit_path: Path, keyword: str | None, bootstrap: str | None,
            log: Path | None, title: str) -> int:
    command = [str(venvs.tools), "-m", "pytest", "integration_tests", "-p", "no:cacheprovider", "-q",
               "-o", f"pythonpath={test_kit_path}", "-rfEsxXp", "-W", "ignore::DeprecationWarning"]
    if keyword:
        command += ["-k", keyword]
    environment = {**os.environ, "KAFKA_EOS_INTEGRATION": "versions", "KAFKA_EOS_REQUIRE_SERVERS": "1",
                   "PYTHONPATH": str(test_kit_path), JOB_PYTHON_ENV: str(venvs.job)}
    if bootstrap:
        environment["KAFKA_BOOTSTRAP_SERVERS"] = bootstrap
    if log is None:
        return subprocess.run(command, cwd=REPO, env=environment).returncode
    # Beside README command 2 (.ci/run), the runs' output goes to the log, so that the two do not
    # interleave line by line; a failed run's tail comes back here.
    with log.open("a") as out:
        out.write(f"==== version matrix: {title}\n")
        out.flush()
        start = out.tell()
        code = subprocess.run(command, cwd=REPO, env=environment, stdout=out, stderr=subprocess.STDOUT).returncode
    if code != 0:
        with log.open(errors="replace") as written:
            written.seek(start)
            tail = "\n".join(written.read().splitlines()[-FAILED_TAIL_LINES:])
        print(f"version matrix: {title}: pytest exited {code}; the last {FAILED_TAIL_LINES} lines of its output "
              f"(all of it in {log}):\n{tail}", flush=True)
    return code


class Broker:
    """One Kafka for every run: ``kafka-eos broker``, stopped by its PID (SIGTERM: it stops its
    Kafka, then exits)."""

    def __init__(self, kafka_eos: Path, work: Path) -> None:
        self._file = work / "bootstrap"
        self._file.unlink(missing_ok=True)
        self._log = open(work / "broker.log", "w")  # noqa: SIM115 - closed in stop()
        self._process = subprocess.Popen([str(kafka_eos), "broker", "--bootstrap-file", str(self._file)],
                                         stdout=self._log, stderr=subprocess.STDOUT)

    def wait(self) -> str:
        deadline = time.monotonic() + 300  # a bound for a failure: Kafka from Maven Central, once
        while time.monotonic() < deadline and self._process.poll() is None:
            if self._file.is_file() and self._file.read_text().strip():
                return self._file.read_text().strip()
            time.sleep(1)
        raise SystemExit(f"version matrix: kafka-eos broker did not start; see {self._log.name}")

    def stop(self) -> None:
        if self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(60)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._log.close()


@dataclass(frozen=True)
class LineVenvs:
    """A line's two venvs, by their interpreters."""

    job: Path
    tools: Path


def _venv(where: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True)
    return where / "bin" / "python"


def prepare_line(line: str, wheel: Path, work: Path) -> LineVenvs:
    """The job and tools venvs of ``line``, both at the lowest ends."""
    root = work / f"pyspark-{line}"
    venvs = LineVenvs(job=_venv(root / "job"), tools=_venv(root / "tools"))
    # The pins need only the declared ranges: the kit's and pyspark's metadata, and packaging to
    # read them. So pip resolves the tools venv once, at the pins, rather than at the newest first.
    _pip(venvs.tools, "--no-deps", str(wheel), f"pyspark=={line}", "packaging")
    pins = subprocess.run([str(venvs.tools), str(Path(__file__).resolve()), "lowest-pins"], check=True,
                          capture_output=True, text=True).stdout.split()
    _pip(venvs.tools, *_with_tools(line, wheel), *pins)
    _pip(venvs.job, *_plain(line, wheel), *pins)
    _check_plain(venvs.job)
    return venvs


def _plain(line: str, wheel: Path) -> list[str]:
    """What a user installs: the wheel, no extra, and the line's pyspark, no extra."""
    return [str(wheel), f"pyspark=={line}", *_constraints(line)]


def _with_tools(line: str, wheel: Path) -> list[str]:
    return [f"{wheel}[test]", f"pyspark[{PYSPARK_EXTRA}]=={line}", *_constraints(line)]


def _check_plain(job: Path) -> None:
    script = ("import importlib.util, json; "
              f"print(json.dumps([n for n in {list(NOT_IN_A_PLAIN_INSTALL)!r} if importlib.util.find_spec(n)]))")
    found = json.loads(subprocess.run([str(job), "-c", script], check=True, capture_output=True, text=True).stdout)
    if found:
        raise SystemExit(f"version matrix: the job venv {job.parents[1]} holds {', '.join(found)}, which no plain "
                         "install of the kit brings")


def run_line(line: str, venvs: LineVenvs, wheel: Path, work: Path, test_kit_path: Path,
             bootstrap: str | None, log: Path | None = None) -> list[Run]:
    print(f"version matrix: pyspark {line}: the kit from {_imported_kit(venvs.job, work)}", flush=True)
    ends = [("lowest", "the compact set", None)]
    if line in HIGHEST_LINES:
        ends.append(("highest", "the quick starts", "quickstart"))
    runs = []
    for end, suite, keyword in ends:
        if end == "highest":
            # numpy too: pyarrow declares no numpy requirement, so pip keeps the numpy 1 that the
            # lowest pandas (2.2.0) brought, beside a pyarrow that needs numpy 2 (the kit refuses
            # that pair in one line: spark_versions.check_installed_packages).
            _pip(venvs.tools, "--upgrade", *_with_tools(line, wheel), *ENDS, *HIGHEST_ALSO)
            _pip(venvs.job, "--upgrade", *_plain(line, wheel), *ENDS, *HIGHEST_ALSO)
            _check_plain(venvs.job)
        run = Run(line, end, suite, _installed(venvs.job))
        print(f"version matrix: pyspark {line}, {end} ends: {run.versions}", flush=True)
        started = time.monotonic()
        run.code = _pytest(venvs, test_kit_path, keyword, bootstrap, log, f"pyspark {line}, {end} ends")
        run.seconds = time.monotonic() - started
        print(f"version matrix: {run.line_of_report()}", flush=True)
        runs.append(run)
    return runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="version_matrix", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command")
    commands.add_parser("lowest-pins", help="(in a matrix venv) print the lowest pins of the tested dependencies")
    parser.add_argument("--wheel", type=Path, help="the kit's wheel, as .ci/run built it")
    parser.add_argument("--work", type=Path, help="a folder for the venvs")
    parser.add_argument("--kafka-eos", type=Path,
                        help="an installed kafka-eos command, to start one broker for every run")
    parser.add_argument("--log", type=Path,
                        help="write the runs' pytest output to this file, and print only a failed run's tail")
    parser.add_argument("--finished", type=Path,
                        help="write the second (Unix time) the matrix finished to this file, for .ci/run's phase times")
    parser.add_argument("--lines", default=",".join(LINES),
                        help=f"comma-separated pyspark versions (default: {','.join(LINES)})")
    args = parser.parse_args(argv)
    if args.command == "lowest-pins":
        print(" ".join(lowest_pins()))
        return 0
    if args.wheel is None or not args.wheel.is_file() or args.work is None:
        parser.error("--wheel (an existing wheel file) and --work are required")
    args.work.mkdir(parents=True, exist_ok=True)
    test_kit_path = args.work / "test-kit-path"
    test_kit_path.mkdir(exist_ok=True)
    link = test_kit_path / "kafka_testkit"
    if not link.exists():
        link.symlink_to(REPO / "kafka_testkit")
    # A CI timeout's SIGTERM unwinds as an exit, so the broker is stopped on the way out.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    runs: list[Run] = []
    broker = Broker(args.kafka_eos, args.work) if args.kafka_eos else None
    try:
        bootstrap = broker.wait() if broker else None
        lines = [line.strip() for line in args.lines.split(",")]
        wheel = args.wheel.resolve()
        # The next line's venv is installed while this line's tests run: pip mostly waits on
        # downloads and the disk, and the tests leave that time idle.
        with ThreadPoolExecutor(max_workers=1) as installer:
            prepared = {lines[0]: installer.submit(prepare_line, lines[0], wheel, args.work)}
            for index, line in enumerate(lines):
                if index + 1 < len(lines):
                    following = lines[index + 1]
                    prepared[following] = installer.submit(prepare_line, following, wheel, args.work)
                try:
                    runs += run_line(line, prepared[line].result(), wheel, args.work, test_kit_path, bootstrap,
                                     args.log)
                except subprocess.CalledProcessError as exc:
                    print(f"version matrix: pyspark {line}: {' '.join(map(str, exc.cmd))} exited {exc.returncode}",
                          flush=True)
                    runs.append(Run(line, "setup", "the venv", code=exc.returncode))
                finally:
                    shutil.rmtree(args.work / f"pyspark-{line}", ignore_errors=True)  # a GB each
    finally:
        if broker:
            broker.stop()
    if args.finished:
        args.finished.write_text(f"{int(time.time())}\n")
    print("version matrix:")
    for run in runs:
        print(f"  {run.line_of_report()}")
    return 0 if runs and all(run.passed for run in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
