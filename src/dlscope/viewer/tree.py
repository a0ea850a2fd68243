"""The Group Ops tree table: groups (scope prefixes) and ops from agg_groups, paged in tree order.

A tree cannot be paged by plain ORDER BY, so the aggregation's rows are read once (they number in the
thousands, one per op node and group) and kept; expand/collapse state, sort among siblings, searches and
paging then run on that list. A search keeps matching rows plus their ancestors, so a match is never orphaned.
"""

from __future__ import annotations

import threading
from collections.abc import Set

from dlscope.viewer.params import BadParameter, TableRequest, parse_id_list
from dlscope.viewer.profile_db import ProfileDB
from dlscope.viewer.tables import GROUPS

_CACHE: dict = {}
_LOCK = threading.Lock()


def load_tree(db: ProfileDB, agg: int) -> list[dict]:
    key = (str(db.path), db._generation, agg)
    with _LOCK:
        if key in _CACHE:
            return _CACHE[key]
    cols = ", ".join(f"{c.sql} AS {c.name}" for c in GROUPS.columns)
    rows = db.execute(f"SELECT {cols} FROM agg_groups WHERE agg_id = ? ORDER BY group_id", (agg,), 10_000)
    names = [c.name for c in GROUPS.columns]
    nodes = [dict(zip(names, r)) for r in rows]
    with _LOCK:
        _CACHE[key] = nodes
    return nodes


def _matches(node: dict, req: TableRequest) -> bool:
    for name, (op, value) in req.filters.items():
        v = node.get(name)
        if op == "contains":
            if v is None or value.lower() not in str(v).lower():
                return False
        elif v is None:
            return False
        elif op == "between":
            if not value[0] <= v <= value[1]:
                return False
        elif not {"=": v == value, "!=": v != value, ">": v > value, "<": v < value,
                  ">=": v >= value, "<=": v <= value}[op]:
            return False
    if req.q:
        q = req.q.lower()
        if not any(q in str(node.get(c.name) or "").lower() for c in GROUPS.columns if c.kind == "text"):
            return False
    return True


def _ids(name: str, raw: str) -> set[int]:
    try:
        return parse_id_list(name, raw)
    except BadParameter:
        raise BadParameter(name, "use a comma-separated list of group ids") from None


def parse_open(raw: str | None, closed: str | None = None) -> tuple[set[int] | str, set[int]]:
    """Expansion state: ``open=all`` (default) minus ``closed=ids``, ``open=none``, or ``open=ids``."""
    if raw in (None, "", "all"):
        return "all", _ids("closed", closed or "")
    if raw == "none":
        return set(), set()
    return _ids("open", raw), set()


def visible_rows(nodes: list[dict], req: TableRequest, expanded: set[int] | str,
                 closed: Set[int] = frozenset()) -> list[dict]:
    """Rows in pre-order (siblings sorted by the request's column), honouring expansion and searches."""
    children: dict = {}
    for n in nodes:
        children.setdefault(n["parent_group_id"], []).append(n)
    by_id = {n["group_id"]: n for n in nodes}
    searching = bool(req.filters or req.q)
    keep: set[int] = set()
    if searching:
        for n in nodes:
            if _matches(n, req):
                cur: dict | None = n
                while cur is not None and cur["group_id"] not in keep:
                    keep.add(cur["group_id"])
                    cur = by_id.get(cur["parent_group_id"])
    sort = req.sort if req.sort != "tree" else None

    def key(n):
        v = n.get(sort)
        return (v is None, v if v is not None else 0)

    out: list[dict] = []
    roots = [n for n in nodes if n["parent_group_id"] not in by_id]
    stack = list(reversed(_ordered(roots, sort, req.desc, key)))
    while stack:
        n = stack.pop()
        if searching and n["group_id"] not in keep:
            continue
        kids = children.get(n["group_id"], [])
        is_open = searching or (expanded == "all" and n["group_id"] not in closed) or (
            expanded != "all" and n["group_id"] in expanded)
        out.append({**n, "has_children": bool(kids), "expanded": bool(kids) and is_open})
        if kids and is_open:
            stack.extend(reversed(_ordered(kids, sort, req.desc, key)))
    return out


def _ordered(items, sort, desc, key):
    return sorted(items, key=key, reverse=desc) if sort else items


def fetch_tree_page(db: ProfileDB, req: TableRequest, state) -> dict:
    rows = visible_rows(load_tree(db, req.scope["agg"]), req, *state)
    total = len(rows)
    start = (req.page - 1) * req.size
    page_rows = rows[start:start + req.size]
    return {"table": "groups", "columns": [c.name for c in GROUPS.columns] + ["has_children", "expanded"],
            "rows": page_rows, "page": req.page, "size": req.size, "total": total, "count_truncated": False,
            "last_page": max(1, -(-total // req.size)), "has_next": start + req.size < total,
            "sort": req.sort, "order": "desc" if req.desc else "asc"}
