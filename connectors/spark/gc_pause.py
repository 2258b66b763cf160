"""Python's cyclic garbage collector kept out of a Spark task's way.

A task allocates a few objects per record (librdkafka messages, timestamp tuples, column lists),
none of them in reference cycles, so reference counting frees them all. The cyclic collector
still runs every few hundred allocations and walks every young object each time, a large share
of the source's read loop (``bench/README.md``). Pausing it for the task (and collecting once at
the end) keeps memory the same and the time without it.

Spark's reused Python workers also run a full ``gc.collect()`` after every task
(``pyspark/daemon.py``), which walks every object of pyspark, pyarrow and the Kafka clients, for
each task. The first task to end in a worker therefore collects once and freezes what is left (``gc.freeze``): that long-lived heap is
never walked again, and the collection after each task only sees what the task left behind.
"""

from __future__ import annotations

import gc
import threading
from contextlib import contextmanager
from typing import Iterator

_lock = threading.Lock()
_depth = 0
_was_enabled = False
_frozen = False


@contextmanager
def gc_paused() -> Iterator[None]:
    """Cyclic GC off inside the block; nestable, and restored as it was when the outermost
    block ends."""
    global _depth, _was_enabled, _frozen
    with _lock:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _was_enabled:
                gc.enable()
                if not _frozen:
                    gc.collect()
                    gc.freeze()
                    _frozen = True
                else:
                    # Cycles created meanwhile (by other code in the process) are found now.
                    gc.collect(0)
