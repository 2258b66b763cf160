"""The scratch SQLite database ``kafka-eos verify`` streams topics into, and the one way an anomaly
is read out of it.

Every check of the verifier, a copy's (``verify.py``) and a stateful shape's (``shape_checks.py``),
is SQL over tables of this store: a topic's records go in as rows, one batch at a time as they are
read, and the anomalies come out of GROUP BYs, indexed joins and window functions. Nothing grows in
Python with the number of records or keys: SQLite's page cache is capped (:data:`CACHE_KIB`), what
does not fit is in the file (sorts spill to temporary files), so memory stays bounded however many
millions of records or keys there are, and ids are kept exactly (no hash that could hide a loss).
"""

from __future__ import annotations

import logging
import sqlite3
import tempfile
import time
from contextlib import contextmanager
from itertools import islice
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

from connectors.tools.anomaly import Anomaly
from connectors.tools.tool_errors import UsageError

log = logging.getLogger(__name__)

#: SQLite's page cache, in KiB (it is also what a sort keeps in memory before it spills to disk):
#: what bounds the store's memory however large the topics are.
CACHE_KIB = 64 * 1024
#: Where each record came from and what identifies it: the first columns of every table of records.
RECORD_COLUMNS = ("id BLOB NOT NULL", "part INTEGER NOT NULL", "off INTEGER NOT NULL")
#: Rows handed to SQLite in one statement when a caller loads an iterable (``add_all``).
LOAD_BATCH = 10_000
#: LAG/LEAD, which the order checks need, came with SQLite 3.25.
_WINDOW_FUNCTIONS = (3, 25, 0)
_SCRATCH_PREFIX = "kafka-eos-verify-"


def show_id(raw: bytes) -> str:
    """An id or key as a report shows it: its UTF-8 text, else ``0x`` and its hex."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return "0x" + raw.hex()


class RecordStore:
    """One verification's SQLite file: tables of records (:data:`RECORD_COLUMNS` and any more), the
    tables the checks derive from them, and :meth:`anomaly` to read one anomaly out."""

    def __init__(self, path: Path) -> None:
        if sqlite3.sqlite_version_info < _WINDOW_FUNCTIONS:
            raise UsageError(f"kafka-eos verify needs SQLite 3.25 or newer (window functions); this Python's "
                             f"sqlite3 module has {sqlite3.sqlite_version}")
        self.path = path
        self.db = sqlite3.connect(path, isolation_level=None)
        # A scratch database: nothing to protect against a crash, so no journal and no fsync; sorts
        # and temporary tables go to files, so their size is not memory.
        for pragma in ("journal_mode = OFF", "synchronous = OFF", f"cache_size = -{CACHE_KIB}", "temp_store = FILE"):
            self.db.execute(f"PRAGMA {pragma}")
        self._inserts: dict[str, str] = {}

    @classmethod
    @contextmanager
    def scratch(cls, work_dir: str | Path | None = None) -> Iterator["RecordStore"]:
        """A store in a new temporary directory (under ``work_dir`` if given), deleted afterwards."""
        with tempfile.TemporaryDirectory(prefix=_SCRATCH_PREFIX, dir=work_dir) as directory:
            store = cls(Path(directory) / "verify.sqlite")
            log.debug("verify store at %s", store.path)
            try:
                yield store
            finally:
                store.close()

    def create(self, table: str, extra_columns: Sequence[str] = ()) -> None:
        """A table of records: :data:`RECORD_COLUMNS`, then ``extra_columns`` (SQL column definitions)."""
        columns = (*RECORD_COLUMNS, *extra_columns)
        self.db.execute(f"CREATE TABLE {table} ({', '.join(columns)})")
        self._inserts[table] = f"INSERT INTO {table} VALUES ({', '.join('?' * len(columns))})"

    def clear(self, table: str) -> None:
        self.db.execute(f"DELETE FROM {table}")

    def add(self, table: str, rows: Sequence[tuple[Any, ...]]) -> None:
        """One batch of rows, in one transaction (what makes loading millions of rows fast)."""
        self.db.execute("BEGIN")
        self.db.executemany(self._inserts[table], rows)
        self.db.execute("COMMIT")

    def add_all(self, table: str, rows: Iterable[tuple[Any, ...]]) -> None:
        """Every row of ``rows``, :data:`LOAD_BATCH` at a time: the iterable is never held whole."""
        iterator = iter(rows)
        while batch := list(islice(iterator, LOAD_BATCH)):
            self.add(table, batch)

    def execute(self, sql: str, parameters: Sequence[Any] = ()) -> sqlite3.Cursor:
        started = time.monotonic()
        cursor = self.db.execute(sql, parameters)
        log.debug("%.2f s: %s", time.monotonic() - started, sql)
        return cursor

    def scalar(self, sql: str, parameters: Sequence[Any] = ()) -> int:
        """The integer a one-value query returns (0 for NULL: SUM over no rows)."""
        (value,) = self.db.execute(sql, parameters).fetchone()
        return int(value or 0)

    def anomaly(
        self,
        name: str,
        jepsen_name: str | None,
        detection: str,
        found: str,
        *,
        records: str,
        sample: str,
        show: Callable[..., dict[str, Any]],
        order: str,
        max_samples: int,
        parameters: Sequence[Any] = (),
    ) -> Anomaly:
        """One anomaly read out of the store, the same way for every check: ``found`` is the
        ``FROM ... WHERE`` of its rows, one per id (or key, or (key, window)) it affects; ``records``
        the SQL expression of how many records a row affects; ``sample`` the columns that ``show``
        turns into one sample, for the first ``max_samples`` rows by ``order``; ``parameters`` are
        those of ``found``."""
        started = time.monotonic()
        ids, affected = self.db.execute(f"SELECT COUNT(*), SUM({records}) {found}", parameters).fetchone()
        samples = ([show(*row) for row in self.db.execute(f"SELECT {sample} {found} ORDER BY {order} LIMIT ?",
                                                           (*parameters, max_samples))]
                   if ids and max_samples else [])
        log.info("%s: %d ids, %d records (%.1f s)", name, ids, affected or 0, time.monotonic() - started)
        return Anomaly(name, jepsen_name, int(ids), int(affected or 0), detection, samples)

    def close(self) -> None:
        self.db.close()
