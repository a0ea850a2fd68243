"""Nesting of CPU intervals per thread: parents, depths, roots, and the innermost interval open at a time.

PRODUCT.md: the op that launched a call is the innermost op *enclosing* the call's start on its thread
(op start <= t < op end); an op that has already ended launches nothing. Intervals are sorted once per
thread by (start, longest first, input order); the interval enclosing a time t is then the nearest one at or
before t's sorted place whose end lies after t, and the parent of an interval is the nearest earlier one
still open at its start. Both are "rightmost position <= p whose end > x" questions, answered on the parent
chain (the intervals between an interval and its parent end by its start): the parents are found one nesting
level at a time (a running maximum of the ends per run of siblings; deep nestings by jumping along earlier
intervals' own answers), the enclosing interval by climbing from the last one starting at or before t (about
the depth in vectorized steps, a max segment tree over the sorted ends for long climbs; no per-event loop).
A zero-length interval encloses nothing; it owns a time only when it sits exactly there and no interval of
positive length encloses it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_NONE = np.int64(-1)


class _RightmostAbove:
    """For a fixed int64 array ``values``: the rightmost index j <= p with values[j] > x, for many (p, x)."""

    def __init__(self, values: np.ndarray):
        n = len(values)
        self.size = 1 << max(int(n - 1).bit_length(), 0) if n else 1
        tree = np.full(2 * self.size, np.iinfo(np.int64).min, dtype=np.int64)
        tree[self.size:self.size + n] = values
        for level in range(self.size.bit_length() - 1, 0, -1):  # internal nodes, one level at a time
            lo, hi = 1 << (level - 1), 1 << level
            tree[lo:hi] = np.maximum(tree[2 * lo:2 * hi:2], tree[2 * lo + 1:2 * hi:2])
        self.tree = tree

    def query(self, p: np.ndarray, x: np.ndarray) -> np.ndarray:
        tree, size = self.tree, self.size
        p = np.asarray(p, dtype=np.int64)
        x = np.asarray(x, dtype=np.int64)
        out = np.full(len(p), -1, dtype=np.int64)
        rows = np.flatnonzero(p >= 0)
        node = p[rows] + size
        xs = x[rows]
        hit = tree[node] > xs
        found_rows, found_nodes = [rows[hit]], [node[hit]]
        rows, node, xs = rows[~hit], node[~hit], xs[~hit]
        # climb: the first left sibling (of the leaf or an ancestor) whose subtree holds a value > x
        while len(rows):
            left = node - 1  # the left sibling when node is a right child
            good = (node & 1).astype(bool) & (tree[left] > xs)
            found_rows.append(rows[good])
            found_nodes.append(left[good])
            node >>= 1
            stay = ~good & (node > 1)
            rows, node, xs = rows[stay], node[stay], xs[stay]
        # descend: the rightmost leaf > x inside the subtree found
        rows, node = np.concatenate(found_rows), np.concatenate(found_nodes)
        xs = x[rows]
        while len(rows):
            leaf = node >= size
            out[rows[leaf]] = node[leaf] - size
            rows, node, xs = rows[~leaf], node[~leaf], xs[~leaf]
            right = 2 * node + 1
            node = np.where(tree[right] > xs, right, right - 1)
        return out


@dataclass
class Nesting:
    """Intervals of one kind (e.g. ops) nested per thread; per-row arrays keep the caller's row order."""

    order: np.ndarray        # caller row indices in sorted (thread, start, -end, row) order
    thread_of: np.ndarray    # thread index (0..n_threads-1) of each sorted row
    thread_lo: np.ndarray    # first sorted position of each thread
    thread_keys: np.ndarray  # the distinct thread keys, sorted
    starts: np.ndarray       # sorted starts
    ends: np.ndarray         # sorted ends (never before their start)
    depth: np.ndarray        # depth per caller row (0 = outermost)
    parent: np.ndarray       # caller row index of the parent, -1 for roots
    root: np.ndarray         # caller row index of the outermost enclosing interval (itself for roots)
    #: sorted position of each sorted interval's parent (-1 for roots): what :meth:`innermost_at` climbs
    parent_sorted: np.ndarray
    #: the ends' max tree, built for the queries whose climb is long (deep nestings) when they come
    _tree: _RightmostAbove | None = None
    #: (thread, start) folded into one sorted int64 per row, with the starts' min and max (built when asked)
    _folded: tuple[np.ndarray, int, int] | None = None

    @classmethod
    def build(cls, keys: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> Nesting:
        keys = np.asarray(keys, dtype=np.int64)
        starts = np.asarray(starts, dtype=np.int64)
        ends = np.maximum(np.asarray(ends, dtype=np.int64), starts)
        n = len(starts)
        # stable: equal (thread, start, end) keep their row order without a row key
        order = _thread_order(keys, starts, ends)
        # the keys in sorted order are already grouped: each thread's first position where the key changes
        sorted_keys = keys[order]
        new = np.empty(n, dtype=bool)
        new[:1] = True
        np.not_equal(sorted_keys[1:], sorted_keys[:-1], out=new[1:])
        thread_lo = np.flatnonzero(new)
        thread_keys = sorted_keys[thread_lo]
        del sorted_keys
        thread_of = np.cumsum(new, dtype=np.int64)
        thread_of -= 1
        del new
        s_sorted, e_sorted = starts[order], ends[order]
        parent = np.full(n, -1, dtype=np.int64)
        by_level = _parents_by_level(s_sorted, e_sorted, thread_of, thread_lo)
        if by_level is None:  # times spanning too much to fold: by jumps along the candidates
            parent_sorted = _nearest_open_before(s_sorted, e_sorted, thread_lo)
            parent[order] = np.where(parent_sorted >= 0, order[np.maximum(parent_sorted, 0)], -1)
            depth, root = _depth_and_root(parent)
        else:
            parent_sorted, depth_sorted, root_sorted = by_level
            parent[order] = np.where(parent_sorted >= 0, order[np.maximum(parent_sorted, 0)], -1)
            depth, root = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
            depth[order] = depth_sorted
            root[order] = order[root_sorted]
            del depth_sorted, root_sorted
        return cls(order, thread_of, thread_lo.astype(np.int64, copy=False), thread_keys, s_sorted, e_sorted,
                   depth, parent, root, parent_sorted)

    def innermost_at(self, keys: np.ndarray, times: np.ndarray) -> np.ndarray:
        """Caller row index of the innermost interval enclosing ``times`` on thread ``keys`` (-1 if none)."""
        keys = np.asarray(keys, dtype=np.int64)
        times = np.asarray(times, dtype=np.int64)
        out = np.full(len(times), -1, dtype=np.int64)
        if len(self.order) == 0 or len(times) == 0:
            return out
        thread = np.minimum(np.searchsorted(self.thread_keys, keys), len(self.thread_keys) - 1)
        known = self.thread_keys[thread] == keys
        lo = self.thread_lo[thread]
        hi = np.append(self.thread_lo[1:], len(self.order))[thread]
        last = self._last_at_or_before(thread, lo, hi, times)  # last sorted interval of the thread starting <= t
        last = np.where(known, last, -1)
        hit = self._open_on_chain(last, times, lo)
        # a zero-length interval exactly at t owns it when nothing of positive length encloses t
        zero = (hit < 0) & (last >= 0)
        at = np.where(zero, last, 0)
        zero &= (self.starts[at] == times) & (self.ends[at] == times)
        hit = np.where(zero, last, hit)
        ok = hit >= 0
        out[ok] = self.order[hit[ok]]
        return out

    def _open_on_chain(self, last: np.ndarray, times: np.ndarray, lo: np.ndarray) -> np.ndarray:
        """Per query, the last sorted interval at or before ``last`` (of the thread starting at ``lo``) whose end
        lies after t, or -1. It is ``last`` or one of its ancestors (the intervals between an interval and its
        parent end by its start, so by t): the first of them open at t, found by climbing all queries at once,
        about the depth in steps; a query still climbing after ``MAX_LEVELS`` steps asks the ends' max tree."""
        hit = np.full(len(last), -1, dtype=np.int64)
        rows = np.flatnonzero(last >= 0)
        at = last[rows]
        for _ in range(MAX_LEVELS):
            if not len(rows):
                return hit
            t = times[rows]
            found = self.ends[at] > t
            hit[rows[found]] = at[found]
            up = self.parent_sorted[at[~found]]
            going = up >= 0
            rows, at = rows[~found][going], up[going]
        if len(rows):
            if self._tree is None:
                self._tree = _RightmostAbove(self.ends)
            deep = self._tree.query(at, times[rows])
            hit[rows] = np.where(deep >= lo[rows], deep, -1)
        return hit

    def _last_at_or_before(self, thread: np.ndarray, lo: np.ndarray, hi: np.ndarray, times: np.ndarray
                           ) -> np.ndarray:
        """Per query, the last sorted position of its thread whose start <= t, or -1: one searchsorted on
        (thread, start) folded into one int64 when the starts' span allows, else a search per range."""
        if self._folded is None:
            n_threads = len(self.thread_keys)
            s_min, s_max = int(self.starts.min()), int(self.starts.max())
            width = s_max - s_min + 2  # offsets 1..span+1; 0 is "before every start of the thread"
            if s_min <= np.iinfo(np.int64).min + 1 or n_threads * width >= 1 << 62:
                self._folded = (np.zeros(0, np.int64), 0, 0)
            else:
                self._folded = (self.thread_of * width + (self.starts - (s_min - 1)), s_min, s_max)
        folded, s_min, s_max = self._folded
        if len(folded) != len(self.starts):
            return _last_at_or_before(self.starts, lo, hi, times)
        width = s_max - s_min + 2
        query = thread * width + (np.clip(times, s_min - 1, s_max) - (s_min - 1))
        last = np.searchsorted(folded, query, side="right") - 1
        return np.where(last >= lo, last, -1)


def _thread_order(keys: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """``np.lexsort((-ends, starts, keys))``: by thread, then start, then longest first, then row. As three stable
    sorts, each refining the last, of one int64 per row (the thread's order and the start, then the (thread,
    start)'s order and the end, folded): traces list each thread's intervals nearly in start order, which a
    stable sort (timsort) takes in about one pass, where lexsort sorted every key in full (14 ms -> ~3 ms on
    the benchmark trace's 283k ops). Spans that do not fold into an int64 go to lexsort."""
    n = len(starts)
    if n == 0:
        return np.zeros(0, np.int64)
    s_lo, e_hi = int(starts.min()), int(ends.max())
    span = e_hi - s_lo + 1  # starts and ends both within it (ends are never before their start)
    if span >= (1 << 62) // (n + 1):
        return np.lexsort((-ends, starts, keys))
    order = np.argsort(keys, kind="stable")
    folded = keys[order]
    group = np.empty(n, dtype=np.int64)  # dense rank of each row's thread, then of its (thread, start)
    group[0] = 0
    np.cumsum(folded[1:] != folded[:-1], out=group[1:])
    folded = starts[order]
    folded -= s_lo
    group *= span
    folded += group
    order = order[np.argsort(folded, kind="stable")]
    folded.sort(kind="stable")
    group[0] = 0
    np.cumsum(folded[1:] != folded[:-1], out=group[1:])
    del folded
    group *= span
    group += e_hi
    group -= ends[order]  # longest first: the latest end the lowest
    return order[np.argsort(group, kind="stable")]


def _last_at_or_before(sorted_starts: np.ndarray, lo: np.ndarray, hi: np.ndarray, times: np.ndarray) -> np.ndarray:
    """Per query, the last position in [lo, hi) whose start <= t (starts sorted within each range), or -1.

    A binary search over each query's own range, all queries at once."""
    left = lo.copy()
    right = hi.copy()  # invariant: answer in [left - 1, right - 1]
    while True:
        open_ = left < right
        if not open_.any():
            break
        mid = (left + right) >> 1
        mid_c = np.where(open_, mid, 0)
        le = open_ & (sorted_starts[mid_c] <= times)
        left = np.where(le, mid + 1, left)
        right = np.where(open_ & ~le, mid, right)
    return np.where(left > lo, left - 1, -1)


#: levels :func:`_parents_by_level` goes down before it leaves the rest to :func:`_nearest_open_before`, and
#: steps :meth:`Nesting.innermost_at` climbs before it asks the ends' max tree
MAX_LEVELS = 24
#: a deep nesting (a Python call stack: ~25 levels on average) costs a pass over most intervals per level: where
#: more than this share of the intervals is left after ``TRIAL_LEVELS`` levels, the rest go by jumps (ops: 6
#: levels, 30% left after 3)
DEEP_SHARE_LEFT = 0.6
TRIAL_LEVELS = 3


def _parents_by_level(starts: np.ndarray, ends: np.ndarray, thread_of: np.ndarray, thread_lo: np.ndarray
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Parent (:func:`_nearest_open_before`'s answer), depth and outermost ancestor of each sorted interval, one
    nesting level at a time (past :data:`MAX_LEVELS` levels, the intervals left by jumps along the candidates);
    None where the times' span would overflow a fold.

    A run of sorted intervals (first: each thread's) splits at its roots, those no earlier interval of the run is
    open at: the run's parent is their parent. Every other interval's parent lies between the last root before it
    and itself (the run's intervals before that root end by its start), so the intervals after a root up to the
    next are the next level's run, whose parent is that root. Each level is a few whole-array steps (a running
    maximum of the ends per run): 6 levels on the benchmark trace's ops against 21 rounds of jumps."""
    n = len(starts)
    parent = np.full(n, -1, dtype=np.int64)
    depth = np.zeros(n, dtype=np.int64)
    root = np.arange(n, dtype=np.int64)
    if n == 0:
        return parent, depth, root
    lo = int(starts.min())
    span = int(ends.max()) - lo + 1  # every start and end less lo lies in [0, span)
    if span >= (1 << 62) // (n + 1):  # the runs' times lifted apart would overflow int64
        return None
    rows = np.arange(n, dtype=np.int64)  # the positions not placed yet, ascending
    # each row's run, ascending (level 0: its thread's index; then the position of the run's parent), so that
    # the runs' times lifted by it lie one run above the other: one running maximum serves every run
    run = thread_of.astype(np.int64, copy=True)
    level = 0
    while len(rows):
        if level == MAX_LEVELS or (level == TRIAL_LEVELS and len(rows) > DEEP_SHARE_LEFT * n):
            # deep: the rest by jumps, from the levels placed (each its parent) ...
            cand = parent.copy()
            cand[rows] = rows - 1  # ... and the interval before each other one (never a thread's first)
            parent = _nearest_open_before(starts, ends, thread_lo, cand, rows)
            return (parent, *_depth_and_root(parent))
        run *= span
        run -= lo
        reach = ends[rows]
        reach += run  # lifted ends, then their running maximum
        np.maximum.accumulate(reach, out=reach)
        run += starts[rows]  # lifted starts
        is_root = np.empty(len(rows), dtype=bool)  # nothing earlier in the run open at its start (a run's
        is_root[0] = True                          # first: every earlier reach lies below its run)
        np.less_equal(reach[:-1], run[1:], out=is_root[1:])
        del reach
        mine = rows[is_root]
        if level:
            up = run[is_root] // span  # the run's parent, back from the lifted start
            parent[mine] = up
            depth[mine] = level
            root[mine] = root[up]
        # the rest: their run is the one after the last root before them, that root their run's parent
        run = np.where(is_root, rows, -1)
        np.maximum.accumulate(run, out=run)
        keep = ~is_root
        rows, run = rows[keep], run[keep]
        level += 1
    return parent, depth, root


def _nearest_open_before(starts: np.ndarray, ends: np.ndarray, thread_lo: np.ndarray,
                         cand: np.ndarray | None = None, todo: np.ndarray | None = None) -> np.ndarray:
    """Per sorted interval, the nearest earlier one of its thread still open at its start (``end > start``), or -1:
    the parent.

    Each interval's candidate starts as the interval just before it; a candidate closed at the interval's start
    is replaced by the candidate's own candidate, all intervals at once, until it is open or none is left. No
    answer is skipped: when interval i's candidate c is closed at i's start, the intervals c's own search passes
    end by c's start, so by i's start too, and c's answer is at or after i's (open at i's start, i's answer is
    open at c's earlier start). About the nesting depth in rounds (21 on the benchmark trace's 283k ops), against
    log2(n) for each climb and descent of :class:`_RightmostAbove`: 0.04 -> 0.03 s CPU there."""
    if cand is None or todo is None:  # (else: ``cand`` a candidate of each interval, those of ``todo`` to move)
        cand = np.arange(-1, len(starts) - 1, dtype=np.int64)
        cand[thread_lo] = -1  # a thread's first interval has none before it
        todo = np.flatnonzero(cand >= 0)
    while len(todo):
        c = cand[todo]
        closed = ends[c] <= starts[todo]
        todo = todo[closed]
        cand[todo] = cand[c[closed]]  # read before written: every row jumps from the same round's candidates
        todo = todo[cand[todo] >= 0]
    return cand


def _depth_and_root(parent: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Depth and outermost ancestor of every node of a forest, by pointer doubling (log depth steps)."""
    depth = (parent >= 0).astype(np.int64)  # distance to anc
    anc = parent.copy()
    while (anc >= 0).any():
        rows = np.flatnonzero(anc >= 0)
        up = anc[rows]
        depth[rows] += depth[up]
        anc[rows] = anc[up]
    root = np.where(parent >= 0, parent, np.arange(len(parent), dtype=np.int64))
    while True:  # roots point to themselves: jump until nothing moves
        nxt = root[root]
        if np.array_equal(nxt, root):
            return depth, root
        root = nxt


def levels(depth: np.ndarray) -> list[np.ndarray]:
    """Row indices per depth (level 0 first): one sort, then slices, so deep forests cost no extra scans."""
    if len(depth) == 0:
        return []
    deepest = int(depth.max())
    # depths as int16 where they fit: numpy's stable sort of 16-bit integers is a radix sort (one pass, no compares)
    order = np.argsort(depth.astype(np.int16, copy=False) if deepest < 1 << 15 else depth, kind="stable")
    bounds = np.searchsorted(depth[order], np.arange(deepest + 2))
    return [order[bounds[d]:bounds[d + 1]] for d in range(len(bounds) - 1)]


def inclusive_sum(values: np.ndarray, parent: np.ndarray, by_level: list[np.ndarray]) -> np.ndarray:
    """Each node's own value plus all its descendants' (deepest level first; ``by_level`` from :func:`levels`)."""
    total = np.asarray(values).astype(np.int64, copy=True)
    for rows in reversed(by_level[1:]):
        np.add.at(total, parent[rows], total[rows])
    return total


def inherit_flag(flag: np.ndarray, parent: np.ndarray, by_level: list[np.ndarray]) -> np.ndarray:
    """A node is flagged when it or any ancestor is (``by_level`` from :func:`levels`)."""
    out = np.asarray(flag, dtype=bool).copy()
    for rows in by_level[1:]:
        out[rows] |= out[parent[rows]]
    return out
