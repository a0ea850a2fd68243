"""Writing the profile database: bulk Arrow ingest into a temporary file, renamed into place at the end."""

from __future__ import annotations

import datetime as dt
import json
import os
import sqlite3
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import numpy as np
import pandas as pd
import pyarrow as pa

from .. import __version__
from ..errors import DlscopeError
from .schema import DDL, INDEXES, RAW_TABLES, SCHEMA_VERSION


def table_columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')]


def _column_values(frame: pd.DataFrame, col: str) -> list:
    """One column as a Python list for sqlite3: bools as 0/1, NaN/None as NULL, numpy scalars unboxed."""
    if col not in frame:
        return [None] * len(frame)
    values = frame[col]
    if values.dtype == bool:
        return values.to_numpy(np.int64).tolist()
    if values.dtype.kind in "iu":
        return values.to_numpy().tolist()
    missing = values.isna()
    if values.dtype.kind == "f":
        out = values.to_numpy().tolist()
        return [None if m else v for v, m in zip(out, missing.to_numpy())] if missing.any() else out
    out = values.tolist()
    if missing.any():
        out = [None if m else v for v, m in zip(out, missing.to_numpy())]
    return [v.item() if isinstance(v, np.generic) else v for v in out] if values.dtype == object else out


def insert_frame(conn: sqlite3.Connection, table: str, frame: pd.DataFrame) -> None:
    """Bulk-insert a frame in the table's column order, values bound as parameters."""
    if frame.empty:
        return
    columns = table_columns(conn, table)
    cols = ", ".join(f'"{c}"' for c in columns)
    marks = ", ".join("?" * len(columns))
    conn.executemany(f'INSERT INTO "{table}" ({cols}) VALUES ({marks})',
                     zip(*(_column_values(frame, c) for c in columns)))


class RawWriter(threading.Thread):
    """Creates the file, loads the raw tables (ADBC) and builds the indexes, beside the caller's work.

    The bulk of the writing runs in C without the GIL, so on a second core it costs the import almost
    no time. It is the only code touching the file until :meth:`NewDatabase.connect` joins it.
    """

    def __init__(self, path: str, raw_tables: dict[str, pd.DataFrame] | None):
        super().__init__(name="dlscope-raw-writer", daemon=True)
        self.path, self.raw_tables, self.error = path, raw_tables, None

    def run(self) -> None:
        try:
            conn = sqlite3.connect(self.path)
            conn.executescript(DDL)
            conn.close()
            if self.raw_tables is not None:
                ingest_raw(self.path, self.raw_tables)
            conn = sqlite3.connect(self.path)
            try:
                conn.execute("PRAGMA cache_size=-262144")  # 256 MiB: index builds sort in memory
                conn.executescript(INDEXES)
            finally:
                conn.close()
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread by wait()
            self.error = e
        finally:
            self.raw_tables = None

    def wait(self) -> None:
        self.join()
        if self.error is not None:
            raise self.error


class NewDatabase:
    """A database being written: the raw tables and indexes in the background, the rest on ``connect()``."""

    def __init__(self, path: str, raw_tables: dict[str, pd.DataFrame] | None):
        self.path, self.conn = path, None
        self.raw_writer = RawWriter(path, raw_tables)
        self.raw_writer.start()

    def connect(self) -> sqlite3.Connection:
        """Wait for the raw tables and indexes, then open the file for the remaining (small) writes."""
        if self.conn is None:
            self.raw_writer.wait()
            self.conn = sqlite3.connect(self.path)
            self.conn.execute("PRAGMA journal_mode=OFF")  # the file is renamed into place only when complete
            self.conn.execute("PRAGMA synchronous=OFF")
            self.conn.execute("BEGIN")
        return self.conn


@contextmanager
def atomic_database(path: Path, force: bool, raw_tables: dict[str, pd.DataFrame] | None = None
                    ) -> Iterator[NewDatabase]:
    """A fresh database at a temporary path next to ``path``, holding ``raw_tables`` when given;
    renamed into place only on success."""
    path = Path(path)
    if path.exists() and not force:
        raise DlscopeError(f"{path}: already exists (use --force to overwrite)")
    if not path.parent.exists():
        raise DlscopeError(f"{path}: folder {path.parent} does not exist")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    os.unlink(tmp)
    db = NewDatabase(tmp, raw_tables)
    try:
        yield db
        conn = db.connect()
        conn.commit()
        conn.close()
        os.replace(tmp, path)
    except BaseException:
        db.raw_writer.join()
        if db.conn is not None:
            db.conn.close()
        for leftover in (tmp, tmp + "-journal", tmp + "-wal", tmp + "-shm"):
            if os.path.exists(leftover):
                os.unlink(leftover)
        raise


def write_meta(conn: sqlite3.Connection, profile_name: str, extra: dict) -> None:
    meta = {"schema_version": str(SCHEMA_VERSION), "dlscope_version": __version__, "profile_name": profile_name,
            "created_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "extra_json": json.dumps(extra, default=str)}
    conn.executemany("INSERT OR REPLACE INTO dlscope_meta (key, value) VALUES (?, ?)", list(meta.items()))


def write_sources(conn: sqlite3.Connection, sources: list[dict]) -> None:
    rows = [(i, s.get("source_path", ""), s.get("source_format", ""), s.get("rank", 0), s.get("world_size", 1),
             s.get("hostname", ""), json.dumps(s, default=str)) for i, s in enumerate(sources)]
    conn.executemany("INSERT INTO sources VALUES (?, ?, ?, ?, ?, ?, ?)", rows)


def split_ops(ops: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per-node strings once (op_nodes), per-call numbers (op_instances)."""
    return ops.drop_duplicates("node_id"), ops


def ingest_raw(path: str, tables: dict[str, pd.DataFrame]) -> None:
    """Bulk-load the raw tables into a closed database file through ADBC (Arrow in, no per-row Python).

    ADBC links its own copy of SQLite; two SQLite libraries must never have one file open at the same
    time in one process (their POSIX locks and WAL maps do not know of each other), so this runs while
    no sqlite3 connection to ``path`` is open.
    """
    from adbc_driver_sqlite import dbapi

    tables = dict(tables)
    tables["op_nodes"], tables["op_instances"] = split_ops(tables.pop("ops"))
    probe = sqlite3.connect(path)
    try:
        columns_of = {name: table_columns(probe, name) for name in RAW_TABLES}
    finally:
        probe.close()
    with dbapi.connect(path, autocommit=True) as adbc:  # pragmas must be set outside a transaction
        cursor = adbc.cursor()
        for statement in ("PRAGMA journal_mode=OFF", "PRAGMA synchronous=OFF", "PRAGMA cache_size=-262144",
                          "BEGIN"):  # no journal, no fsync: the file is renamed into place only when complete
            cursor.execute(statement)
            cursor.fetchall()
        for name in RAW_TABLES:
            frame = tables[name]
            if frame.empty:
                continue
            columns = [c for c in columns_of[name] if c in frame.columns]
            cursor.adbc_ingest(name, pa.Table.from_pandas(frame[columns], preserve_index=False), mode="append")
        cursor.execute("COMMIT")
        cursor.fetchall()
        cursor.close()


def write_aggregation(conn: sqlite3.Connection, agg) -> int:
    """Store one :class:`~dlscope.analyze.aggregation.Aggregation`; returns its agg_id."""
    agg_id = (conn.execute("SELECT COALESCE(MAX(agg_id), 0) + 1 FROM aggregations").fetchone()[0])
    row = {**agg.row, "agg_id": agg_id,
           "created_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}
    insert_frame(conn, "aggregations", pd.DataFrame([row]))
    for table, frame in (("agg_gpus", agg.gpus), ("agg_iterations", agg.iterations), ("agg_ops", agg.ops),
                         ("agg_op_types", agg.op_types), ("agg_kernels", agg.kernels),
                         ("agg_op_kernels", agg.op_kernels), ("agg_groups", agg.groups)):
        insert_frame(conn, table, frame.assign(agg_id=agg_id))
    return agg_id
