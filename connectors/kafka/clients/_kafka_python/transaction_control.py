"""The transaction control plane: ending and finding transactions that other processes opened.

librdkafka can only end the transaction of the producer handle that opened it. The two-phase
commit needs more: the driver commits (EndTxn) transactions that executor processes opened and
then left, and recovery finds (ListTransactions, DescribeTransactions) transactions a crash left
open. kafka-python's protocol classes and admin plumbing provide both; what of its plumbing is
private is reached through ``admin_internals.py`` alone, checked against the pinned release. This
module, ``admin_internals.py`` and ``settings.py`` (the connection settings) are the only ones that
import kafka-python;
everything it raises is a type of ``connectors/kafka/kafka_errors.py``, through the one table of ``clients/error_table.py``.

Nothing here retries: each call makes one attempt and maps what went wrong. Retrying transient
errors (``RetriableKafkaError``) is the caller's decision (for EndTxn, the loop of
``twophase/transaction_endings.py``).

Connection settings are the librdkafka-style client configuration, translated by
``kafka_python_settings.kafka_python_config``; a setting kafka-python cannot honour is refused when
the control plane is made, naming the option. A refused request (an ACL missing) raises
``KafkaAuthorizationError`` naming the principal, the operation and the transactional id prefix.
ListTransactions answers only with ids the principal may DESCRIBE, silently; ``describe_transaction``
tells a missing DESCRIBE apart from "nothing to find".
"""

from __future__ import annotations

import logging
import math
import threading
from collections import defaultdict, deque
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Mapping, Sequence

import kafka.errors as kafka_errors
from kafka.admin import KafkaAdminClient
from kafka.protocol.producer.transaction import EndTxnRequest

from connectors.kafka.authorization import Denied, transactional_id_error
from connectors.kafka.clients import OpenTransaction, ProducerIdentity, TopicPartition, TransactionListing
from connectors.kafka.clients.error_table import kafka_error
from connectors.kafka.kafka_errors import (
    BrokerUnavailableError,
    KafkaAuthorizationError,
    KafkaConnectorError,
    RetriableKafkaError,
)
from connectors.kafka.clients._kafka_python import admin_internals
from connectors.kafka.clients._kafka_python.settings import kafka_python_config

log = logging.getLogger(__name__)

# Kafka error codes (org.apache.kafka.common.protocol.Errors) this module acts on; what each one
# becomes is the table's (``clients/error_table.py``).
_NONE = 0
_COORDINATOR_NOT_AVAILABLE = 15
_NOT_COORDINATOR = 16
# The coordinator cached for the transactional id is wrong (moved, or its broker is gone).
_STALE_COORDINATOR_CODES = frozenset({_NOT_COORDINATOR, _COORDINATOR_NOT_AVAILABLE})

_CONNECTION_ERRORS: tuple[type[Exception], ...] = (
    kafka_errors.KafkaConnectionError,
    kafka_errors.NodeNotReadyError,
    kafka_errors.KafkaTimeoutError,
    kafka_errors.RequestTimedOutError,
    kafka_errors.MetadataEmptyBrokerList,
    kafka_errors.BrokerNotAvailableError,
    kafka_errors.NetworkExceptionError,
    # A node named by the metadata (a listing's broker, a coordinator) left the metadata before it
    # was reached: it went down, and another node takes over its partitions.
    kafka_errors.UnknownBrokerIdError,
)

# Only Ongoing transactions hold the LSO back for good. PrepareCommit/PrepareAbort ones have been
# decided already: the coordinator is writing their markers and finishes them without any client
# action, so there is nothing for the caller to commit or abort.
_OPEN_STATES = ("Ongoing",)

def _error_name(code: int) -> str:
    error_type = kafka_errors.for_code(code)
    return getattr(error_type, "message", None) or f"ERROR_{code}"


def _map_error_code(code: int, context: str, denied: Denied | None = None) -> KafkaConnectorError:
    name = _error_name(code)
    return kafka_error(code, name, f"{context}: {name} (error {code})",
                       retriable=getattr(kafka_errors.for_code(code), "retriable", False), denied=denied)


def _map_exception(exc: Exception, context: str, denied: Denied | None = None) -> KafkaConnectorError:
    if isinstance(exc, KafkaConnectorError):
        return exc
    if isinstance(exc, kafka_errors.BrokerResponseError) and exc.errno not in (None, _NONE):
        mapped = _map_error_code(int(exc.errno), context, denied)
    elif isinstance(exc, _CONNECTION_ERRORS):
        mapped = BrokerUnavailableError(f"{context}: {exc}", code=type(exc).__name__)
    elif isinstance(exc, kafka_errors.KafkaError) and exc.retriable:
        mapped = RetriableKafkaError(f"{context}: {exc}", code=type(exc).__name__)
    else:
        mapped = KafkaConnectorError(f"{context}: {exc}")
    mapped.__cause__ = exc
    return mapped


#: EndTxn's version: 4, the classic protocol, which the transactions' own producer (librdkafka, which
#: does not speak transaction version 2) uses too. Version 5 is transaction version 2's: a 4.x
#: broker refuses it with UNSUPPORTED_VERSION while the cluster has not finalised
#: transaction.version=2 (all through a rolling upgrade from 3.9: integration_tests/
#: test_rolling_upgrade.py), and where it is finalised it bumps the epoch at every EndTxn, which
#: the producer does not expect. Every broker since 2.7 takes version 4 (3.9's newest).
_END_TXN_VERSION = 4

#: The most connections to each coordinator one EndTxn round uses, each a client of its own. A
#: broker works through one connection's requests one at a time (it reads the next request only
#: after answering the last, to keep their order), and an EndTxn is answered only once its
#: transaction-log record is replicated. So on one connection per coordinator, a round of 1,000
#: transactions on a 3-node cluster at replication 3 took 7.3 s here, a replication wait per
#: transaction; on 32 it took 1.2-1.5 s once the clients were made (integration_tests/
#: test_commit_round_at_scale.py; bench/commit_round.py).
ROUND_CONNECTIONS = 32
#: A round gets one more connection per coordinator for each this many transactions: a small
#: round (a few write tasks) keeps one, and makes no client it would not use.
TRANSACTIONS_PER_CONNECTION = 32


class KafkaPythonTransactionControl:
    """``TransactionControl`` over kafka-python's admin client.

    The admin client connects on first use, not at construction, so that building the clients of
    a job never fails just because a broker is briefly down.
    """

    def __init__(self, bootstrap_servers: str, config: Mapping[str, Any] | None = None) -> None:
        self.bootstrap_servers = bootstrap_servers
        # The librdkafka-style settings, for the principal that messages of refused requests name.
        self._settings = dict(config or {})
        self._admin_config = kafka_python_config(self._settings)
        self._admin_config.setdefault("client_id", "kafka-eos-txn-control")
        # kafka-python waits 30 s for a first broker by default; fail sooner and let the caller's
        # retry policy decide.
        self._admin_config.setdefault("bootstrap_timeout_ms", 10000)
        #: The clients by lane, each with its own connections; lane 0 serves every call, the
        #: others only the lanes of a large EndTxn round (``end_txn_round``), made when one needs them.
        self._admins: dict[int, KafkaAdminClient] = {}
        #: The threads that run a large round's lanes side by side, kept from round to round like
        #: the lanes' clients: starting 32 threads for each round cost the driver up to 0.4 s of a
        #: 1,000-transaction round where the brokers share its cores (bench/commit_round.py).
        self._round_workers: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._closed = False

    def _client(self, lane: int = 0) -> KafkaAdminClient:
        with self._lock:
            if self._closed:
                raise KafkaConnectorError("transaction control: used after close()")
            admin = self._admins.get(lane)
        if admin is not None:
            return admin
        # Made outside the lock: a client bootstraps (connects, reads the metadata), and the lanes
        # of a round make theirs side by side.
        config = dict(self._admin_config)
        if lane:
            config["client_id"] = f"{config['client_id']}-{lane}"
        try:
            made = KafkaAdminClient(bootstrap_servers=self.bootstrap_servers, **config)
        except Exception as exc:
            raise _map_exception(exc, f"transaction control: connect to {self.bootstrap_servers}") from exc
        with self._lock:
            admin = None if self._closed else self._admins.setdefault(lane, made)
        if admin is not made:
            made.close()  # another thread made this lane's client first, or the control was closed
        if admin is None:
            raise KafkaConnectorError("transaction control: used after close()")
        return admin

    def _forget_coordinator(self, admin: KafkaAdminClient, transactional_id: str) -> None:
        # kafka-python caches coordinators and has no public way to drop one; without this, every
        # later call would go to the broker that said NOT_COORDINATOR. Every client of a round's
        # lanes forgets it: the retry of a transaction may go out on another lane.
        with self._lock:
            admins = list(self._admins.values()) or [admin]
        for client in admins:
            admin_internals.forget_transaction_coordinator(client, transactional_id)

    # -- EndTxn --------------------------------------------------------------------------------

    def end_txn(
        self, transactional_id: str, identity: ProducerIdentity, commit: bool
    ) -> None:
        error = self.end_txn_round([(transactional_id, identity)], commit)[transactional_id]
        if error is not None:
            raise error

    def end_txn_round(
        self, transactions: Sequence[tuple[str, ProducerIdentity]], commit: bool
    ) -> dict[str, KafkaConnectorError | None]:
        """EndTxn for every transaction, sent together: one batched FindCoordinator, then the
        EndTxn requests pipelined on each coordinator's connection, as many in flight as the client
        allows (``_send_end_txns``). A large round is dealt over several clients, so several
        connections to each coordinator, which the broker serves side by side
        (``ROUND_CONNECTIONS``); each transaction's outcome is its own either way."""
        if not transactions:
            return {}
        lanes = min(ROUND_CONNECTIONS, math.ceil(len(transactions) / TRANSACTIONS_PER_CONNECTION))
        if lanes <= 1:
            return self._end_txns_on(0, list(transactions), commit)
        dealt = [list(transactions[lane::lanes]) for lane in range(lanes)]
        rounds = list(self._workers().map(lambda lane: self._end_txns_on(lane, dealt[lane], commit), range(lanes)))
        results: dict[str, KafkaConnectorError | None] = {}
        for outcome in rounds:
            results.update(outcome)
        return {transactional_id: results[transactional_id] for transactional_id, _ in transactions}

    def _workers(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._closed:
                raise KafkaConnectorError("transaction control: used after close()")
            if self._round_workers is None:
                self._round_workers = ThreadPoolExecutor(ROUND_CONNECTIONS, thread_name_prefix="kafka-eos-end-txn")
            return self._round_workers

    def _end_txns_on(
        self, lane: int, transactions: list[tuple[str, ProducerIdentity]], commit: bool
    ) -> dict[str, KafkaConnectorError | None]:
        """EndTxn for ``transactions`` on the client of ``lane``; each id's outcome, mapped."""
        action = "commit" if commit else "abort"
        admin = self._client(lane)  # no client, no round: raised, as for a round on one client
        try:
            outcomes = admin_internals.run(admin, self._send_end_txns, admin, transactions, commit)
        except Exception as exc:
            # The round failed as a whole (no connection, no coordinator): every id gets the error.
            results: dict[str, KafkaConnectorError | None] = {}
            for transactional_id, identity in transactions:
                self._forget_if_stale(admin, transactional_id, exc)
                context = self._context(action, transactional_id, identity)
                results[transactional_id] = _map_exception(exc, context, self._denied(transactional_id, context))
            return results
        results = {}
        for (transactional_id, identity), (version, outcome) in zip(transactions, outcomes):
            context = self._context(action, transactional_id, identity)
            if isinstance(outcome, Exception):
                self._forget_if_stale(admin, transactional_id, outcome)
                results[transactional_id] = _map_exception(outcome, context, self._denied(transactional_id, context))
                continue
            code = int(outcome.error_code)
            if code != _NONE:
                if code in _STALE_COORDINATOR_CODES:
                    self._forget_coordinator(admin, transactional_id)
                error = _map_error_code(code, context, self._denied(transactional_id, context))
                log.warning("%s failed: %s", context, error)
                results[transactional_id] = error
                continue
            log.info("%s done (EndTxn v%s; epoch now %s)", context, version,
                     getattr(outcome, "producer_epoch", "unknown"))
            results[transactional_id] = None
        return results

    def _denied(self, transactional_id: str, doing: str, operations: tuple[str, ...] = ("WRITE", "DESCRIBE"),
                ) -> Denied:
        def denied(error_name: str) -> KafkaAuthorizationError:
            return transactional_id_error(self._settings, transactional_id, error_name=error_name, doing=doing,
                                          operations=operations)
        return denied

    @staticmethod
    def _context(action: str, transactional_id: str, identity: ProducerIdentity) -> str:
        return (f"EndTxn {action} of {transactional_id!r} (producer id {identity.producer_id}, "
                f"epoch {identity.producer_epoch})")

    def _forget_if_stale(self, admin: KafkaAdminClient, transactional_id: str, exc: Exception) -> None:
        if isinstance(exc, _CONNECTION_ERRORS) or isinstance(
            exc, (kafka_errors.NotCoordinatorError, kafka_errors.CoordinatorNotAvailableError)
        ):
            self._forget_coordinator(admin, transactional_id)

    @staticmethod
    async def _send_end_txns(
        admin: KafkaAdminClient,
        transactions: list[tuple[str, ProducerIdentity]],
        commit: bool,
    ) -> list[tuple[int | None, Any]]:
        """Every EndTxn, pipelined within the client's in-flight limit per coordinator.

        kafka-python refuses a request past ``max_in_flight_requests_per_connection`` at once
        (``NodeNotReadyError``, the error of an unreachable broker) instead of queueing it, so a
        batch of 200 transactions sent at once had most refused and retried as broker failures.
        Here each coordinator has a queue: a request is sent while the connection has room by the
        client's own count (which the client's other requests, a metadata refresh, count in too),
        else it waits for the oldest of this round's requests to that coordinator to be answered
        (a connection answers in order). Nothing waits in a queue longer than the requests ahead
        of it take, and a full queue is no failure."""
        coordinators = await admin_internals.transaction_coordinators(
            admin, [transactional_id for transactional_id, _ in transactions])
        limit = max(1, admin_internals.in_flight_limit(admin))
        outcomes: list[tuple[int | None, Any] | None] = [None] * len(transactions)
        in_flight: dict[int, deque[tuple[int, EndTxnRequest, Any]]] = defaultdict(deque)

        async def answered(node: int) -> None:
            index, request, future = in_flight[node].popleft()
            try:
                outcomes[index] = (request.API_VERSION, await future)
            except Exception as exc:
                outcomes[index] = (None, exc)

        for index, (transactional_id, identity) in enumerate(transactions):
            node = coordinators[transactional_id]
            window = in_flight[node]
            while window and (len(window) >= limit or admin_internals.in_flight_count(admin, node) >= limit):
                await answered(node)
            request = EndTxnRequest(
                transactional_id=transactional_id,
                producer_id=identity.producer_id,
                producer_epoch=identity.producer_epoch,
                committed=commit,
                version=_END_TXN_VERSION,
            )
            window.append((index, request, admin_internals.send(admin, request, node)))
        for node, window in in_flight.items():
            while window:
                await answered(node)
        return [outcome for outcome in outcomes if outcome is not None]

    # -- ListTransactions + DescribeTransactions -----------------------------------------------

    def list_transactions(self, transactional_id_prefix: str) -> list[TransactionListing]:
        """Every transactional id with the prefix, in any state (ListTransactions without a state
        filter; the prefix is matched here, as in ``list_open_transactions``)."""
        context = f"list transactions with prefix {transactional_id_prefix!r}"
        admin = self._client()
        try:
            by_broker = admin.list_transactions()
        except Exception as exc:
            raise _map_exception(exc, context) from exc
        found = {
            listing.transactional_id: TransactionListing(
                listing.transactional_id, listing.producer_id, getattr(listing.state, "value", str(listing.state)))
            for listings in by_broker.values()
            for listing in listings
            if listing.transactional_id.startswith(transactional_id_prefix)
        }
        return [found[transactional_id] for transactional_id in sorted(found)]

    def list_open_transactions(self, transactional_id_prefix: str) -> list[OpenTransaction]:
        """Ongoing transactions whose id starts with the prefix.

        The prefix is matched here rather than by the broker: ListTransactions'
        ``transactional_id_pattern`` needs Kafka 4.1+. Transactions in PrepareCommit/PrepareAbort
        are left out: they are already decided and complete without any client action."""
        context = f"list open transactions with prefix {transactional_id_prefix!r}"
        admin = self._client()
        try:
            by_broker = admin.list_transactions(state_filters=list(_OPEN_STATES))
        except Exception as exc:
            raise _map_exception(exc, context) from exc
        ids = sorted(
            {
                listing.transactional_id
                for listings in by_broker.values()
                for listing in listings
                if listing.transactional_id.startswith(transactional_id_prefix)
            }
        )
        if not ids:
            return []
        try:
            descriptions = admin.describe_transactions(ids)
        except Exception as exc:
            if isinstance(exc, (kafka_errors.NotCoordinatorError, *_CONNECTION_ERRORS)):
                for transactional_id in ids:
                    self._forget_coordinator(admin, transactional_id)
            raise _map_exception(exc, f"{context}: describe {ids}",
                                 self._denied(ids[0], f"describing {ids}", ("DESCRIBE",))) from exc
        result = []
        for transactional_id in ids:
            description = descriptions.get(transactional_id)
            # Between the listing and the description the transaction may have ended.
            if description is None or description.state.value not in _OPEN_STATES:
                continue
            result.append(
                OpenTransaction(
                    transactional_id=transactional_id,
                    producer_id=description.producer_id,
                    producer_epoch=description.producer_epoch,
                    state=description.state.value,
                    start_time_ms=description.transaction_start_time_ms,
                    timeout_ms=description.transaction_timeout_ms,
                    partitions=frozenset(
                        TopicPartition(tp.topic, tp.partition)
                        for tp in description.topic_partitions
                    ),
                )
            )
        log.debug("%s: %d open", context, len(result))
        return result

    def describe_transaction(self, transactional_id: str) -> TransactionListing | None:
        """The broker's state of one transactional id (DescribeTransactions), None if it has none.

        Raises KafkaAuthorizationError when the principal may not DESCRIBE the id: the one way to
        tell that ListTransactions, which leaves such ids out without a word, cannot see them."""
        context = f"describe transaction {transactional_id!r}"
        admin = self._client()
        try:
            descriptions = admin.describe_transactions([transactional_id])
        except kafka_errors.TransactionalIdNotFoundError:
            return None
        except Exception as exc:
            if isinstance(exc, (kafka_errors.NotCoordinatorError, *_CONNECTION_ERRORS)):
                self._forget_coordinator(admin, transactional_id)
            raise _map_exception(exc, context, self._denied(
                transactional_id, "describing it, as the sweep of lingering transactions (ListTransactions, "
                "DescribeTransactions) does", ("DESCRIBE",))) from exc
        description = descriptions.get(transactional_id)
        if description is None:
            return None
        return TransactionListing(transactional_id, description.producer_id, description.state.value)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            admins, self._admins = list(self._admins.values()), {}
            workers, self._round_workers = self._round_workers, None
        if workers is not None:
            workers.shutdown(wait=True)
        for admin in admins:
            admin.close()
