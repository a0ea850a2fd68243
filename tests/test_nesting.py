"""Per-thread nesting of CPU intervals, against a brute-force reading of the same intervals."""

from __future__ import annotations

import numpy as np
import pandas as pd

from dlscope.analyze.analysis import _iteration_ends
from dlscope.analyze.nesting import Nesting


def _brute_parent(keys, starts, ends, i) -> int:
    """The latest-starting interval of the same thread that contains interval i's start (ties: longer first)."""
    best = -1
    for j in range(len(starts)):
        if j != i and keys[j] == keys[i] and starts[j] <= starts[i] and ends[i] <= ends[j] and \
                (starts[j], -ends[j], j) < (starts[i], -ends[i], i):
            if best < 0 or (starts[j], -ends[j]) > (starts[best], -ends[best]):
                best = j
    return best


def _random_nested(rng, n, origin):
    """Properly nested intervals (a random tree) on one thread, starting at ``origin``."""
    starts, ends, stack, t = [], [], [], origin
    for _ in range(n):
        while stack and rng.random() < 0.4:
            ends[stack.pop()] = t
            t += int(rng.integers(1, 5))
        starts.append(t)
        ends.append(-1)
        stack.append(len(starts) - 1)
        t += int(rng.integers(1, 5))
    for i in reversed(stack):
        ends[i] = t
        t += 1
    return starts, ends


def test_threads_on_clocks_far_apart_nest_as_if_alone():
    """Ranks recorded on different machines: 10^18 ns between their clocks must not overflow anything."""
    rng = np.random.default_rng(5)
    keys, starts, ends = [], [], []
    for key, origin in ((0, 1_740_461_679_600_000_000), (1, 12_000), (2, 4_458_676_639_000_000), (3, 0)):
        s, e = _random_nested(rng, 40, origin)
        keys += [key] * len(s)
        starts += s
        ends += e
    keys, starts, ends = np.array(keys), np.array(starts, np.int64), np.array(ends, np.int64)
    nest = Nesting.build(keys, starts, ends)
    assert nest.parent.tolist() == [_brute_parent(keys, starts, ends, i) for i in range(len(starts))]
    # the innermost interval open at each start is the interval itself
    assert nest.innermost_at(keys, starts).tolist() == list(range(len(starts)))
    assert nest.innermost_at(np.array([9]), np.array([5])).tolist() == [-1]  # a thread with no intervals


def test_iteration_ends_keep_nanoseconds_beyond_float_precision():
    """An iteration without GPU work (a missing value) must not turn the others' ns epochs into floats."""
    iterations = pd.DataFrame({"rank": [0, 1], "iteration": [1, 1], "cpu_end": [1_000, 1_740_461_679_600_357_000]})
    kernels = pd.DataFrame({"rank": [1], "iteration": [1], "end": [1_740_461_679_600_358_001]})
    memops = pd.DataFrame({"rank": pd.Series([], dtype="int64"), "iteration": pd.Series([], dtype="int64"),
                           "end": pd.Series([], dtype="int64")})
    ops = memops
    assert _iteration_ends(iterations, ops, kernels, memops).tolist() == [1_000, 1_740_461_679_600_358_001]


def _sort_key(starts, ends, i):
    return (starts[i], -ends[i], i)


def _brute_innermost(keys, starts, ends, key, t) -> int:
    """PRODUCT.md's launching op, read literally: start <= t < end, the latest start, then the shortest, then
    the later row; a zero-length interval exactly at t only when nothing of positive length encloses t."""
    inside = [j for j in range(len(starts)) if keys[j] == key and starts[j] <= t < ends[j]]
    if inside:
        return max(inside, key=lambda j: _sort_key(starts, ends, j))
    zero = [j for j in range(len(starts)) if keys[j] == key and starts[j] == ends[j] == t]
    return max(zero) if zero else -1


def _brute_open_parent(keys, starts, ends, i) -> int:
    """The nearest earlier interval (in start, longest-first, row order) of the thread still open at i's start."""
    earlier = [j for j in range(len(starts)) if keys[j] == keys[i] and _sort_key(starts, ends, j) <
               _sort_key(starts, ends, i) and ends[j] > starts[i]]
    return max(earlier, key=lambda j: _sort_key(starts, ends, j)) if earlier else -1


def _messy(rng, n):
    """Intervals as real traces have them: nested, touching, zero-length, identical, and a few that overlap
    without nesting (µs rounding), on three threads."""
    keys = rng.integers(0, 3, n)
    starts = rng.integers(0, 60, n)
    lengths = np.where(rng.random(n) < 0.25, 0, rng.integers(1, 30, n))
    return keys.astype(np.int64), starts.astype(np.int64), (starts + lengths).astype(np.int64)


def test_innermost_enclosing_interval_matches_the_definition_on_messy_intervals():
    rng = np.random.default_rng(11)
    for _ in range(30):
        keys, starts, ends = _messy(rng, int(rng.integers(1, 40)))
        nest = Nesting.build(keys, starts, ends)
        q_keys = rng.integers(0, 4, 200)  # thread 3 has no intervals
        q_times = rng.integers(-2, 95, 200)
        got = nest.innermost_at(q_keys, q_times).tolist()
        assert got == [_brute_innermost(keys, starts, ends, k, t) for k, t in zip(q_keys, q_times)]
        assert nest.parent.tolist() == [_brute_open_parent(keys, starts, ends, i) for i in range(len(starts))]


def test_an_op_that_ended_before_the_launch_never_launched_it():
    """The bug the audit found: the latest-starting interval at the right depth was taken without checking
    that it still contained the time (a zero-length view charged with a FlashAttention kernel)."""
    keys = np.zeros(4, np.int64)
    starts = np.array([0, 10, 20, 20], np.int64)   # attention [0, 100), view [10, 10], cast [20, 30), view [20, 20]
    ends = np.array([100, 10, 30, 20], np.int64)
    nest = Nesting.build(keys, starts, ends)
    assert nest.innermost_at(keys[:3], np.array([15, 25, 35])).tolist() == [0, 2, 0]
    assert nest.innermost_at(keys[:1], np.array([10])).tolist() == [0]  # a longer op encloses the view's time
    alone = Nesting.build(keys[:1], np.array([10], np.int64), np.array([10], np.int64))
    assert alone.innermost_at(keys[:1], np.array([10])).tolist() == [0]  # nothing longer: the view owns it
    assert nest.depth.tolist() == [0, 1, 1, 2] and nest.root.tolist() == [0, 0, 0, 0]


def test_a_node_called_at_two_data_types_is_split_and_one_at_one_type_is_kept():
    from dlscope.analyze.analysis import _nodes_by_data_type

    node = np.array([0, 1, 0, 2, 1], dtype=np.int32)
    one_type = pd.Series(pd.Categorical(["f32", "f16", "f32", "", "f16"]))
    assert _nodes_by_data_type(node, one_type) is node
    two_types = pd.Series(pd.Categorical(["f32", "f16", "f16", "", "f16"]))  # node 0: f32 then f16
    # numbered as one key of (node, type) in order of first appearance: (0,f32) (1,f16) (0,f16) (2,"")
    assert _nodes_by_data_type(node, two_types).tolist() == [0, 1, 2, 3, 1]
    gap = np.array([0, 2], dtype=np.int32)  # node 1 has no call: not every node is known to have one type
    assert _nodes_by_data_type(gap, pd.Series(pd.Categorical(["a", "a"]))).tolist() == [0, 1]


def _brute_depth_and_root(parent: list[int]) -> tuple[list[int], list[int]]:
    depth, root = [], []
    for i in range(len(parent)):
        d, r = 0, i
        while parent[r] >= 0:
            d, r = d + 1, parent[r]
        depth.append(d)
        root.append(r)
    return depth, root


def test_parents_depths_roots_and_innermost_intervals_match_the_definition_however_deep(monkeypatch):
    """The nesting is found one level at a time up to ``MAX_LEVELS`` levels, by jumps along the candidates past
    it, and the innermost interval at a time by climbing the parents up to as many steps, by the ends' max tree
    past them: each way gives each interval the nearest earlier one still open at its start, its depth and
    outermost ancestor as the parent chain reads them, and each time its innermost enclosing interval, on messy
    intervals (overlapping, zero-length, three threads) and on a 40-deep chain."""
    import dlscope.analyze.nesting as nesting

    rng = np.random.default_rng(23)
    cases = [_messy(rng, int(rng.integers(1, 60))) for _ in range(40)]
    deep = np.arange(40, dtype=np.int64)
    cases.append((np.zeros(45, np.int64), np.r_[deep, 50, 50, 60, 61, 61], np.r_[200 - deep, 50, 55, 65, 61, 70]))
    for max_levels in (nesting.MAX_LEVELS, 1):
        monkeypatch.setattr(nesting, "MAX_LEVELS", max_levels)
        for keys, starts, ends in cases:
            nest = Nesting.build(keys, starts, ends)
            parent = [_brute_open_parent(keys, starts, ends, i) for i in range(len(starts))]
            depth, root = _brute_depth_and_root(parent)
            assert nest.parent.tolist() == parent
            assert nest.depth.tolist() == depth and nest.root.tolist() == root
            q_keys, q_times = rng.integers(0, 4, 100), rng.integers(-2, 210, 100)
            assert nest.innermost_at(q_keys, q_times).tolist() == [_brute_innermost(keys, starts, ends, k, t)
                                                                   for k, t in zip(q_keys, q_times)]
    assert max(_brute_depth_and_root(parent)[0]) > nesting.MAX_LEVELS  # the chain goes past the levels


def test_intervals_are_ordered_by_thread_start_longest_first_then_row_as_lexsort_orders_them():
    """The nesting's order (three stable sorts of folded keys) is lexsort's, on messy intervals in trace order and
    shuffled, threads with keys far apart, and clocks too far apart to fold (lexsort itself then)."""
    from dlscope.analyze.nesting import _thread_order

    rng = np.random.default_rng(31)
    for _ in range(30):
        keys, starts, ends = _messy(rng, int(rng.integers(1, 80)))
        keys = keys * 1_000_003 - 7
        for perm in (np.argsort(starts, kind="stable"), rng.permutation(len(keys))):
            k, s, e = keys[perm], starts[perm], ends[perm]
            assert _thread_order(k, s, e).tolist() == np.lexsort((-e, s, k)).tolist()
    far = np.array([0, 1 << 61, 5, 1 << 61], np.int64)
    assert _thread_order(np.zeros(4, np.int64), far, far + 1).tolist() == [0, 2, 1, 3]


def test_op_node_numbers_are_pandas_group_numbers_in_order_of_first_appearance():
    """The op nodes' numbering folds each column's codes (a constant integer column folds nothing, a small-span
    one its offsets, others factorized, categoricals their codes): the numbers are pandas' own ``ngroup``."""
    from dlscope.analyze.analysis import _group_numbers

    rng = np.random.default_rng(41)
    n = 500
    columns = [pd.Series(np.full(n, 3, np.int64)),                                   # one rank
               pd.Series(rng.integers(-2, 3, n)),                                    # small span
               pd.Series(rng.choice(np.array([0, 1 << 50, -(1 << 40)]), n)),         # wide span
               pd.Series(rng.random(n) < 0.3),                                       # a flag
               pd.Series(pd.Categorical(rng.choice(["mm", "add", ""], n))),          # text as categories
               pd.Series(rng.choice(["a", "b"], n), dtype=object)]
    frame = pd.DataFrame({f"c{i}": c for i, c in enumerate(columns)})
    expected = frame.groupby(list(frame.columns), sort=False, observed=True, dropna=False).ngroup()
    assert _group_numbers(columns).tolist() == expected.tolist()
    assert _group_numbers(columns[:1]).tolist() == [0] * n
