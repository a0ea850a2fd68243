"""The aggregation tables' writer started beside the expert rules: forked before the raw writer has ended, it waits
for that writer's exit itself (the importing process goes on with the rules), then writes the rows the sqlite3 path
writes; a failure anywhere leaves no file and no child."""

from __future__ import annotations

import os
import sqlite3
import time

import pytest
from conftest import data_file
from process_watch import children
from test_store_writer import _partly_replayed, _path_rows, _two_rank_aggs

from dlscope.errors import DlscopeError
from dlscope.pipeline import build_database
from dlscope.store import writer


def _wait_for(path, seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.01)


def test_a_writer_started_while_the_raw_writer_runs_waits_for_its_end_then_writes_every_row(tmp_path, monkeypatch):
    """The raw writer held until the test lets it go: the aggregation writer, already forked, has not begun; once
    the raw writer has ended it writes the rows, the replay's column filled (a row with none NULL, integers past
    2**53 exact)."""
    monkeypatch.setattr(writer, "BESIDE_AGG_ROWS", 0)  # a background writer for these few rows too
    go, raw_done, began = tmp_path / "go", tmp_path / "raw done", tmp_path / "began"
    write_raw, ingest = writer.write_raw_file, writer.ingest_agg_tables

    def held_raw(*args, **kwargs):  # in the raw writer
        _wait_for(go)
        write_raw(*args, **kwargs)
        raw_done.touch()

    def noted_ingest(*args, **kwargs):  # in the aggregation writer
        began.write_text("after the raw writer" if raw_done.exists() else "before the raw writer ended")
        return ingest(*args, **kwargs)

    monkeypatch.setattr(writer, "write_raw_file", held_raw)  # the forked writers inherit both
    monkeypatch.setattr(writer, "ingest_agg_tables", noted_ingest)
    (tmp_path / "out").mkdir()
    aggs = _two_rank_aggs()
    with writer.atomic_database(tmp_path / "out" / "a.sqlite", force=False) as db:
        db.write_raw({})
        pending = db.write_agg_tables_beside(aggs, writer.BEFORE_REPLAY)
        assert pending is not None and db.queued_writer is not None
        time.sleep(0.3)
        assert not began.exists()  # still waiting for the raw writer
        go.touch()
        _partly_replayed(aggs)
        ids, written = pending()
        assert ids == [1, 2] and written["agg_ops"] is None and written["agg_kernels"] is None
        assert writer.NAMES_INDEXED in written  # the names of its tables indexed there
        writer.write_aggregations(db.connect(), aggs, ids, written)
    assert began.read_text() == "after the raw writer"
    with sqlite3.connect(tmp_path / "out" / "a.sqlite") as conn:
        assert _path_rows(conn, "agg_ops", "node_id") == [
            (1, 5, 2**62 + 1, "integer"), (1, 7, None, "null"), (1, 9, 17, "integer"),
            (2, 5, None, "null"), (2, 8, None, "null")]
        assert _path_rows(conn, "agg_kernels", "kernel_name") == [(1, "gemm", 0, "integer"),
                                                                  (1, "relu", 2**61, "integer")]
        assert conn.execute("SELECT agg_id, group_id, parent_group_id, name FROM agg_groups ORDER BY rowid"
                            ).fetchall() == [(1, 1, None, "root"), (1, 2, 1, None), (2, 1, None, "root")]
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_too_few_rows_or_no_forked_raw_writer_start_no_writer_beside_the_rules(tmp_path, monkeypatch):
    """Below ``BESIDE_AGG_ROWS``, with the raw tables already waited for, or where dlscope must not fork: None, and
    the import writes them as before."""
    with writer.atomic_database(tmp_path / "a.sqlite", force=False) as db:
        db.write_raw({})
        assert db.write_agg_tables_beside(_two_rank_aggs(), writer.BEFORE_REPLAY) is None  # 8 rows < 20k
        monkeypatch.setattr(writer, "BESIDE_AGG_ROWS", 0)
        db.connect()
        assert db.write_agg_tables_beside(_two_rank_aggs(), writer.BEFORE_REPLAY) is None
    monkeypatch.setattr(writer, "can_fork", lambda: False)
    with writer.atomic_database(tmp_path / "b.sqlite", force=False) as db:
        db.write_raw({})
        assert db.write_agg_tables_beside(_two_rank_aggs(), writer.BEFORE_REPLAY) is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.sqlite", "b.sqlite"]


@pytest.mark.parametrize("where", ["raw writer", "importing process", "aggregation writer"])
def test_a_failure_with_a_writer_waiting_beside_the_rules_leaves_no_file_and_no_child(tmp_path, monkeypatch, where):
    """The raw writer failing while the aggregation writer waits for it, the importing process failing in its rules,
    or the aggregation writer failing midway (agg_groups written, agg_ops not): one line naming the database (where
    it is the writing that failed), no file left in the folder, no child left running."""
    monkeypatch.setattr(writer, "BESIDE_AGG_ROWS", 0)
    if where == "raw writer":
        def failing_raw(*_args, **_kwargs):
            time.sleep(0.2)  # the aggregation writer is waiting by then
            raise OSError(28, "No space left on device")
        monkeypatch.setattr(writer, "write_raw_file", failing_raw)
    elif where == "aggregation writer":
        ingest = writer._ingest_agg_table

        def failing(ingest_, table, *args):
            if table == "agg_ops":
                raise OSError(28, "No space left on device")
            return ingest(ingest_, table, *args)
        monkeypatch.setattr(writer, "_ingest_agg_table", failing)
    before = children()
    with pytest.raises((DlscopeError, ZeroDivisionError)) as failed:
        with writer.atomic_database(tmp_path / "a.sqlite", force=False) as db:
            db.write_raw({})
            pending = db.write_agg_tables_beside(_two_rank_aggs(), writer.BEFORE_REPLAY)
            assert pending is not None
            if where == "importing process":
                raise ZeroDivisionError("a rule failed")
            pending()
    if where != "importing process":
        text = str(failed.value)
        assert text.startswith(f"{tmp_path / 'a.sqlite'}: writing the database failed") and "\n" not in text
        assert "No space left" in text
    assert list(tmp_path.iterdir()) == []
    assert children() <= before


def _rows(path) -> dict[str, list[tuple]]:
    """Every row of the aggregation tables, the aggregations (but the second each was written), the findings and the
    names indexed for search."""
    with sqlite3.connect(path) as conn:
        rows = {}
        for table in (*writer.AGG_TABLES, "aggregations", "findings", "search_names"):
            columns = [r[1] for r in conn.execute(f'PRAGMA table_info("{table}")') if r[1] != "created_at"]
            rows[table] = conn.execute(f'SELECT {", ".join(columns)} FROM "{table}" ORDER BY rowid').fetchall()
        return rows


def test_a_job_whose_aggregation_tables_go_in_beside_the_rules_stores_the_rows_sqlite3_stores(tmp_path, monkeypatch):
    """A real 8-rank job: with the writer beside the rules (it ran: its pid noted), every aggregation table, the
    aggregations, the findings and the searched names (which that writer indexes) hold the rows of an import whose
    aggregation tables sqlite3 inserts after the replay (the path with no background aggregation writer); a search
    of the trigram index finds the same names."""
    job = data_file("kineto", "param_dlrm_8rank_v100")
    monkeypatch.setattr(writer, "BESIDE_AGG_ROWS", 0)
    ran, after_raw = tmp_path / "ran", writer._after_raw_writer

    def noted(*args):
        (ran / str(os.getpid())).touch()
        return after_raw(*args)

    ran.mkdir()
    monkeypatch.setattr(writer, "_after_raw_writer", noted)
    beside = build_database([job], tmp_path / "beside.sqlite", progress=False)
    assert [int(p.name) for p in ran.iterdir()] != [] and os.getpid() not in [int(p.name) for p in ran.iterdir()]
    monkeypatch.setattr(writer.NewDatabase, "write_agg_tables_beside", lambda *_: None)
    monkeypatch.setattr(writer.NewDatabase, "write_agg_tables", lambda *_, **__: None)  # sqlite3, after the replay
    plain = build_database([job], tmp_path / "plain.sqlite", progress=False)
    a, b = _rows(beside), _rows(plain)
    assert sum(len(a[t]) for t in writer.AGG_TABLES) > 1_000 and len(a["aggregations"]) == 8
    for table in a:
        assert a[table] == b[table], table
    assert any(r[1].startswith("agg_") for r in a["search_names"])
    found = []
    for db in (beside, plain):
        with sqlite3.connect(db) as conn:
            found.append(conn.execute("SELECT n.source, n.name FROM search_names_trigram t JOIN search_names n "
                                      "ON n.name_id = t.rowid WHERE t.folded MATCH 'embedding' ORDER BY 1, 2"
                                      ).fetchall())
    assert found[0] == found[1] and any(source.startswith("agg_") for source, _ in found[0])
