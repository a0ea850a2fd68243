"""The interval algebra every metric stands on, against a brute-force count of covered time units."""

from __future__ import annotations

import numpy as np

from dlscope.analyze.intervals import clip, merge, union_length, union_per_group


def _covered_units(starts, ends) -> set[int]:
    return {t for s, e in zip(starts, ends) for t in range(int(s), int(e))}


def test_merge_gives_the_union_as_sorted_disjoint_intervals_for_any_times():
    rng = np.random.default_rng(3)
    for _ in range(500):
        n = int(rng.integers(0, 25))
        starts = rng.integers(-300, 300, n)  # negative times too (clocks relative to a later origin)
        ends = starts + rng.integers(0, 40, n)
        s, e = merge(starts, ends)
        assert np.all(s[1:] > e[:-1]) and np.all(e >= s)
        assert _covered_units(s, e) == _covered_units(starts, ends)
        assert union_length(starts, ends) == len(_covered_units(starts, ends))


def test_merge_of_intervals_ending_before_zero():
    s, e = merge(np.array([-17, -30, -10]), np.array([-4, -20, -8]))
    assert s.tolist() == [-30, -17] and e.tolist() == [-20, -4]


def test_clip_drops_what_falls_outside_the_window():
    s, e = clip(np.array([0, 10, 50]), np.array([20, 30, 60]), 15, 55)
    assert s.tolist() == [15, 15, 50] and e.tolist() == [20, 30, 55]


def _brute_union(intervals: list[tuple[int, int]]) -> int:
    """Covered length, one unit at a time."""
    return len({t for s, e in intervals for t in range(s, max(e, s))})


def test_union_per_group_counts_overlaps_once_and_reports_first_start_and_last_end():
    rng = np.random.default_rng(21)
    for _ in range(20):
        n, n_groups = int(rng.integers(1, 50)), 6  # group 5 never drawn: stays (0, 0, 0)
        group = rng.integers(0, 5, n)
        starts = rng.integers(-30, 30, n)
        ends = starts + np.where(rng.random(n) < 0.2, -3, rng.integers(0, 15, n))  # some end before they start
        union, first, last = union_per_group(group, starts, ends, n_groups)
        for g in range(n_groups):
            mine = [(int(s), int(e)) for s, e, k in zip(starts, ends, group) if k == g]
            assert union[g] == _brute_union(mine)
            assert first[g] == (min(s for s, _ in mine) if mine else 0)
            assert last[g] == (max(max(s, e) for s, e in mine) if mine else 0)


def test_union_per_group_of_rows_of_shared_intervals_equals_the_intervals_copied_out():
    """``rows``: one interval counted in several groups (an activity in each ancestor op's union) is read where
    it lies; the figures equal those of the intervals copied out row by row."""
    rng = np.random.default_rng(5)
    starts = rng.integers(-50, 50, 40)
    ends = starts + rng.integers(-2, 20, 40)
    rows = rng.integers(0, 40, 300)
    group = rng.integers(0, 9, 300)
    by_rows = union_per_group(group, starts, ends, 10, rows)
    for g in range(10):
        mine = [(int(starts[r]), int(ends[r])) for r, k in zip(rows, group) if k == g]
        assert by_rows[0][g] == _brute_union(mine)
        assert by_rows[1][g] == (min(s for s, _ in mine) if mine else 0)
        assert by_rows[2][g] == (max(max(s, e) for s, e in mine) if mine else 0)


def test_union_per_group_far_apart_times_and_many_groups_take_the_exact_path():
    """Times spanning ~2^61 ns with several groups cannot be lifted run above run within int64: the figures
    stay exact (hand-computed) through the group-by path."""
    big = 1 << 61
    group = np.array([0, 0, 1, 1, 3])
    starts = np.array([-big, -big + 5, big - 10, big - 8, 7])
    ends = np.array([-big + 10, -big + 20, big - 2, big - 9, 7])
    union, first, last = union_per_group(group, starts, ends, 4)
    assert union.tolist() == [20, 8, 0, 0]
    assert first.tolist() == [-big, big - 10, 0, 7]
    assert last.tolist() == [-big + 20, big - 2, 0, 7]
