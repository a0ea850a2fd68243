"""Vectorized interval algebra over int64 nanosecond [start, end) intervals."""

from __future__ import annotations

import numpy as np
import pandas as pd


def clip(starts: np.ndarray, ends: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """Intervals cut to [lo, hi); empty ones are dropped."""
    s = np.maximum(np.asarray(starts, dtype=np.int64), lo)
    e = np.minimum(np.asarray(ends, dtype=np.int64), hi)
    keep = e > s
    return s[keep], e[keep]


def merge(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals as sorted, disjoint intervals."""
    if len(starts) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    order = np.argsort(starts, kind="stable")
    s = np.asarray(starts, dtype=np.int64)[order]
    e = np.asarray(ends, dtype=np.int64)[order]
    running_end = np.maximum.accumulate(e)
    new_group = np.empty(len(s), dtype=bool)
    new_group[0] = True
    new_group[1:] = s[1:] > running_end[:-1]
    firsts = np.flatnonzero(new_group)
    # the running end never decreases, so a group's end is the running end at its last interval
    lasts = np.append(firsts[1:] - 1, len(s) - 1)
    return s[firsts], running_end[lasts]


def union_length(starts: np.ndarray, ends: np.ndarray) -> int:
    """Length of the union: overlapping intervals count once."""
    s, e = merge(starts, ends)
    return int((e - s).sum())


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """Sorted distinct values (a sort and a mask: much faster than np.unique's hashing on large int arrays)."""
    v = np.sort(np.asarray(values, dtype=np.int64))
    if len(v) == 0:
        return v
    keep = np.empty(len(v), dtype=bool)
    keep[0] = True
    np.not_equal(v[1:], v[:-1], out=keep[1:])
    return v[keep]


def covered_by_union(bounds: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """For the elementary segments [bounds[i], bounds[i+1]), whether one of the intervals covers each one. The
    intervals must be sorted and disjoint, as :func:`merge` gives them, and ``bounds`` sorted and holding each
    start and end: each interval turns the cover on at its start's bound and off at its end's, no two share a
    bound, so a running count of 0/1 bytes is the mask."""
    n_seg = len(bounds) - 1
    if n_seg <= 0:
        return np.zeros(max(n_seg, 0), dtype=bool)
    delta = np.zeros(len(bounds), dtype=np.int8)
    delta[np.searchsorted(bounds, starts)] = 1
    delta[np.searchsorted(bounds, ends)] = -1
    return np.cumsum(delta, dtype=np.int8)[:n_seg].view(bool)


def union_per_group(group: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                    n_groups: int, rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per group 0..n_groups-1: the length of the union of its intervals, its first start and its last end
    (0, 0, 0 for a group without intervals). Each interval adds the part of it past the group's running
    reach, so overlaps count once; exact int64 throughout. ``rows``: the intervals are ``starts[rows]``,
    ``ends[rows]`` (each row once per group it is in: not copied out beside the sorted ones)."""
    union = np.zeros(n_groups, dtype=np.int64)
    first = np.zeros(n_groups, dtype=np.int64)
    last = np.zeros(n_groups, dtype=np.int64)
    if len(group) == 0:
        return union, first, last
    starts, ends = np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)
    order = _group_start_order(np.asarray(group, dtype=np.int64), starts if rows is None else starts[rows])
    g = np.asarray(group, dtype=np.int64)[order]
    at = order if rows is None else np.asarray(rows)[order]
    del order
    s, e = starts[at], ends[at]
    del at
    np.maximum(e, s, out=e)
    new = np.empty(len(g), dtype=bool)
    new[0] = True
    np.not_equal(g[1:], g[:-1], out=new[1:])
    heads = np.flatnonzero(new)  # each group's rows are one run: sums and maxima per run, not per row
    reach = _running_max_per_run(e, g, new)  # e itself, in place
    del new
    past = np.empty_like(reach)  # the reach before each interval (its own start at a group's head) ...
    past[1:] = reach[:-1]
    past[heads] = s[heads]
    np.maximum(past, s, out=past)
    np.subtract(reach, past, out=past)  # ... and what the interval adds past it
    np.maximum(past, 0, out=past)
    union[g[heads]] = np.add.reduceat(past, heads)
    first[g[heads]] = s[heads]
    last[g[heads]] = reach[np.append(heads[1:] - 1, len(g) - 1)]  # the reach at a run's end: its last end
    return union, first, last


def _group_start_order(group: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """``np.lexsort((starts, group))`` as one stable sort of (group, start) folded into an int64 where it fits:
    the activities' groups come as a few runs (an op's own, then its ancestors'), which a stable sort (timsort)
    merges, where lexsort sorted both keys in full."""
    s_lo, s_hi = int(starts.min()), int(starts.max())
    g_lo, g_hi = int(group.min()), int(group.max())
    span = s_hi - s_lo + 1
    if (g_hi - g_lo + 1) * span >= 1 << 62:
        return np.lexsort((starts, group))
    folded = group - g_lo
    folded *= span
    folded += starts
    folded -= s_lo
    return np.argsort(folded, kind="stable")


def _running_max_per_run(values: np.ndarray, group: np.ndarray, new: np.ndarray) -> np.ndarray:
    """The running maximum of ``values`` (modified in place) restarting at each run of ``group`` (sorted):
    each run lifted above the runs before it, one ``maximum.accumulate``, when that fits in int64; else a
    group-by."""
    lo, span = int(values.min()), int(values.max()) - int(values.min()) + 1
    g_lo, g_span = int(group[0]), int(group[-1]) - int(group[0]) + 1
    if g_span * span >= 1 << 62:
        run = np.cumsum(new) - 1
        values[:] = pd.Series(values).groupby(run, sort=False).cummax().to_numpy(np.int64)
        return values
    values -= lo  # 0 .. span - 1
    lift = group - g_lo
    lift *= span
    values += lift
    np.maximum.accumulate(values, out=values)
    values -= lift
    values += lo
    return values
