"""``store.reader.arrow_table``: a query's rows as Arrow columns of the asked types, NULLs kept, read through
ADBC from a database file and through the sqlite3 connection from an in-memory one, the same either way."""

from __future__ import annotations

import sqlite3

import pyarrow as pa

from dlscope.store.reader import arrow_table

SCHEMA = pa.schema([("n", pa.int64()), ("x", pa.float64()), ("s", pa.string())])
ROWS = [(1, 0.5, "a"), (None, None, None), (2**62, -1.25, "é")]


def _fill(conn: sqlite3.Connection) -> None:
    conn.execute("CREATE TABLE t (n INTEGER, x REAL, s TEXT)")
    conn.executemany("INSERT INTO t VALUES (?, ?, ?)", ROWS)
    conn.commit()


def test_a_file_and_an_in_memory_database_read_alike(tmp_path):
    disk = sqlite3.connect(tmp_path / "t.sqlite")
    memory = sqlite3.connect(":memory:")
    for conn in (disk, memory):
        _fill(conn)
        table = arrow_table(conn, "SELECT n, x, s FROM t WHERE n IS NULL OR n > ? ORDER BY rowid", (0,), SCHEMA)
        assert table.schema == SCHEMA
        assert [tuple(r.values()) for r in table.to_pylist()] == ROWS
    empty = arrow_table(disk, "SELECT n, x, s FROM t WHERE n < ?", (0,), SCHEMA)
    assert empty.schema == SCHEMA and len(empty) == 0
