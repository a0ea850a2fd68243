"""Writing the profile database: bulk Arrow ingest into a temporary file, renamed into place at the end."""

from __future__ import annotations

import datetime as dt
import errno
import json
import os
import re
import sqlite3
import stat
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd
import pyarrow as pa

from ..errors import DlscopeError
from ..model import value_counts
from ..nanoseconds import round_ns
from ..processes import (
    FirstComer,
    ForkedCall,
    ThreadCall,
    can_fork,
    owned_name,
    release_free_memory,
    remove_dead,
    stop_if_given_up,
)
from ..version import __version__
from .schema import DDL, INDEXES, PAGE_SIZE, RAW_TABLES, SCHEMA_VERSION, SEARCH_DDL, SEARCH_INDEXES


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


def write_raw_file(path: str, tables: dict[str, pd.DataFrame], create: bool = True, indexes: bool = True,
                   timelines: FirstComer | None = None, own_indexes: bool = False,
                   op_names: pd.DataFrame | None = None) -> None:
    """Create the database file (``create``), bulk-load raw tables, then build every index (``indexes``: the
    last part; those an earlier part built are left as they are) and number the searched names.

    ``tables`` uses the model's names; ``ops`` is stored as op_nodes + op_instances. A job imported rank by
    rank appends each rank's tables and builds the indexes once, after the last; a part whose tables are
    complete builds their indexes right after their rows (``own_indexes``). ``timelines``: the ranks'
    timeline arrays, built and stored here after the indexes unless the caller, idle first, took them.
    ``op_names``: the ops' op_id and name, for the kernels' search keys where the kernels go before the ops.
    """
    conn = sqlite3.connect(path)
    try:
        if create:
            conn.execute(f"PRAGMA page_size={PAGE_SIZE}")
            # no journal, no fsync, as the ingest: each CREATE commits on its own, and ~70 commits with a
            # journal's fsyncs took 0.1-0.5 s of the writer's wall time (the file is renamed into place only
            # when complete)
            conn.execute("PRAGMA journal_mode=OFF")
            conn.execute("PRAGMA synchronous=OFF")
            conn.executescript(DDL)
            create_search_tables(conn)
        columns_of = {name: table_columns(conn, name) for name in RAW_TABLES}
    finally:
        conn.close()
    kernels = tables.get("kernels")
    search = "search_key" in columns_of["kernels"]
    if kernels is not None and search:
        pairs = kernel_pairs(kernels, tables.get("ops", op_names))
        tables = {**tables, "kernels": kernels.assign(search_key=search_keys(pairs))}
    else:
        pairs = None
    if tables or indexes:
        with _ArrowIngest(path, columns_of) as ingest:
            for name, frame in tables.items():
                ingest.add(name, frame)
            # right after the rows, on the same connection
            if indexes:
                built = {name for (name,) in ingest.rows("SELECT name FROM sqlite_master WHERE type = 'index'")}
                ingest.execute_script(index_sql(search, lambda name, _: name not in built))
            elif own_indexes:
                stored = {part for name in tables for part in (("op_nodes", "op_instances") if name == "ops"
                                                              else (name,))}
                ingest.execute_script(index_sql(search, lambda _, table: table in stored))
    stop_if_given_up()
    # the ranks' timeline arrays here unless the caller, its own work done, has already taken them
    build_timelines = timelines is not None and timelines.take()
    if build_timelines and (tables or indexes):  # the ingest's page cache and sorter memory back to the system
        release_free_memory()
    names = raw_names(tables, pairs)
    if names or indexes or build_timelines:
        conn = sqlite3.connect(path)
        try:
            # as the ingest: no journal, no fsync (the file is renamed into place only when complete)
            conn.execute("PRAGMA journal_mode=OFF")
            conn.execute("PRAGMA synchronous=OFF")
            add_names(conn, names)
            if build_timelines:
                assert timelines is not None
                write_timeline_arrays(conn, timelines.work())
            if indexes:
                index_names(conn, {}, renumber=True)
            conn.commit()
        finally:
            conn.close()


_CREATE_INDEX = re.compile(r"CREATE INDEX (\w+) ON (\w+)")


def index_sql(search: bool, which: Callable[[str, str], bool]) -> str:
    """The schema's CREATE INDEX statements (``INDEXES``, and ``SEARCH_INDEXES`` where ``search``) that ``which``
    takes by index name and table name, in the schema's order."""
    statements = [sql.strip() for sql in (INDEXES + (SEARCH_INDEXES if search else "")).split(";") if sql.strip()]
    return ";\n".join(sql for sql in statements if which(*_CREATE_INDEX.match(sql).groups()))  # type: ignore[union-attr]


def root_op_names(kernels: pd.DataFrame, ops: pd.DataFrame | None) -> pd.Series:
    """The name of the outermost op each kernel was launched beneath (NaN: none), as the viewer's Op Name
    column shows it (``kernels.root_op_id`` -> that op's node name)."""
    if ops is None or ops.empty:
        return pd.Series(None, index=kernels.index, dtype=object)
    return kernels["root_op_id"].map(pd.Series(ops["name"].to_numpy(object), index=ops["op_id"].to_numpy()))


class KernelPairs(NamedTuple):
    """The kernels' distinct (kernel name, outermost op name) pairs, found on integer codes (hashing a million
    names as Python strings costs a second): ``names`` holds each pair once, in order of first appearance, as
    Python objects (``k``: None for none, ``o``: NaN for none, None without ops) with its ``kernels`` and its
    ``first`` kernel row; ``of_kernel``: each kernel's row of ``names``."""

    names: pd.DataFrame
    of_kernel: np.ndarray


def kernel_pairs(kernels: pd.DataFrame, ops: pd.DataFrame | None) -> KernelPairs:
    """Each kernel's (kernel name, outermost op name) pair (``KernelPairs``), made once for both the search_key
    and the search tables."""
    k_codes, k_names = pd.factorize(kernels["name"], sort=False)
    k_names = np.append(np.asarray(k_names, dtype=object), np.array([None], dtype=object))  # code -1: None
    if ops is None or ops.empty:
        o_codes = np.full(len(kernels), -1, dtype=np.int64)
        o_names = np.array([None], dtype=object)
    else:
        node_codes, o_names = pd.factorize(ops["name"], sort=False)
        o_names = np.append(np.asarray(o_names, dtype=object), np.array([np.nan], dtype=object))  # none: NaN
        at = pd.Index(ops["op_id"].to_numpy()).get_indexer(kernels["root_op_id"].to_numpy())
        o_codes = np.where(at >= 0, node_codes[at], -1)
    pair = (k_codes.astype(np.int64) + 1) * (len(o_names) + 1) + (o_codes.astype(np.int64) + 1)
    of_kernel, distinct = pd.factorize(pair, sort=False)  # in order of first appearance
    first = np.unique(of_kernel, return_index=True)[1]
    k_of, o_of = np.divmod(np.asarray(distinct, dtype=np.int64), len(o_names) + 1)
    names = pd.DataFrame({"k": k_names[k_of - 1], "o": o_names[o_of - 1]})
    return KernelPairs(names.assign(kernels=np.bincount(of_kernel, minlength=len(names)), first=first), of_kernel)


def search_keys(pairs: KernelPairs) -> pd.arrays.IntegerArray:
    """kernels.search_key: a 64-bit hash (pandas' SipHash, once per distinct pair) of the kernel's name and its
    outermost op's name (``pairs``: as ``kernel_pairs`` makes them). Two pairs with one key would share an index
    range: the writer refuses to index such a database's names (``add_names``), so the viewer never confuses
    them."""
    distinct = pd.util.hash_pandas_object(pairs.names[["k", "o"]].fillna("\x00none"), index=False,
                                          categorize=True).to_numpy()
    keys = distinct[pairs.of_kernel]
    return pd.arrays.IntegerArray(keys.view(np.int64), np.zeros(len(keys), dtype=bool))


def raw_names(tables: dict[str, pd.DataFrame], pairs: KernelPairs | None = None) -> dict[str, pd.DataFrame]:
    """The distinct searched names of raw tables (source -> frame of name and kernels), counted with pandas as
    they are written: kernel names with their kernels, the outermost ops' names with the kernels launched
    beneath them, op types; and under "pairs" the (kernel name, outermost op name) pairs of the kernels with
    their search_key and kernels."""
    out = {}
    kernels = tables.get("kernels")
    if kernels is not None and not kernels.empty:
        counts = value_counts(kernels["name"], sort=False)
        out["kernels.name"] = pd.DataFrame({"name": counts.index, "kernels": counts.to_numpy()})
    ops = tables.get("ops")
    if ops is not None and not ops.empty:
        outer = ops[ops["parent_id"] < 0].groupby("name", sort=False)["kernel_count"].sum()
        out["ops.name"] = pd.DataFrame({"name": outer.index, "kernels": outer.to_numpy()})
        types = ops["op_type"].dropna().unique()
        out["op_nodes.op_type"] = pd.DataFrame({"name": types, "kernels": None})
    if kernels is not None and "search_key" in kernels and not kernels.empty:
        named = (kernel_pairs(kernels, ops) if pairs is None else pairs).names
        keys = kernels["search_key"].to_numpy(np.int64)[named["first"].to_numpy()]
        per_key = named["kernels"].groupby(keys, sort=False).transform("sum").to_numpy()  # one key, one count
        out["pairs"] = pd.DataFrame({"key": keys, "kernel_name": named["k"].to_numpy(object),
                                     "op_name": named["o"].to_numpy(object), "kernels": per_key,
                                     "clash": len(named) != len(np.unique(keys))})
    return out


def add_names(conn: sqlite3.Connection, names: dict[str, pd.DataFrame]) -> None:
    """Add distinct names to ``search_names`` and the kernels' (kernel name, op name) pairs to
    ``search_kernel_pairs`` (a few thousand rows), summing the kernels of one already there (a job written rank
    by rank adds each rank's); nothing where the file has no search tables. Two pairs hashed to one search_key
    (all but impossible) drop the search tables: the viewer then searches as in a database without them."""
    if not names or not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'search_names'").fetchone():
        return
    pairs = names.pop("pairs", None)
    rows = [(source, name, name.lower(), None if pd.isna(k) else int(k))
            for source, frame in names.items() for name, k in zip(frame["name"].tolist(), frame["kernels"].tolist())
            if isinstance(name, str)]
    conn.executemany("INSERT INTO search_names (source, name, folded, kernels) VALUES (?, ?, ?, ?) "
                     "ON CONFLICT (source, name) DO UPDATE SET kernels = CASE WHEN excluded.kernels IS NULL "
                     "THEN kernels ELSE COALESCE(kernels, 0) + excluded.kernels END", rows)
    if pairs is None:
        return
    stored = {k: (a, b) for k, a, b in conn.execute("SELECT search_key, kernel_name, op_name FROM search_kernel_pairs")}
    new = list(zip(pairs["key"].tolist(), pairs["kernel_name"].tolist(), pairs["op_name"].tolist(),
                   pairs["kernels"].tolist()))
    new = [(k, None if pd.isna(a) else a, None if pd.isna(b) else b, int(n)) for k, a, b, n in new]
    if pairs["clash"].any() or any(k in stored and stored[k] != (a, b) for k, a, b, _ in new):
        for table in ("search_kernel_pairs", "search_names_trigram", "search_names"):
            conn.execute(f"DROP TABLE {table}")
        return
    conn.executemany("INSERT INTO search_kernel_pairs (search_key, kernel_name, op_name, kernels) VALUES (?, ?, ?, ?) "
                     "ON CONFLICT (search_key) DO UPDATE SET kernels = kernels + excluded.kernels", new)


#: The searched name columns of the raw tables: source -> SQL of (name, kernels it covers), as the
#: viewer's tables name them (``viewer.tables``: a column's ``names``); the import counts them with pandas
#: (``raw_names``), this SQL recounts a database's rows (bench/viewer_bench.py after growing its kernels).
RAW_NAMES = {
    "kernels.name": "SELECT name, COUNT(*) FROM kernels GROUP BY name",
    "ops.name": "SELECT n.name, SUM(i.kernel_count) FROM op_instances i JOIN op_nodes n "
                "ON n.node_id = i.node_id WHERE i.parent_id < 0 GROUP BY n.name",
    "op_nodes.op_type": "SELECT DISTINCT op_type, NULL FROM op_nodes",
}
#: search_kernel_pairs recounted from a database's rows.
KERNEL_PAIRS = ("SELECT k.search_key, k.name, n.name, COUNT(*) FROM kernels k LEFT JOIN op_instances i "
                "ON i.op_id = k.root_op_id LEFT JOIN op_nodes n ON n.node_id = i.node_id GROUP BY k.search_key")
#: The same for the aggregations' name columns, indexed as each aggregation is written.
AGG_NAMES = {
    "agg_ops.op_name": "SELECT DISTINCT op_name, NULL FROM agg_ops",
    "agg_ops.op_type": "SELECT DISTINCT op_type, NULL FROM agg_ops",
    "agg_op_types.op_type": "SELECT DISTINCT op_type, NULL FROM agg_op_types",
    "agg_kernels.kernel_name": "SELECT DISTINCT kernel_name, NULL FROM agg_kernels",
    "agg_op_kernels.kernel_name": "SELECT DISTINCT kernel_name, NULL FROM agg_op_kernels",
}


def create_search_tables(conn: sqlite3.Connection) -> bool:
    """A new file's kernels.search_key column and search tables (SEARCH_DDL); False where this SQLite has no FTS5
    trigram tokenizer (built without FTS5, or before 3.34): the file then has no search tables, and the viewer
    matches the names it reads from the rows, as for a database written by an older dlscope."""
    try:
        for statement in SEARCH_DDL.split(";"):
            if statement.strip():
                conn.execute(statement)
    except sqlite3.OperationalError:
        conn.execute("DROP TABLE IF EXISTS search_names")
        conn.execute("DROP TABLE IF EXISTS search_kernel_pairs")
        return False
    return True


def index_names(conn: sqlite3.Connection, sources: dict[str, str], renumber: bool = False) -> bool:
    """Add the distinct names of ``sources`` (source -> SQL of name, kernels) to ``search_names`` and
    rebuild their trigram index (a few thousand names: milliseconds), so a viewer search reads matching names
    instead of millions of rows. ``renumber``: give every name its id in (source, name) order, so that a job
    written rank by rank has the ids of a whole import. A database without the tables (an older dlscope's, or
    a SQLite without FTS5) is left as it is: returns False."""
    if conn.execute("SELECT COUNT(*) FROM sqlite_master WHERE name IN ('search_names', 'search_names_trigram')"
                    ).fetchone()[0] < 2:
        return False
    for source, sql in sources.items():
        found = sorted((source, n, n.lower(), k) for n, k in conn.execute(sql).fetchall() if isinstance(n, str))
        conn.executemany("INSERT OR IGNORE INTO search_names (source, name, folded, kernels) VALUES (?, ?, ?, ?)",
                         found)
    if renumber:
        rows = conn.execute("SELECT source, name, folded, kernels FROM search_names ORDER BY source, name").fetchall()
        conn.execute("DELETE FROM search_names")
        conn.executemany("INSERT INTO search_names (name_id, source, name, folded, kernels) VALUES (?, ?, ?, ?, ?)",
                         [(i, *row) for i, row in enumerate(rows, 1)])
    conn.execute("INSERT INTO search_names_trigram (search_names_trigram) VALUES ('rebuild')")
    return True


def _one_line(error: BaseException) -> str:
    return " ".join(f"{type(error).__name__}: {error}".split())


def _write_failed(label: str, problem: str) -> DlscopeError:
    return DlscopeError(f"{label}: writing the database failed ({problem})")


#: Rows of aggregation tables from which a background writer pays (:meth:`NewDatabase.write_agg_tables`): it
#: costs ~0.1 s more CPU than an ingest here (starting, its import of ADBC, pages copied on write) and saves
#: the importing process ~4 us a row (the 64-rank job: 53k rows; a single rank's import: a few hundred).
BESIDE_AGG_ROWS = 20_000


def _agg_rows(aggs: list, tables: list[str]) -> int:
    """The rows of the named aggregation tables of ``aggs`` (against ``BESIDE_AGG_ROWS``)."""
    return sum(len(getattr(agg, AGG_TABLES[table])) for agg in aggs for table in tables)


class NewDatabase:
    """A database being written: the raw tables and indexes in the background, the rest on ``connect()``.

    Only the background writer touches the file until :meth:`connect` has waited for it.
    """

    def __init__(self, path: str, label: str, replacing: bool = False):
        self.path, self.label = path, label
        self.conn: sqlite3.Connection | None = None
        # the file's write-out begun beside the last writes where its rename will replace a file (_Writeback)
        self.replacing = replacing
        self.writeback: _Writeback | None = None
        self.raw_writer: ForkedCall | ThreadCall | None = None
        # the aggregation writer forked before the raw writer ended (:meth:`write_agg_tables_beside`): it starts
        # once ``raw_ended`` reads its end (the raw writer, which holds the only writing end, has exited)
        self.queued_writer: ForkedCall | None = None
        self.raw_ended = -1
        self.written = False  # the raw tables (or an empty database) in the file, no background writer
        self.agg_writer = False  # the background writer is ingest_agg_tables: its result goes to agg_written
        self.agg_written: tuple[list[int], dict[str, int | None]] = ([], {})
        self.send_filled: Callable[[], None] | None = None  # sends it the replay's column (ingest_agg_tables)

    def write_raw(self, tables: dict[str, pd.DataFrame], first: bool = True, last: bool = True,
                  timelines: FirstComer | None = None, fork: bool = True, own_indexes: bool = False,
                  op_names: pd.DataFrame | None = None) -> None:
        """Write raw tables in the background (a forked child that reads the tables copy-on-write, its end
        readable at ``raw_ended``, or a thread where this process must not fork): the ``first``
        part creates the file, the ``last`` builds the indexes not built yet (a whole import is one part; a job
        imported rank by rank, one part per rank and a last one; an import may hand its tables over as each
        becomes final, each part building its own tables' indexes: ``own_indexes``). One writer at a time: a
        part for a thread goes to the raw tables' writer thread still running, after its work (the caller goes
        on: :meth:`ThreadCall.then`), any other waits for the writer before it here. ``timelines``: the
        timeline arrays, built there too unless this process takes them first (``write_raw_file``).
        ``fork=False``: a thread even where a child could be forked (it shares the pages the importing process
        goes on to rewrite, which a forked child would keep a second copy of). ``op_names``: see
        :func:`write_raw_file`."""
        args = (self.path, tables, first, last, timelines, own_indexes, op_names)
        if not fork or not can_fork():
            running = self.raw_writer if self._raw_thread() else None
            if isinstance(running, ThreadCall) and running.then(write_raw_file, *args):
                return
            self._wait_raw()
            self.raw_writer = ThreadCall(write_raw_file, *args)
            return
        self._wait_raw()
        read, write = os.pipe()  # its writing end lives in the forked writer only: closed when it exits
        try:
            self.raw_writer = ForkedCall(write_raw_file, *args)
        except BaseException:
            os.close(read)
            raise
        finally:
            os.close(write)
        self.raw_ended = read

    def _raw_thread(self) -> bool:
        """The background writer is a thread writing raw tables (no aggregation writer waits on it)."""
        return (isinstance(self.raw_writer, ThreadCall) and self.queued_writer is None and not self.agg_writer
                and self.send_filled is None)

    def _close_raw_ended(self) -> None:
        if self.raw_ended >= 0:
            os.close(self.raw_ended)
            self.raw_ended = -1

    def _wait_raw(self) -> None:
        writer, self.raw_writer = self.raw_writer, None
        queued, self.queued_writer = self.queued_writer, None
        if writer is None:
            return
        try:
            if queued is not None:  # the raw writer's end first (the aggregation writer waits for it there)
                try:
                    writer.result()
                except BaseException:
                    queued.kill()
                    raise
                writer = queued
        except (DlscopeError, KeyboardInterrupt, SystemExit):
            raise
        except BaseException as e:  # noqa: BLE001 - one line naming the database
            raise _write_failed(self.label, _one_line(e)) from e
        finally:
            self._close_raw_ended()
        send, self.send_filled = self.send_filled, None
        try:
            if send is not None:  # the aggregation writer waits for the replay's column
                try:
                    send()
                except BaseException:
                    writer.kill()
                    raise
            value = writer.result()
            if self.agg_writer:
                self.agg_written, self.agg_writer = value, False
        except (DlscopeError, KeyboardInterrupt, SystemExit):
            raise
        except BaseException as e:  # noqa: BLE001 - one line naming the database
            raise _write_failed(self.label, _one_line(e)) from e

    def abandon(self) -> None:
        """Stop the background writer now (the caller is failing): a forked one is killed, not awaited."""
        writer, self.raw_writer = self.raw_writer, None
        queued, self.queued_writer = self.queued_writer, None
        for call in (queued, writer):
            if call is not None:
                call.kill()
        self._close_raw_ended()
        self.end_writeback()

    def _begin_writeback(self) -> None:
        """The file's write-out begun, the background writer ended, where the rename will replace a file; its
        descriptor opened before SQLite opens the file for the last writes (:class:`_Writeback`)."""
        sync_file_range = _sync_file_range() if self.replacing and self.writeback is None else None
        if sync_file_range is not None:
            try:
                self.writeback = _Writeback(self.path, sync_file_range)
            except (OSError, RuntimeError):  # only a head start: the rename writes it out as ever
                self.replacing = False

    def end_writeback(self) -> None:
        """Wait for the write-out begun by :meth:`connect` and close its descriptor (after SQLite's connection)."""
        writeback, self.writeback = self.writeback, None
        if writeback is not None:
            writeback.end()

    def wait_written(self) -> None:
        """Wait for the raw tables, indexes (and timeline arrays, where the writer builds them) to be written:
        under a memory budget the import runs one stage at a time, not the writer beside the rules."""
        self._wait_written()

    def _wait_written(self) -> None:
        """The raw tables and indexes written (an empty database made when none were)."""
        if self.raw_writer is not None:
            self._wait_raw()
        elif not self.written:
            write_raw_file(self.path, {})
        self.written = True

    def write_agg_tables_beside(self, aggs: list, tables
                                ) -> Callable[[], tuple[list[int], dict[str, int | None]]] | None:
        """:meth:`write_agg_tables` started before the raw writer has ended, so the importing process does not
        wait for it: a forked writer that waits itself for the raw writer's exit (the end of ``raw_ended``), then
        ingests (:func:`ingest_agg_tables`), while the importing process goes on (the expert rules: the job's
        ingest then runs on the core the raw writer leaves, not at the import's end). None where it does not
        start: too few rows to pay (``BESIDE_AGG_ROWS``), no forked raw writer running, no fork allowed."""
        if (self.conn is not None or not aggs or self.raw_ended < 0 or self.queued_writer is not None
                or not isinstance(self.raw_writer, ForkedCall) or not can_fork()):
            return None
        tables = list(tables)
        if _agg_rows(aggs, tables) < BESIDE_AGG_ROWS:
            return None
        forked = ForkedCall(_after_raw_writer, self.raw_ended, self.path, aggs, tables, inbox=True)
        self.queued_writer = forked
        return self._agg_writer_started(aggs, tables, forked.send)

    def write_agg_tables(self, aggs: list, tables, beside: bool = True
                         ) -> Callable[[], tuple[list[int], dict[str, int | None]]]:
        """:func:`write_agg_tables` of the aggregations to be, before :meth:`connect`: through ADBC (Arrow in,
        no per-row Python) once the raw tables are written, in the background as they are
        (:func:`ingest_agg_tables`), while the importing process takes in the replay's figures (~0.25 s of inserts
        were the 64-rank job's tail); the tables the replay fills wait there for its column, sent when the
        database is next waited for (``aggs`` are then replayed or skipped). Returns what gives the agg_ids and the
        tables' rowids before them (None: written with the replay's column), waiting for the writer. ``beside``
        False: written here, now (under a memory budget: a forked writer alive during the replay would keep the
        pages of the tables the importing process lets go before it)."""
        if self.conn is not None or not aggs:
            conn = self.connect()
            ids = new_agg_ids(conn, len(aggs))
            done: tuple[list[int], dict[str, int | None]] = (ids, {**write_agg_tables(conn, aggs, ids, tables)})
            return lambda: done
        self._wait_written()
        tables = list(tables)
        if not beside or _agg_rows(aggs, tables) < BESIDE_AGG_ROWS:
            done = ingest_agg_tables(None, self.path, aggs, tables)  # here: the replay's column filled after it
            return lambda: done
        if can_fork():
            forked = ForkedCall(ingest_agg_tables, self.path, aggs, tables, inbox=True)
            self.raw_writer, send = forked, forked.send
        else:
            sent = _Sent()
            self.raw_writer, send = ThreadCall(ingest_agg_tables, sent, self.path, aggs, tables), sent.send
        return self._agg_writer_started(aggs, tables, send)

    def _agg_writer_started(self, aggs: list, tables: list[str], send: Callable
                            ) -> Callable[[], tuple[list[int], dict[str, int | None]]]:
        """The background aggregation writer's replay column sent when the database is next waited for; returns
        what waits for its agg_ids and rowids."""
        def send_filled() -> None:
            try:
                columns = replay_columns(aggs, tables)
            except BaseException:
                send(None)  # the writer stops
                raise
            send(columns)
        self.agg_writer, self.send_filled = True, send_filled

        def written() -> tuple[list[int], dict[str, int | None]]:
            self._wait_written()
            return self.agg_written
        return written

    def ingest(self, script: str, frames: dict[str, pd.DataFrame], indexes: str = "") -> bool:
        """Tables made by ``script`` filled with ``frames`` through ADBC (Arrow in, no per-row Python binding),
        then ``indexes`` built, once the background writer has ended and before :meth:`connect` opens the file to
        sqlite3 (the one writer of the file at a time). False, nothing written, where it is open already: the
        caller inserts them there."""
        if self.conn is not None:
            return False
        self._wait_written()
        self._begin_writeback()
        with _ArrowIngest(self.path, {}) as ingest:
            ingest.execute_script(script)
            for name, frame in frames.items():
                ingest.columns_of[name] = [r[1] for r in ingest.rows(f'PRAGMA table_info("{name}")')]
                ingest.add(name, frame)
            ingest.execute_script(indexes)
        return True

    def connect(self) -> sqlite3.Connection:
        """Wait for the raw tables and indexes, then open the file for the remaining (small) writes."""
        if self.conn is None:
            self._wait_written()
            self._begin_writeback()
            self.conn = sqlite3.connect(self.path)
            self.conn.execute("PRAGMA journal_mode=OFF")  # the file is renamed into place only when complete
            self.conn.execute("PRAGMA synchronous=OFF")
            self.conn.execute("BEGIN")
        return self.conn


def check_output(path: Path, force: bool) -> None:
    """Refuse an output that is not a regular database file or a free name, before anything is read:
    an existing file without ``force``, a folder, a FIFO, a device or a socket (``--force`` replaces a file,
    never one of those), a folder that does not exist."""
    path = Path(path)
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        mode = None
    except OSError as e:
        raise DlscopeError(f"{path}: cannot be used as the output ({e.strerror or e})") from None
    if mode is not None:
        if not stat.S_ISREG(mode):
            raise DlscopeError(f"{path}: is {_file_kind(mode)}, not a database file; name a new or existing "
                               "database file with -o")
        if not force:
            raise DlscopeError(f"{path}: already exists (use --force to overwrite)")
    if not path.parent.exists():
        raise DlscopeError(f"{path}: folder {path.parent} does not exist")
    if not path.parent.is_dir():
        raise DlscopeError(f"{path}: {path.parent} is not a folder")
    if not os.access(path.parent, os.W_OK | os.X_OK):
        raise DlscopeError(f"{path}: folder {path.parent} is not writable")


def _file_kind(mode: int) -> str:
    for test, what in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return what
    return "not a regular file"


#: errors that, while the database is being written, can only be about the output (full disk, quota,
#: file size limit, read-only or vanished folder): reported as one line naming it
_OUTPUT_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EIO, errno.EACCES, errno.EPERM}


@contextmanager
def atomic_database(path: Path, force: bool) -> Iterator[NewDatabase]:
    """A fresh database at a temporary path next to ``path``, renamed into place only on success.

    The temporary file is named for this run (:func:`dlscope.processes.owned_name`); those of runs that
    died (killed, machine crash) are removed here first. Whatever fails, the background writer is stopped
    and the temporary file removed; SQLite and file-system failures become one line naming ``path``.
    """
    path = Path(path)
    check_output(path, force)
    remove_dead(path.parent, ".")
    tmp = str(path.parent / owned_name(f".{path.name}", ".tmp"))
    db = NewDatabase(tmp, str(path), replacing=path.exists())
    try:
        try:
            yield db
            conn = db.connect()
            conn.commit()
            conn.close()
            db.conn = None
            db.end_writeback()
            check_output(path, force)  # still a file or free: nothing replaced it meanwhile
            os.replace(tmp, path)
        except sqlite3.Error as e:
            raise _write_failed(str(path), _sqlite_text(e)) from None
        except OSError as e:
            if e.errno not in _OUTPUT_ERRNOS:
                raise
            raise _write_failed(str(path), e.strerror or str(e)) from None
    except BaseException:
        if db.conn is not None:
            db.conn.close()
        db.abandon()
        for leftover in (tmp, tmp + "-journal", tmp + "-wal", tmp + "-shm"):
            try:
                os.unlink(leftover)
            except OSError:
                pass
        raise


#: sync_file_range(2)'s flag: begin writing the range's dirty pages out, without waiting for them
SYNC_FILE_RANGE_WRITE = 2


def _sync_file_range() -> Callable[[int, int, int, int], int] | None:
    """Linux's sync_file_range from the C library (Python's os has none); None elsewhere."""
    import ctypes

    try:
        call = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    call.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    call.restype = ctypes.c_int
    return call


class _Writeback:
    """The new database's write-out begun by a thread while the last writes run (the results, on one core).

    A rename over an existing file makes ext4 (``auto_da_alloc``) allocate and start writing out every dirty page
    of the renamed file inside the rename: 50-150 ms for the benchmark trace's 175 MB, on the import's last,
    single-core stretch, where the other core idles. ``sync_file_range(WRITE)`` begins that write-out (it waits for
    no I/O and changes no byte) once the background writer has ended, so the rename only has the later pages'.

    Its descriptor is opened before SQLite's connection and closed after it: closing a descriptor drops every
    POSIX lock the process holds on the file, SQLite's included.
    """

    def __init__(self, path: str, sync_file_range: Callable[[int, int, int, int], int]):
        self.fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        self.thread = threading.Thread(target=sync_file_range, args=(self.fd, 0, 0, SYNC_FILE_RANGE_WRITE),
                                       name="dlscope-writeback", daemon=True)
        try:
            self.thread.start()
        except BaseException:
            os.close(self.fd)
            raise

    def end(self) -> None:
        try:
            self.thread.join()
        finally:
            os.close(self.fd)


def _sqlite_text(error: sqlite3.Error) -> str:
    text = " ".join(str(error).split())
    if "disk is full" in text or "disk I/O error" in text:
        return f"{text}: is the disk full?"
    return text


def write_meta(conn: sqlite3.Connection, profile_name: str, extra: dict, system: dict | None = None) -> None:
    """The database's facts; ``system``: the job's system facts (:func:`dlscope.system.job_facts`), one key each."""
    meta = {**(system or {}), "schema_version": str(SCHEMA_VERSION), "dlscope_version": __version__,
            "profile_name": profile_name,
            "created_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "extra_json": json.dumps(extra, default=str)}
    conn.executemany("INSERT OR REPLACE INTO dlscope_meta (key, value) VALUES (?, ?)", list(meta.items()))


def write_sources(conn: sqlite3.Connection, sources: list[dict]) -> None:
    rows = [(i, s.get("source_path", ""), s.get("source_format", ""), s.get("rank", 0), s.get("world_size", 1),
             s.get("hostname", ""), json.dumps(s, default=str)) for i, s in enumerate(sources)]
    conn.executemany("INSERT INTO sources VALUES (?, ?, ?, ?, ?, ?, ?)", rows)


def write_timeline_arrays(conn: sqlite3.Connection, arrays: dict[int, dict[str, bytes]]) -> None:
    """Store each rank's timeline arrays (``analyze.timeline.RankTimeline.to_arrays``), inside the caller's
    transaction."""
    conn.executemany("INSERT INTO timeline_arrays (rank, name, data) VALUES (?, ?, ?)",
                     [(rank, name, data) for rank, named in sorted(arrays.items()) for name, data in named.items()])


def stored_name(table: str) -> str:
    """The database table holding a model table's rows (an op call is a row of ``op_instances``)."""
    return "op_instances" if table == "ops" else table


def split_ops(ops: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per-node strings once (op_nodes), per-call numbers (op_instances)."""
    return ops.drop_duplicates("node_id"), ops


#: rows handed to ADBC at a time (a batch of Arrow views of the frame's columns)
INGEST_ROWS = 65_536


def _arrow_batches(frame: pd.DataFrame, columns: list[str]) -> pa.RecordBatchReader:
    """The frame's columns as Arrow record batches, converted once: numbers, pandas' Arrow-backed strings and the
    categoricals' codes are taken as they are (no copy), so the writer holds no copy of a table; each column's
    type is inferred from all its rows (one all-missing object column: a null column, read as NULL)."""
    table = pa.Table.from_pandas(frame[columns], preserve_index=False)
    batches = table.to_batches(max_chunksize=INGEST_ROWS)
    return pa.RecordBatchReader.from_batches(table.schema, _unless_given_up(batches))


def _unless_given_up(batches: list[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The batches, one at a time, until the caller of a writer thread gives up (a forked writer is killed)."""
    for batch in batches:
        stop_if_given_up()
        yield batch


#: The ingest's SQLite page cache, KiB; it also bounds each index build's in-memory sort (a larger sort spills
#: sorted runs to a temporary file that SQLite unlinks as it opens it). A larger cache only holds pages that are
#: written anyway: on the benchmark trace 8 MiB instead of 256 MiB takes ~115 MiB off the writer's private memory
#: at the same CPU (1.8-1.9 s either way), and on a kernels table ten times larger its 13 index builds take
#: ~100 instead of 553 MiB and slightly less CPU (bench/README.md, "h23write"; bench/writer_memory.py).
INGEST_CACHE_KIB = 8 * 1024


class _ArrowIngest:
    """Bulk-load frames into a closed database file through ADBC (Arrow in, no per-row Python), and build the
    indexes there: ADBC's own SQLite is newer than the one Python links here (3.53 beside 3.40) and sorts an
    index build about a quarter cheaper. Its page cache is small (``INGEST_CACHE_KIB``).

    ADBC links its own copy of SQLite; two SQLite libraries must never have one file open at the same
    time in one process (their POSIX locks and WAL maps do not know of each other), so this runs while
    no sqlite3 connection to the file is open.

    ADBC's low-level statements, not its DB-API module: that one imports ``pyarrow.dataset`` and with it Arrow's
    file systems (S3, GCS, Azure, HDFS), Parquet, ORC and Substrait, ~7 MiB of pages in every process that writes,
    none of which an ingest uses.
    """

    def __init__(self, path: str, columns_of: dict[str, list[str]]):
        self.path, self.columns_of = path, columns_of

    def __enter__(self) -> _ArrowIngest:
        import adbc_driver_manager
        import adbc_driver_sqlite

        self.db = adbc_driver_sqlite.connect(self.path)
        try:
            self.conn = adbc_driver_manager.AdbcConnection(self.db)  # in autocommit: pragmas outside a transaction
        except BaseException:
            self.db.close()
            raise
        try:
            for statement in ("PRAGMA journal_mode=OFF", "PRAGMA synchronous=OFF",
                              f"PRAGMA cache_size=-{INGEST_CACHE_KIB}", "BEGIN"):
                self._execute(statement)  # no journal, no fsync: the file is renamed into place only when complete
        except BaseException:
            self._close()
            raise
        return self

    def _statement(self):
        from adbc_driver_manager import AdbcStatement

        return AdbcStatement(self.conn)

    def _execute(self, statement: str) -> None:
        self.rows(statement)

    def rows(self, query: str) -> list[tuple]:
        with self._statement() as stmt:
            stmt.set_sql_query(query)
            stream, _ = stmt.execute_query()
            table = pa.RecordBatchReader.from_stream(stream).read_all()
        return list(zip(*(column.to_pylist() for column in table.columns)))

    def value(self, query: str):
        """The one value a query gives."""
        return self.rows(query)[0][0]

    def execute_script(self, script: str) -> None:
        """Run ``;``-separated statements without parameters (the schema's CREATE INDEX lists)."""
        for statement in script.split(";"):
            if statement.strip():
                stop_if_given_up()
                self._execute(statement)

    def add(self, name: str, frame: pd.DataFrame) -> None:
        if name == "ops":
            nodes, instances = split_ops(frame)
            self.add("op_nodes", nodes)
            self.add("op_instances", instances)
            return
        if frame.empty:
            return
        import adbc_driver_manager as adbc

        columns = [c for c in self.columns_of[name] if c in frame.columns]
        try:
            with self._statement() as stmt:
                stmt.set_options(**{adbc.INGEST_OPTION_TARGET_TABLE: name,
                                    adbc.INGEST_OPTION_MODE: adbc.INGEST_OPTION_MODE_APPEND})
                stmt.bind_stream(_arrow_batches(frame, columns))
                stmt.execute_update()
        except Exception:
            stop_if_given_up()  # the batches ended because the caller gave up: say so, not ADBC's wrapping of it
            raise

    def _close(self) -> None:
        try:
            self.conn.close()
        finally:
            self.db.close()

    def __exit__(self, kind, value, tb) -> None:
        try:
            if kind is None:
                self._execute("COMMIT")
        finally:
            self._close()


def add_aggregation_columns(conn: sqlite3.Connection) -> None:
    """Give a database written before an aggregation table or column existed that table or column (NULL: not
    computed then), so `dlscope aggregate` can write today's aggregations into it; raw tables are left alone."""
    model = sqlite3.connect(":memory:")
    try:
        model.executescript(DDL)
        for name, sql in model.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'").fetchall():
            if name not in ("aggregations", "findings") and not name.startswith("agg_"):
                continue
            have = table_columns(conn, name)
            if not have:
                conn.execute(sql)
                continue
            for _, col, kind, *_ in model.execute(f'PRAGMA table_info("{name}")').fetchall():
                if col not in have:
                    conn.execute(f'ALTER TABLE "{name}" ADD COLUMN "{col}" {kind}')
    finally:
        model.close()


def write_aggregation(conn: sqlite3.Connection, agg) -> int:
    """Store one :class:`~dlscope.analyze.aggregation.Aggregation`; returns its agg_id."""
    return write_aggregations(conn, [agg])[0]


AGG_TABLES = {"agg_gpus": "gpus", "agg_iterations": "iterations", "agg_ops": "ops", "agg_op_types": "op_types",
              "agg_kernels": "kernels", "agg_op_kernels": "op_kernels", "agg_groups": "groups",
              "agg_critical_path": "critical_path"}


def _integer_ns(row: dict) -> dict:
    """An aggregation row with its ns figures as integers (avg_iteration_ns is a mean: rounded here)."""
    return {k: round_ns(v) if k.endswith("_ns") else v for k, v in row.items()}


#: the tables written while the critical path's replay runs (:func:`write_agg_tables`): all but its own one;
#: the replay adds one column, critical_path_ns, to those named here, filled in after it
BEFORE_REPLAY = ("agg_gpus", "agg_iterations", "agg_op_types", "agg_op_kernels", "agg_groups", "agg_ops",
                 "agg_kernels")
REPLAY_FILLED = ("agg_ops", "agg_kernels")
#: in what :func:`ingest_agg_tables` returns: the aggregation tables' names are indexed for search already
NAMES_INDEXED = "search_names"


def new_agg_ids(conn: sqlite3.Connection | _ArrowIngest, count: int) -> list[int]:
    """The agg_ids the next ``count`` aggregations get (the first is the run's ``run_id``)."""
    query = "SELECT COALESCE(MAX(agg_id), 0) + 1 FROM aggregations"
    first = conn.value(query) if isinstance(conn, _ArrowIngest) else conn.execute(query).fetchone()[0]
    return list(range(first, first + count))


def _joined(aggs: list, ids: list[int], field: str) -> pd.DataFrame | None:
    """One table of all ``aggs`` with its agg_id column: joined once, the agg_id column made once (not one frame
    copy per aggregation); None when every aggregation's is empty."""
    return _joined_frames([getattr(agg, field) for agg in aggs], ids)


def _joined_frames(frames: list[pd.DataFrame], ids: list[int]) -> pd.DataFrame | None:
    return _with_ids(_join(frames), ids)


class Joined(NamedTuple):
    """One table of every aggregation before its agg_id column (the ids known once the file can be read): the rows
    of the aggregations that have some (their positions ``kept``, their ``sizes``), in order."""

    frame: pd.DataFrame
    kept: list[int]
    sizes: list[int]


def _join(frames: list[pd.DataFrame]) -> Joined | None:
    kept = [i for i, frame in enumerate(frames) if not frame.empty]
    if not kept:
        return None
    parts = [frames[i] for i in kept]
    return Joined(pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0], kept, [len(p) for p in parts])


def _with_ids(joined: Joined | None, ids: list[int]) -> pd.DataFrame | None:
    if joined is None:
        return None
    owner = np.repeat(np.array([ids[i] for i in joined.kept], dtype=np.int64), joined.sizes)
    return joined.frame.assign(agg_id=owner)


def replay_columns(aggs: list, tables) -> dict[str, list[pd.arrays.IntegerArray | None]]:
    """The replay's critical_path_ns of each aggregation (None: none) in the tables it fills, as integers
    (NA: none), as :func:`ingest_agg_tables` waits for them."""
    return {table: [None if (column := getattr(agg, AGG_TABLES[table]).get("critical_path_ns")) is None
                    else pd.array(column, dtype="Int64") for agg in aggs] for table in tables if table in REPLAY_FILLED}


def _after_raw_writer(filled: Callable[[], dict[str, list] | None], raw_ended: int, path: str, aggs: list,
                      tables: list[str]) -> tuple[list[int], dict[str, int | None]]:
    """In the aggregation writer forked before the raw writer ended: :func:`ingest_agg_tables` once the raw
    writer has exited (``raw_ended`` reads its end of file: the raw writer held the pipe's only writing end); the
    one writer of the file at a time. A raw writer that failed is reported by the importing process, which then
    kills this one. ADBC's module is loaded while it waits (~25 ms less after the raw writer's end)."""
    import adbc_driver_manager  # noqa: F401
    import adbc_driver_sqlite  # noqa: F401

    # each table's aggregations joined while the raw writer ends (~60 ms of the 64-rank job's ingest)
    joined = {table: _join([getattr(agg, AGG_TABLES[table]) for agg in aggs]) for table in tables}
    while os.read(raw_ended, 1):
        pass
    os.close(raw_ended)
    return ingest_agg_tables(filled, path, aggs, tables, joined)


def ingest_agg_tables(filled: Callable[[], dict[str, list] | None] | None, path: str, aggs: list,
                      tables: list[str], joined: dict[str, Joined | None] | None = None
                      ) -> tuple[list[int], dict[str, int | None]]:
    """:func:`write_agg_tables` through ADBC into a file no sqlite3 connection has open (``_ArrowIngest``); the
    agg_ids reserved and each table's rowid before its first row (None: its critical_path_ns filled here).
    The tables the replay fills (``REPLAY_FILLED``) get it once ``filled()`` gives it, the replay in
    (:func:`replay_columns`; None: the importing process failed), by one UPDATE each (:func:`_fill_path`), their
    critical_path_ns indexes built after it (``filled`` None: left to :func:`_fill_critical_path`, their
    rowids returned). A table's indexes are dropped before its rows and built again after
    them, as the SQL the schema wrote (one sort instead of an index insert per row). A background writer
    (``filled`` given) also indexes the tables' names for search (``AGG_NAMES``) while it waits for the replay:
    ``NAMES_INDEXED`` in what it returns tells :func:`write_aggregations` it is done. ``joined``: each table's
    aggregations joined already (:func:`_join`)."""
    with _ArrowIngest(path, {}) as ingest:
        ids = new_agg_ids(ingest, len(aggs))
        before: dict[str, int | None] = {}
        waiting: dict[str, tuple[int, list[str]]] = {}
        for table in tables:
            frames = joined[table] if joined is not None else [getattr(agg, AGG_TABLES[table]) for agg in aggs]
            at, deferred = _ingest_agg_table(ingest, table, frames, ids, table in REPLAY_FILLED)
            if at is not None:
                before[table] = at
                if table in REPLAY_FILLED:
                    waiting[table] = at, deferred
        if filled is None:
            for _, deferred in waiting.values():
                ingest.execute_script(";".join(deferred))
            return ids, before
    # the rest through sqlite3 (the search tables' trigram index is its SQLite's, as the importing process's),
    # once ADBC's SQLite has closed the file: the names while the replay ends, then its column
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA journal_mode=OFF")  # as the ingest: the file is renamed into place only when complete
        conn.execute("PRAGMA synchronous=OFF")
        if set(tables) >= {t.split(".")[0] for t in AGG_NAMES}:
            index_names(conn, AGG_NAMES)
            conn.commit()
            before[NAMES_INDEXED] = None
        columns = filled() if waiting else {}
        if columns is None:
            raise EOFError("the replay's figures never came")
        for table, (at, deferred) in waiting.items():
            payload = _path_json(columns[table], [len(getattr(agg, AGG_TABLES[table])) for agg in aggs])
            if payload is not None:
                _fill_path(conn.execute, table, at, payload)
            for sql in deferred:
                conn.execute(sql)
            before[table] = None
        conn.commit()
    finally:
        conn.close()
    return ids, before


def _ingest_agg_table(ingest: _ArrowIngest, table: str, frames: list[pd.DataFrame] | Joined | None, ids: list[int],
                      defer_path_indexes: bool = False) -> tuple[int | None, list[str]]:
    """One aggregation table's rows (``frames``: each aggregation's, or joined already), its indexes built after
    them; returns the table's largest rowid before them (None: no rows) and the SQL of the critical_path_ns indexes
    left to build (``defer_path_indexes``)."""
    joined = _joined_frames(frames, ids) if isinstance(frames, list) else _with_ids(frames, ids)
    if joined is None:
        return None, []
    before = ingest.value(f'SELECT COALESCE(MAX(rowid), 0) FROM "{table}"')
    ingest.columns_of[table] = [r[1] for r in ingest.rows(f'PRAGMA table_info("{table}")')]
    indexes = ingest.rows("SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL "
                          f"AND tbl_name = '{table}'")
    for name, _ in indexes:
        ingest.execute_script(f'DROP INDEX "{name}"')
    ingest.add(table, joined)
    deferred = [sql for _, sql in indexes if defer_path_indexes and "critical_path_ns" in sql]
    for _, sql in indexes:
        if sql not in deferred:
            ingest.execute_script(sql)
    return before, deferred


class _Sent:
    """ForkedCall's inbox for a thread (where dlscope must not fork): the one value sent, waited for."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.value = None

    def send(self, value) -> None:
        self.value = value
        self.event.set()

    def __call__(self):
        self.event.wait()
        return self.value


def write_agg_tables(conn: sqlite3.Connection, aggs: list, ids: list[int], tables) -> dict[str, int]:
    """The named per-aggregation tables (``AGG_TABLES`` keys) of ``aggs``, one insert per table; returns each
    table's rowid before its first row (the rows follow it in order: SQLite gives a new row the largest + 1)."""
    before = {}
    for table in tables:
        joined = _joined(aggs, ids, AGG_TABLES[table])
        if joined is not None:
            before[table] = conn.execute(f'SELECT COALESCE(MAX(rowid), 0) FROM "{table}"').fetchone()[0]
            insert_frame(conn, table, joined)
    return before


def _fill_critical_path(conn: sqlite3.Connection, aggs: list, written: dict[str, int | None]) -> None:
    """The replay's critical_path_ns of the rows written before it (NULL there until now), by rowid
    (:func:`_fill_path`); the column's index built again after the rows' values, not kept up to date row by row."""
    for table, before in written.items():
        if table not in REPLAY_FILLED or before is None:  # (None: written with them)
            continue
        payload = _path_json([getattr(agg, AGG_TABLES[table]).get("critical_path_ns") for agg in aggs],
                             [len(getattr(agg, AGG_TABLES[table])) for agg in aggs])
        if payload is None:  # not replayed: NULL as written
            continue
        on_column = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = ? "
                                 "AND sql LIKE '%critical_path_ns%'", (table,)).fetchall()
        for name, _ in on_column:
            conn.execute(f'DROP INDEX "{name}"')
        _fill_path(conn.execute, table, before, payload)
        for _, sql in on_column:
            conn.execute(sql)


def _path_json(columns: list, lengths: list[int]) -> str | None:
    """One table's critical_path_ns in row order as a JSON array (null: no value), from each aggregation's
    column (None: not replayed), as integers from the start (a float loses 2**53 and up); None when no row has
    one."""
    values = np.zeros(sum(lengths), np.int64)
    known = np.zeros(len(values), bool)
    at = 0
    for column, length in zip(columns, lengths):
        if column is not None and length:
            series = pd.Series(column, copy=False)
            has = series.notna().to_numpy()
            values[at:at + length][has] = series.to_numpy(dtype=np.int64, na_value=0)[has]
            known[at:at + length] = has
        at += length
    if not known.any():
        return None
    return "[" + ",".join(np.where(known, values.astype(str), "null").tolist()) + "]"


def _fill_path(execute: Callable, table: str, before: int, payload: str) -> None:
    """critical_path_ns of the rows after rowid ``before`` from ``payload`` (:func:`_path_json`): sent once into
    a temporary table keyed by rowid, then one UPDATE from it (one statement per row cost the 64-rank job's 20k
    rows 0.05 s more); rows without a value are left as they are. ``execute``: sqlite3's or ADBC's."""
    execute("CREATE TEMP TABLE replay_filled (filled_rowid INTEGER PRIMARY KEY, value INTEGER)")
    execute("INSERT INTO temp.replay_filled SELECT key + ?, value FROM json_each(?) WHERE type = 'integer'",
            (before + 1, payload))
    execute(f'UPDATE "{table}" SET critical_path_ns = (SELECT value FROM temp.replay_filled '
            f'WHERE filled_rowid = "{table}".rowid) WHERE rowid IN (SELECT filled_rowid FROM temp.replay_filled)')
    execute("DROP TABLE temp.replay_filled")


def write_aggregations(conn: sqlite3.Connection, aggs: list, ids: list[int] | None = None,
                       written: dict[str, int | None] | None = None) -> list[int]:
    """Store aggregations (one per rank of a job) with one insert per table; returns their agg_ids.
    ``ids``/``written``: the ids of :func:`new_agg_ids` and what :func:`write_agg_tables` returned for the tables
    it wrote before the critical path's replay (their critical_path_ns filled in here)."""
    written = written or {}
    ids = new_agg_ids(conn, len(aggs)) if ids is None else ids
    created = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    insert_frame(conn, "aggregations", pd.DataFrame([{**_integer_ns(agg.row), "agg_id": agg_id, "run_id": ids[0],
                                                      "created_at": created}
                                                     for agg_id, agg in zip(ids, aggs)]))
    _fill_critical_path(conn, aggs, written)
    write_agg_tables(conn, aggs, ids, [t for t in AGG_TABLES if t not in written])
    if NAMES_INDEXED not in written:
        index_names(conn, AGG_NAMES)
    return ids
