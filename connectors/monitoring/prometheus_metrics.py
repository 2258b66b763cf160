"""A query's status as Prometheus metrics (``kafka_eos_*``), through prometheus-client.

:class:`QueryStatusCollector` turns a :class:`~connectors.monitoring.status.QueryStatus` into metric
families; prometheus-client renders them (:func:`exposition`), for ``kafka-eos status
--prometheus`` (node-exporter's textfile collector, a push gateway) and for the metrics listener
of a running query (:mod:`connectors.monitoring.metrics_listener`). Every metric carries the
``query_id`` label, so one Prometheus tells queries apart.

Counters (``_total``) and the commit-duration histogram come from the running totals kept with
each checkpoint's statistics, so they grow over the query's whole life although only a few
checkpoints are retained; they restart from zero only if every retained checkpoint lacks
statistics (a state written by an older version), which Prometheus treats as a counter reset.
"""

from __future__ import annotations

from typing import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from connectors.monitoring.status import QueryStatus, attention_reasons
from twophase.checkpoint_statistics import COMMIT_DURATION_BUCKETS_S

PREFIX = "kafka_eos"
COMMIT_PHASES = ("prepare", "store", "end_txn", "mark", "sweep")


class QueryStatusCollector(Collector):
    def __init__(self, status: QueryStatus) -> None:
        self.status = status

    def collect(self) -> Iterator[Metric]:
        s = self.status
        q = [s.query_id]

        def gauge(name: str, doc: str, value: float | None, unit_labels: tuple[str, ...] = ()) -> GaugeMetricFamily:
            family = GaugeMetricFamily(f"{PREFIX}_{name}", doc, labels=["query_id", *unit_labels])
            if value is not None:
                family.add_metric(q, value)
            return family

        yield gauge("last_committed_batch", "Newest batch id in Spark's commit log (-1: none yet).",
                    -1 if s.last_committed_batch is None else s.last_committed_batch)
        yield gauge("latest_checkpoint_id", "Newest checkpoint stored in the sink's state (-1: none).",
                    -1 if s.latest_checkpoint_id is None else s.latest_checkpoint_id)
        yield gauge("pending_checkpoints", "1 when the newest checkpoint is stored but its commit is not "
                    "confirmed, else 0.", 0 if s.pending is None else 1)
        yield gauge("pending_checkpoint_age_seconds", "How long the pending checkpoint has been waiting for "
                    "its commit (0 when there is none).", 0 if s.pending is None else s.pending.age_ms / 1000)
        yield gauge("restart_budget_seconds", "eos.restartBudgetMs: a pending checkpoint older than this is "
                    "stale.", s.restart_budget_ms / 1000)
        yield gauge("transaction_timeout_seconds", "eos.transactionTimeoutMs of the sink's transactions.",
                    s.transaction_timeout_ms / 1000)
        yield gauge("open_transactions", "Open (Ongoing) transactions of the sink's transactional ids.",
                    len(s.open_transactions))
        yield gauge("oldest_open_transaction_age_seconds", "Age of the sink's oldest open transaction (0: none).",
                    max((t.age_ms for t in s.open_transactions), default=0) / 1000)
        ages = GaugeMetricFamily(f"{PREFIX}_open_transaction_age_seconds", "Age of each open transaction.",
                                 labels=["query_id", "transactional_id"])
        for txn in s.open_transactions:
            ages.add_metric([s.query_id, txn.transactional_id], txn.age_ms / 1000)
        yield ages
        lag = GaugeMetricFamily(f"{PREFIX}_source_lag_records", "Last stable offset minus the offset of "
                                "Spark's last committed batch, per source partition.",
                                labels=["query_id", "topic", "partition"])
        for p in s.lag:
            lag.add_metric([s.query_id, p.topic, str(p.partition)], p.lag)
        yield lag
        yield gauge("attention_reasons", "Reasons `kafka-eos status` exits 1 (0 when healthy).",
                    len(attention_reasons(s)))
        yield from self._from_statistics()

    def _from_statistics(self) -> Iterator[Metric]:
        s = self.status
        newest = s.newest_statistics
        if newest is None:
            return
        q = [s.query_id]
        totals = newest.totals
        for name, doc, value in (
            ("checkpoints_committed", "Checkpoints committed (by their batch or by a recovery).", totals.checkpoints),
            ("records_committed", "Records committed (lost ones are counted apart).", totals.records),
            ("transactions_committed", "Transactions committed (lost ones are counted apart).", totals.transactions),
            ("recoveries", "Checkpoints a restarted driver had to commit after a crash.", totals.recoveries),
            ("lingering_transactions_aborted", "Transactions of crashed tasks aborted by the sweep.",
             totals.lingering_aborted),
            ("transactions_lost", "Transactions that could not be committed (their records are lost), every "
             "one of each checkpoint.", totals.lost_transactions),
            ("records_lost", "Records of the transactions that could not be committed; a restart cannot "
             "recover them: re-produce them from the source.", totals.lost_records),
        ):
            counter = CounterMetricFamily(f"{PREFIX}_{name}", doc, labels=["query_id"])
            counter.add_metric(q, value)
            yield counter
        histogram = HistogramMetricFamily(f"{PREFIX}_commit_duration_seconds",
                                          "Duration of a checkpoint's commit, from the batch's end to its "
                                          "confirmation (prepare, store, EndTxn, mark, sweep).",
                                          labels=["query_id"])
        buckets = [(_bound(b), float(n)) for b, n in zip(COMMIT_DURATION_BUCKETS_S, totals.commit_duration_buckets)]
        histogram.add_metric(q, buckets + [("+Inf", float(totals.commit_count))],
                             sum_value=totals.commit_seconds_sum)
        yield histogram
        last = GaugeMetricFamily(f"{PREFIX}_last_commit_phase_duration_seconds",
                                 "The newest checkpoint's commit, by phase.", labels=["query_id", "phase"])
        if newest.timings is not None:
            t = newest.timings
            for phase, ms in zip(COMMIT_PHASES, (t.prepare_ms, t.store_ms, t.commit_ms, t.mark_ms, t.sweep_ms)):
                last.add_metric([s.query_id, phase], ms / 1000)
        yield last
        stamp = GaugeMetricFamily(f"{PREFIX}_last_commit_timestamp_seconds",
                                  "When the newest checkpoint's statistics were written (Unix time).",
                                  labels=["query_id"])
        stamp.add_metric(q, newest.written_at_ms / 1000)
        yield stamp
        records = GaugeMetricFamily(f"{PREFIX}_last_checkpoint_records", "Records of the newest checkpoint.",
                                    labels=["query_id"])
        records.add_metric(q, newest.records)
        yield records
        age = GaugeMetricFamily(f"{PREFIX}_last_commit_oldest_transaction_age_seconds",
                                "How long the newest checkpoint's oldest transaction was open when its commit "
                                "was confirmed.", labels=["query_id"])
        if newest.oldest_transaction_age_ms is not None:
            age.add_metric(q, newest.oldest_transaction_age_ms / 1000)
        yield age


def _bound(seconds: float) -> str:
    return repr(float(seconds))


def registry_for(status: QueryStatus) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(QueryStatusCollector(status))
    return registry


def exposition(status: QueryStatus) -> str:
    """The Prometheus text format of ``status``'s metrics."""
    return generate_latest(registry_for(status)).decode("utf-8")
