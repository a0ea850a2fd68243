"""The Python page: the Python call tree as an icicle (flame graph) per thread, and the ops a frame called.

The page's data says which threads have a tree; the icicle's boxes come from ``/api/python/tree`` (the subtree
under a node, or a thread's or every thread's outermost frames under one box), the ops from
``/api/python/ops``. Both read ``python_tree`` / ``python_frames`` / ``op_instances`` (docs/schema.md).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from dlscope.present.python_stacks import python_section
from dlscope.viewer.params import BadParameter, parse_int
from dlscope.viewer.profile_db import ProfileDB

PAGE_PARAMS = ("thread", "frame")
#: boxes narrower than this share of the shown root are not sent (less than a pixel on a wide screen)
MIN_SHARE = 1 / 2000
#: the most boxes one answer holds
MAX_NODES = 4000
#: the most op rows listed for one frame
MAX_OPS = 200
_THREAD = re.compile(r"^(-?\d{1,19}):(-?\d{1,19}):(-?\d{1,19})$")
_NODE_COLUMNS = ("node_id", "parent_node_id", "depth", "name", "file", "line", "function", "calls", "total_ns",
                 "self_ns", "rank", "pid", "tid")


def threads(db: ProfileDB) -> list[dict]:
    """Each thread with a call tree: its key ``rank:pid:tid``, its outermost frames' total time and box count."""
    if not db.has("python_tree"):
        return []
    return [{"key": f"{r}:{p}:{t}", "rank": r, "pid": p, "tid": t, "total_ns": total, "roots": n}
            for r, p, t, total, n in db.execute(
                "SELECT rank, pid, tid, SUM(total_ns), COUNT(*) FROM python_tree WHERE parent_node_id < 0 "
                "GROUP BY rank, pid, tid ORDER BY SUM(total_ns) DESC, rank, pid, tid")]


def view_data(viewer, db: ProfileDB, scope: dict, params: Mapping[str, str]) -> dict:
    known = threads(db)
    thread = params.get("thread") or "all"
    if thread != "all" and thread not in {t["key"] for t in known}:
        raise BadParameter("thread", f"{thread[:40]!r} is not a thread with Python frames here "
                                     "(give rank:pid:tid from the thread menu, or all)")
    frame = parse_int("frame", params["frame"], 0) if params.get("frame") else None
    section = python_section(db.connection()) if db.has("python_tree") else None
    return {"python": {"threads": known, "thread": thread, "frame": frame,
                       "source": section["source"] if section else None,
                       "frames": section["frames"] if section else None}}


def _thread(params: Mapping[str, str]) -> tuple[int, int, int] | None:
    raw = params.get("thread") or "all"
    if raw == "all":
        return None
    m = _THREAD.match(raw)
    if m is None:
        raise BadParameter("thread", f"{raw[:40]!r}: give rank:pid:tid (whole numbers) or all")
    return parse_int("thread", m.group(1)), parse_int("thread", m.group(2)), parse_int("thread", m.group(3))


def _node_row(row: tuple) -> dict:
    return dict(zip(_NODE_COLUMNS, row))


def tree(db: ProfileDB, params: Mapping[str, str]) -> dict:
    """The boxes under one root: node ``node`` of rank ``rank``, else one box holding the outermost frames of
    ``thread`` (rank:pid:tid, or all). Boxes under ``MIN_SHARE`` of the root and past ``MAX_NODES`` are left
    out (``truncated`` says so); their time stays in their parent's total."""
    if not db.has("python_tree"):
        raise BadParameter("db", "this profile has no Python call tree")
    cols = ", ".join(f't."{c}"' for c in _NODE_COLUMNS)
    start_params: tuple[int, ...]
    if params.get("node"):
        rank = parse_int("rank", params.get("rank") or "")
        node = parse_int("node", params["node"])
        row = db.execute_one(f"SELECT {cols} FROM python_tree t WHERE rank = ? AND node_id = ?", (rank, node))
        if row is None:
            raise BadParameter("node", f"there is no call-tree node {node} on rank {rank}")
        root = _node_row(row)
        starts, start_params = "t.rank = ? AND t.node_id = ?", (rank, node)
    else:
        which = _thread(params)
        where = "t.parent_node_id < 0" + ("" if which is None else " AND t.rank = ? AND t.pid = ? AND t.tid = ?")
        start_params = () if which is None else which
        total = db.execute_one(f"SELECT COALESCE(SUM(total_ns), 0), COUNT(*) FROM python_tree t WHERE {where}",
                               start_params)
        if which is not None and not total[1]:
            raise BadParameter("thread", f"{params.get('thread')!r} has no Python frames")
        root = {"node_id": None, "parent_node_id": None, "depth": -1, "total_ns": total[0], "self_ns": 0,
                "calls": None, "file": "", "line": -1, "function": "",
                "name": "all threads" if which is None else f"thread {which[2]} (pid {which[1]}, rank {which[0]})",
                "rank": None if which is None else which[0], "pid": None if which is None else which[1],
                "tid": None if which is None else which[2]}
        starts = where
    floor = max(int(root["total_ns"] * MIN_SHARE), 1) if root["total_ns"] else 0
    rows = db.execute(
        f"""WITH RECURSIVE sub(rank, node_id) AS (
                SELECT t.rank, t.node_id FROM python_tree t WHERE {starts}
                UNION ALL
                SELECT t.rank, t.node_id FROM python_tree t JOIN sub ON t.rank = sub.rank
                    AND t.parent_node_id = sub.node_id WHERE t.total_ns >= ? LIMIT {MAX_NODES + 1})
            SELECT {cols} FROM sub JOIN python_tree t ON t.rank = sub.rank AND t.node_id = sub.node_id""",
        (*start_params, floor), limit_ms=10_000)
    nodes = [_node_row(r) for r in rows[:MAX_NODES]]
    if root["node_id"] is not None:
        nodes = [n for n in nodes if not (n["node_id"] == root["node_id"] and n["rank"] == root["rank"])]
    return {"root": root, "nodes": nodes, "truncated": len(rows) > MAX_NODES, "min_ns": floor}


def frame_ops(db: ProfileDB, params: Mapping[str, str]) -> dict:
    """The ops the frames of one call-tree node called: ops whose innermost enclosing frame is one of them and
    whose parent op (if any) is not in that same frame, summed per op node, longest first."""
    rank = parse_int("rank", params.get("rank") or "")
    node = parse_int("node", params.get("node") or "")
    if not db.has("python_tree"):
        raise BadParameter("db", "this profile has no Python call tree")
    if db.execute_one("SELECT 1 FROM python_tree WHERE rank = ? AND node_id = ?", (rank, node)) is None:
        raise BadParameter("node", f"there is no call-tree node {node} on rank {rank}")
    if not db.has("python_frames", "op_instances", "op_nodes") or "frame_id" not in db.columns("op_instances"):
        return {"ops": [], "truncated": False}
    rows = db.execute(
        """SELECT o.node_id, n.name, n.parent_node_id, COUNT(*), SUM(o."end" - o.start), MIN(o.op_id)
           FROM python_frames f JOIN op_instances o ON o.frame_id = f.frame_id JOIN op_nodes n ON n.node_id = o.node_id
           WHERE f.rank = ? AND f.node_id = ? AND (o.parent_id < 0 OR NOT EXISTS (
                 SELECT 1 FROM op_instances p WHERE p.op_id = o.parent_id AND p.frame_id = o.frame_id))
           GROUP BY o.node_id ORDER BY SUM(o."end" - o.start) DESC, o.node_id LIMIT ?""",
        (rank, node, MAX_OPS + 1), limit_ms=10_000)
    ops = [{"op_node_id": nid, "name": name, "op_node": parent < 0, "calls": calls, "cpu_time_ns": t,
            "first_op_id": first} for nid, name, parent, calls, t, first in rows[:MAX_OPS]]
    return {"ops": ops, "truncated": len(rows) > MAX_OPS}
