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
from dataclasses import dataclass

from dlscope.viewer.params import BadParameter, TableRequest
from dlscope.viewer.profile_db import ProfileDB, QueryTimeout
from dlscope.viewer.tables import KERNELS, TableSpec

KERNEL_OP_NAME = KERNELS.column("op_name")

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


#: A kernel-name search is answered by merging each matching name's range of a (name_key, sort column) index when
#: it matches at most this many names (SQLite's compound SELECT allows 500 arms).
MERGE_NAMES = 200
#: Sorts of the kernels table that a (name_key, ...) index serves, in the sort's own order (then kernel_id).
KEY_SORTS = {"dur", "start", "device", "iteration", "op_id", "kernel_id"}
#: An Op Name search walks its kernel names' index ranges checking each row's op: taken when the page needs at
#: most this many index entries (rows read), else the WHERE clause answers it.
MAX_WALK = 100_000


def name_index(db: ProfileDB) -> set[str]:
    """The name columns (``search_names.source``) this database indexes; empty for an older database."""
    key = ("name_sources",)
    if key not in db.counts:
        db.counts[key] = ({r[0] for r in db.execute("SELECT DISTINCT source FROM search_names", limit_ms=10_000)}
                          if db.has("search_names", "search_names_trigram") else set())
    return db.counts[key]


def find_names(db: ProfileDB, source: str, needle: str) -> list[tuple[str, int | None, int | None]]:
    """(name, kernels, name_key) of the names of ``source`` containing ``needle``, ignoring case (Python's
    str.lower, as the index folds them): a phrase query of the trigram index for 3 characters or more, else a
    scan of the distinct names (thousands at most, never the rows)."""
    folded = needle.lower()
    cache_key = (str(db.path), db._generation, source, folded)
    found = NAME_MATCHES.get(cache_key)
    if found is not None:
        return found
    if len(folded) >= 3:
        rows = db.execute("SELECT s.name, s.folded, s.kernels, s.name_key FROM search_names_trigram t "
                          "JOIN search_names s ON s.name_id = t.rowid "
                          "WHERE search_names_trigram MATCH :phrase AND s.source = :source",
                          {"phrase": '"' + folded.replace('"', '""') + '"', "source": source}, 10_000)
    else:
        rows = db.execute("SELECT name, folded, kernels, name_key FROM search_names "
                          "WHERE source = :source AND instr(folded, :needle) > 0",
                          {"source": source, "needle": folded}, 10_000)
    found = sorted((name, kernels, key) for name, text, kernels, key in rows if folded in text)
    NAME_MATCHES.put(cache_key, found)
    return found


def name_total(db: ProfileDB, source: str) -> int:
    """The kernels all names of ``source`` cover (the denominator of a search's share)."""
    key = ("name_total", source)
    if key not in db.counts:
        db.counts[key] = db.execute_one("SELECT COALESCE(SUM(kernels), 0) FROM search_names WHERE source = ?",
                                        (source,), 10_000)[0]
    return db.counts[key]


def keys_distinct(db: ProfileDB) -> bool:
    """Whether every kernel name has its own name_key (a 64-bit hash: a clash is all but impossible, but then the
    keys cannot stand for the names)."""
    key = ("keys_distinct",)
    if key not in db.counts:
        db.counts[key] = bool(db.execute_one(
            "SELECT COUNT(*) = COUNT(DISTINCT name_key) AND COUNT(*) = COUNT(name_key) FROM search_names "
            "WHERE source = 'kernels.name'", (), 10_000)[0])
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
    """A kernels-table search answered name by name: the matching kernel names in name order as (name, name_key,
    rows they hold), ``ops`` the op names the rows must launch beneath (an Op Name search) or None, ``count``
    the rows in all, ``walk`` index entries read per row found (1 without ops; for ops, the names' kernels over
    those beneath the ops)."""
    arms: list[tuple[str, int, int]]
    ops: list[str] | None
    count: int
    walk: float = 1.0


def kernel_names_by_key(db: ProfileDB) -> dict[int, tuple[str, int]]:
    """name_key -> (kernel name, kernels) from the name index (thousands of names)."""
    key = ("kernel_names_by_key",)
    if key not in db.counts:
        db.counts[key] = {h: (n, k or 0) for n, k, h in db.execute(
            "SELECT name, kernels, name_key FROM search_names WHERE source = 'kernels.name' AND name_key IS NOT NULL",
            (), 10_000)}
    return db.counts[key]


def kernel_search_plan(db: ProfileDB | None, req: TableRequest) -> KernelPlan | None:
    """For a search of the kernels table by kernel name (a Kernel Name filter, a global search no op name
    matches) and/or by op name (an Op Name filter), with no scope and no other filter: the kernel names whose
    rows answer it (see KernelPlan). None when the request is anything else or the database lacks the name
    keys (then the WHERE clause answers it)."""
    spec = req.spec
    if (db is None or not spec.huge or req.scope or not (req.filters or req.q)
            or set(req.filters) - {"kernel_name", "op_name"} or spec.column("kernel_name") is None
            or any(op != "contains" for op, _ in req.filters.values())):
        return None
    if "kernels.name" not in name_index(db) or not keys_distinct(db):
        return None
    texts = [req.filters["kernel_name"][1]] if "kernel_name" in req.filters else []
    if req.q:
        for c in searched_columns(spec):
            if c.name != "kernel_name" and (not c.names or c.names not in name_index(db)
                                            or find_names(db, c.names, req.q)):
                return None  # an op name matches too: the rows are not a union of kernel names
        texts.append(req.q)
    by_key = kernel_names_by_key(db)
    rows = {key: kernels for key, (_, kernels) in by_key.items()}
    for text in texts:
        keep = {f[2] for f in find_names(db, "kernels.name", text)}
        rows = {key: n for key, n in rows.items() if key in keep}
    ops = None
    if "op_name" in req.filters:
        if "ops.name" not in name_index(db) or not db.has("search_op_kernels"):
            return None
        ops = [f[0] for f in find_names(db, "ops.name", req.filters["op_name"][1])]
        pairs = dict(db.execute("SELECT name_key, SUM(kernels) FROM search_op_kernels WHERE op_name IN "
                                "(SELECT value FROM json_each(?)) GROUP BY name_key", (json.dumps(ops),), 10_000))
        rows = {key: pairs[key] for key in rows if key in pairs}
    arms = sorted((by_key[key][0], key, n) for key, n in rows.items() if n)
    count = sum(n for _, _, n in arms)
    walk = sum(by_key[key][1] for _, key, _ in arms) / count if ops is not None and count else 1.0
    return KernelPlan(arms, ops, count, walk)


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
    if (plan is not None and spec.key and len(plan.arms) <= MERGE_NAMES
            and (plan.ops is None or (offset + limit) * plan.walk <= MAX_WALK)):
        if req.sort in KEY_SORTS:
            return _merged_page(req, plan, params, cols)
        if req.sort == "kernel_name" and plan.ops is not None:
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


def _op_term(plan: KernelPlan, params: dict) -> str:
    """The rows launched beneath the plan's op names (the Op Name column's own filter), or nothing."""
    if plan.ops is None:
        return ""
    params["_ops"] = json.dumps(plan.ops)
    assert KERNEL_OP_NAME is not None and KERNEL_OP_NAME.in_sql is not None
    return " AND " + KERNEL_OP_NAME.in_sql.replace(":p", ":_ops")


def _outer(req: TableRequest, inner: str, cols: str) -> str:
    spec = req.spec
    order, _ = order_clause(req)
    outer_joins = " ".join(spec.joins[j] for j in sorted(spec.joins))
    return (f"SELECT {cols} FROM ({inner}) AS _page JOIN {spec.source} ON {spec.key} = _page._key "
            f"{outer_joins} ORDER BY {order}")


def _merged_page(req: TableRequest, plan: KernelPlan, params: dict, cols: str) -> tuple[str, dict]:
    """A page of a name search sorted by a column that a (name_key, column) index orders: one arm per matching
    kernel name, each walking its name's index range already in the sort's order, merged by SQLite's ordered
    compound SELECT up to the page (offset + limit index entries, times ``walk`` for an op's rows)."""
    spec = req.spec
    assert spec.key is not None  # the caller checked: the page is found by its rows' keys
    if not plan.arms:
        return _empty_page(spec, cols)
    exprs = order_exprs(req)
    direction = "DESC" if req.desc else "ASC"
    out = {"_limit": params["_limit"], "_offset": params["_offset"]}
    op_term = _op_term(plan, out)
    select = ", ".join(f"{e} AS _s{i}" for i, e in enumerate(exprs))
    arms = []
    for i, (_, key, _) in enumerate(plan.arms):
        out[f"_nk{i}"] = key
        arms.append(f"SELECT {select} FROM {spec.source} WHERE k.name_key = :_nk{i}{op_term}")
    by = ", ".join(f"{i + 1} {direction}" for i in range(len(exprs)))
    inner = (f"SELECT _s{exprs.index(spec.key)} AS _key FROM ({' UNION ALL '.join(arms)} ORDER BY {by} "
             "LIMIT :_limit OFFSET :_offset)")
    return _outer(req, inner, cols), out


def _name_ordered_page(req: TableRequest, plan: KernelPlan, offset: int, limit: int, cols: str) -> tuple[str, dict]:
    """A page of an Op Name search sorted by kernel name: the names' row counts (from the index) say which
    names hold the page's rows and from where; each such name's rows come in id order from its name_key index."""
    spec = req.spec
    arms = plan.arms[::-1] if req.desc else plan.arms
    direction = "DESC" if req.desc else "ASC"
    params: dict = {}
    op_term = _op_term(plan, params)
    parts, start = [], 0
    for i, (_, key, n) in enumerate(arms):
        lo, hi = max(offset - start, 0), min(offset + limit - start, n)
        if lo < hi:
            params.update({f"_nk{i}": key, f"_l{i}": hi - lo, f"_o{i}": lo})
            parts.append(f"SELECT _key FROM (SELECT {spec.key} AS _key FROM {spec.source} WHERE k.name_key = :_nk{i}"
                         f"{op_term} ORDER BY {spec.key} {direction} LIMIT :_l{i} OFFSET :_o{i})")
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
        return plan.count  # the index holds each name's kernels (beneath each op)
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
