"""The Python of Spark's workers on the standalone cluster (``spark_cluster``), when the nodes' own
Python lacks the kit:

- nothing shipped: the job fails with one line of the kit's naming ``PYSPARK_PYTHON`` and
  ``spark.archives`` (``connectors.spark.failures``), not with a bare ``No module named 'connectors'``
  deep in a Spark trace;
- the kit shipped as Spark documents for Python dependencies: a packed virtualenv (``venv-pack``)
  given as ``spark.archives=env.tar.gz#environment`` with ``PYSPARK_PYTHON=./environment/bin/python``;
  the job is exactly-once (docs/where-it-runs.md describes this recipe).

The packed venv is the ``packed_venv`` fixture of conftest.py (also shipped to YARN by
test_spark_on_yarn.py).
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from connectors.spark.failures import worker_python_message
from kafka_io import assert_exactly_once, copied_id, read_committed_values, topics_with_orders, wait_until_stable
from spark_job import kit_lines, run_spark_job, spark_job_command, spark_job_environment, wait_for_end
from test_spark_standalone import _python_with_dependencies_only

pytestmark = pytest.mark.spark

RECORDS = 2000


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
    # The example prints the kit's one-line errors last, as "kafka-eos: <line>".
    line, = kit_lines(finished.stderr)
    assert line.startswith("PYSPARK_PYTHON=./environment/bin/python does not exist in the driver's working folder")
