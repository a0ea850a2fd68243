"""Opening a profile database: version checks, migration of older files, tables as DataFrames."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pandas as pd

from ..errors import DlscopeError, InputError
from .schema import SCHEMA_VERSION

#: from-version -> SQL that upgrades a database to from-version + 1.
MIGRATIONS: dict[int, str] = {}
#: from-version -> why no migration exists: its stored figures cannot be corrected from the file alone
NOT_MIGRATABLE = {
    1: "its per-op figures (attribution, op nodes, groups, iterations) were computed by an older, wrong model; "
       "import the trace again",
}


def schema_version(conn: sqlite3.Connection, path: Path) -> int:
    try:
        row = conn.execute("SELECT value FROM dlscope_meta WHERE key = 'schema_version'").fetchone()
    except sqlite3.DatabaseError:
        raise InputError(path, "is not a dlscope profile database (no dlscope_meta table)") from None
    if row is None:
        raise InputError(path, "is not a dlscope profile database (no schema version)")
    return int(row[0])


def connect(path: str | Path, *, readonly: bool = True) -> sqlite3.Connection:
    """Open a dlscope database; refuse newer ones; migrate older ones when opened for writing."""
    path = Path(path)
    if not path.exists():
        raise InputError(path, "no such profile database")
    if path.is_dir():
        raise InputError(path, "is a directory, not a profile database")
    mode = "ro" if readonly else "rw"
    try:
        conn = sqlite3.connect(f"file:{path.resolve()}?mode={mode}", uri=True)
        version = schema_version(conn, path)
    except sqlite3.DatabaseError as e:
        raise InputError(path, f"is not a readable SQLite database ({e})") from None
    if version > SCHEMA_VERSION:
        conn.close()
        raise InputError(path, f"was written by a newer dlscope (schema {version}; this dlscope reads up to "
                               f"{SCHEMA_VERSION}); upgrade dlscope to open it")
    if version < SCHEMA_VERSION:
        if version in NOT_MIGRATABLE:
            conn.close()
            raise InputError(path, f"has the older schema {version}: {NOT_MIGRATABLE[version]}")
        if readonly:
            conn.close()
            raise InputError(path, f"has the older schema {version}; run `dlscope aggregate` on it once to "
                                   f"migrate it to schema {SCHEMA_VERSION}")
        migrate(conn, version)
    return conn


def migrate(conn: sqlite3.Connection, version: int) -> None:
    with conn:
        while version < SCHEMA_VERSION:
            conn.executescript(MIGRATIONS[version])
            version += 1
            conn.execute("UPDATE dlscope_meta SET value = ? WHERE key = 'schema_version'", (str(version),))


def read_table(conn: sqlite3.Connection, table: str, where: str = "", params: tuple = ()) -> pd.DataFrame:
    """A whole table (optionally filtered by a fixed, code-written WHERE clause) as a DataFrame."""
    return pd.read_sql_query(f'SELECT * FROM "{table}" {where}', conn, params=params)


def meta(conn: sqlite3.Connection) -> dict[str, str]:
    return dict(conn.execute("SELECT key, value FROM dlscope_meta").fetchall())


def latest_agg_id(conn: sqlite3.Connection) -> int | None:
    row = conn.execute("SELECT MAX(agg_id) FROM aggregations").fetchone()
    return row[0]


def resolve_agg_id(conn: sqlite3.Connection, agg_id: int | None) -> int:
    if agg_id is None:
        agg_id = latest_agg_id(conn)
        if agg_id is None:
            raise DlscopeError("the database has no aggregation; run `dlscope aggregate` first")
        return agg_id
    if conn.execute("SELECT 1 FROM aggregations WHERE agg_id = ?", (agg_id,)).fetchone() is None:
        raise DlscopeError(f"no aggregation {agg_id} in the database")
    return agg_id
