"""Who launched what: GPU activity → launching API call → launching op, and the op tree above it.

PRODUCT.md: the launching op of a kernel is found by following the kernel's correlation id to its launch
API call; the innermost op *enclosing* that call's start on its thread launched it. Framework ops are asked
first; an annotation range that stands for an op (``ops.range_domain`` set: it launched GPU work outside any
framework op) owns only the launches no framework op encloses, and is never the parent of a framework op.
Each op's root is its outermost enclosing op: the op node the user wrote.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..model import string_column
from .intervals import union_per_group
from .nesting import Nesting, inclusive_sum, inherit_flag, levels


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


@dataclass
class OpTree:
    """The ops' nesting: framework ops nested among themselves, ranges that stand for ops among themselves."""

    parent: np.ndarray  # row of the parent op, -1 for roots
    depth: np.ndarray
    root: np.ndarray    # row of the outermost enclosing op (itself for roots)
    levels: list[np.ndarray]  # rows per depth, outermost first
    _framework: tuple[np.ndarray, Nesting]
    _ranges: tuple[np.ndarray, Nesting]

    @classmethod
    def build(cls, ops: pd.DataFrame) -> OpTree:
        (keys,) = thread_keys([ops])
        n = len(ops)
        parent = np.full(n, -1, np.int64)
        depth = np.zeros(n, np.int64)
        root = np.arange(n, dtype=np.int64)
        is_range = ops["range_domain"].to_numpy(dtype=object) != ""
        parts = []
        for rows in (np.flatnonzero(~is_range), np.flatnonzero(is_range)):
            nest = Nesting.build(keys[rows], ops["start"].to_numpy()[rows], ops["end"].to_numpy()[rows])
            parent[rows] = take(rows, nest.parent)
            depth[rows] = nest.depth
            root[rows] = rows[nest.root] if len(rows) else rows
            parts.append((rows, nest))
        return cls(parent, depth, root, levels(depth), parts[0], parts[1])

    def launching_op(self, ops: pd.DataFrame, calls: pd.DataFrame) -> np.ndarray:
        """Row of the op that launched each call (framework ops first, then ranges standing for ops).

        Thread codes are numbered in order of first appearance with the ops first, so the ops' codes here are
        the ones the tree was built with."""
        _, call_keys = thread_keys([ops, calls])
        starts = calls["start"].to_numpy(np.int64)
        out = np.full(len(calls), -1, np.int64)
        for rows, nest in (self._framework, self._ranges):
            todo = np.flatnonzero(out < 0)
            if len(rows) == 0 or len(todo) == 0:
                continue
            hit = nest.innermost_at(call_keys[todo], starts[todo])
            out[todo] = take(rows, hit)
        return out


def link_launches(api_calls: pd.DataFrame, activities: dict[str, pd.DataFrame]) -> dict[str, np.ndarray]:
    """Per activity table, each row's launching call (row into ``api_calls``, -1 if none)."""
    return {name: link_api_calls(frame, api_calls) for name, frame in activities.items()}


def attribute(ops: pd.DataFrame, api_calls: pd.DataFrame, activities: dict[str, pd.DataFrame],
              tree: OpTree, api_op_row: np.ndarray, links: dict[str, np.ndarray]) -> None:
    """Add attribution columns in place, from the op tree, each API call's launching op row and each
    activity's launching call (``links``).

    ops: parent_id, depth, root_id, direction (bwd inherited from ancestors, else fwd), api_time (its own
    calls and its descendants'). api_calls: op_id. Each activity table (kernels, memops, syncs): api_id,
    launch_ts, op_id (the innermost launching op), root_op_id (that op's root: its op node instance).
    """
    op_ids = ops["op_id"].to_numpy()
    ops["parent_id"] = take(op_ids, tree.parent)
    ops["depth"] = tree.depth
    ops["root_id"] = op_ids[tree.root] if len(ops) else np.zeros(0, np.int64)
    bwd = inherit_flag((ops["direction"] == "bwd").to_numpy(), tree.parent, tree.levels)
    # two words taken per row (a numpy "<U3" array would be converted string by string)
    ops["direction"] = string_column(np.array(["fwd", "bwd"], dtype=object)[bwd.astype(np.intp)])

    api_calls["op_id"] = take(op_ids, api_op_row)
    self_api = np.zeros(len(ops), dtype=np.int64)
    has_op = api_op_row >= 0
    np.add.at(self_api, api_op_row[has_op], (api_calls["end"] - api_calls["start"]).to_numpy()[has_op])
    ops["api_time"] = inclusive_sum(self_api, tree.parent, tree.levels)

    api_ids = api_calls["api_id"].to_numpy()
    api_starts = api_calls["start"].to_numpy()
    root_ids = ops["root_id"].to_numpy()
    for name, frame in activities.items():
        rows = links[name]
        frame["api_id"] = take(api_ids, rows)
        frame["launch_ts"] = np.where(rows >= 0, take(api_starts, rows), frame["start"].to_numpy())
        op_row = take(api_op_row, rows)
        frame["op_id"] = take(op_ids, op_row)
        frame["root_op_id"] = take(root_ids, op_row)


def gpu_idle_per_owner(owner: np.ndarray, starts: np.ndarray, ends: np.ndarray, n_owners: int) -> np.ndarray:
    """DLProf's GPU idle of an op: from the start of its first GPU activity to the end of its last, the time
    none of them runs (the span less the union)."""
    keep = owner >= 0
    union, first, last = union_per_group(owner[keep], np.asarray(starts)[keep], np.asarray(ends)[keep], n_owners)
    return last - first - union


def ancestor_rows(owner: np.ndarray, parent: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every (ancestor-or-self of owner[i], i) pair: what each op's inclusive figures are built from."""
    rows = np.flatnonzero(owner >= 0)
    anc = owner[rows]
    out_anc, out_row = [anc], [rows]
    while len(rows):
        up = parent[anc]
        keep = up >= 0
        rows, anc = rows[keep], up[keep]
        if len(rows):
            out_anc.append(anc)
            out_row.append(rows)
    return np.concatenate(out_anc), np.concatenate(out_row)
