"""Parts of the dependency graph's build made cheap (issue 21), each against a plain oracle: pandas' own
factorize and value_counts, and a loop over the calls one at a time."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from conftest import data_file, requires_shared

from dlscope.whatif.graph import _Builder, _small, row_codes


@pytest.mark.parametrize("scale", [1, 10**4, 10**15])  # rows marked in a table, hashed, columns hashed
def test_row_codes_are_pandas_sorted_factorize_of_the_rows(scale):
    rng = np.random.default_rng(3)
    for trial in range(30):
        n, m = int(rng.integers(1, 3000)), int(rng.integers(1, 4))
        keys = rng.integers(-2, int(rng.integers(2, 40)), (n, m)) * scale
        codes, rows = row_codes(keys)
        want_codes, want_rows = pd.factorize(pd.MultiIndex.from_arrays(list(keys.T)), sort=True)
        assert np.array_equal(codes, want_codes), trial
        assert np.array_equal(rows, np.array(want_rows.tolist(), np.int64).reshape(-1, m)), trial


def test_row_codes_of_rows_too_varied_to_combine_are_still_pandas_sorted_factorize():
    rng = np.random.default_rng(4)
    keys = rng.permutation(np.arange(70_000))[:, None] * np.array([1, 3, 5, 7]) + rng.integers(0, 2, (70_000, 1))
    codes, rows = row_codes(keys)  # 4 columns of ~70k distinct values: more combinations than an int64 holds
    want_codes, want_rows = pd.factorize(pd.MultiIndex.from_arrays(list(keys.T)), sort=True)
    assert np.array_equal(codes, want_codes)
    assert np.array_equal(rows, np.array(want_rows.tolist(), np.int64))


def test_the_busiest_thread_has_the_most_ops_and_calls_and_the_first_seen_wins_a_tie():
    ops = pd.DataFrame({"rank": [0, 0, 0, 1, 1, 1, 2], "pid": [7, 7, 7, 5, 5, 5, 1],
                        "tid": [2, 1, 1, 9, 8, 8, 4]})
    api = pd.DataFrame({"rank": [0, 0, 1, 1, 3, 3], "pid": [7, 7, 5, 5, 4, 4], "tid": [2, 2, 9, 9, 6, 3]})
    # rank 0: tid 2 three times, tid 1 twice; rank 1: tid 9 and 8 three times each, 9 first seen;
    # rank 2: its only thread; rank 3: a tie of calls, tid 6 first
    got = _Builder._busiest_threads(SimpleNamespace(job=SimpleNamespace(ops=ops, api_calls=api)))
    assert got.to_dict("index") == {0: {"pid": 7, "tid": 2}, 1: {"pid": 5, "tid": 9}, 2: {"pid": 1, "tid": 4},
                                    3: {"pid": 4, "tid": 6}}
    # what pandas' value_counts says (most first; ties in order of first appearance), first per rank
    want = (pd.concat([ops, api]).value_counts().reset_index().drop_duplicates("rank").set_index("rank")
            [["pid", "tid"]])
    pd.testing.assert_frame_equal(got.sort_index(), want.sort_index(), check_names=False)


def _waited_one_at_a_time(calls: pd.DataFrame, acts: pd.DataFrame) -> list[int]:
    """The activity each call waited for, call by call: among its rank's (and stream's, when it names one)
    activities by end, the last to end by the call's end, stepping back (at most 64) over any launched after
    the call started."""
    out = []
    for c in calls.itertuples():
        a = acts[(acts["rank"] == c.rank) & ((acts["stream"] == c.stream) if c.stream >= 0 else True)]
        a = a.sort_values("end", kind="stable")
        ends, launches, rows = a["end"].tolist(), a["launch"].tolist(), a.index.tolist()
        p = max((i for i, e in enumerate(ends) if e <= c.end), default=-1)
        steps = 0
        while p >= 0 and launches[p] >= c.start and steps < 64:
            p, steps = p - 1, steps + 1
        out.append(rows[p] if p >= 0 and launches[p] < c.start else -1)
    return out


def test_each_blocking_call_waits_for_the_last_work_launched_before_it():
    rng = np.random.default_rng(5)
    for trial in range(20):
        na, nc = int(rng.integers(1, 300)), int(rng.integers(1, 60))
        launch = rng.integers(0, 10_000, na)
        start = launch + rng.integers(0, 500, na)
        acts = pd.DataFrame({"rank": rng.integers(0, 3, na), "stream": rng.integers(0, 3, na), "launch": launch,
                             "start": start, "end": start + rng.integers(0, 300, na) // 50 * 50},
                            index=rng.permutation(na) * 2)  # rows of a larger table
        cs = rng.integers(0, 10_000, nc)
        calls = pd.DataFrame({"rank": rng.integers(0, 4, nc), "stream": rng.integers(-1, 3, nc), "start": cs,
                              "end": cs + rng.integers(0, 2_000, nc)}, index=rng.permutation(nc) + 100)
        got = _Builder._waited(None, calls, acts)
        assert got.tolist() == _waited_one_at_a_time(calls, acts), trial


def test_the_cpu_instants_sort_is_numpy_lexsort_of_the_four_keys():
    """One stable sort of the packed first key, tied runs sorted again by the second: the order numpy's lexsort
    gives (ties of all keys in row order)."""
    from dlscope.whatif.graph import _lexsort_pairs

    rng = np.random.default_rng(5)
    for trial in range(30):
        n = int(rng.integers(1, 4000))
        major, minor = rng.integers(0, 5, n), rng.integers(0, 4, n)
        time, sub = rng.integers(0, int(rng.integers(1, 50)), n), rng.integers(-3, 3, n)
        want = np.lexsort((sub, minor, time, major))
        assert np.array_equal(_lexsort_pairs(major, time, minor, sub), want), trial


@requires_shared
def test_the_activities_name_codes_are_pandas_factorize_of_their_names(tmp_path):
    """Kernel and memop names kept as integer codes (their tables' categories joined) give what factorizing
    the names themselves gives: codes in order of first appearance and the names, for all activities and for
    a subset of rows; a missing name falls back to pandas' own handling."""
    import sqlite3

    from dlscope.pipeline import build_database
    from dlscope.whatif.graph import Graph, build
    from dlscope.whatif.job import from_database

    path = data_file("kineto", "tbplugin_resnet50_v100_workers0.pt.trace.json.gz")  # kernels and memops
    db = build_database([path], tmp_path / "x.sqlite", progress=False)
    conn = sqlite3.connect(db)
    try:
        g = build(from_database(conn))
    finally:
        conn.close()
    names = g.activities["name"]
    assert (g.activities["table"] == "memop").any() and (g.activities["table"] == "kernel").any()
    code, distinct = g.name_codes()
    want_code, want = pd.factorize(names)
    assert np.array_equal(code, want_code) and list(distinct) == list(want)
    rows = np.flatnonzero((g.activities["table"] == "kernel").to_numpy(bool))[::-1]
    code, distinct = g.name_codes(rows, na_sentinel=False)
    want_code, want = pd.factorize(names.iloc[rows], use_na_sentinel=False)
    assert np.array_equal(code, want_code) and list(distinct) == list(want)
    # a missing name: the text itself is factorized
    act = g.activities.copy()
    act.loc[0, "name"] = None
    act.loc[0, "name_code"] = -1
    missing = SimpleNamespace(activities=act, activity_names=g.activity_names)
    code, distinct = Graph.name_codes(missing)
    want_code, want = pd.factorize(act["name"])
    assert np.array_equal(code, want_code) and list(distinct) == list(want)


def test_ranks_are_int16_while_they_fit_then_wider():
    """Each vertex's rank (-1 up to the job's largest) is kept as int16 when it fits, else as an index type."""
    for largest, dtype in ((0, np.int16), (2 ** 15 - 2, np.int16), (2 ** 15 - 1, np.int32), (2 ** 40, np.int64)):
        kind = _small(largest)
        assert kind == dtype, largest
        assert np.array([-1, largest], kind).tolist() == [-1, largest]  # both ends held exactly


def _settled_one_head_at_a_time(x: np.ndarray, C: np.ndarray, seg: np.ndarray) -> list[int]:
    """Each head: C plus the largest x - C of its run so far among reached heads (NONE: none reached yet)."""
    from dlscope.whatif.replay import NONE
    out, best, run = [], None, None
    for xi, ci, si in zip(x.tolist(), C.tolist(), seg.tolist()):
        if si != run:
            best, run = None, si
        if xi > NONE:
            best = xi - ci if best is None else max(best, xi - ci)
        out.append(NONE if best is None else best + ci)
    return out


def test_a_sweep_settles_each_run_as_a_loop_over_its_heads_does_by_runs_or_on_one_axis():
    from dlscope.whatif.replay import NONE, _settled
    rng = np.random.default_rng(5)
    for trial in range(200):
        n = int(rng.integers(1, 300))
        seg = np.cumsum(rng.random(n) < rng.choice([0.005, 0.05, 0.5]))
        seg -= seg[0]
        C = np.cumsum(rng.integers(0, 10**6, n))
        x = rng.integers(0, 10**12, n) if trial % 2 else np.where(rng.random(n) < 0.3, NONE, rng.integers(0, 10**12, n))
        cut = np.flatnonzero(seg[1:] != seg[:-1]) + 1
        runs = list(zip([0, *cut.tolist()], [*cut.tolist(), n]))
        want = _settled_one_head_at_a_time(x, C, seg)
        assert _settled(x, C, seg, runs).tolist() == want, trial   # run by run (where every head is reached)
        assert _settled(x, C, seg).tolist() == want, trial         # on one axis
