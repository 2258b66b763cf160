"""Running the Spark job (connectors/tools/jobs/spark_pipeline.py, the one `kafka-eos replay` runs) as the integration tests do: a separate
process (driver JVM and Python workers) in a process group of its own, on Spark ``local[2,4]`` or a
cluster master, with Kafka client settings for a secured broker."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import Mapping

from connectors.tools import jobs
from twophase import failpoints
from kafka_testkit.job_python import job_python

JOB = Path(jobs.__file__).resolve().parent / "spark_pipeline.py"
KILLED = -signal.SIGKILL
#: The prefix of the kit's default transactional ids (eos.transactionalIdPrefix unset).
DEFAULT_PREFIX = "kafka-eos-"


def spark_job_command(bootstrap: str, source: str, sink: str, checkpoint: Path, *failpoint_specs: str,
                      batch_records: int = 500, master: str | None = None,
                      kafka_config: Mapping[str, str] | None = None, python: str | None = None,
                      extra: tuple[str, ...] = ()) -> list[str]:
    command = [python or job_python(), str(JOB), "--bootstrap", bootstrap, "--input", source, "--output", sink,
               "--checkpoint-dir", str(checkpoint), "--bounded", "--transform", "copy",
               "--max-offsets-per-trigger", str(batch_records), *extra]
    if master:
        command += ["--master", master]
    for name, value in (kafka_config or {}).items():
        command += ["--kafka-option", f"{name}={value}"]
    for spec in failpoint_specs:
        command += ["--failpoint", spec]
    return command


def spark_job_environment(env: Mapping[str, str] | None = None) -> dict[str, str]:
    environment = {k: v for k, v in os.environ.items() if k != failpoints.ENV_VAR}
    # Loopback only: Spark would otherwise bind the driver to the host's first interface.
    environment["SPARK_LOCAL_IP"] = "127.0.0.1"
    environment.update(env or {})
    return environment


def start_spark_job(*args: object, env: Mapping[str, str] | None = None, **kwargs: object) -> subprocess.Popen[str]:
    """The job, running; its stdout and stderr are pipes (read them with ``communicate``)."""
    return subprocess.Popen(spark_job_command(*args, **kwargs), stdout=subprocess.PIPE,  # type: ignore[arg-type]
                            stderr=subprocess.PIPE, text=True, env=spark_job_environment(env), start_new_session=True)


def run_spark_job(*args: object, env: Mapping[str, str] | None = None,
                  **kwargs: object) -> subprocess.CompletedProcess[str]:
    """The job, run to its end (or its death)."""
    return wait_for_end(start_spark_job(*args, env=env, **kwargs))


def wait_for_end(process: subprocess.Popen[str], timeout_s: float = 900) -> subprocess.CompletedProcess[str]:
    """``process`` (started in a session of its own, with piped output) run to its end; after
    ``timeout_s`` its whole process group is killed."""
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def kit_lines(stderr: str) -> list[str]:
    """The one-line errors the example printed last (``kafka-eos: <line>``)."""
    return [line[len("kafka-eos: "):] for line in stderr.splitlines() if line.startswith("kafka-eos: ")]
