"""The Compare view (two databases given): ``dlscope.compare.compare`` of base vs new, as the viewer shows it.

Page parameters: ``base`` and ``new`` (profile keys, default 0 and 1: swap them to reverse the comparison),
``base_agg`` and ``new_agg`` (aggregations, default each database's newest). The comparison is computed once
per (databases, generations, aggregations) and cached; its op types, ops and kernels are derived tables.
"""

from __future__ import annotations

from collections.abc import Mapping

from dlscope.compare import compare
from dlscope.errors import DlscopeError
from dlscope.viewer.derived import DerivedDB, derived_page
from dlscope.viewer.params import BadParameter, parse_int
from dlscope.viewer.profile_db import ProfileDB
from dlscope.viewer.tables import Column, TableSpec

PAGE_PARAMS = ("base", "new", "base_agg", "new_agg")


def _side_columns(name: str, label: str, kind: str = "ns", hidden: bool = False) -> tuple[Column, ...]:
    return (Column(f"base_{name}", f"{label} Base", f"base_{name}", kind, hidden=hidden),
            Column(f"new_{name}", f"{label} New", f"new_{name}", kind, hidden=hidden),
            Column(f"delta_{name}", f"{label} Δ", f"delta_{name}", kind, hidden=hidden))


STATUS = Column("status", "Change", "status", "text")
IMPACT = Column("impact_ns", "Impact", "impact_ns", "ns")

COMPARE_OP_TYPES = TableSpec(
    "compare_op_types", "Op Types by Impact", "compare_op_types",
    (IMPACT, STATUS, Column("op_type", "Op Type", "op_type", "text"),
     *_side_columns("gpu_time_ns", "GPU Time"), Column("gpu_time_ns_ratio", "GPU Ratio", "gpu_time_ns_ratio", "float"),
     *_side_columns("cpu_time_ns", "CPU Time"), Column("cpu_time_ns_ratio", "CPU Ratio", "cpu_time_ns_ratio", "float"),
     *_side_columns("calls", "Calls", "int"), *_side_columns("kernel_count", "Kernels", "int", hidden=True),
     Column("base_ops", "Ops Base", "base_ops", hidden=True), Column("new_ops", "Ops New", "new_ops", hidden=True),
     Column("row", "Row", "row", hidden=True)),
    "impact_ns", key="row")

COMPARE_OPS = TableSpec(
    "compare_ops", "Ops by Impact", "compare_ops",
    (IMPACT, STATUS, Column("match", "Match", "match", "text", hidden=True),
     Column("op_name", "Op Name", "op_name", "text"), Column("op_type", "Op Type", "op_type", "text", hidden=True),
     Column("direction", "Direction", "direction", "text", hidden=True),
     *_side_columns("gpu_time_ns", "GPU Time"), *_side_columns("cpu_time_ns", "CPU Time"),
     *_side_columns("calls", "Calls", "int"), *_side_columns("kernel_count", "Kernels", "int", hidden=True),
     Column("base_input_shapes", "Input Shapes Base", "base_input_shapes", "text", hidden=True),
     Column("new_input_shapes", "Input Shapes New", "new_input_shapes", "text", hidden=True),
     Column("base_scope", "Scope Base", "base_scope", "text", hidden=True),
     Column("new_scope", "Scope New", "new_scope", "text", hidden=True),
     Column("row", "Row", "row", hidden=True)),
    "impact_ns", key="row")

COMPARE_KERNELS = TableSpec(
    "compare_kernels", "Kernels by Impact", "compare_kernels",
    (IMPACT, STATUS, Column("kernel_name", "Kernel Name", "kernel_name", "text"),
     Column("uses_tc", "Uses TC", "uses_tc", "bool"),
     *_side_columns("gpu_time_ns", "GPU Time"), Column("gpu_time_ns_ratio", "GPU Ratio", "gpu_time_ns_ratio", "float"),
     *_side_columns("calls", "Calls", "int"),
     Column("base_avg_ns", "Avg Base", "base_avg_ns", "ns", hidden=True),
     Column("new_avg_ns", "Avg New", "new_avg_ns", "ns", hidden=True),
     Column("row", "Row", "row", hidden=True)),
    "impact_ns", key="row")

SPECS = {s.name: s for s in (COMPARE_OP_TYPES, COMPARE_OPS, COMPARE_KERNELS)}
#: Run-level parts of the result the page shows above the tables (the row lists are served as tables).
HEAD_KEYS = ("base", "new", "values", "verdict", "key_changes", "metrics", "breakdown", "batch_size", "op_names",
             "counts")


def _pick_db(viewer, params: Mapping[str, str], name: str, default: int) -> ProfileDB:
    raw = params.get(name)
    return viewer.dbs[default if raw in (None, "") else parse_int(name, raw, 0, len(viewer.dbs) - 1)]


def _pick_agg(db: ProfileDB, params: Mapping[str, str], name: str) -> int | None:
    raw = params.get(name)
    aggs = [a["agg_id"] for a in db.aggregations()]
    if raw in (None, ""):
        return db.current_agg_id()
    agg = parse_int(name, raw)
    if agg not in aggs:
        raise BadParameter(name, f"aggregation {agg} does not exist in {db.profile_name} "
                                 f"(have {', '.join(map(str, aggs)) or 'none'})")
    return agg


def sides(viewer, params: Mapping[str, str]) -> tuple[ProfileDB, int | None, ProfileDB, int | None]:
    """The validated (base db, base agg, new db, new agg) of a request."""
    if len(viewer.dbs) < 2:
        raise DlscopeError("the Compare view needs two profile databases: start the viewer with "
                           "`dlscope view BASE.sqlite NEW.sqlite`")
    base, new = _pick_db(viewer, params, "base", 0), _pick_db(viewer, params, "new", 1)
    return base, _pick_agg(base, params, "base_agg"), new, _pick_agg(new, params, "new_agg")


def _rows(rows: list[dict]) -> list[dict]:
    return [{**r, "row": i} for i, r in enumerate(rows)]


def compare_result(viewer, params: Mapping[str, str]) -> tuple[dict, DerivedDB]:
    """(comparison, its tables), computed once per (databases, aggregations) and cached on the viewer."""
    base, base_agg, new, new_agg = sides(viewer, params)

    def build():
        result = compare(base.path, new.path, base_agg_id=base_agg, new_agg_id=new_agg)
        kernels = [{**r, "uses_tc": r["new_uses_tc"] if r["new_uses_tc"] is not None else r["base_uses_tc"]}
                   for r in _rows(result["kernels"])]
        tables = [(COMPARE_OP_TYPES, _rows(result["op_types"])), (COMPARE_OPS, _rows(result["ops"])),
                  (COMPARE_KERNELS, kernels)]
        return result, DerivedDB(f"{base.profile_name}-vs-{new.profile_name}", tables)

    key = ("compare", str(base.path), base._generation, base_agg, str(new.path), new._generation, new_agg)
    return viewer.derived.get(key, build)


def table_source(viewer, db: ProfileDB, scope: dict, params: Mapping[str, str]) -> DerivedDB:
    return compare_result(viewer, params)[1]


def view_data(viewer, db: ProfileDB, scope: dict, params: Mapping[str, str]) -> dict:
    """The view's JSON: the run-level comparison and the current page of each table; with one database open,
    the runs it can be compared with (``choices``: the databases next to it) instead."""
    if len(viewer.dbs) < 2:
        return {"compare": None, "choices": [c for c in viewer.candidates() if c["key"] is None], "tables": {}}
    result, tables = compare_result(viewer, params)
    base, _, new, _ = sides(viewer, params)
    head = {k: result[k] for k in HEAD_KEYS}
    head["base"] = {**head["base"], "key": base.key, "aggregations": base.aggregations()}
    head["new"] = {**head["new"], "key": new.key, "aggregations": new.aggregations()}
    return {"compare": head,
            "tables": {prefix: derived_page(tables, spec, params, prefix + ".")
                       for prefix, spec in (("types", COMPARE_OP_TYPES), ("ops", COMPARE_OPS),
                                            ("kernels", COMPARE_KERNELS))}}
