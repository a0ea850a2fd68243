"""The rules' job-wide frames: a table's rows cut in the same order twice are one copy, not two (on a one-rank
trace the kernels in its iterations and those overlapping its window are the same rows), and each frame still
holds exactly its own rows."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from dlscope.experts.context import RuleFrames

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
