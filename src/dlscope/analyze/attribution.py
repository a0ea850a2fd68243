"""Who launched what: GPU activity → launching API call → launching op, and op nesting.

PRODUCT.md: the launching op of a kernel is found by following the kernel's correlation id to its launch
API call; the innermost op open on that thread at the call's start launched it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .nesting import Nesting


def thread_keys(frames: list[pd.DataFrame]) -> list[np.ndarray]:
    """One int code per (rank, pid, tid), shared across several tables."""
    joined = pd.concat([f[["rank", "pid", "tid"]] for f in frames], ignore_index=True)
    codes = joined.groupby(["rank", "pid", "tid"], sort=False).ngroup().to_numpy(np.int64)
    out, pos = [], 0
    for f in frames:
        out.append(codes[pos:pos + len(f)])
        pos += len(f)
    return out


def take(values: np.ndarray, rows: np.ndarray, missing=-1) -> np.ndarray:
    """``values[rows]`` where rows >= 0, ``missing`` elsewhere (also when ``values`` is empty)."""
    out = np.full(len(rows), missing, dtype=np.asarray(values).dtype if len(values) else np.int64)
    ok = rows >= 0
    out[ok] = np.asarray(values)[rows[ok]]
    return out


def link_api_calls(activity: pd.DataFrame, api_calls: pd.DataFrame) -> np.ndarray:
    """Row index into ``api_calls`` of each activity's launching call (by correlation id), -1 if none."""
    if len(activity) == 0 or len(api_calls) == 0:
        return np.full(len(activity), -1, dtype=np.int64)
    by_pid = bool((activity["pid"] >= 0).any())
    keys = ["rank", "pid", "correlation"] if by_pid else ["rank", "correlation"]
    calls = api_calls.loc[api_calls["correlation"] >= 0, keys].copy()
    calls["_row"] = calls.index.to_numpy(np.int64)
    calls = calls.drop_duplicates(keys, keep="first")
    left = activity[keys].copy()
    merged = left.merge(calls, on=keys, how="left", sort=False)
    rows = merged["_row"].fillna(-1).to_numpy(np.int64, copy=True)
    rows[activity["correlation"].to_numpy() < 0] = -1
    return rows


def propagate_up(values: np.ndarray, parent: np.ndarray, depth: np.ndarray) -> np.ndarray:
    """Inclusive sums over a forest: each node gets its own value plus all descendants'."""
    total = values.astype(np.int64).copy()
    for d in range(int(depth.max(initial=0)), 0, -1):
        rows = np.flatnonzero((depth == d) & (parent >= 0))
        np.add.at(total, parent[rows], total[rows])
    return total


def propagate_down_flag(flag: np.ndarray, parent: np.ndarray, depth: np.ndarray) -> np.ndarray:
    """A node is flagged when it or any ancestor is."""
    out = flag.copy()
    for d in range(1, int(depth.max(initial=0)) + 1):
        rows = np.flatnonzero((depth == d) & (parent >= 0))
        out[rows] |= out[parent[rows]]
    return out


def gpu_idle_per_owner(owner: np.ndarray, starts: np.ndarray, ends: np.ndarray, n_owners: int) -> np.ndarray:
    """DLProf's GPU idle of an op: gaps between its own GPU activities, from first start to last end."""
    idle = np.zeros(n_owners, dtype=np.int64)
    keep = owner >= 0
    if not keep.any():
        return idle
    frame = pd.DataFrame({"o": owner[keep], "s": starts[keep], "e": ends[keep]}).sort_values(["o", "s"], kind="stable")
    reach = frame.groupby("o", sort=False)["e"].cummax()
    prev_reach = reach.groupby(frame["o"], sort=False).shift(1)
    gap = (frame["s"] - prev_reach).clip(lower=0).fillna(0).astype(np.int64)
    sums = gap.groupby(frame["o"], sort=False).sum()
    idle[sums.index.to_numpy(np.int64)] = sums.to_numpy(np.int64)
    return idle


def attribute(ops: pd.DataFrame, api_calls: pd.DataFrame, activities: dict[str, pd.DataFrame],
              prebuilt: tuple[Nesting, np.ndarray] | None = None) -> None:
    """Add attribution columns in place.

    ops: parent_id, depth, direction (bwd inherited from ancestors, else fwd), api_time.
    api_calls: op_id. Each activity table (kernels, memops, syncs): api_id, launch_ts, op_id.
    ``prebuilt``: the ops' nesting and each API call's innermost op row, when already computed for these rows.
    """
    if prebuilt is None:
        op_keys, api_keys = thread_keys([ops, api_calls])
        nest = Nesting.build(op_keys, ops["start"].to_numpy(), ops["end"].to_numpy())
        api_op_row = nest.innermost_at(api_keys, api_calls["start"].to_numpy())
    else:
        nest, api_op_row = prebuilt
    parent_row = nest.parent
    ops["parent_id"] = take(ops["op_id"].to_numpy(), parent_row)
    ops["depth"] = nest.depth

    bwd = propagate_down_flag((ops["direction"] == "bwd").to_numpy(), parent_row, nest.depth)
    ops["direction"] = np.where(bwd, "bwd", "fwd")

    op_ids = ops["op_id"].to_numpy()
    api_calls["op_id"] = take(op_ids, api_op_row)
    self_api = np.zeros(len(ops), dtype=np.int64)
    has_op = api_op_row >= 0
    np.add.at(self_api, api_op_row[has_op], (api_calls["end"] - api_calls["start"]).to_numpy()[has_op])
    ops["api_time"] = propagate_up(self_api, parent_row, nest.depth)

    api_ids = api_calls["api_id"].to_numpy()
    api_starts = api_calls["start"].to_numpy()
    api_ops = api_calls["op_id"].to_numpy()
    for frame in activities.values():
        rows = link_api_calls(frame, api_calls)
        frame["api_id"] = take(api_ids, rows)
        frame["launch_ts"] = np.where(rows >= 0, take(api_starts, rows), frame["start"].to_numpy())
        frame["op_id"] = take(api_ops, rows)
