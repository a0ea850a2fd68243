"""Writing the profile database: bulk Arrow ingest into a temporary file, renamed into place at the end."""

from __future__ import annotations

import ctypes
import ctypes.util
import datetime as dt
import functools
import itertools
import json
import os
import sqlite3
import sys
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import numpy as np
import pandas as pd
import pyarrow as pa

from ..version import __version__
from ..errors import DlscopeError
from ..nanoseconds import round_ns
from .schema import DDL, INDEXES, PAGE_SIZE, RAW_TABLES, SCHEMA_VERSION


def table_columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')]


def _column_values(frame: pd.DataFrame, col: str) -> list:
    """One column as a Python list for sqlite3: bools as 0/1, NaN/None as NULL, numpy scalars unboxed."""
    if col not in frame:
        return [None] * len(frame)
    values = frame[col]
    if values.dtype == bool:
        return values.to_numpy(np.int64).tolist()
    if values.dtype.kind in "iu" and not values.hasnans:  # a nullable Int64 with NA takes the object path
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


def write_raw_file(path: str, tables: dict[str, pd.DataFrame], create: bool = True, indexes: bool = True) -> None:
    """Create the database file (``create``), bulk-load raw tables, then build every index (``indexes``).

    ``tables`` uses the model's names; ``ops`` is stored as op_nodes + op_instances. A job imported rank by
    rank appends each rank's tables and builds the indexes once, after the last.
    """
    conn = sqlite3.connect(path)
    try:
        if create:
            conn.execute(f"PRAGMA page_size={PAGE_SIZE}")
            conn.executescript(DDL)
        columns_of = {name: table_columns(conn, name) for name in RAW_TABLES}
    finally:
        conn.close()
    if tables:
        with _ArrowIngest(path, columns_of) as ingest:
            for name, frame in tables.items():
                ingest.add(name, frame)
    if indexes:
        conn = sqlite3.connect(path)
        try:
            conn.execute("PRAGMA cache_size=-262144")  # 256 MiB: index builds sort in memory
            conn.executescript(INDEXES)
        finally:
            conn.close()


def release_free_memory() -> None:
    """Hand the allocators' free pages back to the system before a fork.

    A forked child shares the parent's pages copy-on-write, free ones included: when the parent then
    reuses a free page, it gets a private copy and the child keeps the old one, so every free page at the
    fork could end up counted twice. glibc's ``malloc_trim`` releases them (hundreds of MB after a large
    analysis); elsewhere this does nothing.
    """
    pa.default_memory_pool().release_unused()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.lru_cache(maxsize=1)
def _malloc_trim():
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None


class ForkedRawWriter:
    """:func:`write_raw_file` in a forked process, beside the caller's work (aggregations, rules).

    The child sees the tables copy-on-write, so nothing is copied or pickled, and unlike a thread it never
    waits for the GIL: on a 1M-event trace the writing took 1.4 s this way against 1.8 s in a thread,
    and the caller's work ran 25% faster (bench/README.md). The child runs only this function and leaves
    with ``os._exit``; a failure comes back as one line through a pipe.
    """

    def __init__(self, path: str, tables: dict[str, pd.DataFrame], label: str, **how: bool):
        self.label = label
        release_free_memory()
        read, write = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # the child
            os.close(read)
            code = 1
            try:
                write_raw_file(path, tables, **how)
                code = 0
            except BaseException as e:  # noqa: BLE001 - reported to the parent
                os.write(write, _one_line(e).encode()[:2000])
            finally:
                os._exit(code)
        os.close(write)
        self.pipe = read

    def wait(self) -> None:
        if self.pid is None:
            return
        _, status = os.waitpid(self.pid, 0)
        self.pid = None
        message = os.read(self.pipe, 4096).decode(errors="replace")
        os.close(self.pipe)
        code = os.waitstatus_to_exitcode(status)
        if code != 0:
            raise _write_failed(self.label, message or f"exit status {code}")


class ThreadRawWriter(threading.Thread):
    """:func:`write_raw_file` in a thread, where processes cannot be forked.

    The ingest takes the GIL back briefly many times (once per Arrow batch); with Python's default 5 ms
    switch interval each of those waits for the busy main thread, which doubled the ingest time, so the
    interval is 0.5 ms while this thread runs.
    """

    SWITCH_INTERVAL_S = 0.0005

    def __init__(self, path: str, tables: dict[str, pd.DataFrame], label: str, **how: bool):
        super().__init__(name="dlscope-raw-writer", daemon=True)
        self.path, self.tables, self.label, self.how, self.error = path, tables, label, how, None
        self.saved_interval = sys.getswitchinterval()
        sys.setswitchinterval(min(self.saved_interval, self.SWITCH_INTERVAL_S))
        self.start()

    def run(self) -> None:
        try:
            write_raw_file(self.path, self.tables, **self.how)
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread by wait()
            self.error = e
        finally:
            self.tables = None

    def wait(self) -> None:
        self.join()
        sys.setswitchinterval(self.saved_interval)
        if self.error is not None:
            raise _write_failed(self.label, _one_line(self.error)) from self.error


def _one_line(error: BaseException) -> str:
    return " ".join(f"{type(error).__name__}: {error}".split())


def _write_failed(label: str, problem: str) -> DlscopeError:
    return DlscopeError(f"{label}: writing the database failed ({problem})")


def _can_fork() -> bool:
    return hasattr(os, "fork") and hasattr(os, "waitstatus_to_exitcode")


class NewDatabase:
    """A database being written: the raw tables and indexes in the background, the rest on ``connect()``.

    Only the background writer touches the file until :meth:`connect` has waited for it.
    """

    def __init__(self, path: str, label: str):
        self.path, self.label, self.conn, self.raw_writer = path, label, None, None

    def write_raw(self, tables: dict[str, pd.DataFrame], first: bool = True, last: bool = True) -> None:
        """Write raw tables in the background: the ``first`` part creates the file, the ``last`` builds the
        indexes (a whole import is one part; a job imported rank by rank, one part per rank and a last one).
        A part waits for the one before: one writer at a time."""
        if self.raw_writer is not None:
            self.raw_writer.wait()
        writer = ForkedRawWriter if _can_fork() else ThreadRawWriter
        self.raw_writer = writer(self.path, tables, self.label, create=first, indexes=last)

    def wait_quietly(self) -> None:
        """Wait for the background writer without raising (the caller is already failing)."""
        try:
            if self.raw_writer is not None:
                self.raw_writer.wait()
        except BaseException:  # noqa: BLE001
            pass

    def connect(self) -> sqlite3.Connection:
        """Wait for the raw tables and indexes, then open the file for the remaining (small) writes."""
        if self.conn is None:
            if self.raw_writer is None:
                write_raw_file(self.path, {})
            else:
                self.raw_writer.wait()
            self.conn = sqlite3.connect(self.path)
            self.conn.execute("PRAGMA journal_mode=OFF")  # the file is renamed into place only when complete
            self.conn.execute("PRAGMA synchronous=OFF")
            self.conn.execute("BEGIN")
        return self.conn


@contextmanager
def atomic_database(path: Path, force: bool) -> Iterator[NewDatabase]:
    """A fresh database at a temporary path next to ``path``, renamed into place only on success."""
    path = Path(path)
    if path.exists() and not force:
        raise DlscopeError(f"{path}: already exists (use --force to overwrite)")
    if not path.parent.exists():
        raise DlscopeError(f"{path}: folder {path.parent} does not exist")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    os.unlink(tmp)
    db = NewDatabase(tmp, str(path))
    try:
        yield db
        conn = db.connect()
        conn.commit()
        conn.close()
        os.replace(tmp, path)
    except BaseException:
        db.wait_quietly()
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


def stored_name(table: str) -> str:
    """The database table holding a model table's rows (an op call is a row of ``op_instances``)."""
    return "op_instances" if table == "ops" else table


def split_ops(ops: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per-node strings once (op_nodes), per-call numbers (op_instances)."""
    return ops.drop_duplicates("node_id"), ops


#: rows converted to Arrow and ingested at a time: the writer holds one such chunk, not a table's copy
INGEST_ROWS = 65_536


def _arrow_rows(frame: pd.DataFrame, columns: list[str], lo: int, schema: pa.Schema | None = None) -> pa.Table:
    """Rows [lo, lo + INGEST_ROWS) as Arrow; later chunks take the first one's schema (an all-missing
    chunk of an object column would otherwise come out as a null column)."""
    return pa.Table.from_pandas(frame.iloc[lo:lo + INGEST_ROWS][columns], schema=schema, preserve_index=False)


class _ArrowIngest:
    """Bulk-load frames into a closed database file through ADBC (Arrow in, no per-row Python).

    ADBC links its own copy of SQLite; two SQLite libraries must never have one file open at the same
    time in one process (their POSIX locks and WAL maps do not know of each other), so this runs while
    no sqlite3 connection to the file is open.
    """

    def __init__(self, path: str, columns_of: dict[str, list[str]]):
        self.path, self.columns_of = path, columns_of

    def __enter__(self) -> "_ArrowIngest":
        from adbc_driver_sqlite import dbapi

        self.adbc = dbapi.connect(self.path, autocommit=True)  # pragmas must be set outside a transaction
        self.cursor = self.adbc.cursor()
        for statement in ("PRAGMA journal_mode=OFF", "PRAGMA synchronous=OFF", "PRAGMA cache_size=-262144",
                          "BEGIN"):  # no journal, no fsync: the file is renamed into place only when complete
            self._execute(statement)
        return self

    def _execute(self, statement: str) -> None:
        self.cursor.execute(statement)
        self.cursor.fetchall()

    def add(self, name: str, frame: pd.DataFrame) -> None:
        if name == "ops":
            nodes, instances = split_ops(frame)
            self.add("op_nodes", nodes)
            self.add("op_instances", instances)
            return
        if frame.empty:
            return
        columns = [c for c in self.columns_of[name] if c in frame.columns]
        first = _arrow_rows(frame, columns, 0)
        rest = (_arrow_rows(frame, columns, lo, first.schema) for lo in range(INGEST_ROWS, len(frame), INGEST_ROWS))
        batches = itertools.chain.from_iterable(chunk.to_batches() for chunk in itertools.chain([first], rest))
        self.cursor.adbc_ingest(name, pa.RecordBatchReader.from_batches(first.schema, batches), mode="append")

    def __exit__(self, kind, value, tb) -> None:
        try:
            if kind is None:
                self._execute("COMMIT")
        finally:
            self.cursor.close()
            self.adbc.close()


def write_aggregation(conn: sqlite3.Connection, agg) -> int:
    """Store one :class:`~dlscope.analyze.aggregation.Aggregation`; returns its agg_id."""
    return write_aggregations(conn, [agg])[0]


AGG_TABLES = {"agg_gpus": "gpus", "agg_iterations": "iterations", "agg_ops": "ops", "agg_op_types": "op_types",
              "agg_kernels": "kernels", "agg_op_kernels": "op_kernels", "agg_groups": "groups"}


def _integer_ns(row: dict) -> dict:
    """An aggregation row with its ns figures as integers (avg_iteration_ns is a mean: rounded here)."""
    return {k: round_ns(v) if k.endswith("_ns") else v for k, v in row.items()}


def write_aggregations(conn: sqlite3.Connection, aggs: list) -> list[int]:
    """Store aggregations (one per rank of a job) with one insert per table; returns their agg_ids."""
    first = conn.execute("SELECT COALESCE(MAX(agg_id), 0) + 1 FROM aggregations").fetchone()[0]
    ids = list(range(first, first + len(aggs)))
    created = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    insert_frame(conn, "aggregations", pd.DataFrame([{**_integer_ns(agg.row), "agg_id": agg_id, "run_id": first, "created_at": created}
                                                     for agg_id, agg in zip(ids, aggs)]))
    for table, field in AGG_TABLES.items():
        frames = [getattr(agg, field).assign(agg_id=agg_id) for agg_id, agg in zip(ids, aggs)
                  if not getattr(agg, field).empty]
        if frames:
            insert_frame(conn, table, pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0])
    return ids
