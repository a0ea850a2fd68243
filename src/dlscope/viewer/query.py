"""Turn a validated TableRequest into SQL (names from the whitelist, values bound) and run it.

Deep pages stay fast through a late row lookup: the inner query walks only the sort index to find the page's
row keys (``LIMIT/OFFSET`` over index entries, no row reads), the outer query reads just those rows. Counts run
under a short time limit and are cached (the raw tables never change); a count that would take too long is
reported as unknown, with ``has_next`` from fetching one extra row, as Datasette does.
"""

from __future__ import annotations

import json
import re
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor

from dlscope.viewer.params import BadParameter, TableRequest
from dlscope.viewer.profile_db import ProfileDB, QueryTimeout
from dlscope.viewer.tables import TableSpec

ROW_LIMIT_MS = 2000
COUNT_LIMIT_MS = 400
#: Counting a huge filtered table gives up sooner: the page is shown with "many" rows instead of waiting.
HUGE_COUNT_LIMIT_MS = 120
#: Above this many rows a table only sorts on indexed columns unless a narrowing scope (an iteration) is set.
BIG_TABLE_ROWS = 200_000


def _like(value: str) -> str:
    return "%" + re.sub(r"([%_\\])", r"\\\1", value) + "%"


#: A name search matching more than this share of a huge table walks the sort index (cheap per match found);
#: a rarer one reads its matches through the name index and sorts them.
WALK_SORT_INDEX_SHARE = 0.02


def distinct_values(db: ProfileDB, sql: str) -> dict[str, int]:
    """Distinct values of an indexed text column with their row counts (cached: raw tables never change)."""
    key = ("distinct", sql)
    if key not in db.counts:
        db.counts[key] = {r[0]: r[1] for r in db.execute(sql, limit_ms=60_000) if r[0] is not None}
    return db.counts[key]


def matching(db: ProfileDB, sql: str, needle: str) -> tuple[list[str], float]:
    """Values containing ``needle`` (case-insensitive for ASCII, like SQL LIKE) and the share of rows they hold."""
    n = needle.lower()
    values = distinct_values(db, sql)
    found = [(v, c) for v, c in values.items() if n in v.lower()]
    total = sum(c or 0 for c in values.values())
    return [v for v, _ in found], (sum(c or 0 for _, c in found) / total if total else 0.0)


def where_clause(req: TableRequest, db: ProfileDB | None = None,
                 counting: bool = False) -> tuple[list[str], dict, set[str]]:
    """WHERE terms, bound parameters and joins needed by the scopes, column searches and global search."""
    spec = req.spec
    terms, params, joins = [], {}, set()
    for scope in spec.scopes:
        if scope.name in req.scope:
            value = req.scope[scope.name]
            params[scope.name] = json.dumps(value) if scope.kind == "list" else value
            if scope.sql != "1":
                terms.append(scope.sql)
        elif f":{scope.name}" in spec.source:
            params[scope.name] = None
    narrowed = any(sc.narrows and sc.name in req.scope for sc in spec.scopes)
    for i, (name, (op, value)) in enumerate(sorted(req.filters.items())):
        col = spec.column(name)
        assert col is not None  # parse_table_request admitted only the spec's columns
        p = f"f{i}"
        if op == "contains" and db is not None and spec.huge and col.lookup:
            values, share = matching(db, col.lookup, value)
            if not values:
                terms.append("0")  # no name contains it: nothing to scan
                continue
            assert col.in_sql is not None  # a lookup column is filtered through its in_sql
            term = col.in_sql.replace(":p", f":{p}")
            if not counting and share > WALK_SORT_INDEX_SHARE:
                term = "+" + term  # unary + keeps SQLite off the name index: walk the sort index instead
            terms.append(term)
            params[p] = json.dumps(values)
            continue
        if op == "contains" and spec.huge and not narrowed and db is not None and table_rows(db, spec) > BIG_TABLE_ROWS:
            raise BadParameter(f"f.{name}", f"searching {col.label!r} over all {table_rows(db, spec):,} {spec.name} "
                                            "reads every row; select an iteration first or search a name column")
        if col.join:
            joins.add(col.join)
        if op == "contains":
            terms.append(f"{col.sql} LIKE :{p} ESCAPE '\\'")
            params[p] = _like(value)
        elif op == "between":
            terms.append(f"{col.sql} BETWEEN :{p}a AND :{p}b")
            params[p + "a"], params[p + "b"] = value
        else:
            terms.append(f"{col.sql} {op} :{p}")
            params[p] = value
    if req.q:
        ors = []
        for j, c in enumerate(searched_columns(spec)):
            if db is not None and spec.huge and c.lookup:
                found, share = matching(db, c.lookup, req.q)
                if found:
                    term = c.in_sql.replace(":p", f":q{j}")
                    ors.append(("+" + term) if not counting and share > WALK_SORT_INDEX_SHARE else term)
                    params[f"q{j}"] = json.dumps(found)
                continue
            if c.join:
                joins.add(c.join)
            ors.append(f"{c.sql} LIKE :q ESCAPE '\\'")
        terms.append("(" + " OR ".join(ors) + ")" if ors else "0")
        if any("LIKE :q " in o for o in ors):
            params["q"] = _like(req.q)
    return terms, params, joins


def searched_columns(spec: TableSpec) -> list:
    """The columns the global search looks in: every text column, but on a table of raw events (millions of
    rows) only the name columns, which are matched against their distinct names (a bounded cost), never a
    LIKE scan over computed text such as grid and block."""
    text = [c for c in spec.columns if c.kind == "text"]
    return [c for c in text if c.lookup] if spec.huge else text


def order_clause(req: TableRequest) -> tuple[str, set[str]]:
    spec = req.spec
    col = spec.column(req.sort)
    assert col is not None  # parse_table_request admitted only the spec's columns
    direction = "DESC" if req.desc else "ASC"
    exprs = [e.strip() for e in (col.order or col.sql).split(",")]
    if spec.key and spec.key not in exprs:
        exprs.append(spec.key)
    return ", ".join(f"{e} {direction}" for e in exprs), ({col.join} if col.join else set())


def check_big_sort(db: ProfileDB, req: TableRequest) -> None:
    """Refuse an unindexed sort over millions of raw events (it could not answer in time)."""
    spec = req.spec
    col = spec.column(req.sort)
    assert col is not None  # parse_table_request admitted only the spec's columns
    if not spec.huge or col.big_sort or any(s.narrows and s.name in req.scope for s in spec.scopes):
        return
    if table_rows(db, spec) > BIG_TABLE_ROWS:  # counted once, then cached
        raise BadParameter("sort", f"sorting all {table_rows(db, spec):,} {spec.name} by {col.label!r} needs an "
                                   f"index; select an iteration first or sort by an indexed column")


def table_rows(db: ProfileDB, spec: TableSpec) -> int:
    key = ("rows", spec.name)
    if key not in db.counts:
        base = spec.source.split()[0]
        db.counts[key] = db.execute_one(f"SELECT COUNT(*) FROM {base}", limit_ms=30_000)[0]
    return db.counts[key]


def _from(spec: TableSpec, joins: set[str]) -> str:
    return " ".join([spec.source, *(spec.joins[j] for j in sorted(joins))])


def select_sql(req: TableRequest, limit: int | None = None, offset: int = 0,
               db: ProfileDB | None = None) -> tuple[str, dict]:
    """The page (or whole result when limit is None) as one SELECT with named parameters."""
    spec = req.spec
    terms, params, joins = where_clause(req, db)
    order, order_joins = order_clause(req)
    cols = ", ".join(f"{c.sql} AS \"{c.name}\"" for c in spec.columns)
    where = (" WHERE " + " AND ".join(terms)) if terms else ""
    all_joins = set(spec.joins)
    if limit is None:
        return f"SELECT {cols} FROM {_from(spec, all_joins)}{where} ORDER BY {order}", params
    params = {**params, "_limit": limit, "_offset": offset}
    if spec.key and spec.huge:
        inner = (f"SELECT {spec.key} AS _key FROM {_from(spec, joins | order_joins)}{where} "
                 f"ORDER BY {order} LIMIT :_limit OFFSET :_offset")
        outer_joins = " ".join(spec.joins[j] for j in sorted(all_joins))
        sql = (f"SELECT {cols} FROM ({inner}) AS _page JOIN {spec.source} ON {spec.key} = _page._key "
               f"{outer_joins} ORDER BY {order}")
        return sql, params
    return f"SELECT {cols} FROM {_from(spec, all_joins)}{where} ORDER BY {order} LIMIT :_limit OFFSET :_offset", params


def count_sql(req: TableRequest, db: ProfileDB | None = None) -> tuple[str, dict]:
    terms, params, joins = where_clause(req, db, counting=True)
    where = (" WHERE " + " AND ".join(terms)) if terms else ""
    return f"SELECT COUNT(*) FROM {_from(req.spec, joins)}{where}", params


class CountCache:
    """Counts by (database generation, SQL, parameters): the raw tables never change while viewing."""

    def __init__(self, size: int = 512):
        self.size = size
        self.data: OrderedDict = OrderedDict()

    def get(self, key):
        if key in self.data:
            self.data.move_to_end(key)
            return self.data[key]
        return None

    def put(self, key, value):
        self.data[key] = value
        self.data.move_to_end(key)
        while len(self.data) > self.size:
            self.data.popitem(last=False)


COUNTS = CountCache()


_BACKGROUND = ThreadPoolExecutor(1, thread_name_prefix="dlscope-count")
BACKGROUND_COUNT_LIMIT_MS = 60_000


def count_rows(db: ProfileDB, req: TableRequest, limit_ms: float | None = None) -> int | None:
    """The filtered row count, or None when it takes longer than the limit: then it is finished in the
    background and cached, so the next page (or the same page reloaded) shows it."""
    if limit_ms is None:
        limit_ms = HUGE_COUNT_LIMIT_MS if req.spec.huge else COUNT_LIMIT_MS
    sql, params = count_sql(req, db)
    if req.spec.huge and sql == f"SELECT COUNT(*) FROM {req.spec.source}":
        return table_rows(db, req.spec)
    key = (str(db.path), db._generation, sql, json.dumps(params, sort_keys=True, default=str))
    cached = COUNTS.get(key)
    if cached is not None:
        return cached if cached >= 0 else None
    try:
        value = db.execute_one(sql, params, limit_ms)[0]
    except QueryTimeout:
        COUNTS.put(key, -1)  # counting: do not start it twice
        _BACKGROUND.submit(_count_later, db, sql, params, key)
        return None
    COUNTS.put(key, value)
    return value


def _count_later(db: ProfileDB, sql: str, params: dict, key) -> None:
    try:
        COUNTS.put(key, db.execute_one(sql, params, BACKGROUND_COUNT_LIMIT_MS)[0])
    except QueryTimeout:
        pass


def fetch_page(db: ProfileDB, req: TableRequest) -> dict:
    """One page of rows plus the total (or None when counting would take too long) and has_next."""
    check_big_sort(db, req)
    offset = (req.page - 1) * req.size
    sql, params = select_sql(req, req.size + 1, offset, db)
    rows = db.execute(sql, params, ROW_LIMIT_MS)
    has_next = len(rows) > req.size
    rows = rows[: req.size]
    total = count_rows(db, req)
    names = [c.name for c in req.spec.columns]
    last_page = max(1, -(-total // req.size)) if total is not None else (req.page + 1 if has_next else req.page)
    return {"table": req.spec.name, "columns": names, "rows": [dict(zip(names, r)) for r in rows],
            "page": req.page, "size": req.size, "total": total, "count_truncated": total is None,
            "last_page": last_page, "has_next": has_next, "sort": req.sort,
            "order": "desc" if req.desc else "asc"}


def warm_up(db: ProfileDB, specs) -> None:
    """Count huge tables and list their indexed names ahead of the first request (runs in a thread)."""
    for spec in specs:
        if spec.huge and db.has(*spec.requires):
            table_rows(db, spec)
            for col in spec.columns:
                if col.lookup:
                    distinct_values(db, col.lookup)
