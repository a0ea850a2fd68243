"""The views of the navigation bar: which tables each shows, under which URL prefix, scoped by what.

A view's URL carries page-level state (``db``, ``agg``, ``iteration``, ``rank``, ``node``, ``finding``,
``open``) and each table's own state under its prefix (``ops.sort=calls&ops.page=3``); ``?_format=json`` on
any view returns the same tables as data.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from dlscope.viewer import compare_view, dashboard, job_view, python_view, roofline_view, timeline_view
from dlscope.viewer.params import BadParameter, parse_int, parse_table_request
from dlscope.viewer.profile_db import ProfileDB
from dlscope.viewer.query import fetch_page
from dlscope.viewer.tables import TABLES, in_database
from dlscope.viewer.tree import fetch_tree_page, parse_open


@dataclass(frozen=True)
class ViewTable:
    prefix: str
    table: str
    needs: tuple[str, ...] = ()     # page parameters that must be set before this table has rows


@dataclass(frozen=True)
class View:
    slug: str
    title: str
    tables: tuple[ViewTable, ...] = ()
    in_menu: bool = True
    params: tuple[str, ...] = ()    # page parameters of this view only
    data: Callable | None = None    # data(viewer, db, scope, params) -> its JSON, derived tables included


#: The job's stored tables (ranks, collective calls) are served like every other table.
TABLES.update(job_view.TABLES)

VIEWS = {v.slug: v for v in (
    View("dashboard", "Dashboard", (ViewTable("ranks", "ranks"),)),
    View("op-types", "Op Type Summary", (ViewTable("types", "op_types"),)),
    View("group-ops", "Group Ops", (ViewTable("groups", "groups"),)),
    View("ops-kernels", "Ops and Kernels", (ViewTable("ops", "ops"), ViewTable("kernels", "op_kernels", ("node",)))),
    View("kernels-by-iteration", "Kernels by Iteration",
         (ViewTable("iters", "iterations"), ViewTable("kernels", "kernels", ("iteration",)))),
    View("kernels-by-op", "Kernels by Op",
         (ViewTable("iters", "iterations"), ViewTable("ops", "iteration_ops", ("iteration",)),
          ViewTable("kernels", "kernels", ("iteration", "node")))),
    View("iterations", "Iterations", (ViewTable("iters", "iterations"),)),
    View("ranks", "Ranks", (ViewTable("ranks", "ranks"),)),
    View("collectives", "Collectives", (ViewTable("calls", "collective_calls"),
                                        ViewTable("ranks", "collective_ranks", ("call",))),
         params=job_view.PAGE_PARAMS),
    View("gpus", "GPUs", (ViewTable("gpus", "gpus"),)),
    View("timeline", "Timeline", (), params=timeline_view.PAGE_PARAMS, data=timeline_view.view_data),
    View("kernels", "All Kernels", (ViewTable("kernels", "kernels"),)),
    View("python", "Python Call Stacks", (), params=python_view.PAGE_PARAMS, data=python_view.view_data),
    View("roofline", "Roofline", (ViewTable("ops", "roofline_ops"), ViewTable("kernels", "roofline_kernels")),
         params=roofline_view.PAGE_PARAMS, data=roofline_view.view_data),
    View("compare", "Compare Runs", (ViewTable("types", "compare_op_types"), ViewTable("ops", "compare_ops"),
                                     ViewTable("kernels", "compare_kernels")),
         params=compare_view.PAGE_PARAMS, data=compare_view.view_data),
    View("finding", "Expert System Finding",
         (ViewTable("ops", "ops", ("nodes",)), ViewTable("kernels", "kernel_summary", ("kernel_names",)),
          ViewTable("iters", "iterations", ("iterations",))), in_menu=False),
)}

PAGE_PARAMS = {"db", "agg", "rank", "iteration", "node", "finding", "open", "closed", "_format", "details", "title"}

#: Tables computed in Python (not stored): name -> (spec, source(viewer, db, scope, params) -> DerivedDB).
DERIVED = {**{n: (s, job_view.gpus_source) for n, s in job_view.SPECS.items()},
           **{n: (s, roofline_view.table_source) for n, s in roofline_view.SPECS.items()},
           **{n: (s, compare_view.table_source) for n, s in compare_view.SPECS.items()}}


def page_scope(db: ProfileDB, params: Mapping[str, str]) -> dict:
    """Validated page-level parameters, with ``agg`` defaulting to the newest aggregation."""
    aggs = db.aggregations()
    scope: dict = {}
    if params.get("agg"):
        agg = parse_int("agg", params["agg"])
        if not any(a["agg_id"] == agg for a in aggs):
            raise BadParameter("agg", f"aggregation {agg} does not exist in this database "
                                      f"(have {', '.join(str(a['agg_id']) for a in aggs) or 'none'})")
        scope["agg"] = agg
    elif aggs:
        scope["agg"] = db.current_agg_id()
    for name in ("rank", "iteration", "node", "finding"):
        if params.get(name):
            scope[name] = parse_int(name, params[name])
    call = job_view.check_call(params)
    if call is not None:
        scope.update(call)
    if "finding" in scope and "agg" in scope:
        row = db.execute_one("SELECT evidence_json FROM findings WHERE agg_id = ? AND finding_id = ?",
                             (scope["agg"], scope["finding"])) if db.has("findings") else None
        if row is None:
            raise BadParameter("finding", f"finding {scope['finding']} does not exist in aggregation {scope['agg']}")
        scope.update(dashboard.evidence_links(row[0]))
    return scope


def check_params(view: View, params: Mapping[str, str]) -> None:
    """Unknown parameters are bad parameters too: a typo in a shared URL should say so."""
    prefixes = {t.prefix + "." for t in view.tables}
    allowed_keys = {"sort", "order", "page", "size", "q"}
    for key in params:
        if key in PAGE_PARAMS or key in view.params:
            continue
        prefix, _, rest = key.partition(".")
        if prefix + "." in prefixes and (rest in allowed_keys or rest.startswith("f.")):
            continue
        raise BadParameter(key, f"is not a parameter of the {view.title} view")


def table_page(db: ProfileDB, table: str, params: Mapping[str, str], scope: dict, prefix: str = "") -> dict:
    spec = TABLES[table]
    if not db.has(*spec.requires):
        return {"table": table, "rows": [], "total": 0, "missing": f"this database has no {', '.join(spec.requires)}",
                "page": 1, "last_page": 1, "size": 10, "count_truncated": False, "has_next": False}
    spec = in_database(spec, db)
    req = parse_table_request(spec, params, prefix, defaults={k: v for k, v in scope.items()
                                                              if spec.scope(k) is not None})
    if spec.name == "groups":
        return fetch_tree_page(db, req, parse_open(params.get("open"), params.get("closed")))
    return fetch_page(db, req)


def view_data(db: ProfileDB, view: View, params: Mapping[str, str], viewer=None) -> dict:
    """The JSON twin of a view: its page-level state and each table's current page."""
    check_params(view, params)
    scope = page_scope(db, params)
    out: dict = {"view": view.slug, "title": view.title, "profile_name": db.profile_name, "scope": scope,
                 "tables": {}}
    if view.slug == "dashboard":
        out["dashboard"] = dashboard.dashboard_data(db, scope.get("agg"))
        out["dashboard"]["job"] = job_view.job_data(db, scope.get("agg"))
    if view.slug == "iterations" and "agg" in scope:
        out["chart"] = dashboard.iteration_series(db, scope["agg"], scope.get("rank"))
        out["memory"] = dashboard.memory_chart(db, scope["agg"], scope.get("rank"))
    if view.data is not None:
        out.update(view.data(viewer, db, scope, params))
    if view.slug == "gpus":
        out["gpus"] = job_view.gpu_rows(db, scope.get("agg"))
    for vt in view.tables:
        if vt.table in TABLES and all(n in scope for n in vt.needs):
            out["tables"][vt.prefix] = table_page(db, vt.table, params, scope, vt.prefix + ".")
    return out
