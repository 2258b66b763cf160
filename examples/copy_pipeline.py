"""Exactly-once Kafka -> Kafka copy without Spark: the Kafka source, a transform and the
two-phase-commit Kafka sinks, checkpointed by the protocol core's coordinator in one Python
process. It is the job of ``kafka-eos replay --engine inprocess`` and ships in the package; read
it in ``connectors/tools/jobs/copy_pipeline.py``. This script runs it, taking the same arguments:

    python examples/copy_pipeline.py --bootstrap localhost:9092 --input in --output out \\
        --checkpoint-dir /tmp/chk --bounded

which is ``python -m connectors.tools.jobs.copy_pipeline ...`` (``--help`` lists every option).
"""

import sys

from connectors.tools.jobs.copy_pipeline import main

if __name__ == "__main__":
    sys.exit(main())
