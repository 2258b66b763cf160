"""The Python that runs the tests' Spark jobs, their driver and the workers it starts, and what a
healthy job's console may show.

A user installs ``pip install pyspark-kafka-eos`` next to the pyspark of their cluster and nothing
else: no ``test`` or ``tools`` extra. The version matrix (``version_matrix.py``) builds such a venv
for each pyspark line and names its interpreter in ``KAFKA_EOS_JOB_PYTHON``; the tests run from
another venv, which adds the test tools (pytest, the command-line tools' extra) on top. Every test
that starts a Spark job starts it with :func:`job_python`, so a job that needs something only an
extra brings fails in the matrix, at its first batch, as it would on a user's cluster. Outside the
matrix the job Python is the tests' own.
"""

from __future__ import annotations

import os
import re
import sys

#: The interpreter of a venv that holds only the kit's wheel and a pyspark.
JOB_PYTHON_ENV = "KAFKA_EOS_JOB_PYTHON"

# A log4j line at ERROR (``26/12/02 11:00:00 ERROR Executor: ...``) or a Python logging one
# (``... ERROR connectors.spark...: ...``), and the first line of a Python traceback.
_ERROR_LINE = re.compile(r"(^|\s)ERROR[\s:]")
_TRACEBACK = "Traceback (most recent call last)"


def job_python() -> str:
    """The interpreter a test runs a Spark job's driver with (its workers follow the driver's)."""
    return os.environ.get(JOB_PYTHON_ENV, "").strip() or sys.executable


def noisy_lines(console: str) -> list[str]:
    """The lines of a job's console that a run with no fault injected must not print: ERROR lines
    and Python tracebacks (issue 53: a healthy run is quiet on every Spark line)."""
    return [line for line in console.splitlines() if _ERROR_LINE.search(line) or _TRACEBACK in line]


def assert_quiet(console: str, what: str) -> None:
    noisy = noisy_lines(console)
    assert not noisy, f"{what} printed {len(noisy)} ERROR or traceback lines with no fault injected:\n" + \
        "\n".join(noisy[:20])
