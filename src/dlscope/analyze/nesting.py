"""Nesting of CPU intervals per thread: parents, depths, and the innermost interval open at a time.

Everything is vectorized: intervals are sorted once by (thread, start, -end); the depth of an interval is
the number of same-thread intervals open when it starts, and its parent is the latest-starting interval
one level up. Queries ("which op was open on this thread at time t?") use the same per-depth search.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def _composite(keys: np.ndarray, times: np.ndarray, span: int) -> np.ndarray:
    """One sortable int64 per (thread key, time since the thread's first start) pair."""
    return keys.astype(np.int64) * (span + 2) + (times + 1)


@dataclass
class Nesting:
    """Intervals of one kind (e.g. ops) nested per thread; rows keep the caller's order.

    Times are counted from each thread's first start, so threads on unrelated clocks (ranks of a job
    recorded on different machines) never overflow the composite keys.
    """

    order: np.ndarray      # caller row indices in (key, start, -end) order
    skey: np.ndarray       # composite (key, start) of sorted rows
    ekey: np.ndarray       # sorted composite (key, end) of all rows
    depth: np.ndarray      # depth per caller row (0 = outermost)
    parent: np.ndarray     # caller row index of the parent, -1 for roots
    thread_keys: np.ndarray  # the distinct keys, sorted
    thread_t0: np.ndarray    # each one's first start
    span: int

    @classmethod
    def build(cls, keys: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> "Nesting":
        keys = np.asarray(keys, dtype=np.int64)
        starts = np.asarray(starts, dtype=np.int64)
        ends = np.maximum(np.asarray(ends, dtype=np.int64), starts)
        n = len(starts)
        if n == 0:
            z = np.zeros(0, np.int64)
            return cls(z, z, z, z, z, z, z, 0)
        order = np.lexsort((-ends, starts, keys))
        k_sorted = keys[order]
        first_in_thread = np.searchsorted(k_sorted, k_sorted, side="left")
        thread_keys, firsts = np.unique(k_sorted, return_index=True)
        thread_t0 = starts[order][firsts]  # sorted by start within a thread: its first start
        t0 = thread_t0[np.searchsorted(thread_keys, keys)]
        rel_starts, rel_ends = starts - t0, ends - t0
        span = int(rel_ends.max())
        if int(keys.max()) * (span + 2) > 2**62:
            raise OverflowError("a thread's intervals span too long for composite thread/time keys")
        skey = _composite(k_sorted, rel_starts[order], span)
        ekey = np.sort(_composite(keys, rel_ends, span))
        # intervals of the same thread started before (sorted position, thread-relative) minus those ended
        started_before = np.arange(n) - first_in_thread
        thread_first_end = np.searchsorted(ekey, _composite(k_sorted, np.full(n, -1), span) + 1)
        ended_by_start = np.searchsorted(ekey, skey, side="right") - thread_first_end
        depth_sorted = np.maximum(started_before - ended_by_start, 0)
        parent_sorted = np.full(n, -1, dtype=np.int64)
        for d in range(1, int(depth_sorted.max(initial=0)) + 1):
            at_d = np.flatnonzero(depth_sorted == d)
            up = np.flatnonzero(depth_sorted == d - 1)
            if len(at_d) == 0 or len(up) == 0:
                continue
            idx = np.searchsorted(up, at_d) - 1
            ok = idx >= 0
            parent_sorted[at_d[ok]] = order[up[idx[ok]]]
        depth = np.empty(n, dtype=np.int64)
        depth[order] = depth_sorted
        parent = np.empty(n, dtype=np.int64)
        parent[order] = parent_sorted
        return cls(order, skey, ekey, depth, parent, thread_keys, thread_t0, span)

    def innermost_at(self, keys: np.ndarray, times: np.ndarray) -> np.ndarray:
        """Caller row index of the innermost interval open on thread ``keys`` at ``times`` (-1 if none)."""
        keys = np.asarray(keys, dtype=np.int64)
        times = np.asarray(times, dtype=np.int64)
        out = np.full(len(times), -1, dtype=np.int64)
        if len(self.order) == 0 or len(times) == 0:
            return out
        pos = np.minimum(np.searchsorted(self.thread_keys, keys), len(self.thread_keys) - 1)
        known = self.thread_keys[pos] == keys
        rel = times - np.where(known, self.thread_t0[pos], 0)
        inside = known & (rel >= 0) & (rel <= self.span)
        q = _composite(keys, np.clip(rel, 0, self.span), self.span)
        open_count = np.searchsorted(self.skey, q, side="right") - np.searchsorted(self.ekey, q, side="right")
        depth_sorted = self.depth[self.order]
        sorted_keys = (self.skey - 1) // (self.span + 2)
        for d in np.unique(open_count[(open_count > 0) & inside]):
            rows = np.flatnonzero((open_count == d) & inside)
            level = np.flatnonzero(depth_sorted == d - 1)
            if len(level) == 0:
                continue
            pos = np.searchsorted(self.skey[level], q[rows], side="right") - 1
            ok = pos >= 0
            cand = level[pos[ok]]
            same_thread = sorted_keys[cand] == keys[rows[ok]]
            out[rows[ok][same_thread]] = self.order[cand[same_thread]]
        return out
