"""Imported at start-up by every Python process of a bench run (``run_bench.py`` puts this
directory on ``PYTHONPATH``), including the Spark Python workers, which configure no logging.

The exactly-once sink's driver-side commit runs in such a worker (Spark's streaming sink
runner), so its "batch N committed: T transactions, R records, X ms" line is an INFO record that
nobody would print. This sends that logger's records to the process's stderr, which Spark passes
on to the job's stderr, where the bench reads the commit times. Nothing else changes.
"""

import logging
import os
import sys

if os.environ.get("KAFKA_EOS_BENCH_COMMIT_LOG") == "1":
    _logger = logging.getLogger("connectors.spark.commit_protocol")
    _logger.setLevel(logging.INFO)
    # Bound now to the real stderr: Spark may swap sys.stderr for a capturing wrapper later.
    _handler = logging.StreamHandler(sys.stderr)
    _handler.setFormatter(logging.Formatter("%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s"))
    _logger.addHandler(_handler)
    _logger.propagate = False
