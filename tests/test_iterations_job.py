"""Iterations of every rank of a job found in one pass (``find_job_iterations``, ``assign_by_rank``): the same
windows, methods and key-node candidates as each rank analysed alone, on a hand-made job whose ranks split
differently (checked against windows worked out by hand) and on the real DLRM job (checked against its raw
JSON)."""

from __future__ import annotations

import gzip
import json
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import data_file
from raw_kineto import OP_CATS, events
from trace_builder import KinetoTrace

from dlscope.analyze.analysis import analyse
from dlscope.analyze.iterations import assign_by_rank, main_thread_roots
from dlscope.model import TABLES, Profile
from dlscope.pipeline import build_database
from dlscope.pipeline.executors import load_profiles_parallel

US = 1000
KEY = "train_step"


def _rank_file(t: KinetoTrace, path: Path, rank: int, world: int) -> Path:
    t.write(path)
    doc = json.loads(path.read_text())
    doc["distributedInfo"] = {"rank": rank, "world_size": world}
    path.write_text(json.dumps(doc))
    return path


def _three_ranks(tmp_path: Path) -> list[Path]:
    """Rank 0 splits at ProfilerStep#3/#4, rank 1 at the key node (its ProfilerStep#0 loses to it), rank 2
    has neither, nor a loop: one window."""
    r0 = KinetoTrace()
    r0.step(3, 0, 1000)
    r0.step(4, 1000, 2000)
    r0.op("aten::mm", 100, 300)
    r0.launch(110, 120, "volta_sgemm_128x64_tn", 150, 450)
    r0.op("aten::mm", 1100, 1300)
    r0.launch(1110, 1120, "volta_sgemm_128x64_tn", 1150, 2450)  # runs past its step: still step 4's
    r0.op("aten::relu", 2100, 2200)  # after the last step: no iteration
    r1 = KinetoTrace()
    r1.step(0, 0, 3000)
    for s, e in ((0, 500), (700, 1200), (1500, 1800)):
        r1.annotation(KEY, s, e)
    r1.op("aten::mm", 100, 300)
    r1.launch(110, 120, "volta_sgemm_128x64_tn", 150, 450)
    r1.op("aten::add", 800, 900)
    r1.op("aten::mm", 1600, 2500)  # the last op: the last key-node window runs to its end
    r2 = KinetoTrace()
    r2.op("aten::randn", 0, 100)
    r2.op("aten::mm", 200, 400)
    r2.launch(210, 220, "volta_sgemm_128x64_tn", 250, 900)
    r2.op("aten::mm", 500, 600)
    r2.op("aten::sum", 700, 800)
    return [_rank_file(t, tmp_path / f"rank{r}.json", r, 3) for r, t in enumerate((r0, r1, r2))]


#: (rank, iteration, name, start, cpu_end, end) in µs, worked out by hand from _three_ranks
HAND = [
    (0, 3, "ProfilerStep#3", 0, 1000, 1000),
    (0, 4, "ProfilerStep#4", 1000, 2000, 2450),  # its kernel ends at 2450
    (1, 0, KEY, 0, 700, 700),
    (1, 1, KEY, 700, 1500, 1500),
    (1, 2, KEY, 1500, 2500, 2500),  # to the end of the rank's last op (2500), past the marker's (1800)
    (2, 0, "whole profile", 0, 900, 900),  # first op start to the last kernel end
]


def test_ranks_that_split_differently_get_their_own_windows(tmp_path):
    db = build_database(_three_ranks(tmp_path), tmp_path / "job.sqlite", progress=False, key_node=KEY)
    conn = sqlite3.connect(db)
    got = conn.execute('SELECT rank, iteration, name, start, cpu_end, "end" FROM iterations '
                       "ORDER BY rank, iteration").fetchall()
    assert got == [(r, i, n, s * US, c * US, e * US) for r, i, n, s, c, e in HAND]
    extra = json.loads(conn.execute("SELECT value FROM dlscope_meta WHERE key = 'extra_json'").fetchone()[0])
    assert extra["iteration_methods"] == {"0": "profiler_step", "1": "key_node", "2": "whole_profile"}
    assert extra["key_node_candidates"] == {"2": ["aten::mm"]}  # the one top-level op seen twice
    ops = conn.execute("SELECT rank, name, start, iteration FROM ops ORDER BY rank, start").fetchall()
    assert ops == [(0, "aten::mm", 100 * US, 3), (0, "aten::mm", 1100 * US, 4), (0, "aten::relu", 2100 * US, -1),
                   (1, "aten::mm", 100 * US, 0), (1, "aten::add", 800 * US, 1), (1, "aten::mm", 1600 * US, 2),
                   (2, "aten::randn", 0, 0), (2, "aten::mm", 200 * US, 0), (2, "aten::mm", 500 * US, 0),
                   (2, "aten::sum", 700 * US, 0)]
    kernels = conn.execute("SELECT rank, start, iteration FROM kernels ORDER BY rank, start").fetchall()
    assert kernels == [(0, 150 * US, 3), (0, 1150 * US, 4), (1, 150 * US, 0), (2, 250 * US, 0)]


def _one_rank(profile: Profile, rank: int) -> Profile:
    """The job's imported tables cut down to one rank's rows."""
    tables = {name: profile.table(name)[profile.table(name)["rank"] == rank].reset_index(drop=True)
              for name in TABLES}
    return Profile(**tables, meta=dict(profile.meta))


def _load(paths: list[Path], without_steps: bool) -> Profile:
    profile = load_profiles_parallel([str(p) for p in paths], 1)
    if without_steps:  # as if captured without a schedule: the later methods decide
        profile.ranges = profile.ranges[~profile.ranges["name"].str.match(r"ProfilerStep#\d+$")]
    return profile


def _assert_job_equals_each_rank_alone(paths: list[Path], key_node: str | None, without_steps: bool = False
                                       ) -> dict[int, str]:
    job = analyse(_load(paths, without_steps), key_node)
    ranks = sorted(job.iteration_methods)
    assert len(ranks) > 1
    for rank in ranks:
        alone = analyse(_one_rank(_load(paths, without_steps), rank), key_node)
        mine = job.iterations[job.iterations["rank"] == rank].reset_index(drop=True)
        pd.testing.assert_frame_equal(mine, alone.iterations, obj=f"rank {rank} iterations")
        assert alone.iteration_methods == {rank: job.iteration_methods[rank]}
        assert alone.key_node_candidates == ({rank: job.key_node_candidates[rank]}
                                             if rank in job.key_node_candidates else {})
        for name in ("ops", "ranges", "api_calls", "kernels", "memops", "syncs"):
            frame = job.profile.table(name)
            np.testing.assert_array_equal(frame.loc[frame["rank"] == rank, "iteration"].to_numpy(),
                                          alone.profile.table(name)["iteration"].to_numpy(), err_msg=name)
    return job.iteration_methods


def test_a_hand_made_job_split_at_once_equals_each_rank_split_alone(tmp_path):
    _assert_job_equals_each_rank_alone(_three_ranks(tmp_path), KEY)


@pytest.mark.slow
@pytest.mark.parametrize("key_node", [None, "aten::lift_fresh", "DistributedDataParallel.forward", "zero_grad"])
def test_the_dlrm_job_split_at_once_equals_each_rank_split_alone(key_node):
    paths = sorted(data_file("kineto", "param_dlrm_8rank_v100").glob("*.json.gz"))
    methods = _assert_job_equals_each_rank_alone(paths, key_node)
    assert set(methods.values()) == {"key_node" if key_node else "profiler_step"}


@pytest.mark.slow
def test_the_dlrm_job_without_profiler_steps_split_at_once_equals_each_rank_split_alone():
    """No ProfilerStep#N: each rank goes through the later methods (one window, key-node candidates named)."""
    paths = sorted(data_file("kineto", "param_dlrm_8rank_v100").glob("*.json.gz"))
    methods = _assert_job_equals_each_rank_alone(paths, None, without_steps=True)
    assert set(methods.values()) == {"whole_profile"}


def test_the_dlrm_job_key_node_windows_match_its_raw_json():
    """--key-node aten::lift_fresh on every rank: one window per distinct start of an op so named, to the
    next; the last to the later of its own end and the rank's last op's end (PRODUCT.md)."""
    paths = sorted(data_file("kineto", "param_dlrm_8rank_v100").glob("*.json.gz"))
    an = analyse(load_profiles_parallel([str(p) for p in paths], 1), "aten::lift_fresh")
    for path in paths:
        with gzip.open(path, "rt") as f:
            rank = json.load(f)["distributedInfo"]["rank"]
        ops = [e for e in events(path) if e.cat in OP_CATS]
        starts = sorted({e.start for e in ops if e.name == "aten::lift_fresh"})
        last_occ_end = next(e.end for e in sorted(ops, key=lambda e: e.start)
                            if e.name == "aten::lift_fresh" and e.start == starts[-1])
        last_op_end = max(e.end for e in ops)
        want = list(zip(starts, starts[1:])) + [(starts[-1], max(last_occ_end, last_op_end))]
        mine = an.iterations[an.iterations["rank"] == rank]
        assert an.iteration_methods[rank] == "key_node"
        assert list(zip(mine["start"].tolist(), mine["cpu_end"].tolist())) == want
        assert mine["iteration"].tolist() == list(range(len(want)))


def test_events_of_each_rank_fall_in_that_ranks_windows():
    """Windows worked out by hand: rank 5's [10, 20) and [20, 35) (its CPU end), rank 7's [0, 5) and
    [5, 40); a time at a window's start is in it, at the last window's end in none; a rank without
    iterations has none."""
    its = pd.DataFrame({"rank": [7, 5, 7, 5], "iteration": [0, 1, 1, 2], "name": ["a", "b", "c", "d"],
                        "start": [0, 10, 5, 20], "cpu_end": [5, 20, 40, 35]})
    ranks = np.array([5, 5, 5, 5, 5, 7, 7, 7, 7, 6])
    times = np.array([9, 10, 19, 20, 35, -3, 4, 5, 39, 12])
    assert assign_by_rank(ranks, times, its).tolist() == [-1, 1, 1, 2, -1, -1, 0, 1, 1, -1]


def test_windows_too_far_apart_for_one_axis_are_searched_rank_by_rank():
    """Ranks whose windows, laid end to end, would not fit int64 ns still get the same answer."""
    big = 1 << 62
    its = pd.DataFrame({"rank": [0, 0, 1], "iteration": [0, 1, 0], "name": ["a", "b", "c"],
                        "start": [0, big, -big], "cpu_end": [1, big + 10, big]})
    ranks = np.array([0, 0, 0, 0, 1, 1, 1])
    times = np.array([-1, 0, big + 9, big + 10, -big - 1, -big, big - 1])
    assert assign_by_rank(ranks, times, its).tolist() == [-1, 0, 1, -1, -1, 0, 0]


def test_each_ranks_main_thread_is_its_busiest_the_first_seen_of_equals():
    """Rank 5: threads 2 and 1 have two top-level ops each (thread 1's nested op does not count), thread 2 is
    seen first (row 1); rank 7: thread 2 has three to thread 1's one. Their roots come back per rank in start
    order."""
    roots = pd.DataFrame({"rank": [7, 5, 5, 7, 5, 7, 5, 7, 5], "pid": [1] * 9, "tid": [1, 2, 1, 2, 2, 2, 1, 2, 1],
                          "depth": [0] * 8 + [1], "start": [0, 40, 30, 20, 10, 25, 5, 15, 6]})
    got = main_thread_roots(roots)
    assert list(zip(got["rank"], got["tid"], got["start"])) == [(5, 2, 10), (5, 2, 40), (7, 2, 15), (7, 2, 20),
                                                                (7, 2, 25)]
