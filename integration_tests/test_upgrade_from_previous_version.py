"""An upgrade of the kit under a running query keeps it exactly-once: the previous version of the
kit, installed from git, runs its own Spark example on a real broker until it is killed right
after it stored a checkpoint's decision (its transactions pre-committed, not yet committed); the
same checkpointLocation is then restarted on this version, which reads the state the previous
version wrote, commits that decision's transactions and finishes the input. Output: every input
record exactly once, no transaction of the sink left open.

The previous version runs with its installation first on ``PYTHONPATH`` (and the current checkout's
editable install taken off the import system), in the driver and in every Python process Spark
starts: a ``sitecustomize`` logs where each process found the kit, and the test checks that the
workers of the first run imported the previous version and those of the second the current one.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kafka_io import assert_exactly_once, copied_id, read_committed_values, topics_with_orders, wait_until_stable
from spark_job import DEFAULT_PREFIX, KILLED, run_spark_job, spark_job_environment, wait_for_end

pytestmark = pytest.mark.spark

log = logging.getLogger(__name__)

#: The previous version of the kit: 0.1.0, the last commit landed before the 0.2.0 work (the
#: CHANGELOG's 0.1.0 entry names it). Raise it to the commit of each release.
PREVIOUS_VERSION = "b0396cc"
ROOT = Path(__file__).resolve().parent.parent
RECORDS = 3000

# Logs the kit's location in every Python process (driver, data source planners, worker daemons
# and their forks) the moment it is first imported; with KIT_ONLY_PYTHONPATH set, it also takes off
# the editable install of the checkout, which would answer for modules the old version lacks.
SITECUSTOMIZE = textwrap.dedent('''
    import os, sys

    _LOG = os.environ.get("KIT_IMPORT_LOG")
    if os.environ.get("KIT_ONLY_PYTHONPATH"):
        sys.meta_path[:] = [f for f in sys.meta_path if "__editable__" not in type(f).__module__
                            and "__editable__" not in getattr(f, "__module__", "")]

    class _KitImportLog:
        def find_spec(self, name, path=None, target=None):
            if name not in ("twophase", "connectors") or not _LOG:
                return None
            spec = None
            for finder in [f for f in sys.meta_path if f is not self]:
                spec = finder.find_spec(name, path, target) if hasattr(finder, "find_spec") else None
                if spec is not None:
                    break
            if spec is None:
                return None
            with open(_LOG, "a") as log:
                log.write(f"{os.getpid()}\\t{name}\\t{spec.origin}\\t{' '.join(sys.argv)[:200]}\\n")
            return spec

    sys.meta_path.insert(0, _KitImportLog())
''')


def previous_commit() -> str:
    """The full id of PREVIOUS_VERSION; fails (never skips) when the checkout lacks it: CI runs on
    a full clone, where every release commit is reachable."""
    found = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--verify", f"{PREVIOUS_VERSION}^{{commit}}"],
                           capture_output=True, text=True)
    assert found.returncode == 0, (f"the previous version {PREVIOUS_VERSION} is not in this checkout ({ROOT}): "
                                   f"clone the repository with its history. {found.stderr.strip()}")
    return found.stdout.strip()


def install_previous_version(commit: str, where: Path) -> tuple[Path, Path]:
    """The previous version installed from git into a private target (pip, whose isolated build
    fetches setuptools from PyPI; without PyPI, the commit's packages as ``git archive`` gives
    them), and its examples folder."""
    target = where / "site"
    installed = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-input",
                                "--target", str(target), f"git+file://{ROOT}@{commit}"],
                               capture_output=True, text=True, timeout=600)
    if installed.returncode != 0:
        log.warning("pip could not install %s from git (%s); taking its packages from git archive instead",
                    commit, installed.stderr.strip()[-500:])
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        _extract(commit, target, "twophase", "connectors", "kafka_testkit")
    assert (target / "twophase" / "checkpoint.py").exists() and (target / "connectors" / "spark").is_dir()
    _extract(commit, where, "examples")
    return target, where / "examples"


def _extract(commit: str, into: Path, *paths: str) -> None:
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit, *paths], capture_output=True,
                             check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)


def import_log(path: Path) -> list[tuple[int, str, str, str]]:
    rows = [line.split("\t") for line in path.read_text().splitlines()] if path.exists() else []
    return [(int(pid), name, origin, argv) for pid, name, origin, argv in rows]


def workers(rows: list[tuple[int, str, str, str]], driver_pid: int) -> list[tuple[int, str, str, str]]:
    return [row for row in rows if row[0] != driver_pid]


def test_a_query_killed_after_its_decision_on_the_previous_version_finishes_exactly_once_on_this_one(
        kafka_bootstrap, kafka_clients, unique_name, tmp_path):
    commit = previous_commit()
    site, examples = install_previous_version(commit, tmp_path / "previous")
    customize = tmp_path / "customize"
    customize.mkdir()
    (customize / "sitecustomize.py").write_text(SITECUSTOMIZE)
    source, sink, ids = topics_with_orders(kafka_clients, unique_name, RECORDS)
    checkpoint = tmp_path / "chk"

    # 1. The previous version, killed right after it stored batch 2's decision.
    old_log = tmp_path / "imports-previous.log"
    env = spark_job_environment({
        "PYTHONPATH": os.pathsep.join([str(site), str(customize)]),
        "KIT_ONLY_PYTHONPATH": "1", "KIT_IMPORT_LOG": str(old_log),
    })
    env.pop("PYSPARK_PYTHON", None)  # the old example picks its workers' Python itself
    command = [sys.executable, str(examples / "spark_pipeline.py"), "--bootstrap", kafka_bootstrap,
               "--input", source, "--output", sink, "--checkpoint-dir", str(checkpoint), "--bounded",
               "--transform", "copy", "--max-offsets-per-trigger", "500",
               "--failpoint", "after_checkpoint_stored:exit@2"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                               start_new_session=True, cwd=str(tmp_path))
    crashed = wait_for_end(process)
    assert crashed.returncode == KILLED, f"exit {crashed.returncode}\n{crashed.stderr[-4000:]}"
    assert len(read_committed_values(kafka_clients, sink)) < RECORDS, "the previous version finished"
    state = checkpoint / "kafka-eos"
    stored = sorted(int(p.name[4:]) for p in state.glob("chk-*") if (p / "_metadata").exists())
    assert stored and not (state / f"chk-{stored[-1]}" / "_committed").exists(), \
        f"no stored, unconfirmed decision in {sorted(p.name for p in state.iterdir())}"
    decision = (state / f"chk-{stored[-1]}" / "_metadata").read_bytes()
    assert kafka_clients.txn_control().list_open_transactions(DEFAULT_PREFIX), "the decision's transactions"

    rows = import_log(old_log)
    assert rows, "no process logged the kit's import"
    assert all(origin.startswith(str(site)) for _, _, origin, _ in rows), \
        f"a process of the previous version's run imported another kit: {rows}"
    assert workers(rows, process.pid), f"no Python process Spark started imported the kit: {rows}"

    # 2. This version, restarted on the same checkpointLocation.
    new_log = tmp_path / "imports-current.log"
    finished = run_spark_job(kafka_bootstrap, source, sink, checkpoint,
                             env={"PYTHONPATH": str(customize), "KIT_IMPORT_LOG": str(new_log)})
    assert finished.returncode == 0, finished.stderr[-4000:]
    rows = import_log(new_log)
    assert rows and all(origin.startswith(str(ROOT)) for _, _, origin, _ in rows), rows
    assert not any(origin.startswith(str(site)) for _, _, origin, _ in rows), rows

    wait_until_stable(kafka_clients, sink)
    assert_exactly_once(read_committed_values(kafka_clients, sink), ids, copied_id)
    assert kafka_clients.txn_control().list_open_transactions(DEFAULT_PREFIX) == []
    # The previous version's decision was read and committed as it was written, never rewritten.
    kept = state / f"chk-{stored[-1]}"
    if (kept / "_metadata").exists():
        assert (kept / "_metadata").read_bytes() == decision
        assert (kept / "_committed").exists()
