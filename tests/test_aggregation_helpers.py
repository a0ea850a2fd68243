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


def _labels_by_nanosecond(sets, lo, hi):
    """The breakdown's category of every nanosecond of [lo, hi), by looping (the oracle): the first category
    in priority order with an interval covering it, else 'other' (the last)."""
    from dlscope.analyze.aggregation import CATEGORIES

    labels = []
    for t in range(lo, hi):
        label = len(CATEGORIES) - 1
        for i, (starts, ends) in enumerate(sets):
            if any(s <= t < e for s, e in zip(starts, ends)):
                label = i
                break
        labels.append(label)
    return labels


def test_segments_breakdown_of_every_window_is_the_nanoseconds_of_each_category_counted_one_by_one():
    from dlscope.analyze.aggregation import CATEGORIES, Segments

    rng = np.random.default_rng(7)
    for _ in range(200):
        n_ranks = int(rng.integers(1, 4))
        points = [np.sort(rng.integers(0, 60, int(rng.integers(2, 6)))) for _ in range(n_ranks)]
        by_rank: list[list[tuple[list, list]]] = [[] for _ in range(n_ranks)]
        sets = []
        for _c in range(len(CATEGORIES) - 1):
            n = int(rng.integers(0, 7)) if rng.random() < 0.8 else 0  # some categories empty
            starts = rng.integers(-10, 70, n)
            ends = starts + rng.integers(0, 25, n)  # zero-length and overlapping intervals too
            rank = rng.integers(0, n_ranks, n)
            sets.append((starts.astype(np.int64), ends.astype(np.int64), rank.astype(np.int64)))
            for r in range(n_ranks):
                by_rank[r].append((starts[rank == r].tolist(), ends[rank == r].tolist()))
        segments = Segments(sets, points)
        for r in range(n_ranks):
            view = segments.of(r)
            p = sorted(set(points[r].tolist()))
            for a in p:
                for b in p:
                    if b < a:
                        continue
                    labels = _labels_by_nanosecond(by_rank[r], a, b)
                    expected = {c: labels.count(i) for i, c in enumerate(CATEGORIES)}
                    assert view.breakdown(a, b) == expected
                    loader = by_rank[r][CATEGORIES.index("dataloader")]
                    in_loader = sum(any(s <= t < e for s, e in zip(*loader)) for t in range(a, b))
                    assert view.reader_cost(a, b) == (in_loader if any(
                        max(s, points[r].min()) < min(e, points[r].max()) for s, e in zip(*loader)) else None)


def test_covered_by_union_marks_the_pieces_inside_disjoint_intervals():
    from dlscope.analyze.intervals import covered_by_union

    bounds = np.array([0, 2, 5, 7, 9, 12], dtype=np.int64)  # pieces [0,2) [2,5) [5,7) [7,9) [9,12)
    starts, ends = np.array([2, 9], dtype=np.int64), np.array([7, 12], dtype=np.int64)
    assert covered_by_union(bounds, starts, ends).tolist() == [False, True, True, False, True]
    assert covered_by_union(bounds, starts[:0], ends[:0]).tolist() == [False] * 5
    assert covered_by_union(bounds[:1], starts[:0], ends[:0]).tolist() == []


def test_id_index_of_consecutive_ids_is_a_range_and_looks_up_as_an_index_of_the_ids():
    import pandas as pd

    from dlscope.analyze.aggregation import id_index

    for ids in (np.arange(5, 12), np.array([3, 4, 6, 7]), np.array([4, 3, 5]), np.zeros(0, dtype=np.int64)):
        index = id_index(ids, "op_id")
        consecutive = len(ids) > 0 and ids.tolist() == list(range(ids[0], ids[0] + len(ids)))
        assert isinstance(index, pd.RangeIndex) == consecutive
        assert index.tolist() == ids.tolist() and index.name == "op_id"
        keys = np.array([-1, 3, 5, 6, 11, 12, 100])
        assert index.get_indexer(keys).tolist() == pd.Index(ids).get_indexer(keys).tolist()
