"""The numpy group reductions the job-wide aggregation uses, against hand-computed examples."""

from __future__ import annotations

import numpy as np

from dlscope.analyze.aggregation import group_stats


def test_group_stats_counts_sums_minima_and_maxima_per_group_with_ties_and_empty_groups():
    # groups 0..4: group 1 and group 4 have no rows; group 2 holds a tie (7, 7); rows come unsorted
    code = np.array([2, 0, 3, 2, 0, 2, 3])
    dur = np.array([7, 5, -1, 7, 10, 1, 2**40], dtype=np.int64)
    counts, stats = group_stats(code, 5, {"dur": dur, "one": np.ones(7, dtype=np.int64)})
    assert counts.tolist() == [2, 0, 3, 2, 0]
    total, low, high = stats["dur"]
    assert total.tolist() == [15, 0, 15, 2**40 - 1, 0]
    assert low.tolist() == [5, 0, 1, -1, 0]
    assert high.tolist() == [10, 0, 7, 2**40, 0]
    assert stats["one"][0].tolist() == counts.tolist()
    assert total.dtype == np.int64


def test_group_stats_of_no_rows_is_all_empty_groups():
    counts, stats = group_stats(np.zeros(0, dtype=np.int64), 3, {"dur": np.zeros(0, dtype=np.int64)})
    assert counts.tolist() == [0, 0, 0]
    assert [a.tolist() for a in stats["dur"]] == [[0, 0, 0]] * 3
