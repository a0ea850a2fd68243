"""A cProfile / profile output (``python -m cProfile -o run.prof train.py``), read with the standard ``pstats``,
as a Python call tree like the one a trace's frames give (the Python view shows either).

cProfile keeps no calls in time, only per function its calls, own time (tottime), cumulative time (cumtime)
and, per caller, the same four figures for the calls from that caller. The tree is built as snakeviz builds its
icicle: from each root function (one nobody called) walk to the functions it called; a function reached on a
path gets the part of its cumulative time that the caller edge carries, scaled by the share of the caller's
own cumulative time that this path holds (``edge cumtime x path total / caller cumtime``); its self time and
calls are scaled by the same share (calls rounded). This is an approximation: cProfile cannot say which of a
function's callers' calls took which time. A function already on the path (recursion) is not walked again, its
time is in the outer call. A function's cumulative time is given out once: recursion makes its callers' edges
add up to more than it (each counts its own outermost calls), so a later path gets only what earlier ones
(walked longest first) left. Paths below ``MIN_SHARE`` of the root's time are not walked and the tree stops at
``MAX_NODES`` nodes; both are counted in the meta.
"""

from __future__ import annotations

import marshal
import pstats
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..errors import InputError
from ..model import PYTHON_TREE_COLUMNS as TREE_COLUMNS

#: a path of less than this share of its root's cumulative time is not walked
MIN_SHARE = 1e-4
#: the most call-tree nodes built from one output
MAX_NODES = 200_000
SUFFIXES = (".prof", ".pstats", ".cprof", ".profile")

Func = tuple[str, int, str]


def looks_like_cprofile(path: Path) -> bool:
    """Whether the file is a marshalled pstats dictionary (what cProfile and profile write)."""
    try:
        _load(path)
    except InputError:
        return False
    return True


def _load(path: Path) -> dict[Func, Any]:
    """The raw stats, checked: {(file, line, function): (primitive calls, calls, tottime, cumtime, callers)},
    callers: {caller: (calls, primitive calls, tottime, cumtime)} of the calls from that caller."""
    try:
        with open(path, "rb") as f:
            data = marshal.load(f)
    except (EOFError, ValueError, TypeError) as e:
        raise InputError(path, f"is not a cProfile output (cannot unmarshal it: {' '.join(str(e).split())})") \
            from None
    except OSError as e:
        raise InputError(path, f"cannot be read ({e.strerror or e})") from None
    if not isinstance(data, dict) or not data:
        raise InputError(path, "is not a cProfile output (no function statistics in it)")
    for key, value in data.items():
        if not (isinstance(key, tuple) and len(key) == 3 and isinstance(value, tuple) and len(value) == 5
                and isinstance(value[4], dict)):
            raise InputError(path, "is not a cProfile output (an entry is not (file, line, function) -> "
                                   "(calls, calls, tottime, cumtime, callers))")
    return data


def read_stats(path: Path) -> dict[Func, Any]:
    """The statistics as ``pstats`` reads them (after checking the file is one)."""
    _load(path)
    try:
        return pstats.Stats(str(path)).stats  # type: ignore[attr-defined]
    except Exception as e:  # noqa: BLE001 - pstats raises anything on a bad file: one line
        raise InputError(path, f"is not a cProfile output ({type(e).__name__}: {e})") from None


def _name(func: Func) -> tuple[str, str, int, str]:
    """(name, file, line, function) of a pstats key; built-ins are ('~', 0, '<built-in method ...>')."""
    file, line, function = func
    if file == "~" and line == 0:
        return function, "", -1, function
    return f"{file}({line}): {function}", file, int(line), function


def call_tree(stats: dict[Func, Any]) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The call tree (``TREE_COLUMNS``, rank 0, pid/tid -1) and what was left out."""
    callees: dict[Func, list[tuple[Func, tuple]]] = {f: [] for f in stats}
    for func, (_, _, _, _, callers) in stats.items():
        for caller, edge in callers.items():
            if caller in callees:
                callees[caller].append((func, edge))
    roots = [f for f, v in stats.items() if not v[4]]
    top = max(stats, key=lambda f: stats[f][3])
    if top not in roots:  # the program's entry (exec) is called again by the imports it runs: a root too
        roots.append(top)
    rows: list[tuple] = []
    skipped_small = skipped_cap = 0
    # (function, parent node, share of the function's cumtime on this path, path, depth, calls)
    todo: list[tuple[Func, int, float, tuple[Func, ...], int, int]] = []
    for f in sorted(roots, key=lambda f: stats[f][3]):  # the longest root last: walked first
        todo.append((f, -1, 1.0, (f,), 0, int(stats[f][1])))
    root_total = {f: stats[f][3] for f in roots}
    left = {f: float(v[3]) for f, v in stats.items()}  # cumulative time not yet given to a node
    while todo:
        func, parent, share, path, depth, calls = todo.pop()
        if len(rows) >= MAX_NODES:
            skipped_cap += 1
            continue
        _, nc, tt, ct, _ = stats[func]
        share = min(share, left[func] / ct) if ct > 0 else share  # never more than is left of its time
        if share <= 0 and parent >= 0:
            skipped_small += 1  # nothing of its time is left for this path
            continue
        left[func] -= ct * share
        node = len(rows)
        rows.append((node, parent, depth, func, calls, ct * share, tt * share))
        floor = MIN_SHARE * root_total.get(path[0], ct)
        kids = sorted(callees[func], key=lambda e: -e[1][3])
        for child, edge in reversed(kids):
            if child in path:
                continue  # recursion: its time is in the outer call
            child_total = edge[3] * share
            if child_total < floor or child_total <= 0:
                skipped_small += 1
                continue
            child_ct = stats[child][3]
            child_share = child_total / child_ct if child_ct > 0 else 0.0
            todo.append((child, node, child_share, (*path, child), depth + 1, round(edge[0] * share)))
    names = [_name(r[3]) for r in rows]
    tree = pd.DataFrame({
        "rank": np.zeros(len(rows), np.int64),
        "node_id": np.array([r[0] for r in rows], np.int64),
        "parent_node_id": np.array([r[1] for r in rows], np.int64),
        "pid": np.full(len(rows), -1, np.int64), "tid": np.full(len(rows), -1, np.int64),
        "depth": np.array([r[2] for r in rows], np.int64),
        "name": [n[0] for n in names], "file": [n[1] for n in names],
        "line": np.array([n[2] for n in names], np.int64), "function": [n[3] for n in names],
        "calls": np.array([r[4] for r in rows], np.int64),
        "total_ns": _apportioned_ns(rows, 5), "self_ns": _apportioned_ns(rows, 6),
    })[TREE_COLUMNS]
    meta = {"functions": len(stats), "nodes": len(rows), "roots": len(roots), "min_share": MIN_SHARE,
            "max_nodes": MAX_NODES, "paths_below_min_share": skipped_small, "paths_over_max_nodes": skipped_cap,
            "total_tt_ns": round(sum(v[2] for v in stats.values()) * 1e9)}
    return tree, meta


def _apportioned_ns(rows: list[tuple], field: int) -> np.ndarray:
    """Integer ns of each node's share of its function's seconds, rounded so that a function's nodes add up to
    its own rounded time (cumulative rounding per function), never one ns more as rounding each would."""
    seconds = pd.Series([r[field] for r in rows], dtype=np.float64) * 1e9
    func = pd.Series([r[3] for r in rows], dtype=object)
    if not len(rows):
        return np.zeros(0, np.int64)
    upto = pd.Series(np.rint(seconds.groupby(func, sort=False).cumsum().to_numpy()).astype(np.int64))
    return (upto - upto.groupby(func, sort=False).shift(1, fill_value=0)).to_numpy(np.int64)


def load_cprofile(path: Path) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The call tree of a cProfile output and the source's meta; one-line :class:`InputError` on a bad file."""
    path = Path(path)
    tree, facts = call_tree(read_stats(path))
    return tree, {"source_format": "cprofile", "source_path": str(path), "rank": 0, "world_size": 1,
                  "python_tree": facts}
