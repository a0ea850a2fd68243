"""The writers' ADBC ingest uses ADBC's low-level statements, not its DB-API module (which imports
``pyarrow.dataset`` and Arrow's file systems, Parquet, ORC and Substrait: ~7 MiB of pages in each writing
process): an import loads none of them; the ingest's rows and queries agree with sqlite3's own reading."""

from __future__ import annotations

import sqlite3
import subprocess
import sys

import pandas as pd
import pytest
from conftest import data_file, sql

from dlscope.store.writer import _ArrowIngest

TRACE = ("kineto", "hta_a100_nccl_rank0of2_3steps.json.gz")


def test_an_import_loads_neither_the_dbapi_nor_pyarrow_dataset(tmp_path):
    out = tmp_path / "out.sqlite"
    code = ("import sys\nfrom dlscope.pipeline import build_database\n"
            f"build_database([{str(data_file(*TRACE))!r}], {str(out)!r}, progress=False)\n"
            "print(sorted(m for m in sys.modules if m.endswith('dbapi') or m.startswith('pyarrow.dataset')"
            " or m.startswith('pyarrow._s3') or m.startswith('pyarrow._parquet')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split("\n")[-2] == "[]"  # (sqlite3.dbapi2 is Python's own: not matched by 'dbapi' at the end)
    assert sql(out, "SELECT COUNT(*) FROM kernels")[0][0] > 1000


def test_the_ingest_appends_a_frame_and_reads_rows_as_sqlite3_does(tmp_path):
    path = tmp_path / "t.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (a INTEGER, b TEXT, c REAL)")
    conn.execute("INSERT INTO t VALUES (1, 'x', 0.5), (NULL, 'it''s', NULL)")
    conn.commit()
    conn.close()
    frame = pd.DataFrame({"a": [7, -3], "b": ["é\"; DROP TABLE t; --", None], "c": [1.25, 2.0]})
    with _ArrowIngest(str(path), {"t": ["a", "b", "c"]}) as ingest:
        ingest.add("t", frame)
        ingest.execute_script("CREATE INDEX t_a ON t (a); ")
        read = ingest.rows("SELECT a, b, c FROM t ORDER BY rowid")
        assert ingest.value("SELECT COUNT(*) FROM t") == 4
        assert ingest.rows("SELECT a FROM t WHERE a > 100") == []
        assert [r[1] for r in ingest.rows('PRAGMA table_info("t")')] == ["a", "b", "c"]
    expected = sql(path, "SELECT a, b, c FROM t ORDER BY rowid")
    assert read == expected == [(1, "x", 0.5), (None, "it's", None), (7, "é\"; DROP TABLE t; --", 1.25),
                                (-3, None, 2.0)]
    assert sql(path, "SELECT name FROM sqlite_master WHERE type = 'index'") == [("t_a",)]


def test_a_failed_statement_raises_and_lets_the_file_go(tmp_path):
    path = tmp_path / "t.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (a INTEGER)")
    conn.commit()
    conn.close()
    with pytest.raises(Exception, match="no_such_table"), _ArrowIngest(str(path), {"t": ["a"]}) as ingest:
        ingest.add("t", pd.DataFrame({"a": [1, 2]}))
        ingest.execute_script("SELECT * FROM no_such_table")
    conn = sqlite3.connect(path, timeout=0)  # no lock left: a writer gets the file at once
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO t VALUES (3)")
        conn.commit()
    finally:
        conn.close()
