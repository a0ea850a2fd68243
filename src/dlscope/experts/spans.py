"""Interval operations the rules need on top of ``analyze.intervals``: differences, gaps, overlaps."""

from __future__ import annotations

import numpy as np

from ..analyze.intervals import clip, merge


def Span(starts, ends) -> tuple[np.ndarray, np.ndarray]:
    """Intervals as a (starts, ends) pair of int64 arrays."""
    return np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)


def minus(a: tuple, b: tuple) -> tuple[np.ndarray, np.ndarray]:
    """The parts of union(a) not covered by union(b), as disjoint sorted intervals."""
    a_s, a_e = merge(*a)
    b_s, b_e = merge(*b)
    if len(a_s) == 0 or len(b_s) == 0:
        return a_s, a_e
    bounds = np.unique(np.concatenate([a_s, a_e, b_s, b_e]))
    mids = bounds[:-1]
    in_a = _covered(mids, a_s, a_e)
    in_b = _covered(mids, b_s, b_e)
    keep = in_a & ~in_b
    return merge(bounds[:-1][keep], bounds[1:][keep])


def overlap_length(a: tuple, b: tuple) -> int:
    """Length of union(a) ∩ union(b)."""
    a_s, a_e = merge(*a)
    return int((a_e - a_s).sum()) - length(minus((a_s, a_e), b))


def length(span: tuple) -> int:
    s, e = merge(*span)
    return int((e - s).sum())


def gaps(busy: tuple, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """The idle intervals of [lo, hi) not covered by ``busy``."""
    s, e = merge(*clip(*busy, lo, hi))
    starts = np.concatenate([[lo], e])
    ends = np.concatenate([s, [hi]])
    keep = ends > starts
    return starts[keep], ends[keep]


def _covered(points: np.ndarray, s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Whether each point lies in one of the disjoint sorted intervals [s, e)."""
    idx = np.searchsorted(s, points, side="right") - 1
    ok = idx >= 0
    out = np.zeros(len(points), dtype=bool)
    out[ok] = points[ok] < e[idx[ok]]
    return out
