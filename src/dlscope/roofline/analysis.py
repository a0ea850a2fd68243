"""Place every op node and every counter-profiled kernel under its GPU's roofline.

Ops (from a trace): analytic FLOPs and bytes from the shapes of the node's calls (``flops.op_cost``)
against the GPU time of the node's own kernels (``agg_ops.gpu_time_ns``: kernels belong to their
innermost launching op, so parents and children never count the same kernel). Kernels (from Nsight
Compute): measured FLOPs per precision and bytes per memory level (hierarchical roofline, seed 004).

An op is *math bound* when its arithmetic intensity is at or above the ridge point (peak FLOP/s of its
precision ÷ DRAM bandwidth), else *memory bound* (seed 002). ``pct_of_ceiling`` = achieved ÷ the roof at
its intensity, min(peak, AI × bandwidth), as a percentage.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import sqlite3
from collections.abc import Iterable
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dlscope.errors import DlscopeError
from dlscope.roofline.ceilings import LEVELS, GpuCeilings, find_ceilings, load_spec_file
from dlscope.roofline.flops import OpCost, op_cost, ran_at
from dlscope.roofline.flops import _table as _ops_table
from dlscope.roofline.ncu import GEOMETRY, match_trace_kernels
from dlscope.roofline.quadrants import point_utilization, quadrant, run_utilization


def above_roof_reason(family: str, precision: str | None, bound: str | None) -> str:
    """Why a point can sit above its roof (``data/roofline_ops.json``, ``above_roof``)."""
    reasons = _ops_table()["above_roof"]
    if bound == "memory":
        return reasons["memory"]
    return reasons.get(f"{family}/{precision}") or reasons.get(family) or reasons["*"]

#: Families whose kernels run on Tensor Cores when the op uses them (others use CUDA cores).
TENSOR_FAMILIES = frozenset({"gemm", "conv", "conv_bwd", "attention"})
#: How many ops the summary lists as furthest below their roof.
FURTHEST_BELOW = 10


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _table_exists(conn: sqlite3.Connection, name: str) -> bool:
    return conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (name,)).fetchone() is not None


def _aggregation(conn: sqlite3.Connection, agg_id: int | None) -> dict | None:
    if agg_id is None or not _table_exists(conn, "aggregations"):
        return None
    row = conn.execute("SELECT agg_id, rank, iter_start, iter_stop FROM aggregations WHERE agg_id=?",
                       (agg_id,)).fetchone()
    if row is None:
        raise DlscopeError(f"aggregation {agg_id} not found in the database")
    return dict(zip(("agg_id", "rank", "iter_start", "iter_stop"), row))


def _trace_gpu(conn: sqlite3.Connection, agg: dict | None) -> dict | None:
    """The GPU of the aggregation's rank that ran the most kernel time (first GPU when unknown)."""
    if not _table_exists(conn, "gpus"):
        return None
    params: list[Any] = []
    where = ""
    if agg is not None and agg.get("rank") is not None:
        where, params = "WHERE g.rank = ?", [agg["rank"]]
    order = "g.rank, g.device"
    join = ""
    if agg is not None and _table_exists(conn, "agg_gpus"):
        join = "LEFT JOIN agg_gpus a ON a.agg_id = ? AND a.rank = g.rank AND a.device = g.device"
        params = [agg["agg_id"], *params]
        order = "COALESCE(a.kernel_time_ns, 0) DESC, g.rank, g.device"
    row = conn.execute(f"SELECT g.rank, g.device, g.name, g.sm_count, g.cc_major, g.cc_minor FROM gpus g "
                       f"{join} {where} ORDER BY {order} LIMIT 1", params).fetchone()
    if row is None:
        return None
    rank, device, name, sms, major, minor = row
    source = "trace"
    if not name:
        # a device known only by its kernels (a ROCm trace may number the device its kernels ran on apart from the
        # one its deviceProperties describe): when the rank describes exactly one GPU, that GPU ran them
        described = conn.execute("SELECT DISTINCT name, sm_count, cc_major, cc_minor FROM gpus WHERE rank = ? AND "
                                 "name IS NOT NULL AND name != ''", (rank,)).fetchall()
        if len(described) == 1:
            (name, sms, major, minor), source = described[0], "trace (the rank's only described GPU)"
    cc = f"{major}.{minor}" if major is not None and major >= 0 and minor is not None and minor >= 0 else None
    return {"rank": rank, "device": device, "name": name or None, "sm_count": sms if sms and sms > 0 else None,
            "cc": cc, "source": source}


def _ncu_gpu(kernels: pd.DataFrame) -> dict | None:
    if kernels.empty:
        return None
    names = [n for n in kernels["device_name"].dropna().astype(str) if n and n != "nan"]
    ccs = [c for c in kernels["cc"].dropna().astype(str) if c and c != "nan"]
    if not names and not ccs:
        return None
    return {"rank": None, "device": None, "name": names[0] if names else None, "sm_count": None,
            "cc": ccs[0] if ccs else None, "source": "ncu"}


def _ceilings(gpu: dict | None, gpu_spec_path: str | Path | None) -> tuple[GpuCeilings | None, str]:
    if gpu_spec_path:
        return load_spec_file(gpu_spec_path), ""
    if gpu is None:
        return None, ("no GPU recorded in the profile; pass --gpu-spec FILE (one GPU in the shape of an "
                      "entry of dlscope/data/gpu_specs.json)")
    return find_ceilings(gpu.get("name"), gpu.get("cc"), gpu.get("sm_count"))


def place(flops: float, nbytes: float, time_ns: float, peak: float | None, bandwidth: float | None) -> dict:
    """Arithmetic intensity, achieved rates, bound (None: no intensity or no roof) and percent of the roof for one
    point."""
    seconds = time_ns * 1e-9 if time_ns and time_ns > 0 else None
    ai = flops / nbytes if nbytes and nbytes > 0 else None
    out: dict[str, Any] = {"arithmetic_intensity": ai,
                           "achieved_flops_per_s": flops / seconds if seconds else None,
                           "achieved_bytes_per_s": nbytes / seconds if seconds and nbytes else None,
                           "bound": None, "pct_of_ceiling": None}
    if ai is None or not peak or not bandwidth:
        return out
    out["bound"] = "math" if ai >= peak / bandwidth else "memory"
    if seconds:
        if out["bound"] == "math":
            out["pct_of_ceiling"] = 100.0 * out["achieved_flops_per_s"] / peak
        else:
            out["pct_of_ceiling"] = 100.0 * out["achieved_bytes_per_s"] / bandwidth
    return out


def _op_rows(conn: sqlite3.Connection, agg_id: int) -> pd.DataFrame:
    """One row per op node with GPU time, plus its shapes, dtypes and scalar arguments (op_nodes), the output
    shape its backward told where the trace recorded no geometry, and the cost of the modelled ops beneath a node
    without a model (a database older than those columns: none)."""
    columns = {r[1] for r in conn.execute('PRAGMA table_info("agg_ops")')}
    stored = ", ".join(f"a.{c}" if c in columns else f"NULL AS {c}" for c in ("output_shape", *NESTED_COLUMNS))
    query = f"""
        SELECT a.node_id, a.op_name, a.op_type, a.direction, a.scope, a.calls, a.kernel_count,
               a.gpu_time_ns, a.using_tc, a.tc_eligible, o.input_shapes, o.input_dtypes, o.concrete_inputs,
               o.data_type, {stored}
        FROM agg_ops a
        LEFT JOIN op_nodes o ON o.node_id = a.node_id
        WHERE a.agg_id = ? AND a.gpu_time_ns > 0
        ORDER BY a.gpu_time_ns DESC, a.node_id
    """
    return pd.read_sql_query(query, conn, params=(agg_id,))


def _add_quadrant(point: dict, flops, nbytes, time_ns, peak, dram) -> None:
    compute, memory = point_utilization(flops, nbytes, time_ns, peak, dram)
    point["compute_utilization_pct"] = 100.0 * compute if compute is not None else None
    point["memory_utilization_pct"] = 100.0 * memory if memory is not None else None
    point["quadrant"] = quadrant(compute, memory)


@lru_cache(maxsize=1 << 16)
def _memo_cost(op_name, input_shapes, input_dtypes, concrete_inputs, data_type, output_shape):
    return _cost_at(op_cost(op_name, input_shapes, input_dtypes, concrete_inputs, output_shape), data_type)


def _cost_at(cost: OpCost | None, data_type) -> OpCost | None:
    """The model with the precision the node's math ran at: its data type (the dtype of the ops that launched
    its kernels, analyze.analysis) when that has a precision, else the main operand's. Under autocast an
    ``aten::linear`` on FP32 activations runs an FP16 GEMM: its roof is FP16's, not TF32's."""
    precision = ran_at(data_type)
    if cost is None or precision is None or precision == cost.precision:
        return cost
    return dataclasses.replace(cost, precision=precision)


def node_cost(op_name, input_shapes, input_dtypes, concrete_inputs, data_type=None, output_shape=None):
    """:func:`op_cost` at the precision the node ran at (``data_type``), memoized when its arguments are the
    stored texts (the ranks of a job repeat the same op nodes: one model per distinct call, not per rank).
    ``output_shape``: ``agg_ops.output_shape``, a convolution's output where the trace recorded no geometry."""
    output_shape = output_shape if isinstance(output_shape, str) else None  # stored JSON text; NULL / NaN: none
    try:
        return _memo_cost(op_name, input_shapes, input_dtypes, concrete_inputs, data_type, output_shape)
    except TypeError:  # unhashable: the lists of a Kineto event
        return _cost_at(op_cost(op_name, input_shapes, input_dtypes, concrete_inputs, output_shape), data_type)


#: ``agg_ops``' columns with the roofline's cost of the modelled ops beneath an op node without a model of its
#: own (``roofline.nested``, written at aggregation)
NESTED_COLUMNS = ("roofline_flops", "roofline_bytes", "roofline_precision", "roofline_family")


def nested_cost(flops, nbytes, precision, family) -> OpCost | None:
    """The stored cost of the ops beneath a node without a model (:data:`NESTED_COLUMNS`: totals over its calls),
    or None when there is none."""
    if flops is None or pd.isna(flops) or nbytes is None or pd.isna(nbytes) or not isinstance(family, str):
        return None
    return OpCost(flops=int(flops), bytes=int(nbytes), precision=precision if isinstance(precision, str) else None,
                  family=family)


def roof_of(cost: OpCost, using_tc, ceilings: GpuCeilings | None) -> tuple[str | None, bool, tuple | None]:
    """The precision an op node's math runs at, whether on matrix units (its node used Tensor Cores and its
    family can), and its roof: the ceiling's (name, FLOP/s), or None."""
    tensor = bool(using_tc) and cost.family in TENSOR_FAMILIES
    # FP32 on matrix units: TF32 on NVIDIA Tensor Cores, FP32 itself on AMD matrix cores (MFMA F32)
    precision = (ceilings.matrix_precision(cost.precision) if ceilings else
                 "tf32" if cost.precision == "fp32" else cost.precision) if tensor else cost.precision
    peak = ceilings.peak(cost.precision, tensor) if ceilings else None
    if peak is None and ceilings and tensor:  # e.g. FP32 on a GPU without TF32
        peak = ceilings.peak(cost.precision, False)
    return precision, tensor, peak


def roofline_ops(rows: pd.DataFrame | Iterable, ceilings: GpuCeilings | None) -> tuple[list[dict], int]:
    """Op dicts for every node with a FLOP model; also the GPU time of nodes without one. ``rows``: a frame,
    or its rows as ``itertuples`` gives them (the expert rule makes a rank's few rows without a frame)."""
    ops: list[dict] = []
    unmodelled_ns = 0
    dram = ceilings.bandwidth.get("dram") if ceilings else None
    for row in rows.itertuples(index=False) if isinstance(rows, pd.DataFrame) else rows:
        cost = node_cost(row.op_name, row.input_shapes, row.input_dtypes, row.concrete_inputs,
                         getattr(row, "data_type", None), getattr(row, "output_shape", None))
        calls = int(row.calls) if row.calls and row.calls > 0 else 1
        cost_from = "own shapes"
        if cost is not None:
            flops, nbytes = cost.flops * calls, cost.bytes * calls
        else:  # the modelled ops beneath it, summed over its calls
            cost, cost_from = nested_cost(*(getattr(row, c, None) for c in NESTED_COLUMNS)), "ops beneath"
            if cost is None:
                unmodelled_ns += int(row.gpu_time_ns)
                continue
            flops, nbytes = cost.flops, cost.bytes
        precision, tensor, peak = roof_of(cost, row.using_tc, ceilings)
        op = {"node_id": int(row.node_id), "op_name": row.op_name, "op_type": row.op_type,
              "direction": row.direction, "scope": row.scope, "input_shapes": row.input_shapes or "",
              "family": cost.family, "cost_from": cost_from, "calls": calls,
              "precision": precision, "tensor_cores": tensor, "flops": flops, "bytes": nbytes,
              "flops_per_call": flops // calls, "bytes_per_call": nbytes // calls, "gpu_time_ns": int(row.gpu_time_ns),
              "ceiling": peak[0] if peak else None, "ceiling_flops_per_s": peak[1] if peak else None,
              "ceiling_bytes_per_s": dram}
        op.update(place(flops, nbytes, row.gpu_time_ns, peak[1] if peak else None, dram))
        _add_quadrant(op, flops, nbytes, row.gpu_time_ns, peak[1] if peak else None, dram)
        op["above_roof"] = (op.get("pct_of_ceiling") or 0) > 100.0
        op["above_roof_reason"] = above_roof_reason(cost.family, precision, op.get("bound")) \
            if op["above_roof"] else None
        ops.append(op)
    return ops, unmodelled_ns


#: kernel_precision.json patterns that name a type explicitly (not the structural FP32 fallbacks, which a CUTLASS
#: name with a float accumulator would match whatever its inputs).
EXPLICIT_TOKENS = ("trtllm_gen_fp4_operands", "fp8_token", "fp4_token", "int8_token", "fp64_token", "bf16_token",
                   "fp16_token", "tf32_token", "tf32_sm80_s1688")


@lru_cache(maxsize=1)
def _type_tokens() -> tuple[tuple[re.Pattern, str], ...]:
    ref = json.loads(resources.files("dlscope.data").joinpath("kernel_precision.json").read_text())
    return tuple((re.compile(p["pattern"]), p["precision"]) for p in ref["patterns"] if p["id"] in EXPLICIT_TOKENS)


@lru_cache(maxsize=65536)
def tensor_kernel_precision(name: str) -> tuple[str, str]:
    """(precision, why) of a Tensor Core kernel: the first explicit type token of its name (data/
    kernel_precision.json: e4m3, int8, dmma, bf16, f16, tf32, sm80 s1688...), else FP16, the usual case."""
    for pattern, precision in _type_tokens():
        if pattern.search(name or ""):
            return precision, "name"
    return "fp16", "assumed"


def _kernel_precision(row: pd.Series) -> tuple[str, str | None, bool]:
    """(dominant FLOP column, precision, tensor) of a counter-profiled kernel: the FLOP column with the most
    work; Tensor Core work in the precision its name states (FP16 when it states none)."""
    columns = {"flops_fp64": ("fp64", False), "flops_fp32": ("fp32", False), "flops_fp16": ("fp16", False),
               "flops_tensor": ("fp16", True)}
    values = {c: row[c] for c in columns if pd.notna(row[c])}
    if not values or max(values.values()) <= 0:
        return "", None, False
    best = max(values, key=values.__getitem__)
    if best == "flops_tensor":
        return best, tensor_kernel_precision(str(row.get("kernel_name") or ""))[0], True
    return best, *columns[best]


def fma_ceiling(row: pd.Series, peak: float | None, no_fma: float | None = None) -> dict:
    """FMA share of a CUDA-core kernel's FLOPs and the roof its instruction mix allows (ERT's FMA and no-FMA
    ceilings): an FMA issues 2 FLOPs, any other FP instruction 1, so at the issue rate of the FMA peak P a mix
    with FMA share s reaches P / (2 - s): P with only FMAs, P / 2 (the no-FMA ceiling) with none. ``no_fma``: the
    spec's own no-FMA figure (a measured one), used for the no-FMA ceiling when given."""
    fma = row.get("flops_fma")
    cuda_core = [row.get(c) for c in ("flops_fp64", "flops_fp32", "flops_fp16")]
    total = sum(float(v) for v in cuda_core if v is not None and pd.notna(v))
    if fma is None or pd.isna(fma) or total <= 0:
        return {"fma_share": None, "no_fma_ceiling_flops_per_s": None, "fma_mix_ceiling_flops_per_s": None}
    share = float(fma) / total
    return {"fma_share": share, "no_fma_ceiling_flops_per_s": no_fma or (peak / 2 if peak else None),
            "fma_mix_ceiling_flops_per_s": peak / (2 - share) if peak else None}


def roofline_kernels(kernels: pd.DataFrame, ceilings: GpuCeilings | None) -> list[dict]:
    """Hierarchical roofline points of ncu kernels: one intensity and bound per memory level."""
    out = []
    for _, row in kernels.iterrows():
        flop_cols = ["flops_fp64", "flops_fp32", "flops_fp16", "flops_tensor"]
        measured = [row[c] for c in flop_cols if pd.notna(row[c])]
        flops = float(sum(measured)) if measured else None
        _, precision, tensor = _kernel_precision(row)
        peak = ceilings.peak(precision, tensor) if ceilings and precision else None
        item = {"kernel_id": _finite(float(row["kernel_id"])) if pd.notna(row["kernel_id"]) else None,
                "kernel_name": row["kernel_name"], "precision": precision, "tensor_cores": tensor,
                "flops": flops, "time_ns": _finite(float(row["time_ns"])) if pd.notna(row["time_ns"]) else None,
                "tensor_pipe_inst": _finite(row["tensor_pipe_inst"]) if pd.notna(row["tensor_pipe_inst"]) else None,
                "ceiling": peak[0] if peak else None, "ceiling_flops_per_s": peak[1] if peak else None}
        for c in ("trace_kernel_id", "geometry_match", "node_id", "op_name", "iteration"):
            if c in row.index:
                item[c] = None if pd.isna(row[c]) else (row[c] if isinstance(row[c], str) else int(row[c]))
        for c in flop_cols:
            item[c] = float(row[c]) if pd.notna(row[c]) else None
        roofs = []
        for level in LEVELS:
            nbytes = row[f"bytes_{level}"]
            nbytes = float(nbytes) if pd.notna(nbytes) else None
            bandwidth = ceilings.bandwidth.get(level) if ceilings else None
            placed = place(flops or 0.0, nbytes or 0.0, item["time_ns"] or 0.0,
                            peak[1] if peak else None, bandwidth) if flops is not None else {}
            item[f"bytes_{level}"] = nbytes
            item[f"ai_{level}"] = placed.get("arithmetic_intensity")
            item[f"bound_{level}"] = placed.get("bound")
            if placed.get("arithmetic_intensity") and bandwidth:
                roofs.append((placed["arithmetic_intensity"] * bandwidth, level))
        item.update(fma_ceiling(row, peak[1] if peak and not tensor else None,
                                ceilings.no_fma.get(precision) if ceilings and precision and not tensor else None))
        _add_quadrant(item, flops, item["bytes_dram"], item["time_ns"], peak[1] if peak else None,
                      ceilings.bandwidth.get("dram") if ceilings else None)
        item["achieved_flops_per_s"] = (flops / (item["time_ns"] * 1e-9)
                                        if flops is not None and item["time_ns"] else None)
        item["limiting_level"] = None
        item["pct_of_ceiling"] = None
        if peak and roofs and item["achieved_flops_per_s"] is not None:
            roof, level = min(roofs)
            item["limiting_level"] = level if roof < peak[1] else "compute"
            item["pct_of_ceiling"] = 100.0 * item["achieved_flops_per_s"] / min(roof, peak[1])
        out.append(item)
    return out


def _summary(ops: list[dict], unmodelled_ns: int, total_ns: int) -> dict:
    placed = [o for o in ops if o["bound"]]
    for o in placed:
        pct = o["pct_of_ceiling"]
        o["est_saving_ns"] = int(o["gpu_time_ns"] * (1 - min(pct, 100.0) / 100.0)) if pct is not None else None
    ranked = sorted((o for o in placed if o.get("est_saving_ns") is not None),
                    key=lambda o: (-o["est_saving_ns"], o["node_id"]))
    furthest = [{k: o[k] for k in ("node_id", "op_name", "input_shapes", "bound", "precision", "pct_of_ceiling",
                                   "gpu_time_ns", "est_saving_ns")} for o in ranked[:FURTHEST_BELOW]]
    has_roofs = bool(placed) or not ops
    return {
        "memory_bound_gpu_time_ns": sum(o["gpu_time_ns"] for o in placed if o["bound"] == "memory")
        if has_roofs else None,
        "math_bound_gpu_time_ns": sum(o["gpu_time_ns"] for o in placed if o["bound"] == "math")
        if has_roofs else None,
        "modelled_gpu_time_ns": sum(o["gpu_time_ns"] for o in ops),
        "unmodelled_gpu_time_ns": unmodelled_ns,
        "op_gpu_time_ns": total_ns,
        "modelled_op_nodes": len(ops),
        "above_roof_op_nodes": sum(1 for o in ops if o.get("above_roof")),
        "furthest_below": furthest,
    }


def _trace_kernels_named(conn: sqlite3.Connection, names: pd.Series) -> pd.DataFrame:
    """The trace's launches of the kernels ncu profiled (either spelling, with or without 'void '), with the
    op node that launched each."""
    if not _table_exists(conn, "kernels") or names.empty:
        return pd.DataFrame()
    plain = names.dropna().astype(str).str.replace(r"^void\s+", "", regex=True)
    spellings = sorted(set(plain) | set("void " + plain))
    have = {r[1] for r in conn.execute("PRAGMA table_info(kernels)")}
    geometry = [g if g in have else f"NULL AS {g}" for g in GEOMETRY]
    node = ("i.node_id, n.name AS op_name" if _table_exists(conn, "op_instances") and _table_exists(conn, "op_nodes")
            else "NULL AS node_id, NULL AS op_name")
    joins = ("LEFT JOIN op_instances i ON i.op_id = k.op_id LEFT JOIN op_nodes n ON n.node_id = i.node_id"
             if node.startswith("i.") else "")
    frames = []
    for at in range(0, len(spellings), 500):
        chunk = spellings[at:at + 500]
        frames.append(pd.read_sql_query(
            f"SELECT k.kernel_id, k.name, k.start, k.dur, k.op_id, k.iteration, k.launch_ts, k.pid, k.rank, "
            f"{', '.join('k.' + g if ' AS ' not in g else g for g in geometry)}, {node} "
            f"FROM kernels k {joins} WHERE k.name IN ({', '.join('?' * len(chunk))})", conn, params=chunk))
    return pd.concat(frames, ignore_index=True)


def link_counters(conn: sqlite3.Connection, frame: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """Each ncu kernel's trace launch, op node and iteration (``match_trace_kernels``), and the counters
    summed per op node and per iteration: FLOPs per precision, time, Tensor Core use from the counters."""
    trace = _trace_kernels_named(conn, frame["kernel_name"]) if "kernel_name" in frame else pd.DataFrame()
    if trace.empty:
        return frame, {}
    pairs = match_trace_kernels(frame, trace).set_index("ncu_index")
    linked = frame.join(pairs[["trace_kernel_id", "geometry_match", "node_id", "op_name", "iteration"]])
    launches = pairs.reindex(frame.index)[["launch_ts", "pid", "rank"]]
    matched = linked[linked["trace_kernel_id"].notna()]
    flop_cols = ["flops_fp64", "flops_fp32", "flops_fp16", "flops_tensor"]

    def per(keys: list[str]) -> list[dict]:
        rows = matched.dropna(subset=keys[:1])
        if rows.empty:
            return []
        grouped = rows.groupby(keys, dropna=False, sort=True)
        out = grouped[flop_cols + ["time_ns"]].sum(min_count=1)
        out["kernels"] = grouped.size()
        out["tc_kernels"] = grouped["uses_tc"].sum()
        return [{k: _finite(v.item() if hasattr(v, "item") else v) for k, v in r.items()}
                for r in out.reset_index().to_dict("records")]

    links = {"matched_kernels": int(len(matched)), "ncu_kernels": int(len(frame)),
             "geometry_mismatches": int((matched["geometry_match"] == 0).sum()),
             "by_op": per(["node_id", "op_name"]), "by_iteration": per(["iteration"])}
    in_ranges = _kernels_in_ranges(conn, launches.loc[matched.index])
    if not in_ranges.empty:
        matched = matched.loc[in_ranges["row"]].assign(range_name=in_ranges["name"].to_numpy())
        links["by_range"] = per(["range_name"])
    return linked, links


def counters_by_ncu_nvtx(frame: pd.DataFrame) -> list[dict] | None:
    """The counters summed per NVTX range that ``ncu --nvtx`` recorded in its own CSV (``nvtx_ranges``): FLOPs
    per precision, ncu time, kernels and Tensor Core kernels; a kernel counts once in each distinct range open
    at its launch (nested ranges each count it). None when no kernel carries NVTX ranges (no trace needed)."""
    if "nvtx_ranges" not in frame or frame["nvtx_ranges"].isna().all():
        return None
    cells = frame["nvtx_ranges"].fillna("[]")
    codes, uniques = pd.factorize(cells)
    lists = pd.Series([sorted(set(json.loads(u))) for u in uniques], dtype=object)
    names = pd.Series(lists.to_numpy()[codes], index=frame.index).explode().dropna()
    if names.empty:
        return None
    flop_cols = ["flops_fp64", "flops_fp32", "flops_fp16", "flops_tensor"]
    rows = frame.loc[names.index, flop_cols + ["time_ns", "uses_tc"]].assign(range_name=names.to_numpy())
    grouped = rows.groupby("range_name", sort=True)
    out = grouped[flop_cols + ["time_ns"]].sum(min_count=1)
    out["kernels"] = grouped.size()
    out["tc_kernels"] = grouped["uses_tc"].sum()
    return [{k: _finite(v.item() if hasattr(v, "item") else v) for k, v in r.items()}
            for r in out.reset_index().to_dict("records")]


#: At most this many (kernel, range) pairs are compared at once when placing kernels in NVTX ranges.
_PAIRS_AT_ONCE = 4_000_000


def _kernels_in_ranges(conn: sqlite3.Connection, launches: pd.DataFrame) -> pd.DataFrame:
    """(row, name) for every annotation/NVTX range of the same process and rank that was open when a matched
    kernel was launched (nested ranges each count it once); profiler steps are left to by_iteration."""
    launches = launches.dropna(subset=["launch_ts"])
    if launches.empty or not _table_exists(conn, "ranges"):
        return pd.DataFrame(columns=["row", "name"])
    ranges = pd.read_sql_query('SELECT rank, pid, name, start, "end" FROM ranges '
                               "WHERE COALESCE(category, '') != 'step' AND \"end\" >= ? AND start <= ?", conn,
                               params=(int(launches["launch_ts"].min()), int(launches["launch_ts"].max())))
    if ranges.empty:
        return pd.DataFrame(columns=["row", "name"])
    out = []
    step = max(1, _PAIRS_AT_ONCE // len(ranges))
    t_all, pid_all, rank_all = (launches[c].to_numpy(dtype="float64") for c in ("launch_ts", "pid", "rank"))
    r_start, r_end = ranges["start"].to_numpy("float64"), ranges["end"].to_numpy("float64")
    r_pid, r_rank = ranges["pid"].to_numpy("float64"), ranges["rank"].to_numpy("float64")
    for at in range(0, len(launches), step):
        t, pid, rank = (a[at:at + step, None] for a in (t_all, pid_all, rank_all))
        inside = (r_start <= t) & (t <= r_end) & ((r_pid == pid) | np.isnan(pid) | np.isnan(r_pid)) \
            & ((r_rank == rank) | np.isnan(rank) | np.isnan(r_rank))
        k, r = np.nonzero(inside)
        out.append(pd.DataFrame({"row": launches.index[at + k], "name": ranges["name"].to_numpy()[r]}))
    return pd.concat(out, ignore_index=True)


def _ncu_frame(conn: sqlite3.Connection) -> pd.DataFrame:
    if not _table_exists(conn, "ncu_kernels"):
        return pd.DataFrame(columns=["kernel_id", "kernel_name", "device_name", "cc"])
    return pd.read_sql_query("SELECT * FROM ncu_kernels ORDER BY ncu_id", conn)


def roofline_report(conn: sqlite3.Connection, agg_id: int | None, gpu_spec_path: str | Path | None = None) -> dict:
    """The roofline of one aggregation (ops) and of the ncu-profiled kernels in the database, as JSON-ready
    dicts. Unknown GPU: ops and kernels still get FLOPs, bytes, intensities and achieved rates; bound and
    pct_of_ceiling are None and ``ceilings_error`` says how to supply a spec."""
    agg = _aggregation(conn, agg_id)
    kernels_frame = _ncu_frame(conn)
    gpu = _trace_gpu(conn, agg) or _ncu_gpu(kernels_frame)
    ceilings, reason = _ceilings(gpu, gpu_spec_path)
    rows = _op_rows(conn, agg["agg_id"]) if agg is not None and _table_exists(conn, "agg_ops") else pd.DataFrame()
    ops, unmodelled_ns = roofline_ops(rows, ceilings) if not rows.empty else ([], 0)
    total_ns = int(rows["gpu_time_ns"].sum()) if not rows.empty else 0
    kernels_frame, links = link_counters(conn, kernels_frame) if "time_ns" in kernels_frame else (kernels_frame, {})
    kernels = roofline_kernels(kernels_frame, ceilings) if "time_ns" in kernels_frame else []
    summary = _summary(ops, unmodelled_ns, total_ns)
    dram = ceilings.bandwidth.get("dram") if ceilings else None
    op_points = [{"time_ns": o["gpu_time_ns"], "flops": o["flops"], "bytes": o["bytes"],
                  "peak": o["ceiling_flops_per_s"], "precision": o["precision"], "tensor_cores": o["tensor_cores"],
                  "family": o["family"]} for o in ops]
    kernel_points = [{"time_ns": k["time_ns"], "flops": k["flops"], "bytes": k["bytes_dram"],
                      "peak": k["ceiling_flops_per_s"], "precision": k["precision"],
                      "tensor_cores": k["tensor_cores"], "family": None} for k in kernels]
    cc = (gpu or {}).get("cc")
    vendor, peaks = (ceilings.vendor, list(ceilings.flops)) if ceilings else (None, [])
    summary["utilization"] = (run_utilization(op_points, dram, cc, "ops", vendor, peaks)
                              or run_utilization(kernel_points, dram, cc, "ncu kernels", vendor, peaks))
    if ceilings is None:
        summary["memory_bound_gpu_time_ns"] = summary["math_bound_gpu_time_ns"] = None
    return {"agg_id": agg["agg_id"] if agg else None, "gpu": gpu,
            "ceilings": ceilings.to_dict() if ceilings else None, "ceilings_error": reason or None,
            "ops": [{k: _finite(v) for k, v in o.items()} for o in ops],
            "kernels": [{k: _finite(v) for k, v in k_.items()} for k_ in kernels],
            "summary": summary, "counters_linked": links or None,
            "counters_by_nvtx": counters_by_ncu_nvtx(kernels_frame)}


def roofline_tables(report: dict) -> dict[str, pd.DataFrame]:
    """The report's ops and kernels as DataFrames (for CSV / Parquet exports and the Python API)."""
    return {"roofline_ops": pd.DataFrame(report["ops"]), "roofline_kernels": pd.DataFrame(report["kernels"])}
