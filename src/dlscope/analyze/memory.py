"""Memory over time from the allocator's samples (table ``memory``): allocated and reserved bytes per device, the
peak per iteration, the op running at each peak and the allocations live then. Pure functions of DataFrames.

A sample is one allocation (``bytes_delta`` > 0) or free (< 0) of the block at ``addr``, with the allocator's
totals after it. Traces that record only the deltas (2021 Kineto) have no totals: allocated is then the running
sum of the deltas from the trace's start (what was allocated before it is unknown), and reserved is unknown.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .attribution import take
from .nesting import Nesting

#: live allocations listed at a peak (the largest)
LIVE_LISTED = 10


def allocator_series(memory: pd.DataFrame) -> pd.DataFrame:
    """The samples by device and time with ``allocated`` and ``reserved`` (bytes after each sample; reserved
    -1 when unknown, and for the CPU allocator, which holds no cache) and ``basis``: "totals" (the allocator's
    own) or "deltas" (summed from the trace's start)."""
    m = memory.sort_values(["device", "ts"], kind="stable").reset_index(drop=True)
    totals = m.groupby("device")["total_allocated"].transform("max").to_numpy() >= 0
    summed = m.groupby("device")["bytes_delta"].cumsum().to_numpy(np.int64)
    m["allocated"] = np.where(totals, m["total_allocated"].to_numpy(np.int64), summed)
    cpu = m["device"].to_numpy() < 0  # the CPU allocator caches nothing: torch reports its reserved as 0
    m["reserved"] = np.where(totals & ~cpu, m["total_reserved"].to_numpy(np.int64), -1)
    m["basis"] = np.where(totals, "totals", "deltas")
    return m


def iteration_of(times: np.ndarray, iterations: pd.DataFrame) -> np.ndarray:
    """The iteration whose window [start, end) holds each time (-1 outside every window)."""
    its = iterations.sort_values("start")
    starts, ends = its["start"].to_numpy(np.int64), its["end"].to_numpy(np.int64)
    pos = np.searchsorted(starts, times, side="right") - 1
    inside = (pos >= 0) & (times < ends[np.maximum(pos, 0)]) if len(starts) else np.zeros(len(times), bool)
    return np.where(inside, its["iteration"].to_numpy(np.int64)[np.maximum(pos, 0)] if len(starts) else -1, -1)


@dataclass
class OpCalls:
    """A rank's op calls as arrays (rows of ``op_id``, ``rank``, ``pid``, ``tid``, ``start``, ``end``), with
    ``order``: the order that breaks ties between calls of one thread and one interval (a nesting over all of
    them takes that row order), and ``names``: op ids to names (None for -1)."""

    op_id: np.ndarray
    rank: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    start: np.ndarray
    end: np.ndarray
    order: np.ndarray
    names: Callable[[np.ndarray], np.ndarray]

    @classmethod
    def of_frame(cls, ops: pd.DataFrame) -> OpCalls:
        """From a frame of op_id, name, rank, pid, tid, start and end, ties broken by its row order."""
        name_of = ops["name"].to_numpy(dtype=object)
        row_of = pd.Series(np.arange(len(ops)), index=ops["op_id"].to_numpy(np.int64))
        row_of = row_of[~row_of.index.duplicated()]

        def names(ids: np.ndarray) -> np.ndarray:
            rows = row_of.reindex(ids).fillna(-1).to_numpy(np.int64)
            return take(name_of, rows, None)

        op_id, rank, pid, tid, start, end = (ops[c].to_numpy(np.int64)
                                             for c in ("op_id", "rank", "pid", "tid", "start", "end"))
        return cls(op_id, rank, pid, tid, start, end, order=np.arange(len(ops), dtype=np.int64), names=names)


def enclosing_ops(calls: OpCalls, rank: np.ndarray, pid: np.ndarray, tid: np.ndarray, ts: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Rows of ``calls`` on each sample's thread at its ``ts``: the innermost call enclosing it and the outermost
    around that one, exactly as a :class:`Nesting` over all the calls answers (``innermost_at`` and ``root``),
    -1 when none or the sample's thread is unknown (tid < 0).

    Only the calls that can matter are nested: those enclosing the time (start <= ts <= end), then, until none
    is added, each call that could be a nearer parent of a call on the chain from the innermost to the outermost
    (a call starting between that call's parent and it, still running at its start). With calls nested as
    calls are, that adds nothing, and the few calls around a sample answer it; overlapping calls are found and
    nested too, so the answer stays the whole nesting's."""
    n = len(ts)
    inner, outer = np.full(n, -1, np.int64), np.full(n, -1, np.int64)
    if n == 0 or len(calls.start) == 0:
        return inner, outer
    known = tid >= 0
    threads = sorted({(int(r), int(p), int(t)) for r, p, t, k in zip(rank, pid, tid, known) if k})
    for r, p, t in threads:
        rows = np.flatnonzero((calls.tid == t) & (calls.pid == p) & (calls.rank == r))
        if len(rows) == 0:
            continue
        starts = calls.start[rows]
        if len(rows) > 1 and (np.diff(starts) < 0).any():
            by_start = np.argsort(starts, kind="stable")
            rows, starts = rows[by_start], starts[by_start]
        ends = np.maximum(calls.end[rows], starts)  # as a Nesting reads an end before its start
        mine = np.flatnonzero(known & (rank == r) & (pid == p) & (tid == t))
        times = ts[mine]
        found = _enclosing_on_thread(starts, ends, calls.order[rows], times)
        hit = found[0] >= 0
        inner[mine[hit]] = rows[found[0][hit]]
        outer[mine[hit]] = rows[found[1][hit]]
    return inner, outer


def _enclosing_on_thread(starts: np.ndarray, ends: np.ndarray, order: np.ndarray, times: np.ndarray
                         ) -> tuple[np.ndarray, np.ndarray]:
    """:func:`enclosing_ops` on one thread's calls sorted by start (ends already at least their start):
    positions of the innermost and outermost call, -1 when none."""
    chosen = np.zeros(len(starts), bool)
    for t in np.unique(times):
        upto = int(np.searchsorted(starts, t, side="right"))
        chosen[:upto] |= ends[:upto] >= t
    running_max = np.maximum.accumulate(ends)
    while True:
        picked = np.flatnonzero(chosen)
        if len(picked) == 0:
            return np.full(len(times), -1, np.int64), np.full(len(times), -1, np.int64)
        picked = picked[np.lexsort((order[picked], -ends[picked], starts[picked]))]  # a Nesting's own order
        nest = Nesting.build(np.zeros(len(picked), np.int64), starts[picked], ends[picked])
        hit = nest.innermost_at(np.zeros(len(times), np.int64), times)
        added = np.zeros(0, np.int64)
        for x in np.unique(hit[hit >= 0]):  # each chain, innermost to outermost
            while x >= 0:
                parent = int(nest.parent[x])
                s = starts[picked[x]]
                if parent >= 0:  # a call between the parent and x in the nesting's order, running at x's start
                    lo = int(np.searchsorted(starts, starts[picked[parent]], side="left"))
                    hi = int(np.searchsorted(starts, s, side="right"))
                    added = np.concatenate([added, lo + np.flatnonzero(ends[lo:hi] > s)])
                else:  # a call starting before the outermost (or with it) and running at its start
                    lo = int(np.searchsorted(starts, s, side="left"))
                    hi = int(np.searchsorted(starts, s, side="right"))
                    if lo and running_max[lo - 1] > s:
                        added = np.concatenate([added, np.flatnonzero(ends[:lo] > s)])
                    added = np.concatenate([added, lo + np.flatnonzero(ends[lo:hi] > s)])
                x = parent
        added = added[~chosen[added]]
        if len(added) == 0:
            inner = np.where(hit >= 0, picked[np.maximum(hit, 0)], -1)
            outer = np.where(hit >= 0, picked[nest.root[np.maximum(hit, 0)]], -1)
            return inner, outer
        chosen[added] = True


def _first_of_groups(keys: list[np.ndarray]) -> np.ndarray:
    """Positions where a run of equal ``keys`` (rows already grouped) starts."""
    n = len(keys[0])
    if n == 0:
        return np.zeros(0, np.int64)
    change = np.zeros(n, bool)
    change[0] = True
    for k in keys:
        change[1:] |= k[1:] != k[:-1]
    return np.flatnonzero(change)


def _first_max(values: np.ndarray, firsts: np.ndarray) -> np.ndarray:
    """Per group (rows ``firsts[i]`` up to the next first): the position of its first largest value."""
    peak = np.maximum.reduceat(values, firsts)
    sizes = np.diff(np.append(firsts, len(values)))
    at_peak = np.flatnonzero(values == np.repeat(peak, sizes))
    return at_peak[np.searchsorted(at_peak, firsts)]


def _series(memory: pd.DataFrame, rows: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """:func:`allocator_series` as arrays (device, ts, allocated, reserved, totals, bytes_delta, addr if read, and
    ``row``: the sample's row in ``memory``), the samples sorted by device and time, ties in the frame's order.
    ``rows``: only these rows of ``memory`` (increasing positions), without a filtered copy of the frame."""
    cols = {c: memory[c].to_numpy(np.int64) for c in ("device", "ts", "bytes_delta", "total_allocated",
                                                       "total_reserved", *(("addr",) if "addr" in memory else ()))}
    if rows is None:
        order = np.lexsort((cols["ts"], cols["device"]))
    else:
        order = rows[np.lexsort((cols["ts"][rows], cols["device"][rows]))]
    # samples already in that order (one device, by time: the rules' frame) are read in place, not copied
    whole = len(order) == len(memory) and bool((order[1:] > order[:-1]).all())
    s = dict(cols) if whole else {c: v[order] for c, v in cols.items()}
    s["row"] = order
    firsts = _first_of_groups([s["device"]])
    sizes = np.diff(np.append(firsts, len(order)))
    totals = np.repeat(np.maximum.reduceat(s["total_allocated"], firsts) >= 0, sizes)
    summed = np.cumsum(s["bytes_delta"])
    summed -= np.repeat(summed[firsts] - s["bytes_delta"][firsts], sizes)  # each device's sum from its start
    s["allocated"] = np.where(totals, s["total_allocated"], summed)
    s["reserved"] = np.where(totals & (s["device"] >= 0), s["total_reserved"], -1)
    s["totals"] = totals
    return s


def _iteration_peaks(s: dict[str, np.ndarray], iterations: pd.DataFrame) -> dict[str, np.ndarray]:
    """Per device and iteration (sorted): the rows in the series of its first largest allocated and reserved."""
    it = iteration_of(s["ts"], iterations)
    rows = np.flatnonzero(it >= 0)
    rows = rows[np.lexsort((it[rows], s["device"][rows]))]  # stable: each group's rows keep the series order
    firsts = _first_of_groups([s["device"][rows], it[rows]])
    if len(firsts) == 0:
        empty = np.zeros(0, np.int64)
        return {"device": empty, "iteration": empty, "allocated_row": empty, "reserved_row": empty}
    return {"device": s["device"][rows[firsts]], "iteration": it[rows[firsts]],
            "allocated_row": rows[_first_max(s["allocated"][rows], firsts)],
            "reserved_row": rows[_first_max(s["reserved"][rows], firsts)]}


def device_peaks(memory: pd.DataFrame, iterations: pd.DataFrame, kept: np.ndarray | None = None
                 ) -> dict[int, tuple[int, int]]:
    """Per device, the largest allocated and reserved bytes (-1: unknown) of the profiled iterations' peaks: the
    figures :func:`memory_peaks` reports, without locating the ops at them (a rule's cheap screen). ``kept``: as
    for :func:`memory_peaks`."""
    if memory.empty or (kept is not None and not len(kept)):
        return {}
    s = _series(memory, kept)
    peaks = _iteration_peaks(s, iterations)
    out = {}
    for device in np.unique(peaks["device"]):
        mine = peaks["device"] == device
        out[int(device)] = (int(s["allocated"][peaks["allocated_row"][mine]].max()),
                            int(s["reserved"][peaks["reserved_row"][mine]].max()))
    return out


def _live_at(s: dict[str, np.ndarray], row: int) -> np.ndarray:
    """Rows of the blocks of ``device[row]`` allocated and not yet freed just after sample ``row`` (those whose
    last sample up to it is an allocation), largest first (then earliest); blocks without an address cannot be
    told apart and are left out."""
    upto = np.flatnonzero((s["device"][: row + 1] == s["device"][row]) & (s["addr"][: row + 1] >= 0))
    addr = s["addr"][upto]
    by_addr = np.lexsort((-upto, addr))  # each address's last sample first
    last = upto[by_addr[_first_of_groups([addr[by_addr]])]]
    live = np.sort(last[s["bytes_delta"][last] > 0])
    return live[np.lexsort((live, s["ts"][live], -s["bytes_delta"][live]))]


def memory_peaks(memory: pd.DataFrame, iterations: pd.DataFrame, ops: pd.DataFrame | OpCalls,
                 gpus: pd.DataFrame | None = None,
                 threads: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]] | None = None,
                 kept: np.ndarray | None = None) -> dict:
    """What the summary and the rules say about memory, for one rank: per device the peak allocated and reserved
    bytes over ``iterations`` (the profiled ones), the iteration and op at each peak, the allocations live at the
    allocated peak, the GPU's capacity, and the peak of every iteration. The op at a peak is the innermost one;
    ``peak_allocated_op_node`` the outermost around it. ``memory``: the rank's allocator samples (rank, device,
    ts, bytes_delta, total_allocated, total_reserved, pid, tid, addr), ties in time in the table's order;
    ``ops``: the rank's op calls (a frame of op_id, name, rank, pid, tid, start and end, or :class:`OpCalls`).
    ``threads``: for a reader that left pid and tid out of ``memory`` (a dozen samples need them), the (pid, tid)
    of rows of ``memory``. ``kept``: only these rows of ``memory`` (increasing positions; a rule's GPU samples),
    read without a filtered copy of the frame."""
    if memory.empty or (kept is not None and not len(kept)):
        return {"devices": []}
    calls = ops if isinstance(ops, OpCalls) else OpCalls.of_frame(ops)
    s = _series(memory, kept)
    peaks = _iteration_peaks(s, iterations)
    capacity = {} if gpus is None else {int(d): int(b) for d, b in zip(gpus["device"], gpus["memory_bytes"]) if b > 0}
    devices = []
    for device in np.unique(peaks["device"]):
        mine = np.flatnonzero(peaks["device"] == device)
        alloc_rows, res_rows = peaks["allocated_row"][mine], peaks["reserved_row"][mine]
        top_alloc = int(mine[np.argmax(s["allocated"][alloc_rows])])
        top_res = int(mine[np.argmax(s["reserved"][res_rows])])
        rows = [int(peaks["allocated_row"][top_alloc]), int(peaks["reserved_row"][top_res])]
        live = _live_at(s, rows[0])
        at = np.array(rows + live[:LIVE_LISTED].tolist(), np.int64)
        in_memory = s["row"][at]
        pid, tid = threads(in_memory) if threads else (memory["pid"].to_numpy(np.int64)[in_memory],
                                                       memory["tid"].to_numpy(np.int64)[in_memory])
        op_rows, node_rows = enclosing_ops(calls, memory["rank"].to_numpy(np.int64)[in_memory], pid, tid,
                                           s["ts"][at])
        op_ids = take(calls.op_id, op_rows)
        node_op_ids = take(calls.op_id, node_rows)
        names = calls.names(np.concatenate([op_ids, node_op_ids]))
        names, node_names = names[: len(at)], names[len(at):]
        peak_reserved = int(s["reserved"][rows[1]])
        reserved_known = peak_reserved >= 0
        devices.append({
            "device": int(device), "basis": "totals" if s["totals"][rows[0]] else "deltas",
            "capacity_bytes": capacity.get(int(device)),
            "peak_allocated_bytes": int(s["allocated"][rows[0]]),
            "peak_allocated_ts": int(s["ts"][rows[0]]),
            "peak_allocated_iteration": int(peaks["iteration"][top_alloc]),
            "peak_allocated_op": names[0], "peak_allocated_op_id": int(op_ids[0]),
            "peak_allocated_op_node": node_names[0], "peak_allocated_node_op_id": int(node_op_ids[0]),
            "peak_reserved_bytes": peak_reserved if reserved_known else None,
            "peak_reserved_ts": int(s["ts"][rows[1]]) if reserved_known else None,
            "peak_reserved_iteration": int(peaks["iteration"][top_res]) if reserved_known else None,
            "peak_reserved_op": names[1] if reserved_known else None,
            "peak_reserved_op_node": node_names[1] if reserved_known else None,
            "live_at_peak": {"count": len(live), "bytes": int(s["bytes_delta"][live].sum()),
                             "largest": [{"bytes": int(s["bytes_delta"][r]), "ts": int(s["ts"][r]), "op": n}
                                         for r, n in zip(live[:LIVE_LISTED].tolist(), names[2:])]},
            "iterations": [{"iteration": int(i), "peak_allocated_bytes": int(s["allocated"][a]),
                            "peak_reserved_bytes": int(s["reserved"][r]) if s["reserved"][r] >= 0 else None}
                           for i, a, r in zip(peaks["iteration"][mine], alloc_rows, res_rows)],
        })
    return {"devices": devices}
