"""What starts a real Kafka on this machine for ``kafka-eos demo``, ``replay`` and ``broker`` (the
``tools`` extra), when the user names no cluster:

- ``local_broker``: one KRaft node on loopback ports (``LocalKafkaBroker``), from
  ``kafka_distribution``: an unpacked distribution (``KAFKA_HOME``), or the official jars from
  Maven Central, resolved with the user's ``mvn`` by ``maven_artifacts`` into the kit's cache;
- ``local_cluster``: three such nodes (``replay --cluster``, scenario ``rolling_restart``);
- ``errors``: their errors, which the tools take as "this source of a broker failed".

The tools find them through the entry-point group ``pyspark_kafka_eos.kafka_launchers``
(``connectors/tools/broker.py``), where another launcher may be registered too. The test kit
(``kafka_testkit/``, in a checkout only) builds its secured broker and its Spark servers on them.
"""
