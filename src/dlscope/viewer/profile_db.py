"""Open a dlscope profile database for viewing: checked, read-only, one connection per thread, time-limited.

DLProf Viewer's troubleshooting cases are the store's (``store.reader.inspect``): a missing file, a file that is not
a dlscope database, a newer one or an older one without a migration (refused).
"""

from __future__ import annotations

import sqlite3
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from dlscope.store import reader

#: SQLite calls the progress handler every this many VM instructions (~0.1 ms of work, as Datasette measured).
PROGRESS_STEPS = 1000


class QueryTimeout(Exception):
    """A query ran past its time limit; the caller answers with a hint instead of hanging."""


def _ro_uri(path: Path) -> str:
    return path.resolve().as_uri() + "?mode=ro"


def check_database(path: str | Path) -> tuple[dict[str, str], set[str]]:
    """Return (dlscope_meta, table names) of ``path`` or raise InputError saying what is wrong with it (the
    store's one check: missing, not a database, newer, or an older schema that cannot be migrated)."""
    meta, tables, _ = reader.inspect(path)
    return meta, tables


class ProfileDB:
    """One profile database as the viewer sees it: metadata, aggregations and time-limited read queries."""

    def __init__(self, path: str | Path, key: str = "0"):
        self.path = Path(path).resolve()
        self.key = key
        self._local = threading.local()
        self._generation = 0
        self.load()

    def load(self) -> None:
        """(Re)read metadata; called at start and after a re-aggregation rewrote the file."""
        meta, tables, version = reader.inspect(self.path)
        self.meta = meta
        self.tables = tables
        self.schema_version: int | None = version  # None: a DerivedDB, built in memory
        self.notice = None
        if '"source_format": "cprofile"' in (meta.get("extra_json") or ""):
            self.notice = ("this is a cProfile output: a Python call tree only, with no timeline, ops or GPU work "
                           "(nothing else was measured); see Python Call Stacks")
        self.profile_name = meta.get("profile_name") or self.path.stem
        self._generation += 1
        self.counts: dict = {}

    # -- connections -------------------------------------------------------------------------------------
    def connection(self) -> sqlite3.Connection:
        """This thread's read-only connection (reopened after ``load`` so a rewritten file is seen)."""
        cached = getattr(self._local, "conn", None)
        if cached is not None and cached[0] == self._generation:
            return cached[1]
        if cached is not None:
            cached[1].close()
        conn = self.open_readonly()
        self._local.conn = (self._generation, conn)
        return conn

    def open_readonly(self) -> sqlite3.Connection:
        conn = sqlite3.connect(_ro_uri(self.path), uri=True, check_same_thread=False)
        conn.execute("PRAGMA query_only = 1")
        conn.execute("PRAGMA mmap_size = 1073741824")
        conn.execute("PRAGMA cache_size = -32768")
        conn.execute("PRAGMA temp_store = MEMORY")
        return conn

    def execute(self, sql: str, params=(), limit_ms: float = 2000) -> list[tuple]:
        """Run one read query under a time limit; raise QueryTimeout past it."""
        conn = self.connection()
        with time_limit(conn, limit_ms):
            return conn.execute(sql, params).fetchall()

    def execute_one(self, sql: str, params=(), limit_ms: float = 2000):
        rows = self.execute(sql, params, limit_ms)
        return rows[0] if rows else None

    def has(self, *tables: str) -> bool:
        return all(t in self.tables for t in tables)

    def columns(self, table: str) -> set[str]:
        """The columns of a table (an older database lacks some of today's)."""
        key = ("columns", table)
        if key not in self.counts:
            self.counts[key] = {r[1] for r in self.execute(f'PRAGMA table_info("{table}")')}
        return self.counts[key]

    # -- aggregations ------------------------------------------------------------------------------------
    def aggregations(self) -> list[dict]:
        if not self.has("aggregations"):
            return []
        conn = self.connection()
        cur = conn.execute("SELECT * FROM aggregations ORDER BY agg_id")
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row)) for row in cur.fetchall()]

    def current_agg_id(self) -> int | None:
        """What is shown by default: the store's one rule (``reader.CURRENT_AGGREGATION``)."""
        return reader.current_agg_id(self.connection()) if self.has("aggregations") else None


@contextmanager
def time_limit(conn: sqlite3.Connection, limit_ms: float):
    """Abort the statement once ``limit_ms`` has passed (SQLite progress handler), like Datasette does."""
    deadline = time.perf_counter() + limit_ms / 1000.0

    def handler():
        return 1 if time.perf_counter() > deadline else 0

    conn.set_progress_handler(handler, PROGRESS_STEPS)
    try:
        yield
    except sqlite3.OperationalError as exc:
        if "interrupted" in str(exc):
            raise QueryTimeout(f"the query took longer than {limit_ms:.0f} ms; narrow it with a filter") from None
        raise
    finally:
        conn.set_progress_handler(None, PROGRESS_STEPS)
