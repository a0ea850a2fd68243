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


def test_search_keys_hash_each_kernels_own_name_pair_found_on_codes():
    """search_key, found once per distinct pair on integer codes, is the SipHash of that kernel's own (kernel
    name, outermost op name) row, hashed row by row here; pairs come in order of first appearance with their
    kernels; a kernel without a name or an outermost op (or one whose op has no name) hashes as "\\x00none"."""
    kernels = pd.DataFrame({"name": pd.Categorical(["gemm", "relu", "gemm", None, "gemm", "relu"]),
                            "root_op_id": [10, 11, 10, 10, -1, 12]})
    ops = pd.DataFrame({"op_id": [12, 10, 11], "name": pd.Categorical(["aten::mm", "aten::mm", None])})
    pairs = writer.kernel_pairs(kernels, ops)
    rows = [("gemm", "aten::mm"), ("relu", None), ("gemm", "aten::mm"), (None, "aten::mm"), ("gemm", None),
            ("relu", "aten::mm")]
    expected = [int(pd.util.hash_pandas_object(pd.DataFrame({"k": [k or "\x00none"], "o": [o or "\x00none"]}),
                                               index=False).iloc[0].astype("int64")) for k, o in rows]
    assert writer.search_keys(pairs).tolist() == expected
    found = pairs.names[["k", "o", "kernels"]].itertuples(index=False)
    assert [(None if pd.isna(k) else k, None if pd.isna(o) else o, n) for k, o, n in found] == [
        ("gemm", "aten::mm", 2), ("relu", None, 1), (None, "aten::mm", 1), ("gemm", None, 1), ("relu", "aten::mm", 1)]


def test_a_text_column_missing_in_the_first_batches_is_still_stored(tmp_path, monkeypatch):
    """Each column's Arrow type comes from all its rows: names first met after the first batch are stored, and a
    column missing in every row reads NULL."""
    monkeypatch.setattr(writer, "INGEST_ROWS", 2)
    names = [None, None, None, "step", None, "forward"]
    tree = pd.DataFrame({"rank": 0, "node_id": range(6), "parent_node_id": -1, "pid": 1, "tid": 1, "depth": 0,
                         "name": pd.Series(names, dtype=object), "file": pd.Series([None] * 6, dtype=object),
                         "line": 3, "function": pd.Series(names, dtype=object), "calls": 1, "total_ns": 5,
                         "self_ns": 2})
    path = str(tmp_path / "tree.sqlite")
    writer.write_raw_file(path, {"python_tree": tree})
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT node_id, name, file, function FROM python_tree ORDER BY rowid").fetchall()
    assert rows == [(i, n, None, n) for i, n in enumerate(names)]
