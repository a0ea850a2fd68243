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

import numpy as np

from ...roofline.analysis import NESTED_COLUMNS, nested_cost, node_cost, place, roof_of
from ...roofline.quadrants import run_utilization
from ..evidence import fmt_ns
from ..finding import Finding
from ..registry import rule


def _op_rows(ctx) -> tuple[list, ...]:
    """The aggregation's op nodes with GPU time, GPU time descending then node id (the roofline report's
    rows), as columns of plain Python values: node id, op name, calls, uses Tensor Cores, GPU time, the
    shapes, dtypes and arguments of the node's first call, the node's data type, output shape and the stored cost
    of the modelled ops beneath it (a frame of a rank's hundred nodes cost more to make and walk than the rule's
    work)."""
    nodes = ctx.aggregation.ops
    node_ids, first = ctx.frames.first_calls()  # every rank's, made once
    ids, gpu = nodes["node_id"].to_numpy(np.int64), nodes["gpu_time_ns"].to_numpy(np.int64)
    pos = node_ids.get_indexer(ids)
    keep = np.flatnonzero((gpu > 0) & (pos >= 0))
    order = keep[np.lexsort((ids[keep], -gpu[keep]))]  # GPU time descending, then node id
    return (ids[order].tolist(), nodes["op_name"].to_numpy()[order].tolist(), nodes["calls"].to_numpy()[order].tolist(),
            nodes["using_tc"].to_numpy()[order].astype(np.int64).tolist(), gpu[order].tolist(),
            *(first[c][pos[order]].tolist() for c in ("input_shapes", "input_dtypes", "concrete_inputs")),
            nodes["data_type"].astype(object).to_numpy()[order].tolist(),
            *((nodes[c].astype(object).to_numpy()[order].tolist() if c in nodes.columns else [None] * len(order))
              for c in ("output_shape", *NESTED_COLUMNS)))


def _modelled(ctx, ceilings) -> tuple[list[dict], dict[str, list]]:
    """What :func:`~dlscope.roofline.analysis.roofline_ops` gives for the rank's op nodes, reduced to what the
    finding reads: the run-utilization points of the modelled nodes, and the columns (node_id, op_name,
    precision, bound, pct_of_ceiling, flops, bytes, peak, gpu_time_ns) of those placed under a roof. Its own
    pieces (``node_cost``, ``roof_of``, ``place``), without its per-node report dicts; each roof looked up once."""
    dram = ceilings.bandwidth["dram"]
    roofs: dict[tuple, tuple] = {}
    points: list[dict] = []
    placed: dict[str, list] = {c: [] for c in ("node_id", "op_name", "precision", "bound", "pct_of_ceiling", "flops",
                                               "bytes", "peak", "gpu_time_ns")}
    for node_id, op_name, calls, using_tc, time_ns, shapes, dtypes, concrete, data_type, output, *nested in zip(
            *_op_rows(ctx)):
        cost = node_cost(op_name, shapes, dtypes, concrete, data_type, output)
        calls = int(calls) if calls and calls > 0 else 1
        if cost is not None:
            flops, nbytes = cost.flops * calls, cost.bytes * calls
        else:  # the modelled ops beneath it, summed over its calls
            cost = nested_cost(*nested)
            if cost is None:
                continue
            flops, nbytes = cost.flops, cost.bytes
        key = (cost.precision, cost.family, bool(using_tc))
        if key not in roofs:
            roofs[key] = roof_of(cost, using_tc, ceilings)
        precision, tensor, roof = roofs[key]
        peak = roof[1] if roof else None
        points.append({"time_ns": time_ns, "flops": flops, "bytes": nbytes, "peak": peak, "precision": precision,
                       "tensor_cores": tensor, "family": cost.family})
        spot = place(flops, nbytes, time_ns, peak, dram)
        if spot["bound"] is None:
            continue  # no intensity or no roof: not placed
        for c, v in (("node_id", node_id), ("op_name", op_name), ("precision", precision), ("bound", spot["bound"]),
                     ("pct_of_ceiling", spot["pct_of_ceiling"]), ("flops", flops), ("bytes", nbytes), ("peak", peak),
                     ("gpu_time_ns", time_ns)):
            placed[c].append(v)
    return points, placed


def _texts(values: list, rows: np.ndarray) -> np.ndarray:
    """``values`` at ``rows`` as a frame's text column holds them: a missing one (None) is NaN when the
    column has any text, else stays None."""
    out = np.asarray([values[i] for i in rows], dtype=object)
    if any(isinstance(v, str) for v in values):
        out[[v is None for v in out]] = np.nan
    return out


@rule("roofline_quadrant", gpu=True)
def roofline_quadrant(ctx, cfg):
    ceilings = ctx.ceilings
    if ceilings is None or "dram" not in ceilings.bandwidth or ctx.aggregation.ops.empty:
        return None
    points, placed = _modelled(ctx, ceilings)
    dram = ceilings.bandwidth["dram"]
    cc = None if ctx.compute_capability is None else f"{ctx.compute_capability:.1f}"
    util = run_utilization(points, dram, cc, "ops", ceilings.vendor, list(ceilings.flops),
                           graphs=len(ctx.graph_launches) > 0)
    if util is None or util["quadrant"] not in cfg["quadrants"]:
        return None
    target = cfg["target_pct_of_roof"] / 100.0
    if not placed["node_id"]:
        return None
    flops, nbytes, peak, gpu_time = (np.asarray(placed[c]) for c in ("flops", "bytes", "peak", "gpu_time_ns"))
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
    top = {"node_id": np.asarray([placed["node_id"][i] for i in top_rows], dtype=np.int64),
           **{c: _texts(placed[c], top_rows) for c in ("op_name", "precision")},
           "gpu_time_ns": gpu_time[top_rows],
           "pct_of_ceiling": np.asarray([placed["pct_of_ceiling"][i] for i in top_rows], dtype=float),
           "saving_ns": saved[top_rows], "bound": _texts(placed["bound"], top_rows)}
    worst = {c: values[0] for c, values in top.items()}
    units = f" on {ctx.matrix_units.plural}" if util["dominant_tensor_cores"] else ""
    math = (f"the math with the most GPU time is {util['dominant_precision']}{units}" if util["dominant_precision"]
            else f"only {util['math_time_pct']:.1f}% of that time is math (the rest copies, fills and casts), so no "
                 "precision dominates" if util["math_time_pct"] > 0 else
            "none of that time is math (copies, fills and casts), so no precision dominates")
    problem = (
        f"The {len(placed['node_id'])} modelled op nodes ({fmt_ns(int(gpu_time.sum()))} of GPU time) sit in the "
        f"{util['quadrant_label']} quadrant of the roofline: compute utilization "
        f"{util['compute_utilization_pct']:.1f}%, memory utilization {util['memory_utilization_pct']:.1f}% of "
        f"{ceilings.name} (high from {util['high_utilization_pct']:.0f}%); {math}; the op family with the most "
        f"GPU time is "
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
                  "saving_ns": int(r["saving_ns"])}
                 for r in (dict(zip(top, row)) for row in zip(*(v.tolist() for v in top.values())))],
         "saving_basis": f"per op node: GPU time - max(FLOPs / peak, bytes / DRAM bandwidth) / "
                         f"{cfg['target_pct_of_roof']:g}% (its time at that share of its roof), at least 0"})
