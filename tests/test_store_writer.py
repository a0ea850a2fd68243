"""The raw-table writer: chunked Arrow ingest gives the same database as one chunk per table."""

from __future__ import annotations

import sqlite3

import numpy as np
import pandas as pd
import pytest
from conftest import data_file
from process_watch import children

from dlscope.errors import DlscopeError
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


def _two_rank_aggs() -> list:
    """A hand-made 2-rank aggregation: NULLs (None, NaN, pd.NA), ints past 2**53, a rank with no kernels."""
    from dlscope.analyze.aggregation import Aggregation

    big = 2**62 + 12_345  # not a float: exact only if bound as an integer
    empty = pd.DataFrame()

    def agg(rank: int, ops: pd.DataFrame, kernels: pd.DataFrame, groups: pd.DataFrame) -> Aggregation:
        return Aggregation(row={"rank": rank, "scope": "all", "wall_clock_ns": big + rank}, gpus=empty,
                           iterations=empty, ops=ops, op_types=empty, kernels=kernels, op_kernels=empty,
                           groups=groups)

    return [
        agg(0, pd.DataFrame({"node_id": [5, 7, 9], "rank": 0, "op_name": ["aten::mm", None, "a'b;--"],
                             "calls": pd.array([1, None, big], dtype="Int64"), "mfu": [0.5, np.nan, 1e-300]}),
            pd.DataFrame({"kernel_name": ["gemm", "relu"], "calls": [3, 4], "gpu_time_ns": [big, 0]}),
            pd.DataFrame({"group_id": [1, 2], "parent_group_id": [None, 1], "name": ["root", None]})),
        agg(1, pd.DataFrame({"node_id": [5, 8], "rank": 1, "op_name": ["aten::mm", "aten::add"],
                             "calls": pd.array([2, 3], dtype="Int64"), "mfu": [np.nan, 0.25]}),
            empty, pd.DataFrame({"group_id": [1], "parent_group_id": [None], "name": ["root"]})),
    ]


def _stored(conn: sqlite3.Connection, table: str, columns: list[str]) -> list[tuple]:
    return conn.execute(f"SELECT agg_id, {', '.join(columns)} FROM {table} ORDER BY rowid").fetchall()


def _expected(aggs: list, ids: list[int], field: str, columns: list[str]) -> list[tuple]:
    """The frames' rows as Python values, missing as None: read straight from the hand-made frames."""
    rows = []
    for agg_id, agg in zip(ids, aggs):
        frame = getattr(agg, field)
        for i in range(len(frame)):
            cells = [frame[c].iloc[i] if c in frame else None for c in columns]
            rows.append((agg_id, *[None if c is None or c is pd.NA or (isinstance(c, float) and c != c)
                                   else (c.item() if hasattr(c, "item") else c) for c in cells]))
    return rows


def _check_rows(conn: sqlite3.Connection, aggs: list, ids: list[int]) -> None:
    for table, field, columns in (("agg_ops", "ops", ["node_id", "rank", "op_name", "calls", "mfu",
                                                      "critical_path_ns"]),
                                  ("agg_kernels", "kernels", ["kernel_name", "calls", "gpu_time_ns",
                                                              "critical_path_ns"]),
                                  ("agg_groups", "groups", ["group_id", "parent_group_id", "name"]),
                                  ("agg_critical_path", "critical_path", ["rank", "category", "time_ns"])):
        assert _stored(conn, table, columns) == _expected(aggs, ids, field, columns), table
    assert conn.execute("SELECT agg_id, run_id, rank, wall_clock_ns FROM aggregations ORDER BY rowid").fetchall() \
        == [(ids[0], ids[0], 0, 2**62 + 12_345), (ids[1], ids[0], 1, 2**62 + 12_346)]
    assert conn.execute("SELECT typeof(calls) FROM agg_ops WHERE node_id = 9").fetchone() == ("integer",)


def _replayed(aggs: list) -> None:
    """What the critical path's replay adds (``whatif.stored.apply``/``_not_replayed``): one rank's figures,
    the other's NULL."""
    aggs[0].ops = aggs[0].ops.assign(critical_path_ns=np.array([2**62 + 1, 0, 17], np.int64))
    aggs[0].kernels = aggs[0].kernels.assign(critical_path_ns=np.array([0, 2**61], np.int64))
    aggs[0].critical_path = pd.DataFrame({"rank": [0, 1], "category": ["gpu", "comm"], "time_ns": [2**62, 3]})
    aggs[1].ops = aggs[1].ops.assign(critical_path_ns=None)


def test_aggregations_written_at_once_read_back_as_the_frames_they_came_from(tmp_path):
    aggs = _two_rank_aggs()
    _replayed(aggs)
    writer.write_raw_file(str(tmp_path / "a.sqlite"), {})
    with sqlite3.connect(tmp_path / "a.sqlite") as conn:
        ids = writer.write_aggregations(conn, aggs)
        assert ids == [1, 2]
        _check_rows(conn, aggs, ids)


def test_aggregations_written_before_the_replay_get_its_figures_after_it(tmp_path):
    """The tables written while the replay runs (its critical_path_ns NULL then) end with the same rows as
    the tables written after it, and a second run's rows go after the first's."""
    writer.write_raw_file(str(tmp_path / "a.sqlite"), {})
    with sqlite3.connect(tmp_path / "a.sqlite") as conn:
        writer.write_aggregations(conn, _two_rank_aggs())  # an earlier run: rowids and agg_ids taken
        aggs = _two_rank_aggs()
        ids = writer.new_agg_ids(conn, len(aggs))
        written = writer.write_agg_tables(conn, aggs, ids, writer.BEFORE_REPLAY)
        _replayed(aggs)
        assert writer.write_aggregations(conn, aggs, ids, written) == ids == [3, 4]
        later = [r for r in _stored(conn, "agg_ops", ["node_id", "critical_path_ns"]) if r[0] >= 3]
        assert later == [(3, 5, 2**62 + 1), (3, 7, 0), (3, 9, 17), (4, 5, None), (4, 8, None)]
        conn.execute("DELETE FROM aggregations WHERE agg_id < 3")
        for table in writer.AGG_TABLES:
            conn.execute(f"DELETE FROM {table} WHERE agg_id < 3")
        _check_rows(conn, aggs, ids)


def test_aggregation_tables_ingested_before_the_database_opens_read_back_as_their_frames(tmp_path, monkeypatch):
    """The import's path: the tables written through ADBC (Arrow in) in the background while the replay runs,
    before the sqlite3 connection opens; those the replay fills wait there for its column, sent when the database
    is next waited for; the rest after it."""
    monkeypatch.setattr(writer, "BESIDE_AGG_ROWS", 0)  # a background writer for these few rows too
    aggs = _two_rank_aggs()
    with writer.atomic_database(tmp_path / "a.sqlite", force=False) as db:
        pending = db.write_agg_tables(aggs, writer.BEFORE_REPLAY)
        _replayed(aggs)
        ids, written = pending()
        assert ids == [1, 2] and written["agg_groups"] == 0
        assert written["agg_ops"] is None and written["agg_kernels"] is None  # nothing left to fill
        writer.write_aggregations(db.connect(), aggs, ids, written)
    with sqlite3.connect(tmp_path / "a.sqlite") as conn:
        _check_rows(conn, aggs, ids)
        assert conn.execute("SELECT typeof(critical_path_ns) FROM agg_ops WHERE agg_id = 1 AND node_id = 5")\
            .fetchone() == ("integer",)


def test_the_schema_is_created_without_a_journal_yet_the_file_keeps_its_pages_and_journal(tmp_path, monkeypatch):
    """Each CREATE of the schema commits on its own: with a journal, ~70 commits and their fsyncs. The new file's
    schema is made with no journal and no sync (nobody reads it before it is renamed into place); the file still
    has 16 KiB pages, every table and index, and readers get SQLite's default rollback journal."""
    seen = []

    class Watched(sqlite3.Connection):
        def executescript(self, script):
            seen.append((self.execute("PRAGMA journal_mode").fetchone()[0],
                         self.execute("PRAGMA synchronous").fetchone()[0]))
            return super().executescript(script)

    connect = sqlite3.connect
    monkeypatch.setattr(sqlite3, "connect", lambda *a, **k: connect(*a, factory=Watched, **k))
    path = str(tmp_path / "empty.sqlite")
    writer.write_raw_file(path, {})
    assert seen == [("off", 0)]  # the one script: the DDL
    monkeypatch.undo()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA page_size").fetchone()[0] == 16384
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        made = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    model = sqlite3.connect(":memory:")
    model.executescript(writer.DDL + writer.INDEXES)
    assert {r[0] for r in model.execute("SELECT name FROM sqlite_master")} <= made


def test_index_builds_larger_than_the_ingest_cache_spill_to_disk_and_match_their_tables(tmp_path, monkeypatch):
    """The ingest's page cache also bounds each index build's in-memory sort (at least SQLite's 250 pages): a
    larger sort spills sorted runs to a temporary file. A real trace's kernels, repeated until their names
    alone outgrow that bound, written with a 64 KiB cache: the rows read back as written and SQLite's integrity
    check finds every index entry for entry equal to its table."""
    path = data_file("kineto", "hta_a100_nccl_rank0of2_3steps.json.gz")
    with sqlite3.connect(build_database([path], tmp_path / "trace.sqlite", progress=False)) as conn:
        kernels = pd.read_sql_query("SELECT * FROM kernels ORDER BY kernel_id", conn)
    times = -(-(250 * writer.PAGE_SIZE * 2) // int(kernels["name"].str.len().sum()))  # twice the sort's bound
    many = pd.concat([kernels] * times, ignore_index=True)
    many["kernel_id"] = np.arange(len(many))
    monkeypatch.setattr(writer, "INGEST_CACHE_KIB", 64)
    out = str(tmp_path / "spilled.sqlite")
    writer.write_raw_file(out, {"kernels": many})
    with sqlite3.connect(out) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        back = pd.read_sql_query("SELECT * FROM kernels ORDER BY kernel_id", conn)
        indexes = conn.execute("SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND tbl_name = 'kernels'"
                               ).fetchone()[0]
    pd.testing.assert_frame_equal(back.drop(columns="search_key"), many.drop(columns="search_key"),
                                  check_dtype=False)
    assert indexes >= 13
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spilled.sqlite", "trace.sqlite"]  # no temporary file


def _partly_replayed(aggs: list) -> None:
    """Rank 0's ops with a critical_path_ns for two of three rows (the middle one has none), its kernels with
    both; rank 1 not replayed."""
    aggs[0].ops = aggs[0].ops.assign(critical_path_ns=pd.array([2**62 + 1, None, 17], dtype="Int64"))
    aggs[0].kernels = aggs[0].kernels.assign(critical_path_ns=np.array([0, 2**61], np.int64))
    aggs[1].ops = aggs[1].ops.assign(critical_path_ns=None)


def _path_rows(conn: sqlite3.Connection, table: str, key: str) -> list[tuple]:
    return conn.execute(f"SELECT agg_id, {key}, critical_path_ns, typeof(critical_path_ns) FROM {table} "
                        "ORDER BY rowid").fetchall()


def test_the_critical_path_filled_after_the_rows_leaves_rows_without_a_value_null(tmp_path):
    """One UPDATE from a temporary table fills the rows written before the replay: a row with no value stays
    NULL, the others get their integers exactly (past 2**53); the column's index is there again and agrees with
    the table, and the temporary table is gone."""
    writer.write_raw_file(str(tmp_path / "a.sqlite"), {})
    with sqlite3.connect(tmp_path / "a.sqlite") as conn:
        aggs = _two_rank_aggs()
        ids = writer.new_agg_ids(conn, len(aggs))
        written = writer.write_agg_tables(conn, aggs, ids, writer.BEFORE_REPLAY)
        _partly_replayed(aggs)
        writer.write_aggregations(conn, aggs, ids, written)
        assert _path_rows(conn, "agg_ops", "node_id") == [
            (1, 5, 2**62 + 1, "integer"), (1, 7, None, "null"), (1, 9, 17, "integer"),
            (2, 5, None, "null"), (2, 8, None, "null")]
        assert _path_rows(conn, "agg_kernels", "kernel_name") == [(1, "gemm", 0, "integer"),
                                                                  (1, "relu", 2**61, "integer")]
        indexes = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
        assert {"agg_ops_critical_path", "agg_kernels_critical_path"} <= indexes
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert conn.execute("SELECT COUNT(*) FROM sqlite_temp_master").fetchone() == (0,)
        # the index is read for a sort by the column: the same order as the values say
        by_index = conn.execute("SELECT node_id FROM agg_ops INDEXED BY agg_ops_critical_path WHERE agg_id = 1 "
                                "ORDER BY critical_path_ns").fetchall()
        assert by_index == [(7,), (9,), (5,)]


@pytest.mark.parametrize("beside", [True, False])
def test_the_background_writer_gets_the_replays_column_and_writes_rows_without_one_null(tmp_path, monkeypatch,
                                                                                        beside):
    """The import's path: the background writer's tables the replay fills take its column as sent once the
    replay is in, a row with no value NULL, integers exact; nothing left to fill afterwards. Too few rows for a
    background writer to pay: ingested here, the column filled after the replay, the same rows."""
    if beside:
        monkeypatch.setattr(writer, "BESIDE_AGG_ROWS", 0)
    aggs = _two_rank_aggs()
    with writer.atomic_database(tmp_path / "a.sqlite", force=False) as db:
        pending = db.write_agg_tables(aggs, writer.BEFORE_REPLAY)
        assert (db.raw_writer is not None) == beside
        _partly_replayed(aggs)
        ids, written = pending()
        assert written["agg_ops"] == written["agg_kernels"] == (None if beside else 0)
        writer.write_aggregations(db.connect(), aggs, ids, written)
    with sqlite3.connect(tmp_path / "a.sqlite") as conn:
        assert _path_rows(conn, "agg_ops", "node_id") == [
            (1, 5, 2**62 + 1, "integer"), (1, 7, None, "null"), (1, 9, 17, "integer"),
            (2, 5, None, "null"), (2, 8, None, "null")]
        assert _path_rows(conn, "agg_kernels", "kernel_name") == [(1, "gemm", 0, "integer"),
                                                                  (1, "relu", 2**61, "integer")]
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)


@pytest.mark.parametrize("where", ["importing process", "background writer"])
def test_a_failure_while_the_aggregation_tables_are_written_leaves_no_file_and_no_writer(tmp_path, monkeypatch,
                                                                                         where):
    """The importing process failing before it sends the replay's column, or the background writer failing in
    the middle of its tables (agg_groups written, agg_ops not): one line naming the database, no file left in
    the folder, no child left running."""
    monkeypatch.setattr(writer, "BESIDE_AGG_ROWS", 0)
    if where == "importing process":
        monkeypatch.setattr(writer, "replay_columns", lambda *_: 1 / 0)
    else:
        ingest = writer._ingest_agg_table

        def failing(ingest_, table, *args):
            if table == "agg_ops":
                raise OSError(28, "No space left on device")
            return ingest(ingest_, table, *args)
        monkeypatch.setattr(writer, "_ingest_agg_table", failing)  # the forked writer inherits it
    before = children()
    with pytest.raises(DlscopeError) as failed:
        with writer.atomic_database(tmp_path / "a.sqlite", force=False) as db:
            pending = db.write_agg_tables(_two_rank_aggs(), writer.BEFORE_REPLAY)
            pending()
    text = str(failed.value)
    assert text.startswith(f"{tmp_path / 'a.sqlite'}: writing the database failed") and "\n" not in text
    assert ("ZeroDivisionError" if where == "importing process" else "No space left") in text
    assert list(tmp_path.iterdir()) == []
    assert children() <= before


def test_where_dlscope_must_not_fork_a_thread_writes_the_aggregation_tables_the_same(tmp_path, monkeypatch):
    """Inside a user's process (no fork) the background writer is a thread, sent the replay's column the same
    way: the same rows, and a --force replacement leaves the one database."""
    monkeypatch.setattr(writer, "can_fork", lambda: False)
    monkeypatch.setattr(writer, "BESIDE_AGG_ROWS", 0)
    for force in (False, True):
        aggs = _two_rank_aggs()
        with writer.atomic_database(tmp_path / "a.sqlite", force=force) as db:
            pending = db.write_agg_tables(aggs, writer.BEFORE_REPLAY)
            assert isinstance(db.raw_writer, writer.ThreadCall)
            _partly_replayed(aggs)
            ids, written = pending()
            writer.write_aggregations(db.connect(), aggs, ids, written)
    with sqlite3.connect(tmp_path / "a.sqlite") as conn:
        assert _path_rows(conn, "agg_ops", "node_id") == [
            (1, 5, 2**62 + 1, "integer"), (1, 7, None, "null"), (1, 9, 17, "integer"),
            (2, 5, None, "null"), (2, 8, None, "null")]
    assert [p.name for p in tmp_path.iterdir()] == ["a.sqlite"]
