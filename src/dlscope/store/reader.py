"""Opening a profile database: the one check of a file (version, kind), the current aggregation, tables as
DataFrames."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pandas as pd
import pyarrow as pa

from ..errors import DlscopeError, InputError
from .schema import SCHEMA_VERSION

#: Older schemas and why they are not migrated: their stored figures cannot be corrected from the file alone.
#: (No migration exists yet: when a later schema can upgrade an older file in place, its SQL goes with
#: ``connect``.)
NOT_MIGRATABLE = {
    1: "its per-op figures (attribution, op nodes, groups, iterations) were computed by an older, wrong model; "
       "import the trace again",
    2: "its kernels lack the occupancy and wave figures (and Kineto's recorded occupancy); import the trace again",
}


def inspect(path: str | Path) -> tuple[dict[str, str], set[str], int]:
    """(dlscope_meta, table names, schema version) of a profile database, or an InputError saying what is
    wrong with it: missing, a folder, not SQLite, not dlscope's, written by a newer dlscope, or an older
    schema that cannot be migrated. The one check every opener (CLI, API, reports, viewer) goes through."""
    path = Path(path)
    if not path.exists():
        raise InputError(path, "no such profile database (create one with `dlscope import TRACE -o run.sqlite`)")
    if path.is_dir():
        raise InputError(path, "is a directory, not a profile database")
    _roll_back_a_killed_write(path)
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
            if "dlscope_meta" not in tables:
                raise InputError(path, "is not a dlscope profile database (no dlscope_meta table)")
            meta = {str(k): "" if v is None else str(v) for k, v in conn.execute("SELECT key, value FROM dlscope_meta")}
        finally:
            conn.close()
    except sqlite3.DatabaseError as e:
        raise InputError(path, f"is not a readable SQLite database ({e})") from None
    try:
        version = int(meta.get("schema_version", ""))
    except ValueError:
        raise InputError(path, f"is not a dlscope profile database (schema version "
                               f"{meta.get('schema_version')!r})") from None
    if version > SCHEMA_VERSION:
        raise InputError(path, f"was written by a newer dlscope (schema {version}; this dlscope reads up to "
                               f"{SCHEMA_VERSION}); upgrade dlscope to open it")
    if version < SCHEMA_VERSION:
        why = NOT_MIGRATABLE.get(version, "no migration to this dlscope's schema exists; import the trace again")
        raise InputError(path, f"has the older schema {version}: {why}")
    return meta, tables, version


def _roll_back_a_killed_write(path: Path) -> None:
    """A writer killed mid-transaction (``dlscope aggregate``) leaves a hot rollback journal, which a
    read-only connection cannot roll back ("attempt to write a readonly database"): open the file for writing
    once so SQLite restores the last committed state, and remove a journal left before it held anything. A
    journal of a writer still running is not hot (its lock says so) and is left alone."""
    journal = Path(f"{path}-journal")
    try:
        journal.stat()  # none: nothing to do
        if not os.access(path, os.W_OK):
            return
    except OSError:
        return
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=rw", uri=True, timeout=0.1, isolation_level=None)
        try:
            conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()  # rolls a hot journal back
            if journal.exists():  # not hot (the writer died before its header was valid): stale, remove it
                conn.execute("BEGIN IMMEDIATE")  # no other writer can be using it while this lock is held
                try:
                    journal.unlink(missing_ok=True)
                finally:
                    conn.execute("ROLLBACK")
        finally:
            conn.close()
    except (sqlite3.Error, OSError):
        pass  # busy or not a database: the read-only open below says what is wrong, if anything


def connect(path: str | Path, *, readonly: bool = True, any_thread: bool = False) -> sqlite3.Connection:
    """Open a dlscope database after :func:`inspect`'s checks (read-only unless asked). ``any_thread``: for a
    reader that a server's thread pool resumes on other threads (a streamed download), one at a time."""
    path = Path(path)
    inspect(path)
    return sqlite3.connect(f"{path.resolve().as_uri()}?mode={'ro' if readonly else 'rw'}", uri=True,
                           check_same_thread=not any_thread)


def arrow_table(conn: sqlite3.Connection, sql: str, params: tuple, schema: pa.Schema) -> pa.Table:
    """A query's rows as an Arrow table of ``schema`` (its columns in order), read through ADBC from the file
    behind ``conn``: no Python object per value (sqlite3's rows cost about four times as much, pandas.read_sql
    ten). An in-memory database is read through ``conn``."""
    path = next((r[2] for r in conn.execute("PRAGMA database_list") if r[1] == "main"), "")
    if not path:
        rows = conn.execute(sql, params).fetchall()
        return pa.table([pa.array([r[i] for r in rows], f.type) for i, f in enumerate(schema)], schema=schema)
    from adbc_driver_sqlite import dbapi

    with dbapi.connect(f"{Path(path).resolve().as_uri()}?mode=ro") as adbc, adbc.cursor() as cur:
        cur.adbc_statement.set_options(**{"adbc.sqlite.query.batch_rows": str(1 << 20)})
        cur.execute(sql, params)
        table = cur.fetch_arrow_table()
    return pa.table([c if c.type == f.type else c.cast(f.type) for c, f in zip(table.columns, schema)], schema=schema)


def read_table(conn: sqlite3.Connection, table: str, where: str = "", params: tuple = ()) -> pd.DataFrame:
    """A whole table (optionally filtered by a fixed, code-written WHERE clause) as a DataFrame."""
    return pd.read_sql_query(f'SELECT * FROM "{table}" {where}', conn, params=params)


def meta(conn: sqlite3.Connection) -> dict[str, str]:
    return dict(conn.execute("SELECT key, value FROM dlscope_meta").fetchall())


#: The current aggregation: what the summary, the API, reports, compare and the viewer show by default. Of
#: the newest aggregation run (the aggregations one import or `dlscope aggregate` wrote together, one per
#: rank), the one of the lowest rank.
CURRENT_AGGREGATION = ("SELECT agg_id FROM aggregations WHERE COALESCE(run_id, agg_id) = "
                       "(SELECT MAX(COALESCE(run_id, agg_id)) FROM aggregations) ORDER BY rank, agg_id DESC LIMIT 1")


def current_agg_id(conn: sqlite3.Connection) -> int | None:
    row = conn.execute(CURRENT_AGGREGATION).fetchone()
    return row[0] if row else None


def check_timed(conn: sqlite3.Connection, path: str | Path, doing: str) -> None:
    """Refuse ``doing`` (aggregate, report) on a database made from a cProfile output: it holds a Python call tree
    and nothing timed, so every figure would be a zero that was never measured."""
    formats = {r[0] for r in conn.execute("SELECT DISTINCT format FROM sources")}
    if formats == {"cprofile"}:
        raise DlscopeError(f"{path}: holds a cProfile output's Python call tree only (no timeline, ops or GPU work): "
                           f"nothing to {doing}; see it with `dlscope summary` or `dlscope view`")


def resolve_agg_id(conn: sqlite3.Connection, agg_id: int | None) -> int:
    """The aggregation asked for, else the current one; a clear error when there is none."""
    if agg_id is None:
        agg_id = current_agg_id(conn)
        if agg_id is None:
            raise DlscopeError("the database has no aggregation; run `dlscope aggregate` first")
        return agg_id
    if conn.execute("SELECT 1 FROM aggregations WHERE agg_id = ?", (agg_id,)).fetchone() is None:
        raise DlscopeError(f"no aggregation {agg_id} in the database")
    return agg_id
