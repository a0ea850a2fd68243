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

from ..model import narrow_ints, put_column, words_column
from .intervals import union_per_group
from .nesting import Nesting, inclusive_sum, inherit_flag, levels


def thread_keys(frames: list[pd.DataFrame]) -> list[np.ndarray]:
    """One int64 key per (rank, pid, tid), the same for the same thread across the tables given together
    (distinct threads, distinct keys; the keys carry no order)."""
    return pack_keys([[f[c].to_numpy() for f in frames] for c in ("rank", "pid", "tid")])


def pack_keys(columns: list[list[np.ndarray]]) -> list[np.ndarray]:
    """Equal int64 keys for equal tuples: ``columns[c][t]`` is column ``c`` of table ``t``; each table's rows
    get one key per row. Each column is offset by its minimum and folded into one number (a column whose
    span would overflow the fold goes through its distinct values, renumbered densely, first)."""
    lengths = [len(part) for part in columns[0]]
    joined = [np.concatenate([np.asarray(part, dtype=np.int64) for part in col]) if sum(lengths)
              else np.zeros(0, np.int64) for col in columns]
    key, size = np.zeros(len(joined[0]), dtype=np.int64), 1
    for values in joined:
        lo = int(values.min()) if len(values) else 0
        span = int(values.max()) - lo + 1 if len(values) else 1
        if span == 1:  # one value (a single trace's rank, a process's pid): nothing to fold
            continue
        if size * span >= 1 << 62:
            uniques, values = np.unique(values, return_inverse=True)
            lo, span = 0, max(len(uniques), 1)
        if size * span >= 1 << 62:
            uniques, key = np.unique(key, return_inverse=True)
            size = max(len(uniques), 1)
        key = key * span + (values - lo)
        size *= span
    return np.split(key, np.cumsum(lengths)[:-1])


def take(values: np.ndarray, rows: np.ndarray, missing=-1) -> np.ndarray:
    """``values[rows]`` where rows >= 0, ``missing`` elsewhere (also when ``values`` is empty)."""
    out = np.full(len(rows), missing, dtype=np.asarray(values).dtype if len(values) else np.int64)
    ok = rows >= 0
    out[ok] = np.asarray(values)[rows[ok]]
    return out


def link_api_calls(activity: pd.DataFrame, api_calls: pd.DataFrame) -> np.ndarray:
    """Row index into ``api_calls`` of each activity's launching call (by correlation id), -1 if none.

    Calls sharing a key: the first one launched it."""
    if len(activity) == 0 or len(api_calls) == 0:
        return np.full(len(activity), -1, dtype=np.int64)
    by_pid = bool((activity["pid"].to_numpy() >= 0).any())
    names = ["rank", "pid", "correlation"] if by_pid else ["rank", "correlation"]
    act_key, call_key = pack_keys([[activity[c].to_numpy(), api_calls[c].to_numpy()] for c in names])
    call_rows = np.flatnonzero(api_calls["correlation"].to_numpy() >= 0)
    keys, first = np.unique(call_key[call_rows], return_index=True)  # sorted keys, each one's first row
    at = np.minimum(np.searchsorted(keys, act_key), max(len(keys) - 1, 0))
    found = (len(keys) > 0) & (keys[at] == act_key) if len(keys) else np.zeros(len(act_key), dtype=bool)
    rows = np.where(found, call_rows[first[at]] if len(keys) else -1, -1).astype(np.int64)
    rows[activity["correlation"].to_numpy() < 0] = -1
    return rows


@dataclass
class OpTree:
    """The ops' nesting: framework ops nested among themselves, ranges that stand for ops among themselves."""

    parent: np.ndarray  # row of the parent op, -1 for roots
    depth: np.ndarray
    root: np.ndarray    # row of the outermost enclosing op (itself for roots)
    levels: list[np.ndarray]  # rows per depth, outermost first
    #: per kind (framework ops, ranges standing for ops): its rows and their nesting, which only
    #: :meth:`launching_op` reads (~10 int64 per op: freed by :meth:`drop_nestings` once the calls are linked)
    _framework: tuple[np.ndarray, Nesting] | None
    _ranges: tuple[np.ndarray, Nesting] | None

    @classmethod
    def build(cls, ops: pd.DataFrame, keys: np.ndarray | None = None) -> OpTree:
        """``keys``: the ops' thread keys (:func:`thread_keys`), when the caller has them already."""
        if keys is None:
            (keys,) = thread_keys([ops])
        n = len(ops)
        is_range = (ops["range_domain"] != "").to_numpy(dtype=bool)
        starts, ends = ops["start"].to_numpy(np.int64), ops["end"].to_numpy(np.int64)
        parts = []
        for rows in (np.flatnonzero(~is_range), np.flatnonzero(is_range)):
            parts.append((rows, Nesting.build(keys[rows], starts[rows], ends[rows])))
        whole = [nest for rows, nest in parts if len(rows) == n and n]
        if whole:  # one kind of op only (rows = 0..n-1): its nesting's arrays are the tree's
            parent, depth, root = whole[0].parent, whole[0].depth, whole[0].root
        else:
            parent = np.full(n, -1, np.int64)
            depth = np.zeros(n, np.int64)
            root = np.arange(n, dtype=np.int64)
            for rows, nest in parts:
                parent[rows] = take(rows, nest.parent)
                depth[rows] = nest.depth
                root[rows] = rows[nest.root] if len(rows) else rows
                # the tree holds them now; the nesting keeps what launching_op reads
                nest.parent = nest.depth = nest.root = np.zeros(0, np.int64)
        return cls(parent, depth, root, levels(depth), parts[0], parts[1])

    def launching_op(self, call_keys: np.ndarray, starts: np.ndarray) -> np.ndarray:
        """Row of the op that launched each call (framework ops first, then ranges standing for ops).

        ``call_keys``: the calls' thread keys, from the same :func:`thread_keys` call as the tree's ops'."""
        assert self._framework is not None and self._ranges is not None, "launching_op after drop_nestings"
        starts = np.asarray(starts, dtype=np.int64)
        out = np.full(len(starts), -1, np.int64)
        for rows, nest in (self._framework, self._ranges):
            todo = np.flatnonzero(out < 0)
            if len(rows) == 0 or len(todo) == 0:
                continue
            hit = nest.innermost_at(call_keys[todo], starts[todo])
            out[todo] = take(rows, hit)
        return out

    def drop_nestings(self) -> OpTree:
        """Free what only :meth:`launching_op` reads; the parents, depths, roots and levels stay."""
        self._framework = self._ranges = None
        return self


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
    put_column(ops, "parent_id", narrow_ints(take(op_ids, tree.parent)))
    # the tree's depths and roots are these columns from here on (op ids are row numbers: a root's id is its row)
    tree.depth = narrow_ints(tree.depth)
    put_column(ops, "depth", tree.depth)
    root_ids = narrow_ints(op_ids[tree.root] if len(ops) else np.zeros(0, np.int64))
    put_column(ops, "root_id", root_ids)
    if np.array_equal(root_ids, tree.root):
        tree.root = root_ids
    bwd = inherit_flag((ops["direction"] == "bwd").to_numpy(), tree.parent, tree.levels)
    ops["direction"] = words_column(bwd.astype(np.int8), ["fwd", "bwd"])

    put_column(api_calls, "op_id", narrow_ints(take(op_ids, api_op_row)))
    self_api = np.zeros(len(ops), dtype=np.int64)
    has_op = api_op_row >= 0
    np.add.at(self_api, api_op_row[has_op], (api_calls["end"] - api_calls["start"]).to_numpy()[has_op])
    put_column(ops, "api_time", inclusive_sum(self_api, tree.parent, tree.levels))

    api_ids = api_calls["api_id"].to_numpy()
    api_starts = api_calls["start"].to_numpy()
    for name, frame in activities.items():
        rows = links[name]
        put_column(frame, "api_id", narrow_ints(take(api_ids, rows)))
        put_column(frame, "launch_ts", np.where(rows >= 0, take(api_starts, rows), frame["start"].to_numpy()))
        op_row = take(api_op_row, rows)
        put_column(frame, "op_id", narrow_ints(take(op_ids, op_row)))
        put_column(frame, "root_op_id", narrow_ints(take(root_ids, op_row)))


def gpu_idle_per_owner(owner: np.ndarray, starts: np.ndarray, ends: np.ndarray, n_owners: int,
                       rows: np.ndarray | None = None) -> np.ndarray:
    """DLProf's GPU idle of an op: from the start of its first GPU activity to the end of its last, the time
    none of them runs (the span less the union). ``rows``: the activities are ``starts[rows]``, ``ends[rows]``
    (see :func:`union_per_group`)."""
    keep = owner >= 0
    if not keep.all():
        owner = owner[keep]
        if rows is None:
            starts, ends = np.asarray(starts)[keep], np.asarray(ends)[keep]
        else:
            rows = rows[keep]
    union, first, last = union_per_group(owner, starts, ends, n_owners, rows)
    last -= first
    last -= union
    return last


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
