"""The exactly-once enrichment pipeline on PySpark Structured Streaming, Kafka to Kafka: the job
``kafka-eos demo`` and ``replay --engine spark`` run. It ships in the package, so that an
installed kit runs it from anywhere; read it in ``connectors/tools/jobs/spark_pipeline.py``
(its query is ``build_query``). This script runs it, taking the same arguments:

    python examples/spark_pipeline.py --bootstrap localhost:9092 --input orders --output enriched \\
        --checkpoint-dir /tmp/chk --bounded

which is ``python -m connectors.tools.jobs.spark_pipeline ...`` (``--help`` lists every option).
"""

import sys

from connectors.tools.jobs.spark_pipeline import main

if __name__ == "__main__":
    sys.exit(main())
