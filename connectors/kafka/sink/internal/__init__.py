"""What the sink's roles are built from, not used outside ``connectors.kafka.sink`` and the Spark
adapter's sink: the producer pool, the naming strategy of transactional ids, the abort strategy
of lingering transactions."""
