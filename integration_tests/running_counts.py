"""A running count's input and output on a real broker, for the output-mode tests: keyed input
records, the count per key read back with read_committed in offset order, and the invariants of
update and complete mode (``output_modes_job.py`` runs the query)."""

from __future__ import annotations

import os
import subprocess
from collections import defaultdict
from pathlib import Path
from typing import Callable

from connectors.kafka.clients import KafkaClients
from connectors.kafka.clients.broker_retry import BrokerRetryPolicy, RetryingClusterAdmin
from kafka_io import partitions_of, wait_until_stable
from spark_job import spark_job_environment, wait_for_end
from kafka_testkit.job_python import job_python

JOB = Path(__file__).resolve().parent / "output_modes_job.py"
KEYS = 40
RECORDS = 1200
#: Three batches, so that counts must carry over batches in Spark's state store.
BATCH = 400


def new_topic(clients: KafkaClients, unique_name: Callable[[str], str], label: str) -> str:
    topic = unique_name(label)
    # Under the retries the kit's own requests get (a cluster that has just started).
    RetryingClusterAdmin(clients.admin, BrokerRetryPolicy()).create_topic(topic, 3)
    return topic


def load_keyed(clients: KafkaClients, topic: str) -> dict[bytes, int]:
    """``RECORDS`` records over ``KEYS`` keys; returns each key's number of records."""
    producer = clients.producer(None, {})
    inputs: dict[bytes, int] = defaultdict(int)
    for i in range(RECORDS):
        key = f"k{i % KEYS}".encode()
        producer.produce(topic, f"v{i}".encode(), key=key)
        inputs[key] += 1
    producer.flush(60)
    producer.close()
    wait_until_stable(clients, topic)
    return dict(inputs)


def run_count_job(where: list[str], bootstrap: str, source: str, queries: dict[str, str],
                  checkpoint: Path, extra: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """``output_modes_job.py`` run to its end: ``where`` is ``--master M`` or ``--remote URL``,
    ``queries`` maps an output mode to its output topic, ``extra`` are more of the job's arguments."""
    command = [job_python(), str(JOB), *where, "--bootstrap", bootstrap, "--input", source,
               "--checkpoint-dir", str(checkpoint), "--max-offsets-per-trigger", str(BATCH), *extra]
    for mode, topic in queries.items():
        command += ["--query", f"{mode}:{topic}"]
    environment = spark_job_environment({k: v for k, v in os.environ.items() if k != "SPARK_REMOTE"})
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment,
                               start_new_session=True)
    return wait_for_end(process, timeout_s=600)


def counts_by_key(clients: KafkaClients, topic: str) -> dict[bytes, list[int]]:
    """Each key's counts in the output, in offset order, read with read_committed (the kit
    partitions by key: a key's records are in one partition)."""
    tps = partitions_of(clients, topic)
    end = clients.admin().list_offsets(tps, "latest", True)
    reader = clients.reader(read_committed=True)
    counts: dict[bytes, list[int]] = defaultdict(list)
    try:
        for record in sorted(reader.read({tp: (0, end[tp]) for tp in tps if end[tp]}),
                             key=lambda r: (r.partition, r.offset)):
            assert record.key is not None and record.value is not None, record
            counts[record.key].append(int(record.value))
    finally:
        reader.close()
    return dict(counts)


def assert_update_counts(counts: dict[bytes, list[int]], inputs: dict[bytes, int], several_batches: bool = True) -> None:
    """Update mode writes a key's count whenever it changed: per key the counts rise strictly and
    end at the key's number of inputs."""
    assert set(counts) == set(inputs)
    for key, seen in counts.items():
        assert all(a < b for a, b in zip(seen, seen[1:])), f"{key!r}: counts do not rise strictly: {seen}"
        assert seen[-1] == inputs[key], f"{key!r}: ends at {seen[-1]}, has {inputs[key]} inputs: {seen}"
    if several_batches:  # some key was written more than once, its count carried over in Spark's state
        assert max(len(seen) for seen in counts.values()) > 1


def assert_complete_counts(counts: dict[bytes, list[int]], inputs: dict[bytes, int]) -> None:
    """Complete mode writes every key's count every batch: per key they never fall and end at the
    key's number of inputs, and every key is written as often as the others (once a batch: the
    first batch reads every key, whose records are interleaved), in three batches or more."""
    assert set(counts) == set(inputs)
    for key, seen in counts.items():
        assert all(a <= b for a, b in zip(seen, seen[1:])), f"{key!r}: a count fell: {seen}"
        assert seen[-1] == inputs[key], f"{key!r}: ends at {seen[-1]}, has {inputs[key]} inputs: {seen}"
    writes = sorted({len(seen) for seen in counts.values()})
    assert len(writes) == 1 and writes[0] >= RECORDS // BATCH, f"writes per key: {writes}"


def job_failure(job: subprocess.CompletedProcess[str]) -> str:
    kit = [line for line in job.stderr.splitlines() if " connectors." in line or line.startswith("query failed")]
    return f"exit {job.returncode}:\n" + "\n".join(kit[-40:])
