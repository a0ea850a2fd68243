"""The rules' job-wide frames: a table's rows cut in the same order twice are one copy, not two (on a one-rank
trace the kernels in its iterations and those overlapping its window are the same rows), and each frame still
holds exactly its own rows."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from dlscope.experts.context import RuleFrames, _db_columns

STARTS = [50, 10, 30, 20, 60, 40]  # not in time order, as a trace's kernels (stream by stream) are not


def _kernels(ends: list[int]) -> pd.DataFrame:
    return pd.DataFrame({"kernel_id": np.arange(6), "rank": 0, "device": 0, "stream": 7, "name": list("abcdef"),
                         "start": STARTS, "end": ends, "iteration": 1,
                         "uses_tc": pd.array([1, 0, None, 1, 0, None], dtype="Int64")})


def test_the_kernels_in_the_iterations_and_in_the_window_share_one_copy_when_they_are_the_same_rows():
    kernels = _kernels([s + 5 for s in STARTS])
    frames = RuleFrames({"kernels": kernels}, {0: (0, 9, 0, 1_000)})
    inside, overlapping = frames.in_iterations("kernels", 0), frames.overlapping("kernels", 0)
    for frame in (inside, overlapping):  # by start, hand-sorted
        assert frame["start"].tolist() == [10, 20, 30, 40, 50, 60]
        assert frame["name"].tolist() == ["b", "d", "c", "f", "a", "e"]
    assert np.shares_memory(inside["start"].to_numpy(), overlapping["start"].to_numpy())
    assert inside["uses_tc"].tolist() == [False, True, False, False, True, False]  # missing: False
    assert overlapping["uses_tc"].tolist()[:2] == [0, 1] and overlapping["uses_tc"].isna().sum() == 2
    assert kernels["start"].tolist() == STARTS and kernels["uses_tc"].isna().sum() == 2  # the table unchanged


def test_different_rows_are_cut_each_on_its_own():
    """The window starts at 100: only the kernel starting at 60 and ending at 2,000 overlaps it; all six are in
    the iterations."""
    ends = [s + 5 for s in STARTS]
    ends[4] = 2_000
    frames = RuleFrames({"kernels": _kernels(ends)}, {0: (0, 9, 100, 1_000)})
    inside, overlapping = frames.in_iterations("kernels", 0), frames.overlapping("kernels", 0)
    assert inside["start"].tolist() == [10, 20, 30, 40, 50, 60]
    assert overlapping["start"].tolist() == [60] and overlapping["end"].tolist() == [2_000]
    assert not np.shares_memory(inside["start"].to_numpy(), overlapping["start"].to_numpy())


def test_names_matching_two_patterns_on_one_frame_each_give_their_own_rows():
    names = ["fwd_a", "bwd_a", "fwd_b", "opt", "bwd_b"]
    ranges = pd.DataFrame({"rank": 0, "device": -1, "start": np.arange(5) * 10, "end": np.arange(5) * 10 + 5,
                           "name": names, "category": "", "domain": ""})
    frames = RuleFrames({"ranges": ranges}, {0: (0, 9, 0, 10_000)})
    assert frames.matching("ranges", re.compile("fwd"), 0).tolist() == [True, False, True, False, False]
    assert frames.matching("ranges", re.compile("bwd"), 0).tolist() == [False, True, False, False, True]
    assert frames.first_matches("ranges", re.compile("bwd"), 0, 5) == ["bwd_a", "bwd_b"]
    assert frames.first_matches("ranges", re.compile("fwd"), 0, 5) == ["fwd_a", "fwd_b"]


def test_a_frame_gathers_only_the_columns_asked_for_until_a_rule_reads_it_whole():
    """The rules read a few of a kernel's columns: the others are not copied in start order until a rule asks
    for the whole frame, which then holds every column, by start (hand-sorted)."""
    kernels = _kernels([s + 5 for s in STARTS]).assign(correlation=np.arange(6) * 11, grid_x=[4, 3, 2, 1, 6, 5])
    frames = RuleFrames({"kernels": kernels}, {0: (0, 9, 0, 1_000)})
    assert frames.column("kernels", "start", 0).tolist() == [10, 20, 30, 40, 50, 60]
    assert frames.column("kernels", "grid_x", 0).tolist() == [3, 1, 2, 5, 4, 6]
    cut = frames._made["in kernels"][0]
    gathered = set(cut._gathered)
    assert {"start", "grid_x"} <= gathered and not {"correlation", "kernel_id", "device", "end"} & gathered
    whole = frames.in_iterations("kernels", 0)
    assert whole["correlation"].tolist() == [11, 33, 22, 55, 0, 44]
    assert whole["kernel_id"].tolist() == [1, 3, 2, 5, 0, 4]
    assert list(whole.columns) == [c for c in _db_columns("kernels") if c in kernels.columns]  # the database's order


def test_a_frames_masked_rows_are_its_rows_where_the_mask_holds_indexed_by_their_place():
    kernels = _kernels([s + 5 for s in STARTS]).assign(name=lambda k: k["name"].astype("category"))
    frames = RuleFrames({"kernels": kernels}, {0: (0, 9, 0, 1_000)})
    mask = np.array([False, True, True, False, False, True])  # by start: b d c f a e -> d, c, e
    hit = frames.rows_of("kernels", 0, mask, ["name", "start"])
    assert list(hit.columns) == ["name", "start"]
    assert hit["name"].tolist() == ["d", "c", "e"] and hit["start"].tolist() == [20, 30, 60]
    assert hit.index.tolist() == [1, 2, 5]
    assert isinstance(hit["name"].dtype, pd.CategoricalDtype)  # as the table's: a groupby on it is the same
    every = frames.rows_of("kernels", 0, mask)
    assert list(every.columns) == [c for c in _db_columns("kernels") if c in kernels.columns]
    assert every["kernel_id"].tolist() == [3, 2, 4]


def test_a_text_column_comes_as_one_object_per_distinct_text_with_its_missing_values():
    categories = pd.array(["io", "dataloader", None, "io", "dataloader", "io"], dtype="str")
    ranges = pd.DataFrame({"rank": 0, "device": -1, "start": np.arange(6) * 10, "end": np.arange(6) * 10 + 5,
                           "name": list("abcdef"), "category": categories, "domain": ""})
    frames = RuleFrames({"ranges": ranges}, {0: (0, 9, 0, 10_000)})
    got = frames.column("ranges", "category", 0)
    assert got.dtype == object and not got.flags.writeable
    assert [None if pd.isna(v) else v for v in got] == ["io", "dataloader", None, "io", "dataloader", "io"]
    assert len({id(v) for v in got if isinstance(v, str)}) == 2
