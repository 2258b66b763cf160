"""Test doubles and test-server launchers for pyspark-kafka-eos, kept out of the product packages.

- ``fake_cluster``: an embedded Kafka cluster in one SQLite file, faithful to the transactional
  semantics the protocol relies on; selected with a ``fake-kafka://<file>`` bootstrap address
  (registered as a client implementation through an entry point, see ``pyproject.toml``);
- ``local_broker``: starts a real Kafka node on loopback ports, from an unpacked distribution
  (``KAFKA_HOME``) or from the official jars on Maven Central (``kafka_distribution``, resolved
  with ``mvn`` by ``maven_artifacts``); ``local_cluster``: three such nodes;
- ``secured_broker``: the same with SASL_SSL (SCRAM-SHA-512; optionally OAUTHBEARER and TLS client
  certificates) and ACLs that deny by default; ``acl_admin`` creates its users and grants ACLs;
  ``token_endpoint`` issues OAuth tokens for its OAUTHBEARER listener;
- ``spark_cluster``: a Spark standalone cluster (Master and Workers) from the installed pyspark;
  ``spark_connect_server``: a Spark Connect server from it;
- ``spark_kafka_connector``: Spark's own Kafka connector jars from Maven Central;
- ``s3_server``: drives an external S3 server launcher (such as Debian's radosgw).
"""
