"""Publishes the ``kafka_eos_*`` metrics of a running query after each of its micro-batches.

What Spark 4 lets Python publish (read in pyspark 4.3's ``sql/datasource.py`` and
``sql/streaming/listener.py``, and in the JVM classes behind them):

- A Python data source cannot add figures to ``StreamingQueryProgress``: ``DataSourceStreamReader``
  and ``DataSourceStreamWriter`` have no metrics methods, and their JVM wrappers
  (``PythonMicroBatchStream``, ``PythonStreamingWrite``) implement neither ``ReportsSourceMetrics``
  nor ``ReportsSinkMetrics``; ``PythonCustomMetric`` carries only Spark's own Python-runner
  figures. The one figure a Python source can add is ``reportLatestOffset``, which the kit's
  source implements: each progress's ``sources[].latestOffset`` is the input's last stable
  offsets, so lag is ``latestOffset - endOffset`` in Spark's own progress.
- ``df.observe`` adds ``observedMetrics``, but computed from the batch's rows, not from the sink's
  commit, which happens on the driver after the rows are written.
- A Python ``StreamingQueryListener`` gets every progress, on a classic session (it runs in the
  driver's Python process, called back through py4j) and on Spark Connect (the listener is
  pickled and runs in a Python process of the Connect server, on the driver's host). It cannot
  change the progress, but it can publish elsewhere.

So the one way that works on both: this listener. On each progress of its query it reads the
query's status from its files (the statistics kept with each checkpoint: no broker needed) and,
with ``bootstrap``, the broker (open transactions, lag), and pushes the metrics to a Prometheus
Pushgateway (``push_to_gateway``, grouped by ``job`` and ``query_id``) and/or writes them for
node-exporter's textfile collector (``write_to_textfile``, an atomic rename). It runs after the
batch, off the commit path; a failure to publish is logged and never reaches the query.

Only strings are kept in the listener, so it pickles for Spark Connect.
"""

from __future__ import annotations

import importlib.util
import logging
from typing import Any, Mapping

from pyspark.sql.streaming.listener import (
    QueryIdleEvent,
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
    StreamingQueryListener,
)
from twophase.errors import InvalidValueError, MissingExtraError

log = logging.getLogger(__name__)


class KafkaEosMetricsListener(StreamingQueryListener):
    def __init__(self, checkpoint_location: str, *, pushgateway: str | None = None, textfile: str | None = None,
                 state_dir: str | None = None, bootstrap: str | None = None,
                 client_config: Mapping[str, str] | None = None, job: str = "kafka-eos") -> None:
        """``checkpoint_location``/``state_dir``: as given to the query's sink. ``pushgateway``:
        ``host:port`` (or a URL) of a Prometheus Pushgateway; ``textfile``: a ``.prom`` path in
        node-exporter's textfile directory; at least one. ``bootstrap`` (and ``client_config``):
        also ask the broker for the sink's open transactions and the source's lag on each batch."""
        if not pushgateway and not textfile:
            raise InvalidValueError("KafkaEosMetricsListener needs pushgateway='host:port' or textfile='/path/x.prom'")
        if importlib.util.find_spec("prometheus_client") is None:
            raise MissingExtraError("KafkaEosMetricsListener publishes with prometheus-client, which is not installed: "
                                    "pip install 'pyspark-kafka-eos[tools]'")
        self.checkpoint_location = checkpoint_location
        self.pushgateway = pushgateway
        self.textfile = textfile
        self.state_dir = state_dir
        self.bootstrap = bootstrap
        self.client_config = dict(client_config or {})
        self.job = job
        self._query_id: str | None = None

    def _watched_query_id(self) -> str:
        if self._query_id is None:
            from connectors.spark.query_checkpoint import read_query_checkpoint

            self._query_id = read_query_checkpoint(self.checkpoint_location).query_id
        return self._query_id

    def onQueryStarted(self, event: QueryStartedEvent) -> None:
        pass

    def onQueryProgress(self, event: QueryProgressEvent) -> None:
        try:
            if str(event.progress.id) != self._watched_query_id():
                return  # another query of the session
            self.publish()
        except Exception as exc:  # noqa: BLE001 - monitoring must never fail the query
            log.warning("kafka-eos metrics for %s were not published: %r", self.checkpoint_location, exc)

    def onQueryIdle(self, event: QueryIdleEvent) -> None:
        pass

    def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:
        pass

    def publish(self) -> None:
        """Read the query's status now and publish its metrics."""
        from prometheus_client import push_to_gateway, write_to_textfile

        from connectors.monitoring.prometheus_metrics import registry_for
        from connectors.monitoring.status import read_status

        clients: Any = None
        if self.bootstrap:
            from connectors.kafka.clients.factory import clients_for

            clients = clients_for(self.bootstrap, self.client_config)
        status = read_status(self.checkpoint_location, clients, state_dir=self.state_dir)
        registry = registry_for(status)
        if self.textfile:
            write_to_textfile(self.textfile, registry)
        if self.pushgateway:
            push_to_gateway(self.pushgateway, job=self.job, grouping_key={"query_id": status.query_id},
                            registry=registry)
