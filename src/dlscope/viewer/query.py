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
from dataclasses import dataclass, replace

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
    """Values containing ``needle`` (ignoring case: str.lower, as the name index does) and their share of rows."""
    n = needle.lower()
    values = distinct_values(db, sql)
    found = [(v, c) for v, c in values.items() if n in v.lower()]
    total = sum(c or 0 for c in values.values())
    return [v for v, _ in found], (sum(c or 0 for _, c in found) / total if total else 0.0)


#: A kernel or op name search is answered by merging each matching (kernel name, op name) pair's range of a
#: (search_key, sort column) index when it matches at most this many pairs (SQLite's compound SELECT allows 500).
MERGE_PAIRS = 400
#: Sorts of the kernels table that a (search_key, ...) index serves, in the sort's own order (then kernel_id).
KEY_SORTS = {"dur", "start", "device", "iteration", "op_id", "kernel_id"}


def name_index(db: ProfileDB) -> set[str]:
    """The name columns (``search_names.source``) this database indexes; empty for an older database."""
    key = ("name_sources",)
    if key not in db.counts:
        db.counts[key] = ({r[0] for r in db.execute("SELECT DISTINCT source FROM search_names", limit_ms=10_000)}
                          if db.has("search_names", "search_names_trigram") else set())
    return db.counts[key]


def find_names(db: ProfileDB, source: str, needle: str) -> list[tuple[str, int | None]]:
    """(name, kernels) of the names of ``source`` containing ``needle``, ignoring case (Python's
    str.lower, as the index folds them): a phrase query of the trigram index for 3 characters or more, else a
    scan of the distinct names (thousands at most, never the rows)."""
    folded = needle.lower()
    cache_key = (str(db.path), db._generation, source, folded)
    found = NAME_MATCHES.get(cache_key)
    if found is not None:
        return found
    if len(folded) >= 3:
        rows = db.execute("SELECT s.name, s.folded, s.kernels FROM search_names_trigram t "
                          "JOIN search_names s ON s.name_id = t.rowid "
                          "WHERE search_names_trigram MATCH :phrase AND s.source = :source",
                          {"phrase": '"' + folded.replace('"', '""') + '"', "source": source}, 10_000)
    else:
        rows = db.execute("SELECT name, folded, kernels FROM search_names "
                          "WHERE source = :source AND instr(folded, :needle) > 0",
                          {"source": source, "needle": folded}, 10_000)
    found = sorted((name, kernels) for name, text, kernels in rows if folded in text)
    NAME_MATCHES.put(cache_key, found)
    return found


def name_total(db: ProfileDB, source: str) -> int:
    """The kernels all names of ``source`` cover (the denominator of a search's share)."""
    key = ("name_total", source)
    if key not in db.counts:
        db.counts[key] = db.execute_one("SELECT COALESCE(SUM(kernels), 0) FROM search_names WHERE source = ?",
                                        (source,), 10_000)[0]
    return db.counts[key]


def _name_search(db: ProfileDB | None, spec: TableSpec, col, needle: str) -> tuple[list[str], float] | None:
    """The names of column ``col`` containing ``needle`` and the share of the table's kernels they cover, through
    the database's name index, else (an older database) through the names read from the rows; None when the
    column is matched with LIKE instead (a small table without the index, or not a name column)."""
    if db is None:
        return None
    if col.names and col.names in name_index(db):
        found = find_names(db, col.names, needle)
        total = name_total(db, col.names) if spec.huge else 0
        return [f[0] for f in found], (sum(f[1] or 0 for f in found) / total if total else 0.0)
    if spec.huge and col.lookup:
        return matching(db, col.lookup, needle)
    return None


def _in_term(req: TableRequest, col, param: str, share: float, counting: bool) -> str:
    """Rows whose ``col`` is in the JSON list ``:param`` of names. On a huge table, a common match walks the
    sort index (unary + keeps SQLite off the name index: cheap per match found); a rarer one, or one sorted by
    that name, reads its matches through the name index (in name order)."""
    if col.in_sql is None:
        return f"{col.sql} IN (SELECT value FROM json_each(:{param}))"
    term = col.in_sql.replace(":p", f":{param}")
    walk = req.spec.huge and not counting and share > WALK_SORT_INDEX_SHARE and req.sort != col.name
    return "+" + term if walk else term


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
        found = _name_search(db, spec, col, value) if op == "contains" else None
        if found is not None:
            names, share = found
            if not names:
                terms.append("0")  # no name contains it: nothing to scan
                continue
            terms.append(_in_term(req, col, p, share, counting))
            params[p] = json.dumps(names)
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
            found = _name_search(db, spec, c, req.q)
            if found is not None:
                if found[0]:
                    ors.append(_in_term(req, c, f"q{j}", found[1], counting))
                    params[f"q{j}"] = json.dumps(found[0])
                continue
            if spec.huge and c.lookup:
                continue  # no database to match the names against (SQL text only): never a LIKE scan
            if c.join:
                joins.add(c.join)
            ors.append(f"{c.sql} LIKE :q ESCAPE '\\'")
        terms.append("(" + " OR ".join(ors) + ")" if ors else "0")
        if any("LIKE :q " in o for o in ors):
            params["q"] = _like(req.q)
    return terms, params, joins


@dataclass
class KernelPlan:
    """A kernels-table search answered by (kernel name, outermost op name) pairs: the matching pairs as (kernel
    name, search_key, rows they hold) in kernel-name order (no name first), and the rows in all."""
    arms: list[tuple[str | None, int, int]]
    count: int


def kernel_pairs(db: ProfileDB) -> list[tuple[int, str | None, str | None, int]]:
    """The database's (search_key, kernel name, op name, kernels) pairs (thousands), or [] without them."""
    key = ("kernel_pairs",)
    if key not in db.counts:
        db.counts[key] = (db.execute("SELECT search_key, kernel_name, op_name, kernels FROM search_kernel_pairs",
                                     (), 10_000) if db.has("search_kernel_pairs") else [])
    return db.counts[key]


def kernel_search_plan(db: ProfileDB | None, req: TableRequest) -> KernelPlan | None:
    """For a search of the kernels table by kernel name and/or op name (their column filters, the global search)
    with no scope and no other filter: the pairs whose names match (see KernelPlan). None when the request is
    anything else or the database has no pairs (then the WHERE clause answers it)."""
    spec = req.spec
    if (db is None or not spec.huge or req.scope or not (req.filters or req.q)
            or set(req.filters) - {"kernel_name", "op_name"} or spec.column("kernel_name") is None
            or any(op != "contains" for op, _ in req.filters.values())
            or not {"kernels.name", "ops.name"} <= name_index(db)):
        return None
    pairs = kernel_pairs(db)
    if not pairs:
        return None

    def names(source: str, text: str) -> set[str]:
        return {f[0] for f in find_names(db, source, text)}

    tests = []
    if "kernel_name" in req.filters:
        kernel_names = names("kernels.name", req.filters["kernel_name"][1])
        tests.append(lambda k, o: k in kernel_names)
    if "op_name" in req.filters:
        op_names = names("ops.name", req.filters["op_name"][1])
        tests.append(lambda k, o: o in op_names)
    if req.q:
        q_kernels, q_ops = names("kernels.name", req.q), names("ops.name", req.q)
        tests.append(lambda k, o: k in q_kernels or o in q_ops)
    arms = sorted(((k, key, n) for key, k, o, n in pairs if all(t(k, o) for t in tests)),
                  key=lambda a: (a[0] is not None, a[0] or "", a[1]))
    return KernelPlan(arms, sum(n for _, _, n in arms))


def searched_columns(spec: TableSpec) -> list:
    """The columns the global search looks in: every text column, but on a table of raw events (millions of
    rows) only the name columns, which are matched against their distinct names (a bounded cost), never a
    LIKE scan over computed text such as grid and block."""
    text = [c for c in spec.columns if c.kind == "text"]
    return [c for c in text if c.lookup] if spec.huge else text


def order_exprs(req: TableRequest) -> list[str]:
    """The ORDER BY expressions of the request's sort, ending with the row key (a total order for paging)."""
    spec = req.spec
    col = spec.column(req.sort)
    assert col is not None  # parse_table_request admitted only the spec's columns
    exprs = [e.strip() for e in (col.order or col.sql).split(",")]
    if spec.key and spec.key not in exprs:
        exprs.append(spec.key)
    return exprs


def order_clause(req: TableRequest) -> tuple[str, set[str]]:
    col = req.spec.column(req.sort)
    assert col is not None  # parse_table_request admitted only the spec's columns
    direction = "DESC" if req.desc else "ASC"
    return ", ".join(f"{e} {direction}" for e in order_exprs(req)), ({col.join} if col.join else set())


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
    plan = kernel_search_plan(db, req)
    if plan is not None and spec.key and len(plan.arms) <= MERGE_PAIRS:
        if req.sort in KEY_SORTS:
            return _merged_page(req, plan, params, cols)
        if req.sort == "kernel_name":
            return _name_ordered_page(req, plan, offset, limit, cols)
    if spec.key and spec.huge:
        inner = (f"SELECT {spec.key} AS _key FROM {_from(spec, joins | order_joins)}{where} "
                 f"ORDER BY {order} LIMIT :_limit OFFSET :_offset")
        outer_joins = " ".join(spec.joins[j] for j in sorted(all_joins))
        sql = (f"SELECT {cols} FROM ({inner}) AS _page JOIN {spec.source} ON {spec.key} = _page._key "
               f"{outer_joins} ORDER BY {order}")
        return sql, params
    return f"SELECT {cols} FROM {_from(spec, all_joins)}{where} ORDER BY {order} LIMIT :_limit OFFSET :_offset", params


def _empty_page(spec: TableSpec, cols: str) -> tuple[str, dict]:
    return f"SELECT {cols} FROM {_from(spec, set(spec.joins))} WHERE 0", {}


def _outer(req: TableRequest, inner: str, cols: str) -> str:
    spec = req.spec
    order, _ = order_clause(req)
    outer_joins = " ".join(spec.joins[j] for j in sorted(spec.joins))
    return (f"SELECT {cols} FROM ({inner}) AS _page JOIN {spec.source} ON {spec.key} = _page._key "
            f"{outer_joins} ORDER BY {order}")


def _merge(req: TableRequest, keys: list[int], exprs: list[str], params: dict, limit: str, offset: str) -> str:
    """Row keys of the given search_keys' rows in the order of ``exprs``: one arm per key, each a range of a
    (search_key, ...) index already in that order, merged by SQLite's ordered compound SELECT (it reads offset +
    limit index entries)."""
    spec = req.spec
    assert spec.key is not None  # the caller checked: the page is found by its rows' keys
    direction = "DESC" if req.desc else "ASC"
    select = ", ".join(f"{e} AS _s{i}" for i, e in enumerate(exprs))
    arms = []
    for key in keys:
        name = f"_sk{len(params)}"
        params[name] = key
        arms.append(f"SELECT {select} FROM {spec.source} WHERE k.search_key = :{name}")
    by = ", ".join(f"{i + 1} {direction}" for i in range(len(exprs)))
    return (f"SELECT _s{exprs.index(spec.key)} AS _key FROM ({' UNION ALL '.join(arms)} ORDER BY {by} "
            f"LIMIT :{limit} OFFSET :{offset})")


def _merged_page(req: TableRequest, plan: KernelPlan, params: dict, cols: str) -> tuple[str, dict]:
    """A page of a name search sorted by a column that a (search_key, column) index orders: the matching pairs'
    ranges merged up to the page, reading none of the other rows. A page past the middle is read from the other
    end (the pairs' counts give the total), so the entries read are at most half the matches."""
    if not plan.arms:
        return _empty_page(req.spec, cols)
    page_req = req  # the page's own order, whichever end it is read from
    offset, limit = params["_offset"], params["_limit"]
    if offset > plan.count // 2:
        lo = max(plan.count - offset - limit, 0)
        offset, limit, req = lo, max(plan.count - offset - lo, 0), replace(req, desc=not req.desc)
    out = {"_limit": limit, "_offset": offset}
    inner = _merge(req, [key for _, key, _ in plan.arms], order_exprs(req), out, "_limit", "_offset")
    return _outer(page_req, inner, cols), out


def _name_ordered_page(req: TableRequest, plan: KernelPlan, offset: int, limit: int, cols: str) -> tuple[str, dict]:
    """A page of a name search sorted by kernel name: the pairs' row counts (from the index) say which kernel
    names hold the page's rows and from where; each such name's pairs are merged in kernel id order (from the
    name's other end past its middle)."""
    spec = req.spec
    assert spec.key is not None
    groups: dict = {}
    for name, key, n in plan.arms:
        groups.setdefault(name, ([], [0]))
        groups[name][0].append(key)
        groups[name][1][0] += n
    ordered = list(groups.values())[::-1] if req.desc else list(groups.values())
    params: dict = {}
    parts: list[str] = []
    start = 0
    for keys, (n,) in ordered:
        lo, hi = max(offset - start, 0), min(offset + limit - start, n)
        if lo < hi:
            i = len(parts)
            part = req if lo <= n // 2 else replace(req, desc=not req.desc)
            params.update({f"_l{i}": hi - lo, f"_o{i}": lo if part is req else n - hi})
            parts.append(f"SELECT _key FROM ({_merge(part, keys, [spec.key], params, f'_l{i}', f'_o{i}')})")
        start += n
    if not parts:
        return _empty_page(spec, cols)
    return _outer(req, " UNION ALL ".join(parts), cols), params


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
#: Names matching a search, by (database, generation, name column, folded text).
NAME_MATCHES = CountCache(256)


_BACKGROUND = ThreadPoolExecutor(1, thread_name_prefix="dlscope-count")
BACKGROUND_COUNT_LIMIT_MS = 60_000


def count_rows(db: ProfileDB, req: TableRequest, limit_ms: float | None = None) -> int | None:
    """The filtered row count, or None when it takes longer than the limit: then it is finished in the
    background and cached, so the next page (or the same page reloaded) shows it."""
    if limit_ms is None:
        limit_ms = HUGE_COUNT_LIMIT_MS if req.spec.huge else COUNT_LIMIT_MS
    plan = kernel_search_plan(db, req)
    if plan is not None:
        return plan.count  # the index holds each (kernel name, op name) pair's kernels
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
    """Count huge tables and, for a database without a name index, list their names ahead of the first request
    (runs in a thread)."""
    for spec in specs:
        if spec.huge and db.has(*spec.requires):
            table_rows(db, spec)
            for col in spec.columns:
                if col.lookup and not (col.names and col.names in name_index(db)):
                    distinct_values(db, col.lookup)
