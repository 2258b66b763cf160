"""Update and complete output mode on ``format("kafka-eos")``, on a real broker (issue 45).

A running count copied from ``format("kafka")`` (``output_modes_job.py``: ``groupBy("key").count()``)
runs unchanged on the kit's sink, which takes update mode through the kit's JVM provider that
``register()`` puts into the session (connectors/spark/jvm_provider.py). The queries are started
from Python threads other than the one that registered the format, as Spark looks the format up on
the starting thread. The output's invariants are ``running_counts.py``'s. On a standalone cluster
(``KAFKA_EOS_INTEGRATION=all``) the executors are JVMs without the provider's jar: they do not need
it. Spark Connect's case is in test_spark_connect.py, on that module's server.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest

from connectors.kafka.clients import KafkaClients
from running_counts import (assert_complete_counts, assert_update_counts, counts_by_key, job_failure, load_keyed,
                            new_topic, run_count_job)

pytestmark = pytest.mark.spark


def test_a_running_count_in_update_and_complete_mode_runs_unchanged(
        kafka_bootstrap: str, kafka_clients: KafkaClients, unique_name: Callable[[str], str], tmp_path: Path,
        spark_master: str | None) -> None:
    source, update, complete = (new_topic(kafka_clients, unique_name, label)
                                for label in ("counts-in", "update", "complete"))
    inputs = load_keyed(kafka_clients, source)
    job = run_count_job(["--master", spark_master or "local[2]"], kafka_bootstrap, source,
                        {"update": update, "complete": complete}, tmp_path / "checkpoints")
    assert job.returncode == 0, job_failure(job)
    assert "update mode enabled" in job.stderr  # register() put the provider into the driver
    assert_update_counts(counts_by_key(kafka_clients, update), inputs)
    assert_complete_counts(counts_by_key(kafka_clients, complete), inputs)
