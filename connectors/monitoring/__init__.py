"""Watching a running query: its status read from Spark's checkpoint and the sink's state
(``status``), the same as Prometheus metrics (``prometheus_metrics``) and as a plot
(``status_plot``), and a StreamingQueryListener that serves them from the driver
(``metrics_listener``). The ``kafka-eos status`` command only parses its arguments and calls these.

It sits above the Spark adapter and the Kafka connector, which never import it.
"""
