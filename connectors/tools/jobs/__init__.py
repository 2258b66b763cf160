"""The jobs ``kafka-eos demo`` and ``replay`` run, shipped in the package so that an installed kit
runs them from anywhere (``examples/`` in a checkout holds short scripts that run these):

- ``spark_pipeline``: the exactly-once enrichment pipeline on PySpark Structured Streaming, Kafka
  to Kafka (``--engine spark``, the default), also the integration tests' and the benchmarks' job;
- ``copy_pipeline``: the same guarantee without Spark, the protocol core driving the Kafka source
  and sink in one process (``--engine inprocess``);
- ``job_hold``: the end-of-input hold both take (``--hold-until``), so that the replay's timed
  faults find them running;
- ``task_failures``: the seeded executor task failures of the replay's ``task_failures`` scenario,
  which the Spark job puts in front of its sink (imported by the executors too).

Each runs as ``python <this folder>/<job>.py ...`` (the replay's ``{jobs}`` placeholder) or
``python -m connectors.tools.jobs.<job> ...``. They import the kit's base install only: no module
of the ``tools`` extra.
"""
