"""Memory over time from the allocator's samples (table ``memory``): allocated and reserved bytes per device, the
peak per iteration, the op running at each peak and the allocations live then. Pure functions of DataFrames.

A sample is one allocation (``bytes_delta`` > 0) or free (< 0) of the block at ``addr``, with the allocator's
totals after it. Traces that record only the deltas (2021 Kineto) have no totals: allocated is then the running
sum of the deltas from the trace's start (what was allocated before it is unknown), and reserved is unknown.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .attribution import take, thread_keys
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


def innermost_ops(ops: pd.DataFrame, samples: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Rows of ``ops`` (rank, pid, tid, start, end) running on each sample's thread at its ``ts``: the innermost
    (the op that made the allocation) and the outermost around it (the op node: where the model's code called
    it); -1 when none, or the sample's thread is unknown."""
    none = np.full(len(samples), -1, np.int64)
    if len(ops) == 0 or len(samples) == 0:
        return none, none
    calls = samples[["rank", "pid", "tid"]]
    op_keys, sample_keys = thread_keys([ops, calls])
    nest = Nesting.build(op_keys, ops["start"].to_numpy(np.int64), ops["end"].to_numpy(np.int64))
    rows = nest.innermost_at(sample_keys, samples["ts"].to_numpy(np.int64))
    rows = np.where(samples["tid"].to_numpy(np.int64) >= 0, rows, -1)
    return rows, take(nest.root, rows)


def iteration_peaks(series: pd.DataFrame, iterations: pd.DataFrame) -> pd.DataFrame:
    """Per device and iteration: the peak allocated and reserved bytes and the sample at each (its row in
    ``series``; the first sample when the peak repeats)."""
    s = series.assign(iteration=iteration_of(series["ts"].to_numpy(np.int64), iterations))
    s = s[s["iteration"] >= 0]
    if s.empty:
        return pd.DataFrame(columns=["device", "iteration", "peak_allocated", "allocated_row", "peak_reserved",
                                     "reserved_row", "basis"])
    groups = s.groupby(["device", "iteration"], sort=True)
    out = pd.DataFrame({"allocated_row": groups["allocated"].idxmax(), "reserved_row": groups["reserved"].idxmax()})
    out["peak_allocated"] = series["allocated"].to_numpy()[out["allocated_row"].to_numpy()]
    out["peak_reserved"] = series["reserved"].to_numpy()[out["reserved_row"].to_numpy()]
    out["basis"] = series["basis"].to_numpy()[out["allocated_row"].to_numpy()]
    return out.reset_index()


def live_at(series: pd.DataFrame, row: int) -> pd.DataFrame:
    """The blocks of ``series.device[row]`` allocated and not yet freed just after sample ``row`` (those whose
    last sample up to it is an allocation), largest first; blocks without an address cannot be told apart and
    are left out."""
    device = series.at[row, "device"]
    upto = series.iloc[: row + 1]
    upto = upto[(upto["device"] == device) & (upto["addr"] >= 0)] if "addr" in upto else upto.iloc[:0]
    last = upto.drop_duplicates("addr", keep="last")
    live = last[last["bytes_delta"] > 0]
    return live.sort_values(["bytes_delta", "ts"], ascending=[False, True], kind="stable")


def memory_peaks(memory: pd.DataFrame, iterations: pd.DataFrame, ops: pd.DataFrame,
                 gpus: pd.DataFrame | None = None) -> dict:
    """What the summary and the rules say about memory, for one rank: per device the peak allocated and reserved
    bytes over ``iterations`` (the profiled ones), the iteration and op at each peak, the allocations live at the
    allocated peak, the GPU's capacity, and the peak of every iteration. The op at a peak is the innermost one;
    ``peak_allocated_op_node`` the outermost around it. ``ops``: the rank's op calls with
    op_id, name, rank, pid, tid, start and end."""
    if memory.empty:
        return {"devices": []}
    series = allocator_series(memory)
    per_iteration = iteration_peaks(series, iterations)
    capacity = {} if gpus is None else {int(d): int(b) for d, b in zip(gpus["device"], gpus["memory_bytes"]) if b > 0}
    devices = []
    for device, peaks in per_iteration.groupby("device", sort=True):
        top_alloc = peaks.loc[peaks["peak_allocated"].idxmax()]
        top_res = peaks.loc[peaks["peak_reserved"].idxmax()]
        rows = [int(top_alloc["allocated_row"]), int(top_res["reserved_row"])]
        live = live_at(series, rows[0])
        at = series.iloc[rows + live["ts"].index.tolist()[:LIVE_LISTED]]
        op_rows, node_rows = innermost_ops(ops, at)
        names = take(ops["name"].to_numpy(dtype=object), op_rows, None)
        node_names = take(ops["name"].to_numpy(dtype=object), node_rows, None)
        op_ids = take(ops["op_id"].to_numpy(np.int64), op_rows)
        node_op_ids = take(ops["op_id"].to_numpy(np.int64), node_rows)
        reserved_known = int(top_res["peak_reserved"]) >= 0
        devices.append({
            "device": int(device), "basis": str(top_alloc["basis"]), "capacity_bytes": capacity.get(int(device)),
            "peak_allocated_bytes": int(top_alloc["peak_allocated"]),
            "peak_allocated_ts": int(series.at[rows[0], "ts"]),
            "peak_allocated_iteration": int(top_alloc["iteration"]),
            "peak_allocated_op": names[0], "peak_allocated_op_id": int(op_ids[0]),
            "peak_allocated_op_node": node_names[0], "peak_allocated_node_op_id": int(node_op_ids[0]),
            "peak_reserved_bytes": int(top_res["peak_reserved"]) if reserved_known else None,
            "peak_reserved_ts": int(series.at[rows[1], "ts"]) if reserved_known else None,
            "peak_reserved_iteration": int(top_res["iteration"]) if reserved_known else None,
            "peak_reserved_op": names[1] if reserved_known else None,
            "peak_reserved_op_node": node_names[1] if reserved_known else None,
            "live_at_peak": {"count": len(live), "bytes": int(live["bytes_delta"].sum()),
                             "largest": [{"bytes": int(b), "ts": int(t), "op": n}
                                         for b, t, n in zip(live["bytes_delta"][:LIVE_LISTED],
                                                            live["ts"][:LIVE_LISTED], names[2:])]},
            "iterations": [{"iteration": int(r.iteration), "peak_allocated_bytes": int(r.peak_allocated),
                            "peak_reserved_bytes": int(r.peak_reserved) if r.peak_reserved >= 0 else None}
                           for r in peaks.itertuples()],
        })
    return {"devices": devices}
