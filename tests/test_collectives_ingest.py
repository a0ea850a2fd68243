"""The collectives of a whole import ingested through ADBC before the results' sqlite3 connection opens."""

from __future__ import annotations

import gzip
import json
import sqlite3

from conftest import data_file

from dlscope.distributed import store as distributed_store
from dlscope.pipeline import build_database
from dlscope.store.writer import NewDatabase


def _ingested(monkeypatch) -> list[list[str]]:
    """The tables each ADBC ingest before the results filled (:meth:`NewDatabase.ingest`)."""
    calls: list[list[str]] = []
    real = NewDatabase.ingest

    def recording(self, script, frames, indexes=""):
        done = real(self, script, frames, indexes)
        calls.append(list(frames) if done else [])
        return done
    monkeypatch.setattr(NewDatabase, "ingest", recording)
    return calls


def _rows_with_types(db) -> tuple[list, list]:
    with sqlite3.connect(db) as conn:
        columns = [r[1] for r in conn.execute('PRAGMA table_info("collectives")')]
        typed = ", ".join(f'"{c}", typeof("{c}")' for c in columns)
        rows = conn.execute(f"SELECT rowid, {typed} FROM collectives ORDER BY rowid").fetchall()
        indexes = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'collectives' "
                               "ORDER BY name").fetchall()
    return rows, indexes


def test_collectives_ingested_through_adbc_are_the_kernels_args(tmp_path, monkeypatch):
    path = data_file("kineto", "hta_a100_nccl_rank0of2_3steps.json.gz")
    monkeypatch.setattr(distributed_store, "INGEST_COLLECTIVES", 1)
    ingested = _ingested(monkeypatch)
    db = build_database([path], tmp_path / "adbc.sqlite", progress=False)
    assert ingested == [["collectives"]]
    with gzip.open(path) as f:
        raw = sorted((e for e in json.load(f)["traceEvents"] if e.get("cat") == "kernel"
                      and e["name"].startswith("nccl")), key=lambda e: e["ts"])
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT collective, in_nelems, dtype, msg_bytes, group_size, typeof(start), "
                            "typeof(algbw_gbps), collective_id FROM collectives ORDER BY start").fetchall()
    assert len(rows) == len(raw) == 21
    for row, e in zip(rows, raw):
        a = e["args"]
        assert row[:5] == (a["Collective name"], a["In msg nelems"], a["dtype"],
                           a["In msg nelems"] * {"Float": 4, "Long": 8}[a["dtype"]], a["Group size"])
        assert row[5:7] == ("integer", "real")
    assert sorted(r[7] for r in rows) == list(range(21))  # as rank_figures numbers them


def test_collectives_through_adbc_or_sqlite3_are_the_same_rows_types_and_indexes(tmp_path, monkeypatch):
    folder = data_file("kineto", "param_dlrm_8rank_v100")
    ingested = _ingested(monkeypatch)
    monkeypatch.setattr(distributed_store, "INGEST_COLLECTIVES", 10**9)
    by_sqlite3 = _rows_with_types(build_database([folder], tmp_path / "sqlite3.sqlite", progress=False))
    monkeypatch.setattr(distributed_store, "INGEST_COLLECTIVES", 1)
    by_adbc = _rows_with_types(build_database([folder], tmp_path / "adbc.sqlite", progress=False))
    assert len(by_sqlite3[0]) == 64 and len(by_sqlite3[1]) == 2
    assert {t for row in by_sqlite3[0] for t in row[2::2]} >= {"integer", "real", "text"}
    assert ingested == [["collectives"]]  # (the first import: none)
    assert by_adbc == by_sqlite3
