"""The Roofline view: ``roofline_report`` of the page's aggregation as chart points, summary and two tables.

The report is computed once per (database, generation, aggregation) and cached; its ops and ncu kernels are
served as derived tables (sortable, searchable, exportable like every other table). Rates are shown in
TFLOP/s and percentages as fractions (the viewer's ``pct`` kind), so column searches read ``>50`` or ``<20``.
"""

from __future__ import annotations

from collections.abc import Mapping

from dlscope.roofline import roofline_report
from dlscope.viewer.derived import DerivedDB, derived_page
from dlscope.viewer.profile_db import ProfileDB
from dlscope.viewer.tables import Column, TableSpec

ROOFLINE_OPS = TableSpec(
    "roofline_ops", "Ops on the Roofline", "roofline_ops",
    (Column("gpu_time_ns", "GPU Time", "gpu_time_ns", "ns"),
     Column("op_name", "Op Name", "op_name", "text"),
     Column("op_type", "Op Type", "op_type", "text"),
     Column("direction", "Direction", "direction", "text"),
     Column("family", "Family", "family", "text", hidden=True),
     Column("cost_from", "Costed From", "cost_from", "text", hidden=True),
     Column("precision", "Precision", "precision", "text"),
     Column("tensor_cores", "Tensor Cores", "tensor_cores", "bool"),
     Column("bound", "Bound", "bound", "text"),
     Column("pct_of_roof", "% of Roof", "pct_of_roof", "pct"),
     Column("above_roof", "Above Roof", "above_roof", "bool"),
     Column("above_roof_reason", "Why Above the Roof", "above_roof_reason", "text", hidden=True),
     Column("est_saving_ns", "Est. Saving", "est_saving_ns", "ns"),
     Column("arithmetic_intensity", "AI (FLOP/B)", "arithmetic_intensity", "float"),
     Column("achieved_tflops", "Achieved TFLOP/s", "achieved_tflops", "float"),
     Column("achieved_gbps", "Achieved GB/s", "achieved_gbps", "float", hidden=True),
     Column("ceiling", "Roof", "ceiling", "text"),
     Column("ceiling_tflops", "Roof TFLOP/s", "ceiling_tflops", "float", hidden=True),
     Column("calls", "Calls", "calls"),
     Column("gflops", "GFLOP", "gflops", "float"),
     Column("bytes", "Bytes Moved", "bytes", "bytes"),
     Column("scope", "Scope", "scope", "text", hidden=True),
     Column("node_id", "Op ID", "node_id", hidden=True)),
    "gpu_time_ns", key="node_id")

ROOFLINE_KERNELS = TableSpec(
    "roofline_kernels", "Kernels on the Roofline (Nsight Compute)", "roofline_kernels",
    (Column("time_ns", "GPU Time", "time_ns", "ns"),
     Column("kernel_name", "Kernel Name", "kernel_name", "text"),
     Column("precision", "Precision", "precision", "text"),
     Column("tensor_cores", "Tensor Cores", "tensor_cores", "bool"),
     Column("limiting_level", "Limited By", "limiting_level", "text"),
     Column("pct_of_roof", "% of Roof", "pct_of_roof", "pct"),
     Column("achieved_tflops", "Achieved TFLOP/s", "achieved_tflops", "float"),
     Column("ai_l1", "AI L1", "ai_l1", "float"),
     Column("ai_l2", "AI L2", "ai_l2", "float"),
     Column("ai_dram", "AI DRAM", "ai_dram", "float"),
     Column("gflops", "GFLOP", "gflops", "float"),
     Column("bytes_dram", "DRAM Bytes", "bytes_dram", "bytes"),
     Column("bytes_l2", "L2 Bytes", "bytes_l2", "bytes", hidden=True),
     Column("bytes_l1", "L1 Bytes", "bytes_l1", "bytes", hidden=True),
     Column("row", "Row", "row", hidden=True)),
    "time_ns", key="row")

SPECS = {s.name: s for s in (ROOFLINE_OPS, ROOFLINE_KERNELS)}
PAGE_PARAMS = ()
#: The chart's point fields (the tables carry the rest).
OP_POINT = ("node_id", "op_name", "op_type", "precision", "tensor_cores", "arithmetic_intensity",
            "achieved_flops_per_s", "gpu_time_ns", "bound", "pct_of_ceiling", "ceiling", "calls", "above_roof",
            "above_roof_reason")
KERNEL_POINT = ("kernel_name", "precision", "ai_l1", "ai_l2", "ai_dram", "achieved_flops_per_s", "time_ns",
                "limiting_level", "pct_of_ceiling", "ceiling")


def _scaled(v, k):
    return None if v is None else v * k


def _op_row(o: dict) -> dict:
    pct = o.get("pct_of_ceiling")
    return {**o, "pct_of_roof": _scaled(pct, 0.01), "achieved_tflops": _scaled(o.get("achieved_flops_per_s"), 1e-12),
            "achieved_gbps": _scaled(o.get("achieved_bytes_per_s"), 1e-9),
            "ceiling_tflops": _scaled(o.get("ceiling_flops_per_s"), 1e-12), "gflops": _scaled(o.get("flops"), 1e-9)}


def _kernel_row(i: int, k: dict) -> dict:
    return {**k, "row": i, "pct_of_roof": _scaled(k.get("pct_of_ceiling"), 0.01),
            "achieved_tflops": _scaled(k.get("achieved_flops_per_s"), 1e-12), "gflops": _scaled(k.get("flops"), 1e-9)}


def roofline_result(viewer, db: ProfileDB, agg: int | None) -> tuple[dict, DerivedDB]:
    """(report, its tables) for one aggregation, computed once and cached on the viewer."""

    def build():
        report = roofline_report(db.connection(), agg, getattr(viewer, "gpu_spec", None))
        tables = [(ROOFLINE_OPS, [_op_row(o) for o in report["ops"]]),
                  (ROOFLINE_KERNELS, [_kernel_row(i, k) for i, k in enumerate(report["kernels"])])]
        return report, DerivedDB(f"{db.profile_name}-roofline", tables)

    return viewer.derived.get(("roofline", str(db.path), db._generation, agg, getattr(viewer, "gpu_spec", None)),
                              build)


def table_source(viewer, db: ProfileDB, scope: dict, params: Mapping[str, str]) -> DerivedDB:
    return roofline_result(viewer, db, scope.get("agg"))[1]


def view_data(viewer, db: ProfileDB, scope: dict, params: Mapping[str, str]) -> dict:
    """The view's JSON: GPU, ceilings (or why there are none), summary, chart points and table pages."""
    report, tables = roofline_result(viewer, db, scope.get("agg"))
    error = report["ceilings_error"]
    hint = ("In the viewer, restart it with `dlscope view DB --gpu-spec FILE`; from the command line, "
            "`dlscope report DB --reports roofline --gpu-spec FILE`.") if error else None
    return {"roofline": {"agg_id": report["agg_id"], "gpu": report["gpu"], "ceilings": report["ceilings"],
                         "ceilings_error": error, "ceilings_hint": hint, "summary": report["summary"],
                         "ops": [{k: o.get(k) for k in OP_POINT} for o in report["ops"]],
                         "kernels": [{k: x.get(k) for k in KERNEL_POINT} for x in report["kernels"]]},
            "tables": {"ops": derived_page(tables, ROOFLINE_OPS, params, "ops."),
                       "kernels": derived_page(tables, ROOFLINE_KERNELS, params, "kernels.")}}
