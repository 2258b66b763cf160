"""Transactional ids the broker forgot: a query stopped for longer than
``transactional.id.expiration.ms`` (7 days by default: a long weekend), or a write slot a smaller
cluster no longer uses.

On a broker of its own that forgets idle ids within seconds (``transactional.id.expiration.ms``
4 s, its cleanup every second), as a real broker does after a week:

- a finished query whose ids expired is restarted from its checkpoint on more input: it runs, and
  the output is exactly-once;
- a query killed after a checkpoint was stored, before its commit, stays down until the broker has
  aborted that checkpoint's transactions (their timeout) and forgotten their ids: the restart must
  report every one of them lost, with all their records, in one error, never pass over them.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Callable, Iterator

import pytest

from cluster_faults import produce_chunk
from connectors.kafka.clients.factory import clients_for
from connectors.kafka.clients import KafkaClients
from kafka_io import assert_exactly_once, copied_id, read_committed_values, topics_with_orders, wait_until_stable
from spark_job import KILLED, kit_lines, run_spark_job

pytestmark = pytest.mark.spark

EXPIRATION_MS = 4000
#: Batch 0 must commit within it, so it is far above a batch's time on a busy machine (two test
#: workers and the version matrix on 2 cores: 3 s once aborted batch 0 there); the crashed batch's
#: transactions outlive it only because the test waits it out (wait_until_forgotten).
TXN_TIMEOUT_MS = 20_000
RECORDS = 1500
BATCH = 500
#: Bounds the wait for the broker to forget the ids; it forgets them within a few seconds.
_FORGET_BOUND_S = 120.0


@pytest.fixture(scope="module")
def forgetful_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Kafka from Maven Central that expires idle transactional ids after 4 s and aborts timed-out
    transactions within a second."""
    from connectors.servers.server_errors import BrokerStartError
    from connectors.servers.kafka_distribution import MavenKafka
    from connectors.servers.local_broker import LocalKafkaBroker

    config = {"transactional.id.expiration.ms": str(EXPIRATION_MS),
              "transaction.remove.expired.transaction.cleanup.interval.ms": "1000",
              "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000"}
    try:
        broker = LocalKafkaBroker(MavenKafka(), tmp_path_factory.mktemp("forgetful"), extra_config=config)
        bootstrap = broker.start()
    except BrokerStartError as exc:
        pytest.skip(f"a broker with a short transactional.id.expiration.ms is started here from Maven Central: "
                    f"{str(exc).splitlines()[0]}")
    try:
        yield bootstrap
    finally:
        broker.stop()


def wait_until_forgotten(clients: KafkaClients, prefix: str) -> None:
    """Until the broker lists no transactional id of ``prefix`` in any state."""
    deadline = time.monotonic() + _FORGET_BOUND_S
    control = clients.txn_control()
    try:
        while listed := control.list_transactions(prefix):
            assert time.monotonic() < deadline, f"still known to the broker: {listed}"
            time.sleep(0.5)
    finally:
        control.close()


def test_a_query_whose_transactional_ids_expired_restarts_exactly_once(
        forgetful_broker: str, unique_name: Callable[[str], str], tmp_path: Path) -> None:
    clients = clients_for(forgetful_broker)
    source, sink, ids = topics_with_orders(clients, unique_name, RECORDS)
    prefix = unique_name("expiring")
    job = dict(batch_records=BATCH, extra=("--transactional-id-prefix", prefix))
    first = run_spark_job(forgetful_broker, source, sink, tmp_path / "chk", **job)
    assert first.returncode == 0, first.stderr[-4000:]
    wait_until_forgotten(clients, f"{prefix}-")
    more = produce_chunk(clients, source, "later", 700)
    wait_until_stable(clients, source)
    second = run_spark_job(forgetful_broker, source, sink, tmp_path / "chk", **job)
    assert second.returncode == 0, f"{kit_lines(second.stderr)}\n{second.stderr[-4000:]}"
    wait_until_stable(clients, sink)
    assert_exactly_once(read_committed_values(clients, sink), ids + more, copied_id)


def test_a_stored_checkpoint_whose_transactions_timed_out_and_expired_is_reported_lost_in_full(
        forgetful_broker: str, unique_name: Callable[[str], str], tmp_path: Path) -> None:
    clients = clients_for(forgetful_broker)
    source, sink, ids = topics_with_orders(clients, unique_name, RECORDS)
    prefix = unique_name("lost")
    flags = ("--transactional-id-prefix", prefix, "--transaction-timeout-ms", str(TXN_TIMEOUT_MS),
             "--checkpoint-timeout-ms", str(TXN_TIMEOUT_MS), "--restart-budget-ms", "0")
    crashed = run_spark_job(forgetful_broker, source, sink, tmp_path / "chk", "after_checkpoint_stored:exit@2",
                            batch_records=BATCH, extra=flags)
    assert crashed.returncode == KILLED, crashed.stderr[-4000:]
    # Down for longer than the transactions' timeout and the ids' expiration: the broker aborted
    # batch 1's transactions and then forgot their ids.
    wait_until_forgotten(clients, f"{prefix}-")
    restarted = run_spark_job(forgetful_broker, source, sink, tmp_path / "chk", batch_records=BATCH, extra=flags)
    lines = kit_lines(restarted.stderr)
    assert restarted.returncode not in (0, KILLED), restarted.stderr[-4000:]
    assert len(lines) == 1, lines or restarted.stderr[-4000:]
    # Batch 1 (the second, stored by the crashed run): every one of its transactions, with all its
    # records, in the one line; the totals are the sum of the transactions it lists.
    match = re.match(r"checkpoint 1: (\d+) transactions? with ([\d,]+) records? (?:was|were) lost", lines[0])
    assert match, lines[0]
    count, records = int(match.group(1)), int(match.group(2).replace(",", ""))
    listed = [int(n.replace(",", "")) for n in re.findall(r"\(([\d,]+) records?[;) ]", lines[0])]
    assert count >= 1 and len(listed) == count and sum(listed) == records > 0, lines[0]
    assert "a restart cannot bring them back" in lines[0]
    wait_until_stable(clients, sink)
    committed = read_committed_values(clients, sink)
    # Batch 0 was committed before the crash; nothing of batch 1 is visible, nothing is doubled.
    assert len(committed) == len(set(committed)) and len(committed) + records <= len(ids)
    assert set(copied_id(v) for v in committed) <= set(ids)
