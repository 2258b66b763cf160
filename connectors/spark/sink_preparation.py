"""The driver's preparation of the ``kafka-eos`` sink, before any task of a query writes: check
the input schema and the broker's limits, refuse a lost or foreign state, and run the
coordinator's recovery."""

from __future__ import annotations

import threading

from pyspark.sql.types import StructType

from connectors.kafka.clients.factory import clients_for
from connectors.kafka.sink.guardrails import check_output_topic, check_sink
from connectors.spark.driver_committer import SparkCommitProtocol
from connectors.spark.options import SinkOptions
from connectors.spark.schema import check_sink_schema
from connectors.spark.state_guard import guard_sink_state

_guardrails_checked: set[tuple[object, ...]] = set()
_guardrails_lock = threading.Lock()


def check_guardrails(options: SinkOptions) -> None:
    """The broker checks of the sink (``guardrails.py``: its topic exists, then the transactional
    checks), once per process and configuration. A call made while another runs them waits for its
    outcome; a failed check is made again."""
    config = options.config
    key = (config.bootstrap_servers, config.topic, config.delivery_guarantee, config.transactional_id_prefix,
           config.transaction_timeout_ms, config.checkpoint_timeout_ms + config.restart_budget_ms, tuple(sorted(config.client_config.items())))
    with _guardrails_lock:
        if key not in _guardrails_checked:
            clients = clients_for(config.bootstrap_servers, config.client_config)
            check_output_topic(config, clients)
            check_sink(config, clients)
            _guardrails_checked.add(key)


def prepare_sink(options: SinkOptions, schema: StructType, *, abort_lingering: bool = False) -> int:
    """Returns the newest committed checkpoint id (-1 if none), which write tasks compare their
    batch id against. ``abort_lingering`` also ends the open transactions a crashed run left
    (after committing a stored checkpoint's), so that no task's InitProducerId waits for the
    brokers to abort them; only where no task of this run can have written yet."""
    check_sink_schema(schema, options.config.topic)
    check_guardrails(options)
    config = options.config
    if not config.exactly_once:
        return -1
    guard_sink_state(options)
    protocol = SparkCommitProtocol(options)
    try:
        # Spark calls streamWriter() (so this) also in the process that commits or aborts a batch,
        # after its tasks wrote: sweeping there would abort the batch's own transactions.
        return protocol.recover(abort_lingering=abort_lingering)
    finally:
        protocol.close()
