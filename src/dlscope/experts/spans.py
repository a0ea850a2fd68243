"""Interval operations the rules need on top of ``analyze.intervals``: differences, gaps, overlaps."""

from __future__ import annotations

import numpy as np

from ..analyze.intervals import clip, merge, sorted_unique

#: the sorted distinct values of an array (np.unique hashes since numpy 2.3: ~1 s per million distinct int64)
distinct = sorted_unique


def first_seen(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``pd.factorize`` of integers: per value, the index of its distinct value, the distinct values in order
    of first appearance; by a stable sort (each value's first row comes first among its equals), without
    pandas' per-call cost on the few hundred values of a rank."""
    v = np.asarray(values)
    order = np.argsort(v, kind="stable")
    new = np.ones(len(v), dtype=bool)
    new[1:] = v[order][1:] != v[order][:-1]
    firsts = order[new]  # the first row of each distinct value, by value
    number = np.empty(len(firsts), dtype=np.int64)
    number[np.argsort(firsts, kind="stable")] = np.arange(len(firsts))
    codes = np.empty(len(v), dtype=np.int64)
    codes[order] = number[np.cumsum(new) - 1]
    return codes, v[np.sort(firsts)]


def Span(starts, ends) -> tuple[np.ndarray, np.ndarray]:
    """Intervals as a (starts, ends) pair of int64 arrays."""
    return np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)


def minus(a: tuple, b: tuple) -> tuple[np.ndarray, np.ndarray]:
    """The parts of union(a) not covered by union(b), as disjoint sorted intervals."""
    a_s, a_e = merge(*a)
    b_s, b_e = merge(*b)
    if len(a_s) == 0 or len(b_s) == 0:
        return a_s, a_e
    bounds = distinct(np.concatenate([a_s, a_e, b_s, b_e]))
    mids = bounds[:-1]
    in_a = _covered(mids, a_s, a_e)
    in_b = _covered(mids, b_s, b_e)
    keep = in_a & ~in_b
    return merge(bounds[:-1][keep], bounds[1:][keep])


def length(span: tuple) -> int:
    s, e = merge(*span)
    return int((e - s).sum())


def covered_lengths(span: tuple, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Per window [starts[i], ends[i]): the length of union(span) inside it (0 for empty windows)."""
    s, e = Span(*span)
    s, e = merge(s[e > s], e[e > s])
    before = np.concatenate([[0], np.cumsum(e - s)])  # covered length up to the start of each interval

    def covered_until(t: np.ndarray) -> np.ndarray:
        j = np.searchsorted(s, t, side="right") - 1
        inside = np.minimum(t, e[np.maximum(j, 0)]) - s[np.maximum(j, 0)] if len(s) else np.zeros(len(t), np.int64)
        return np.where(j >= 0, before[np.maximum(j, 0)] + inside, 0)

    starts, ends = Span(starts, ends)
    return np.where(ends > starts, covered_until(ends) - covered_until(starts), 0)


def gaps(busy: tuple[np.ndarray, np.ndarray], lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """The idle intervals of [lo, hi) not covered by ``busy``."""
    s, e = merge(*clip(*busy, lo, hi))
    starts = np.concatenate([[lo], e])
    ends = np.concatenate([s, [hi]])
    keep = ends > starts
    return starts[keep], ends[keep]


def gaps_in_windows(busy: tuple, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`gaps` of every window [lo[i], hi[i]) at once: (starts, ends, window index), window by window.

    The busy intervals are merged once; each window takes the stretch of the complement it overlaps
    (found by binary search), so many windows over millions of kernels cost one sort.
    """
    s, e = Span(*busy)
    s, e = merge(s[e > s], e[e > s])
    lo, hi = np.asarray(lo, dtype=np.int64), np.asarray(hi, dtype=np.int64)
    idle_s = np.concatenate([[np.iinfo(np.int64).min], e])  # the complement of the busy time, in order
    idle_e = np.concatenate([s, [np.iinfo(np.int64).max]])
    first = np.searchsorted(idle_e, lo, side="right")  # the first idle stretch ending after lo
    stop = np.searchsorted(idle_s, hi, side="left")  # past the last one starting before hi
    counts = np.maximum(stop - first, 0)
    window = np.repeat(np.arange(len(lo)), counts)
    offsets = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    idx = first[window] + offsets
    starts = np.maximum(idle_s[idx], lo[window])
    ends = np.minimum(idle_e[idx], hi[window])
    keep = ends > starts
    return starts[keep], ends[keep], window[keep]


def _covered(points: np.ndarray, s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Whether each point lies in one of the disjoint sorted intervals [s, e)."""
    idx = np.searchsorted(s, points, side="right") - 1
    ok = idx >= 0
    out = np.zeros(len(points), dtype=bool)
    out[ok] = points[ok] < e[idx[ok]]
    return out
