"""The stored critical path summed a few iteration windows at a time (``whatif.stored.PATH_CHUNK``) equals the
whole trace's path summed at once, and both equal figures worked out from the trace itself, also where GPU work
crosses a window's edge (a kernel launched in one step runs into the next).
"""

from __future__ import annotations

import sqlite3

import numpy as np
import pandas as pd
import pytest
from conftest import data_file, requires_shared
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_whatif_handmade import DL, _db, _loader_trace
from trace_builder import KinetoTrace

from dlscope.whatif import stored
from dlscope.whatif.graph import CATEGORIES, Sparse, _narrowed
from dlscope.whatif.job import from_database
from dlscope.whatif.predict import path_of

US = 1000


def _walk(db, chunk: int, monkeypatch) -> tuple[stored._Walk, stored.Replay]:
    """The walk of the database's only aggregation, summed ``chunk`` path edges at a time."""
    monkeypatch.setattr(stored, "PATH_CHUNK", chunk)
    conn = sqlite3.connect(db)
    try:
        job = from_database(conn)
        (rank, lo, hi), = conn.execute("SELECT rank, iter_start, iter_stop FROM aggregations").fetchall()
    finally:
        conn.close()
    replay = stored.Replay(lambda: job)
    assert replay.note is None
    return replay.walk(rank, lo, hi), replay


def _node_names(replay: stored.Replay, walk: stored._Walk) -> dict[str, int]:
    ops = replay.g.job.ops
    name = dict(zip(ops["node_id"], ops["name"]))
    return {name[n]: int(ns) for n, ns in zip(walk.nodes, walk.node_ns)}


def _cells(walk: stored._Walk) -> dict[str, int]:
    return {CATEGORIES[c % len(CATEGORIES)]: int(ns) for c, ns in zip(walk.cells, walk.cell_ns)}


def test_a_kernel_running_into_the_next_step_is_summed_the_same_window_by_window(tmp_path, monkeypatch):
    db = _db(tmp_path, _loader_trace())
    # by hand (tests/test_whatif_handmade.py's loader trace, 8 µs launch latency measured on the idle stream):
    # steps 1 and 2 are CPU-bound windows of 100 µs: data loading 60, conv2d 10 (of which its launch call 4),
    # 30 outside ops; step 3 ends with its kernel at 350: loading 60, conv2d's 2 µs up to its launch call, the
    # 8 µs launch and the 80 µs kernel (the call, the launch and the kernel belong to conv2d's node)
    expected_nodes = {DL: 180 * US, "aten::conv2d": (10 + 10 + 2 + 8 + 80) * US}
    expected_cells = {"dataloader": 180 * US, "cpu_op": (6 + 6 + 2) * US, "cuda_api": (4 + 4) * US,
                      "cpu_other": 60 * US, "launch": 8 * US, "kernel": 80 * US}
    for chunk in (1, 3, 1 << 30):  # every window alone, a few edges at a time, the whole path at once
        walk, replay = _walk(db, chunk, monkeypatch)
        assert _node_names(replay, walk) == expected_nodes
        assert _cells(walk) == expected_cells
        assert dict(zip(walk.kernel_names, walk.kernel_ns.tolist())) == {"implicit_convolve_sgemm": 80 * US}


def _random_trace(steps: list[tuple[int, int, int]]) -> tuple[KinetoTrace, int]:
    """Steps of 100 µs, each an op [o+a, o+a+10) whose launch (call [o+a+2, o+a+5)) queues a kernel of ``d`` µs on
    one stream (so kernels run into later steps), then an op of ``c`` µs without GPU work; and the measured wall
    of the aggregation: the first step's start to the end of the last step's own activity (its ops, its
    kernel, its CPU end), in ns."""
    t = KinetoTrace()
    gpu_free = 0
    last_end = 0
    for s, (a, d, c) in enumerate(steps):
        o = 100 * s
        t.step(s + 1, o, o + 100)
        t.op("aten::mm", o + a, o + a + 10)
        k_start = max(o + a + 10, gpu_free)
        t.launch(o + a + 2, o + a + 5, f"kernel_{s % 3}", k_start, k_start + d)
        gpu_free = k_start + d
        t.op("aten::add", o + a + 20, o + a + 20 + c)
        last_end = max(o + 100, k_start + d, o + a + 20 + c)
    return t, last_end * US


@pytest.mark.slow
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, 50), st.integers(1, 250), st.integers(1, 30)), min_size=1, max_size=5),
       st.integers(1, 40))
def test_random_steps_sum_the_same_window_by_window_as_the_whole_path(tmp_path_factory, monkeypatch, steps, chunk):
    tmp = tmp_path_factory.mktemp("w")
    trace, wall = _random_trace(steps)
    db = _db(tmp, trace)
    whole, replay = _walk(db, 1 << 30, monkeypatch)
    parts, _ = _walk(db, chunk, monkeypatch)
    for field in ("nodes", "node_ns", "kernel_ns", "cells", "cell_ns"):
        assert np.array_equal(getattr(parts, field), getattr(whole, field)), field
    assert list(parts.kernel_names) == list(whole.kernel_names)
    # the unchanged replay is the measured times: the path of the windows adds up to the measured wall clock
    assert int(whole.cell_ns.sum()) == wall
    # and each sum is the whole path's rows grouped by pandas
    g = replay.g
    path = path_of(g, whole.win, replay.base)
    by_cell = path.groupby(path["rank"] * len(CATEGORIES) + path["category"])["ns"].sum()
    assert dict(zip(whole.cells.tolist(), whole.cell_ns.tolist())) == {int(k): int(v) for k, v in by_cell.items()}
    runs = path[path["act"] >= 0]
    names = pd.Series(g.activities["name"].to_numpy(object)[runs["act"].to_numpy(np.int64)])
    by_kernel = runs["ns"].groupby(names.to_numpy()).sum()
    assert dict(zip(whole.kernel_names, whole.kernel_ns.tolist())) == {k: int(v) for k, v in by_kernel.items()}


def test_indexes_are_int32_only_where_they_fit():
    assert _narrowed(np.array([-1, 0, 2 ** 31 - 2], np.int64)).dtype == np.int32
    assert _narrowed(np.array([-1, 2 ** 31], np.int64)).dtype == np.int64
    assert _narrowed(np.zeros(0, np.int64)).dtype == np.int32


def test_the_unchanged_replay_shares_the_graphs_times_without_letting_them_change(tmp_path, monkeypatch):
    _, replay = _walk(_db(tmp_path, _loader_trace()), 1, monkeypatch)
    assert np.shares_memory(replay.base.t, replay.g.t)
    with pytest.raises(ValueError):
        replay.base.t[0] = 1
    with pytest.raises(ValueError):
        replay.base.weights.wc[0] = 1


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(-5, 5), max_size=40), st.lists(st.integers(0, 60), max_size=30))
def test_a_sparse_column_reads_like_its_dense_array(dense, vertices):
    dense = np.array(dense, np.int64)
    at = np.flatnonzero(dense)
    column = Sparse(at, dense[at], len(dense))
    inside = np.array([v for v in vertices if v < len(dense)], np.int64)
    assert np.array_equal(column[inside], dense[inside])
    assert np.array_equal(column.dense(), dense)
    assert len(column) == len(dense)


def _walks(db, chunk: int, monkeypatch) -> list[stored._Walk]:
    monkeypatch.setattr(stored, "PATH_CHUNK", chunk)
    conn = sqlite3.connect(db)
    try:
        job = from_database(conn)
        aggs = conn.execute("SELECT rank, iter_start, iter_stop FROM aggregations ORDER BY agg_id").fetchall()
    finally:
        conn.close()
    replay = stored.Replay(lambda: job)
    assert replay.note is None
    return [replay.walk(*agg) for agg in aggs]


@requires_shared
@pytest.mark.slow
@pytest.mark.parametrize("parts", [("kineto", "hta_v100_rank1of2_5steps.json.gz"),
                                   ("kineto", "param_dlrm_8rank_v100")])
def test_real_profiles_sum_the_same_path_in_pieces_as_whole(parts, import_db, monkeypatch):
    """One rank of five steps, and eight ranks whose paths cross ranks through their collectives: windows cut
    into pieces of 97 edges sum to the same figures as each path summed at once, and each walk's time adds up
    to its aggregation's wall clock (computed by the aggregation from the tables, not by the replay)."""
    db = import_db(data_file(*parts))
    whole = _walks(db, 1 << 30, monkeypatch)
    pieces = _walks(db, 97, monkeypatch)
    for a, b in zip(whole, pieces):
        for field in ("nodes", "node_ns", "kernel_ns", "cells", "cell_ns"):
            assert np.array_equal(getattr(a, field), getattr(b, field)), field
        assert list(a.kernel_names) == list(b.kernel_names)
    conn = sqlite3.connect(db)
    try:
        walls = [w for w, in conn.execute("SELECT wall_clock_ns FROM aggregations ORDER BY agg_id")]
    finally:
        conn.close()
    assert [int(w.cell_ns.sum()) for w in pieces] == walls


@requires_shared
@pytest.mark.slow
def test_a_window_path_walked_in_pieces_holds_at_most_the_piece_size_and_adds_up_to_the_window(import_db):
    """The walk yields its chain edges at most 97 at a time (the import never holds a window's whole path: on a
    one-window trace that is about one entry per vertex), then its cross edges; the pieces are the one-piece
    path cut in order, and their times add up to the window's replayed span t[end] - start exactly."""
    from dlscope.whatif.predict import windows
    from dlscope.whatif.replay import binding, critical_path_pieces

    db = import_db(data_file("kineto", "hta_v100_rank1of2_5steps.json.gz"))
    conn = sqlite3.connect(db)
    try:
        job = from_database(conn)
        (rank,), = conn.execute("SELECT rank FROM aggregations").fetchall()
    finally:
        conn.close()
    replay = stored.Replay(lambda: job)
    g, base = replay.g, replay.base
    assert g is not None and base is not None
    b = binding(g, base)
    win = windows(g, rank)
    starts, last_end = win.bounds(base.t)
    ends = np.r_[win.start_v[1:], last_end]
    assert len(ends) == 5
    for lo, end_v in zip(starts, ends):
        whole, = critical_path_pieces(g, base, b, int(end_v), int(lo), None)
        pieces = list(critical_path_pieces(g, base, b, int(end_v), int(lo), 97))
        *chain, cross = pieces
        assert len(chain) > 1 and all(0 < len(p.chain_v) <= 97 and not len(p.cross_e) for p in chain)
        assert not len(cross.chain_v) and np.array_equal(cross.cross_e, whole.cross_e)
        assert np.array_equal(np.concatenate([p.chain_v for p in chain]), whole.chain_v)
        assert np.array_equal(np.concatenate([p.chain_ns for p in chain]), whole.chain_ns)
        total = sum(int(p.chain_ns.sum()) + int(p.cross_ns.sum()) + p.untracked_ns for p in pieces)
        assert total == int(base.t[end_v]) - int(lo) > 0
