"""The two-phase-commit Kafka sink, by role, as Flink's connector lays it out: the public roles
here (the ``writer`` of a checkpoint's records, the ``committer`` of its transactions, the
``committable`` handle stored between the two, the sink's ``config`` and ``guardrails``, and
``kafka_sink``, the in-process participant that wires them), their implementations in
``internal`` (the producer pool, the transactional-id naming strategy, the abort strategy)."""
