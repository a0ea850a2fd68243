"""The run's roofline quadrant (seed 002's four quadrants of bandwidth) as a finding, with the quadrant's advice.

The roofline report places every modelled op node under its GPU's roofs (``roofline.analysis.roofline_ops``:
analytic FLOPs and ideal bytes from the recorded shapes) and the run in one quadrant by its compute and memory
utilization (``roofline.quadrants.run_utilization``). The saving is what the modelled ops would gain running at
``target_pct_of_roof`` of their roof: per op node, its GPU time minus its roof time ÷ target, where the roof
time = max(FLOPs ÷ peak of its precision, bytes ÷ DRAM bandwidth); ops already closer to their roof save
nothing. Advice comes from ``data/roofline_advice.json`` (2:4 sparsity only on NVIDIA CC ≥ 8.0 for
GEMM/convolution work; FP8 on NVIDIA CC ≥ 8.9 or an AMD GPU with an FP8 matrix rate).
"""

from __future__ import annotations

from collections import namedtuple
from functools import cache

import numpy as np

from ...roofline.analysis import roofline_ops
from ...roofline.quadrants import run_utilization
from ..evidence import fmt_ns
from ..finding import Finding
from ..registry import rule

#: what ``roofline_ops`` reads of a node, besides its first call's shapes, dtypes and arguments
_NODE_COLUMNS = ["node_id", "op_name", "op_type", "direction", "scope", "calls", "using_tc", "gpu_time_ns"]
#: those that the finding depends on (the op type, direction and scope only pass through to the report's rows)
_READ = {"node_id", "op_name", "calls", "using_tc", "gpu_time_ns"}


def _op_rows(ctx) -> list:
    """The aggregation's op nodes with GPU time, with the shapes, dtypes and arguments of each node's first
    call (the roofline report's rows), as the named tuples ``DataFrame.itertuples`` would give (plain
    Python values; a frame of a rank's hundred nodes cost more to make and walk than the rule's work)."""
    nodes = ctx.aggregation.ops
    node_ids, first = ctx.frames.first_calls()  # every rank's, made once
    ids, gpu = nodes["node_id"].to_numpy(np.int64), nodes["gpu_time_ns"].to_numpy(np.int64)
    pos = node_ids.get_indexer(ids)
    keep = np.flatnonzero((gpu > 0) & (pos >= 0))
    order = keep[np.lexsort((ids[keep], -gpu[keep]))]  # GPU time descending, then node id
    columns = {c: nodes[c].to_numpy()[order] if c in _READ else np.full(len(order), None)
               for c in _NODE_COLUMNS if c in nodes.columns}
    if "using_tc" in columns:
        columns["using_tc"] = columns["using_tc"].astype(np.int64)
    columns.update({c: values[pos[order]] for c, values in first.items()})
    row = _row_type(tuple(columns))
    return [row(*values) for values in zip(*(v.tolist() for v in columns.values()))]


@cache
def _row_type(fields: tuple[str, ...]):
    return namedtuple("Row", fields)


def _texts(ops: list[dict], key: str, rows: np.ndarray) -> np.ndarray:
    """The ops' ``key`` texts at ``rows`` as a frame's text column holds them: a missing one (None) is NaN
    when the column has any text, else stays None."""
    values = np.asarray([ops[i][key] for i in rows], dtype=object)
    if any(isinstance(o[key], str) for o in ops):
        values[[v is None for v in values]] = np.nan
    return values


@rule("roofline_quadrant", gpu=True)
def roofline_quadrant(ctx, cfg):
    ceilings = ctx.ceilings
    if ceilings is None or "dram" not in ceilings.bandwidth or ctx.aggregation.ops.empty:
        return None
    ops, _ = roofline_ops(_op_rows(ctx), ceilings)
    dram = ceilings.bandwidth["dram"]
    cc = None if ctx.compute_capability is None else f"{ctx.compute_capability:.1f}"
    points = [{"time_ns": o["gpu_time_ns"], "flops": o["flops"], "bytes": o["bytes"],
               "peak": o["ceiling_flops_per_s"], "precision": o["precision"], "tensor_cores": o["tensor_cores"],
               "family": o["family"]} for o in ops]
    util = run_utilization(points, dram, cc, "ops", ceilings.vendor, list(ceilings.flops))
    if util is None or util["quadrant"] not in cfg["quadrants"]:
        return None
    target = cfg["target_pct_of_roof"] / 100.0
    placed = [o for o in ops if o["bound"] is not None]
    if not placed:
        return None
    flops, nbytes, peak, gpu_time = (np.asarray([o[c] for o in placed]) for c in
                                     ("flops", "bytes", "ceiling_flops_per_s", "gpu_time_ns"))
    with np.errstate(divide="ignore", invalid="ignore"):
        math_s = np.where(flops > 0, flops / peak.astype(float), 0.0)
        roof_ns = np.fmax(math_s, nbytes / dram) * 1e9  # the larger, a missing one skipped (as pandas' max)
        saved = np.maximum(gpu_time - roof_ns / target, 0.0)
    saving = int(np.nansum(saved))
    if saving <= 0 or ctx.pct(saving) < cfg["min_pct"]:
        return None
    n = ctx.config["evidence"]["max_items"]
    positive = np.flatnonzero(saved > 0)
    top_rows = positive[np.argsort(-saved[positive], kind="stable")[:n]]  # nlargest: ties in row order
    top = {"node_id": np.asarray([placed[i]["node_id"] for i in top_rows], dtype=np.int64),
           **{c: _texts(placed, c, top_rows) for c in ("op_name", "precision")},
           "gpu_time_ns": gpu_time[top_rows],
           "pct_of_ceiling": np.asarray([placed[i]["pct_of_ceiling"] for i in top_rows], dtype=float),
           "saving_ns": saved[top_rows], "bound": _texts(placed, "bound", top_rows)}
    worst = {c: values[0] for c, values in top.items()}
    units = f" on {ctx.matrix_units.plural}" if util["dominant_tensor_cores"] else ""
    problem = (
        f"The {len(placed)} modelled op nodes ({fmt_ns(int(gpu_time.sum()))} of GPU time) sit in the "
        f"{util['quadrant_label']} quadrant of the roofline: compute utilization "
        f"{util['compute_utilization_pct']:.1f}%, memory utilization {util['memory_utilization_pct']:.1f}% of "
        f"{ceilings.name} (high from {util['high_utilization_pct']:.0f}%); the math with the most GPU time is "
        f"{util['dominant_precision']}{units}, the op family with the most is "
        f"{util['dominant_family'] or 'unknown'}. The op furthest below its roof, "
        f"{worst['op_name']}, runs at {worst['pct_of_ceiling']:.1f}% of its {worst['bound']} roof for "
        f"{fmt_ns(int(worst['gpu_time_ns']))}.")
    hints = " ".join(util["advice"])
    return Finding(
        "roofline_quadrant", problem,
        ctx.advice("roofline_quadrant", hints) + f" See {ctx.link('roofline_quadrant')}",
        saving,
        {"node_ids": [int(v) for v in top["node_id"]],
         "quadrant": util["quadrant"], "compute_utilization_pct": util["compute_utilization_pct"],
         "memory_utilization_pct": util["memory_utilization_pct"], "gpu": ceilings.name,
         "dominant_precision": util["dominant_precision"], "dominant_family": util["dominant_family"],
         "ops": [{"node_id": int(r["node_id"]), "op_name": r["op_name"], "precision": r["precision"],
                  "gpu_time_ns": int(r["gpu_time_ns"]), "pct_of_ceiling": r["pct_of_ceiling"],
                  "saving_ns": int(r["saving_ns"])} for r in (dict(zip(top, row)) for row in zip(*top.values()))],
         "saving_basis": f"per op node: GPU time - max(FLOPs / peak, bytes / DRAM bandwidth) / "
                         f"{cfg['target_pct_of_roof']:g}% (its time at that share of its roof), at least 0"})
