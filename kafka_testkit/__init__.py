"""Test doubles and test-server launchers for pyspark-kafka-eos's tests and benchmarks: in a
checkout only, never in the wheel (pyproject's ``packages.find``); pytest finds it through its
``pythonpath``. The kit's embedded cluster and its Kafka launchers are product parts and live in
the product (``connectors/simulated_kafka/``, ``connectors/servers/``), as
do the replay's jobs and task failures (``connectors/tools/jobs/``); this kit builds on them.

- ``secured_broker``: a local node (``connectors.servers.local_broker``) with SASL_SSL
  (SCRAM-SHA-512; optionally OAUTHBEARER and TLS client certificates) and ACLs that deny by
  default; ``acl_admin`` creates its users and grants ACLs; ``token_endpoint`` issues OAuth tokens
  for its OAUTHBEARER listener; ``java_truststore``: a JKS truststore and Java-named settings for it;
- ``node_bouncer``: restarts the nodes of a local 3-node cluster one at a time;
- ``spark_cluster``: a Spark standalone cluster (Master and Workers) from the installed pyspark;
  ``spark_connect_server``: a Spark Connect server from it;
- ``spark_kafka_connector``: Spark's own Kafka connector jars from Maven Central;
- ``job_python``: the Python the tests run Spark jobs on (the version matrix's venv of the wheel
  alone), and the check that a healthy job's console is quiet; ``version_matrix``: CI's runs of
  the wheel on each pyspark line;
- ``s3_server``: drives an external S3 server launcher (such as Debian's radosgw);
- ``kafka_conformance``: checks of Kafka's semantics, run on a real broker and on the embedded
  cluster; ``topic_records``: produce and read a topic's records in tests;
- ``memory_system``, ``memory_storage``, ``crashing_storage``, ``state_scenarios``: in-memory
  participants and state storages, and storages that crash at a chosen write.
"""
