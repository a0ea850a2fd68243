"""Open a dlscope profile database for viewing: checked, read-only, one connection per thread, time-limited.

DLProf Viewer's troubleshooting cases live here: a missing file, a file that is not a dlscope database, an
older database (opened read-only with a notice), a newer one (refused).
"""

from __future__ import annotations

import sqlite3
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from dlscope.errors import InputError
from dlscope.store.schema import SCHEMA_VERSION

#: SQLite calls the progress handler every this many VM instructions (~0.1 ms of work, as Datasette measured).
PROGRESS_STEPS = 1000


class QueryTimeout(Exception):
    """A query ran past its time limit; the caller answers with a hint instead of hanging."""


def _ro_uri(path: Path) -> str:
    return path.resolve().as_uri() + "?mode=ro"


def check_database(path: str | Path) -> tuple[dict[str, str], set[str]]:
    """Return (dlscope_meta, table names) of ``path`` or raise InputError saying what is wrong with it."""
    path = Path(path)
    if not path.exists():
        raise InputError(path, "database not found (create one with `dlscope import TRACE -o run.sqlite`)")
    if path.is_dir():
        raise InputError(path, "is a directory, not a profile database")
    try:
        conn = sqlite3.connect(_ro_uri(path), uri=True)
        try:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table','view')")}
            if "dlscope_meta" not in tables:
                raise InputError(path, "not a dlscope profile database (no dlscope_meta table)")
            meta = {str(k): "" if v is None else str(v) for k, v in conn.execute("SELECT key, value FROM dlscope_meta")}
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        raise InputError(path, f"not a SQLite database ({exc})") from None
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
        meta, tables = check_database(self.path)
        raw_version = meta.get("schema_version", "")
        try:
            version = int(raw_version)
        except ValueError:
            raise InputError(self.path, f"dlscope_meta has no valid schema_version ({raw_version!r})") from None
        if version > SCHEMA_VERSION:
            raise InputError(self.path, f"written by a newer dlscope (schema v{version}); this viewer reads up to "
                                        f"v{SCHEMA_VERSION}: upgrade dlscope (pip install -U dlscope)")
        self.meta = meta
        self.tables = tables
        self.schema_version = version
        self.notice = None
        if version < SCHEMA_VERSION:
            self.notice = (f"This database was written by an older dlscope (schema v{version}, current "
                           f"v{SCHEMA_VERSION}). It is shown read-only as it is; views whose tables are missing "
                           f"stay empty. Re-import the trace to get every view.")
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

    # -- aggregations ------------------------------------------------------------------------------------
    def aggregations(self) -> list[dict]:
        if not self.has("aggregations"):
            return []
        conn = self.connection()
        cur = conn.execute("SELECT * FROM aggregations ORDER BY agg_id")
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row)) for row in cur.fetchall()]


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
