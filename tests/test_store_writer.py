"""The raw-table writer: chunked Arrow ingest gives the same database as one chunk per table."""

from __future__ import annotations

import sqlite3

import pandas as pd
from conftest import data_file

from dlscope.pipeline import build_database
from dlscope.store import writer

RAW = ("op_nodes", "op_instances", "ranges", "api_calls", "kernels", "memops", "memory", "gpus", "iterations")


def _tables(path) -> dict[str, pd.DataFrame]:
    with sqlite3.connect(path) as conn:
        return {t: pd.read_sql_query(f"SELECT * FROM {t} ORDER BY rowid", conn) for t in RAW}


def test_chunked_ingest_writes_the_same_rows_as_whole_tables(tmp_path, monkeypatch):
    path = data_file("kineto", "hta_a100_nccl_rank0of2_3steps.json.gz")
    whole = build_database([path], tmp_path / "whole.sqlite", progress=False)
    monkeypatch.setattr(writer, "INGEST_ROWS", 500)  # the forked writer inherits it
    chunked = build_database([path], tmp_path / "chunked.sqlite", progress=False)
    a, b = _tables(whole), _tables(chunked)
    assert len(a["kernels"]) > 2_000 and len(a["op_instances"]) > 5_000  # many chunks
    for table in RAW:
        pd.testing.assert_frame_equal(a[table], b[table], obj=table)
