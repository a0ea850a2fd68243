"""The Timeline page: which rank and window it opens at, from the link that led there.

Every place that links to the timeline says what it points at, and this module turns that into a window: an
explicit ``start``/``end`` (a finding's evidence range, a pan or zoom), one kernel (``kernel``), one op call
(``op``), an op node's first call in the aggregation (``node``), a kernel name's first launch in it
(``kernel_name``) or an iteration (``iteration``); by default the aggregation's first profiled iteration.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dlscope.distributed.job import run_aggregations
from dlscope.viewer import timeline
from dlscope.viewer.params import BadParameter, parse_int
from dlscope.viewer.profile_db import ProfileDB

PAGE_PARAMS = ("start", "end", "kernel", "op", "kernel_name")
#: Room around one event so the events next to it are seen too: twice its length and at least this (ns).
MIN_PAD_NS = 5_000


def view_data(viewer, db: ProfileDB, scope: dict, params: Mapping[str, str]) -> dict:
    agg = next((a for a in db.aggregations() if a["agg_id"] == scope.get("agg")), None)
    known = timeline.ranks(db)
    rank = scope.get("rank", agg["rank"] if agg else (known[0] if known else 0))
    if known and rank not in known:
        raise BadParameter("rank", f"rank {rank} is not in this profile (have {', '.join(map(str, known))})")
    if agg and agg["rank"] != rank:  # another rank of the job: its aggregation in the same run
        agg = next((a for a in run_aggregations(db.connection(), agg["agg_id"]) if a["rank"] == rank), None)
    focus: dict[str, Any] | None = None
    if params.get("start") or params.get("end"):
        _, start, end, _ = timeline.parse_window(db, {**params, "rank": str(rank)})
    elif params.get("kernel"):
        focus = {"kind": "kernel", "id": parse_int("kernel", params["kernel"])}
        rank, start, end = _padded_event(db, int(focus["id"]))
    elif params.get("op"):
        focus = {"kind": "op", "id": parse_int("op", params["op"])}
        rank, start, end = _op_window(db, int(focus["id"]))
    elif "node" in scope:
        lo = agg["window_start"] if agg and agg["window_start"] is not None else -(2 ** 63)
        row = db.execute_one("SELECT op_id FROM op_instances WHERE node_id = ? AND start >= ? ORDER BY start LIMIT 1",
                             (scope["node"], lo)) if db.has("op_instances") else None
        if row is None:
            raise BadParameter("node", f"op node {scope['node']} has no call in this aggregation")
        focus = {"kind": "op", "id": row[0]}
        rank, start, end = _op_window(db, row[0])
    elif params.get("kernel_name"):
        lo = agg["window_start"] if agg and agg["window_start"] is not None else -(2 ** 63)
        row = db.execute_one("SELECT kernel_id FROM kernels WHERE name = ? AND rank = ? AND start >= ? "
                             "ORDER BY start LIMIT 1", (params["kernel_name"], rank, lo), limit_ms=10_000)
        if row is None:
            raise BadParameter("kernel_name", "no kernel of that name ran on this rank in the aggregation")
        focus = {"kind": "kernel", "id": row[0]}
        rank, start, end = _padded_event(db, row[0])
    else:
        start, end = _iteration_window(db, agg, rank, scope.get("iteration"))
    iterations = []
    if agg and db.has("agg_iterations"):
        iterations = [{"iteration": i, "start": str(s), "end": str(e), "profiled": p} for i, s, e, p in db.execute(
            'SELECT iteration, start, "end", profiled FROM agg_iterations WHERE agg_id = ? AND rank = ? '
            "ORDER BY iteration", (agg["agg_id"], rank))]
    return {"timeline": {"rank": rank, "ranks": known, "start": str(start), "end": str(end), "focus": focus,
                         "iterations": iterations}}


def _padded(start: int, end: int) -> tuple[int, int]:
    pad = max(2 * (end - start), MIN_PAD_NS)
    return start - pad, end + pad


def _event_window(db: ProfileDB, table: str, key: str, event_id: int, param: str) -> tuple[int, int, int]:
    row = db.execute_one(f'SELECT rank, start, "end" FROM {table} WHERE {key} = ?', (event_id,)) \
        if db.has(table) else None
    if row is None:
        raise BadParameter(param, f"there is no {param} {event_id} in this profile")
    return row


def _padded_event(db: ProfileDB, kernel_id: int) -> tuple[int, int, int]:
    rank, start, end = _event_window(db, "kernels", "kernel_id", kernel_id, "kernel")
    return (rank, *_padded(start, end))


def _op_window(db: ProfileDB, op_id: int) -> tuple[int, int, int]:
    """An op call and the GPU work launched beneath it (which runs later than the call returns)."""
    rank, start, end = _event_window(db, "op_instances", "op_id", op_id, "op")
    row = db.execute_one('SELECT MAX("end") FROM kernels WHERE root_op_id = ?', (op_id,)) \
        if db.has("kernels") else None
    last = max(end, row[0]) if row and row[0] is not None else end
    return (rank, *_padded(start, last))


def _iteration_window(db: ProfileDB, agg: dict | None, rank: int, iteration: int | None) -> tuple[int, int]:
    """An iteration's window (the aggregation's by default: its first profiled one), else the whole rank."""
    if agg and db.has("agg_iterations"):
        if iteration is not None:
            row = db.execute_one('SELECT start, "end" FROM agg_iterations WHERE agg_id = ? AND rank = ? '
                                 "AND iteration = ?", (agg["agg_id"], rank, iteration))
            if row is None:
                raise BadParameter("iteration", f"iteration {iteration} is not in aggregation {agg['agg_id']}")
            return row
        row = db.execute_one('SELECT start, "end" FROM agg_iterations WHERE agg_id = ? AND rank = ? AND profiled = 1 '
                             "ORDER BY iteration LIMIT 1", (agg["agg_id"], rank))
        if row is not None and row[1] > row[0]:
            return row
    ev = timeline.CACHE.get(db, rank)
    return ev.first, max(ev.last, ev.first + 1)
