"""The Python of Spark's workers on the standalone cluster (``spark_cluster``), when the nodes' own
Python lacks the kit:

- nothing shipped: the job fails with one line of the kit's naming ``PYSPARK_PYTHON`` and
  ``spark.archives`` (``connectors.spark.failures``), not with a bare ``No module named 'connectors'``
  deep in a Spark trace;
- the kit shipped as Spark documents for Python dependencies: a packed virtualenv (``venv-pack``)
  given as ``spark.archives=env.tar.gz#environment`` with ``PYSPARK_PYTHON=./environment/bin/python``;
  the job is exactly-once (docs/where-it-runs.md describes this recipe).

The packed venv is made for the purpose, as small as it can be: a fresh venv with a non-editable
install of the kit (venv-pack refuses editable installs) and the packages it imports on executors,
without pyspark (Spark puts its own ``pyspark.zip`` and py4j on its workers' path), pip and the
test kit, packed once per test session.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from connectors.spark.failures import kit_error_lines, worker_python_message
from kafka_io import assert_exactly_once, copied_id, read_committed_values, topics_with_orders, wait_until_stable
from spark_job import kit_lines, run_spark_job, spark_job_command, spark_job_environment, wait_for_end
from test_spark_standalone import _python_with_dependencies_only

pytestmark = pytest.mark.spark

REPO_ROOT = Path(__file__).resolve().parents[1]
RECORDS = 2000
#: What the kit's packages import on executors (pyproject.toml's dependencies but pyspark), at the
#: versions of this environment.
EXECUTOR_DEPENDENCIES = ("pyarrow", "confluent-kafka", "kafka-python", "tenacity")
#: Not needed by Spark's workers: left out of the packed venv.
TRIMMED = ("pyarrow/tests", "pyarrow/include")


def _venv_pack() -> str:
    found = shutil.which("venv-pack") or str(Path(sys.executable).with_name("venv-pack"))
    if not os.access(found, os.X_OK):
        pytest.skip("venv-pack is not installed (pip install venv-pack; it is in the test extra)")
    return found


@pytest.fixture(scope="session")
def packed_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``env.tar.gz``: a venv holding the kit (not editable) and its executor dependencies, packed
    by venv-pack; made once per session."""
    venv_pack = _venv_pack()
    work = tmp_path_factory.mktemp("packed-venv")
    # A copy of the sources, so that the build leaves nothing in the checkout.
    source = work / "source"
    source.mkdir()
    for name in ("twophase", "connectors"):
        shutil.copytree(REPO_ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO_ROOT / name, source / name)
    env = work / "env"
    subprocess.run([sys.executable, "-m", "venv", str(env)], check=True)
    pip = [str(env / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, "--no-deps", str(source)], check=True)
    pins = [f"{name}=={importlib.metadata.version(name)}" for name in EXECUTOR_DEPENDENCIES]
    installed = subprocess.run([*pip, *pins], capture_output=True, text=True)
    if installed.returncode != 0:
        pytest.skip(f"could not install {' '.join(pins)} into the venv to pack: {installed.stderr[-1000:]}")
    subprocess.run([str(env / "bin" / "python"), "-m", "pip", "uninstall", "-q", "-y", "pip", "setuptools"],
                   check=True)
    site = Path(subprocess.run([str(env / "bin" / "python"), "-c",
                                "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    for name in TRIMMED:
        shutil.rmtree(site / name, ignore_errors=True)
    archive = work / "env.tar.gz"
    subprocess.run([venv_pack, "-p", str(env), "-o", str(archive), "-q"], check=True)
    return archive


def test_workers_without_the_kit_fail_with_one_line_naming_the_fix(kafka_bootstrap, kafka_clients, unique_name,
                                                                   tmp_path, spark_cluster):
    python = _python_with_dependencies_only(tmp_path / "node-python")
    source, sink, _ids = topics_with_orders(kafka_clients, unique_name, 10)
    finished = run_spark_job(kafka_bootstrap, source, sink, tmp_path / "chk", master=spark_cluster.master_url,
                             env={"PYSPARK_PYTHON": python})
    assert finished.returncode != 0, finished.stderr[-4000:]
    assert "No module named 'connectors'" in finished.stderr
    assert kit_lines(finished.stderr) == [worker_python_message("connectors")], finished.stderr[-4000:]


def test_the_kit_shipped_as_a_packed_venv_with_spark_archives(kafka_bootstrap, kafka_clients, unique_name,
                                                             tmp_path, spark_cluster, packed_venv):
    # The interpreter the packed venv's python links to (venv-pack keeps the link: the nodes need
    # this Python at the same path) has neither the kit nor its dependencies.
    base = Path(sysconfig.get_config_var("BINDIR")) / f"python{sys.version_info.major}.{sys.version_info.minor}"
    bare = subprocess.run([str(base), "-c", "import connectors"], capture_output=True, text=True, cwd=tmp_path)
    assert "No module named 'connectors'" in bare.stderr, bare.stderr
    # Client deploy mode: the kit's data source also runs Python on the driver (its planning steps),
    # from the driver's working folder, with the same relative PYSPARK_PYTHON: the archive is
    # unpacked there too, as docs/where-it-runs.md says.
    driver_folder = tmp_path / "driver"
    (driver_folder / "environment").mkdir(parents=True)
    subprocess.run(["tar", "-xzf", str(packed_venv), "-C", str(driver_folder / "environment")], check=True)
    source, sink, ids = topics_with_orders(kafka_clients, unique_name, RECORDS)
    job = subprocess.Popen(
        spark_job_command(kafka_bootstrap, source, sink, tmp_path / "chk", master=spark_cluster.master_url),
        # Spark's recipe: the archive unpacked as ./environment in each executor's working folder,
        # where Spark starts the executor's Python workers.
        env=spark_job_environment({"PYSPARK_PYTHON": "./environment/bin/python",
                                   "PYSPARK_SUBMIT_ARGS": f"--conf spark.archives={packed_venv}#environment "
                                                          "pyspark-shell"}),
        cwd=driver_folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    finished = wait_for_end(job)
    assert finished.returncode == 0, finished.stderr[-4000:]
    wait_until_stable(kafka_clients, sink)
    assert_exactly_once(read_committed_values(kafka_clients, sink), ids, copied_id)


def test_a_relative_worker_python_missing_on_the_driver_fails_with_one_line(kafka_bootstrap, kafka_clients,
                                                                           unique_name, tmp_path, spark_cluster,
                                                                           packed_venv):
    """The same job from a folder without ./environment: refused at register, naming the fix."""
    source, sink, _ids = topics_with_orders(kafka_clients, unique_name, 10)
    finished = run_spark_job(kafka_bootstrap, source, sink, tmp_path / "chk", master=spark_cluster.master_url,
                             env={"PYSPARK_PYTHON": "./environment/bin/python",
                                  "PYSPARK_SUBMIT_ARGS": f"--conf spark.archives={packed_venv}#environment "
                                                         "pyspark-shell"})
    assert finished.returncode != 0
    # The example registers the format outside its error report: the kit's error is the traceback's last line.
    line, = kit_error_lines(finished.stderr)
    assert line.startswith("PYSPARK_PYTHON=./environment/bin/python does not exist in the driver's working folder")
