"""The end-of-input hold of the kit's example jobs (``--hold-until FILE``).

``kafka-eos replay`` times two of its faults, ``kill -9`` and the broker restart, by the clock. A
bounded job on a fast machine could finish before such a fault comes, and the fault would then
hit no running job. So for those runs the replay passes a hold file that does not exist yet: the
job processes its input as usual, then, instead of exiting, waits until the file exists. The
replay creates it only once the fault has been delivered (after the broker is back; never for a
run it kills). A timed fault therefore always lands on a live job, by construction, however fast
or slow the machine is. Runs without a timed fault get a file that already exists, and exit as
soon as their input is processed.

While it waits, the job appends a ``held`` event to its metrics file, so the replay can tell a
kill that came mid-processing from one that came after the last commit (both are valid faults;
the report says which).
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from connectors.tools.job_metrics import append_event

log = logging.getLogger(__name__)

_POLL_S = 0.05


def hold_until(hold_file: str | os.PathLike[str] | None, metrics_file: str | os.PathLike[str] | None = None) -> None:
    """Return once ``hold_file`` exists (at once when it is None or already there); while
    waiting, the job has processed its input and is idle."""
    if hold_file is None:
        return
    path = Path(hold_file)
    if path.exists():
        return
    log.info("input processed; holding until %s exists", path)
    if metrics_file is not None:
        append_event(metrics_file, {"event": "held", "time_ms": int(time.time() * 1000)})
    while not path.exists():
        time.sleep(_POLL_S)
    log.info("hold released")
