"""The Timeline arrays the import stores (table ``timeline_arrays``) are exactly what the viewer builds from the
database's rows: same lanes, same events in the same order with the same indexes, same memory counters, for
real traces of one rank (Kineto, Nsight Systems) and for a job of eight imported whole and rank by rank. A
database without them, or with unreadable ones, is read from its rows."""

from __future__ import annotations

import shutil
import sqlite3

import numpy as np
import pytest
from conftest import data_file

from dlscope.viewer.profile_db import ProfileDB
from dlscope.viewer.timeline import load_rank, rank_from_rows, ranks

TRACES = [("kineto", "hta_a100_nccl_rank0of2_3steps.json.gz"), ("kineto", "hta_v100_rank1of2_5steps.json.gz"),
          ("kineto", "tbplugin_resnet50_v100_workers0.pt.trace.json.gz"),
          ("nsys_sqlite", "pipit_cloverleaf_a100x4_nsys2024.5.sqlite")]
TRACK_FIELDS = ("ids", "start", "end", "lane", "tc", "dur", "lane_start", "lane_busy", "lane_ptr", "by_dur",
                "neg_dur", "by_lane")


def assert_same(a, b):
    assert a.lanes == b.lanes and (a.first, a.last) == (b.first, b.last) and a.runtime_lane == b.runtime_lane
    assert set(a.tracks) == set(b.tracks)
    for kind, t in a.tracks.items():
        u = b.tracks[kind]
        assert t.max_dur == u.max_dur
        for name in TRACK_FIELDS:
            x, y = getattr(t, name), getattr(u, name)
            assert (x is None) == (y is None), (kind, name)
            if x is not None:
                assert np.array_equal(x, y), (kind, name)
    assert [(c.lane, c.ts.tolist(), c.value.tolist()) for c in a.counters] == \
        [(c.lane, c.ts.tolist(), c.value.tolist()) for c in b.counters]


def stored_rows(db) -> int:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT COUNT(*) FROM timeline_arrays").fetchone()[0]


@pytest.mark.parametrize("trace", TRACES, ids=lambda t: t[1].split(".")[0])
def test_the_stored_timeline_is_the_one_built_from_the_rows(import_db, trace):
    db = import_db(data_file(*trace))
    assert stored_rows(db) > 0
    pdb = ProfileDB(db)
    for rank in ranks(pdb):
        stored, rows = load_rank(pdb, rank), rank_from_rows(pdb, rank)
        assert sum(len(t.ids) for t in rows.tracks.values()) > 0
        assert_same(stored, rows)


@pytest.mark.slow
@pytest.mark.parametrize("one_at_a_time", [False, True], ids=["whole", "rank_by_rank"])
def test_a_job_stores_each_ranks_timeline(tmp_path, monkeypatch, one_at_a_time):
    from dlscope import pipeline
    from dlscope.pipeline import build_database, rank_by_rank

    seen: list = []
    if one_at_a_time:  # under a budget, a job that might not fit is imported one rank at a time
        monkeypatch.setattr(pipeline.build, "whole_job_fits", lambda paths, budget: False)
        real = rank_by_rank.IdOffsets.shift
        monkeypatch.setattr(rank_by_rank.IdOffsets, "shift", lambda self, an: seen.append(1) or real(self, an))
    db = build_database([data_file("kineto", "param_dlrm_8rank_v100")], tmp_path / "job.sqlite", progress=False,
                        max_memory="16GB" if one_at_a_time else None)
    pdb = ProfileDB(db)
    assert len(ranks(pdb)) == 8 and len(seen) == (8 if one_at_a_time else 0)
    for rank in ranks(pdb):
        assert_same(load_rank(pdb, rank), rank_from_rows(pdb, rank))


def test_without_stored_arrays_or_with_unreadable_ones_the_rows_are_read(import_db, tmp_path):
    src = import_db(data_file(*TRACES[0]))
    db = tmp_path / "old.sqlite"
    shutil.copy(src, db)
    rank = ranks(ProfileDB(src))[0]
    expected = rank_from_rows(ProfileDB(src), rank)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE timeline_arrays SET data = x'00ff' WHERE name = 'kernel.start'")
    assert_same(load_rank(ProfileDB(db), rank), expected)
    with sqlite3.connect(db) as conn:
        conn.execute("DROP TABLE timeline_arrays")
    assert_same(load_rank(ProfileDB(db), rank), expected)
