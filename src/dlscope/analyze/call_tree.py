"""Python call stacks: each frame's parent, the per-thread call tree merged by call path, and each op's frame.

The trace's own ids link a frame to its parent (Kineto's ``Python id`` / ``Python parent id``); frames without
ids are nested by time on their thread (the innermost frame enclosing a frame's start, as ops are). The call
tree merges the frames of one thread with the same call path (the functions from the thread's outermost frame down;
a function is its file, line and name, a built-in's without the address of the object it was called on),
like a flame graph: a node's total time is the sum of its frames' durations, its self time that total less its
children's totals, its calls the number of frames. An op's frame is the innermost frame enclosing its start
on its thread; its stack is the innermost *user* frame at or above that frame (``file.py:123``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..importers.python_frames import is_user_file, where
from ..model import PYTHON_TREE_COLUMNS as TREE_COLUMNS
from ..model import narrow_ints, put_column, string_column, text_column
from .attribution import take, thread_keys
from .nesting import Nesting, _depth_and_root, levels

__all__ = ["TREE_COLUMNS", "analyse_frames", "call_tree", "link_frames", "op_frames", "user_places"]


def link_frames(frames: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Row index of each frame's parent (-1 for a thread's outermost frames) and its depth."""
    n = len(frames)
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    rank, pid = frames["rank"].to_numpy(np.int64), frames["pid"].to_numpy(np.int64)
    own, up = frames["python_id"].to_numpy(np.int64), frames["python_parent_id"].to_numpy(np.int64)
    parent = np.full(n, -1, dtype=np.int64)
    has_id = own >= 0
    if has_id.any():
        index = pd.MultiIndex.from_arrays([rank[has_id], pid[has_id], own[has_id]])
        rows = np.flatnonzero(has_id)
        found = index.get_indexer(pd.MultiIndex.from_arrays([rank, pid, up]))
        parent = np.where(has_id & (up >= 0) & (found >= 0), take(rows, found), -1)
    timed = ~has_id
    if timed.any():
        keys, = thread_keys([frames])
        nest = Nesting.build(keys, frames["start"].to_numpy(np.int64), frames["end"].to_numpy(np.int64))
        parent = np.where(timed, nest.parent, parent)
    parent[parent == np.arange(n)] = -1  # a frame naming itself as parent (bad ids) is a root
    depth, _ = _depth_and_root(_acyclic(parent))
    return parent, depth


def _acyclic(parent: np.ndarray) -> np.ndarray:
    """The parent links with any cycle (contradictory ids in a bad trace) cut: its frames become roots."""
    anc = parent.copy()
    for _ in range(64):  # pointer doubling: after k steps anc is the 2^k-th ancestor
        alive = anc >= 0
        if not alive.any():
            return parent
        anc[alive] = anc[anc[alive]]
    out = parent.copy()
    out[anc >= 0] = -1
    return out


def call_tree(frames: pd.DataFrame, parent: np.ndarray, depth: np.ndarray) -> tuple[pd.DataFrame, np.ndarray]:
    """The call tree (``TREE_COLUMNS``) and each frame's node in it. Node ids are numbered per rank (0, 1, ...)."""
    n = len(frames)
    node = np.full(n, -1, dtype=np.int64)
    if n == 0:
        return pd.DataFrame({c: pd.Series([], dtype=object if c in ("name", "file", "function") else np.int64)
                             for c in TREE_COLUMNS}), node
    keys, = thread_keys([frames])
    # one function: the same file, line and function (a built-in's name without its object's address)
    names = frames.groupby(["file", "line", "function"], sort=False).ngroup().to_numpy(np.int64)
    next_id = 0
    for rows in levels(depth):  # top-down: a node is (thread, parent's node, name)
        up = take(node, parent[rows])
        key = pd.DataFrame({"t": keys[rows], "u": up, "n": names[rows]})
        codes = key.groupby(["t", "u", "n"], sort=False).ngroup().to_numpy(np.int64)
        node[rows] = codes + next_id
        next_id += int(codes.max()) + 1 if len(codes) else 0
    dur = (frames["end"].to_numpy(np.int64) - frames["start"].to_numpy(np.int64))
    first = pd.Series(np.arange(n)).groupby(node, sort=True).first().to_numpy(np.int64)
    count = np.bincount(node, minlength=next_id).astype(np.int64)
    total = np.zeros(next_id, dtype=np.int64)
    np.add.at(total, node, dur)
    node_parent = take(node, parent[first])
    children = np.zeros(next_id, dtype=np.int64)
    has_parent = node_parent >= 0
    np.add.at(children, node_parent[has_parent], total[has_parent])
    rank = frames["rank"].to_numpy(np.int64)[first]
    # ids numbered within each rank (a job imported rank by rank numbers them the same), in creation order
    local = pd.Series(np.arange(next_id)).groupby(rank, sort=False).cumcount().to_numpy(np.int64)
    node_parent = take(local, node_parent)
    node = local[node]
    tree = pd.DataFrame({
        "rank": rank, "node_id": local, "parent_node_id": node_parent,
        "pid": frames["pid"].to_numpy(np.int64)[first], "tid": frames["tid"].to_numpy(np.int64)[first],
        "depth": depth[first],
        "name": string_column(_labels(frames, first)),
        "file": string_column(frames["file"].take(first).to_numpy(dtype=object)),
        "line": frames["line"].to_numpy(np.int64)[first],
        "function": string_column(frames["function"].take(first).to_numpy(dtype=object)),
        "calls": count, "total_ns": total, "self_ns": total - children,
    })
    order = np.lexsort((local, pd.factorize(rank)[0]))  # rank by rank, in the order the ranks come
    return tree.iloc[order].reset_index(drop=True), node


def _labels(frames: pd.DataFrame, rows: np.ndarray) -> np.ndarray:
    """A node's name: "file.py(123): func" as Kineto writes it, or the built-in's function."""
    files = frames["file"].to_numpy(dtype=object)[rows]
    lines = frames["line"].to_numpy(np.int64)[rows]
    funcs = frames["function"].to_numpy(dtype=object)[rows]
    return np.array([f"{f}({ln}): {fn}" if f else fn for f, ln, fn in zip(files, lines, funcs)], dtype=object)


def user_places(frames: pd.DataFrame, parent: np.ndarray, depth: np.ndarray) -> np.ndarray:
    """Per frame, ``file.py:123`` of the innermost user frame at or above it ("" when none is the user's)."""
    codes, uniques = pd.factorize(frames["name"].to_numpy(dtype=object))  # a name fixes file and line
    first = pd.Series(np.arange(len(codes))).groupby(codes, sort=True).first().to_numpy(np.int64)
    files, lines = frames["file"].to_numpy(dtype=object)[first], frames["line"].to_numpy(np.int64)[first]
    place = np.array([where(f, ln) if is_user_file(f) else "" for f, ln in zip(files, lines)] or [""],
                     dtype=object)  # once per distinct name
    own = place[codes] if len(codes) else np.zeros(0, dtype=object)
    out = own.copy()
    for rows in levels(depth)[1:]:
        inherit = out[rows] == ""
        out[rows[inherit]] = out[parent[rows[inherit]]]
    return out


def op_frames(ops: pd.DataFrame, frames: pd.DataFrame) -> np.ndarray:
    """Row index of the innermost frame enclosing each op's start on its thread (-1 where none does)."""
    if len(frames) == 0 or len(ops) == 0:
        return np.full(len(ops), -1, dtype=np.int64)
    frame_keys, op_keys = thread_keys([frames, ops])
    nest = Nesting.build(frame_keys, frames["start"].to_numpy(np.int64), frames["end"].to_numpy(np.int64))
    return nest.innermost_at(op_keys, ops["start"].to_numpy(np.int64))


def analyse_frames(ops: pd.DataFrame, frames: pd.DataFrame) -> pd.DataFrame:
    """Add ``parent_id``, ``depth`` and ``node_id`` to the frames and ``frame_id`` to the ops (ops with no
    stack of their own get their frame's user place); return the call tree."""
    parent, depth = link_frames(frames)
    tree, node = call_tree(frames, parent, depth)
    frames["parent_id"] = parent
    frames["depth"] = depth
    frames["node_id"] = node
    hit = op_frames(ops, frames)
    put_column(ops, "frame_id", narrow_ints(hit))
    if len(frames) and (hit >= 0).any():
        places = take(user_places(frames, parent, depth), hit, missing="")
        mine = ops["stack"].to_numpy(dtype=object)
        ops["stack"] = text_column(np.where(mine != "", mine, places))
    return tree
