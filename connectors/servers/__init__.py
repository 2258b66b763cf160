"""What starts or finds a Kafka for ``kafka-eos demo``, ``replay``, ``broker`` and the tests: local
brokers and 3-node clusters from ``KAFKA_HOME`` or Maven Central (``local_broker``, ``local_cluster``),
the child processes they run as (``child_process``), and how a bootstrap address is chosen
(``broker_discovery``); their errors are in ``server_errors``."""
