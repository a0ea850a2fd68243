"""Tensor Core shape alignment (seed 003's table): GEMM M/N/K and convolution channel counts should be
multiples of 8 for FP16/BF16 and 16 for INT8/FP8, read from the ops' recorded input shapes.

The saving compares each misaligned op with aligned ops of the same family and precision and of similar
size (FLOPs within a factor) in the same profile: the time above what the aligned ops' FLOP rate would
need. Without an aligned reference of similar size the op adds nothing to the estimate.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources

import numpy as np
import pandas as pd

from ...roofline.flops import op_cost
from ..evidence import fmt_ns, iterations_of, plural, top_by
from ..finding import Finding
from ..registry import rule


@lru_cache(maxsize=1)
def _models() -> dict:
    return json.loads(resources.files("dlscope.data").joinpath("roofline_ops.json").read_text())["ops"]


def _model(name: str) -> dict | None:
    spec = _models().get(name if "::" in name else f"aten::{name}")
    return spec if spec and spec.get("family") in ("gemm", "conv") else None


def _shape(shapes: list, index) -> list[int] | None:
    if index is None or index >= len(shapes):
        return None
    s = shapes[index]
    return [int(x) for x in s] if isinstance(s, list) and s and all(isinstance(x, int) for x in s) else None


def tc_dims(name: str, input_shapes: str) -> dict[str, int] | None:
    """The dimensions Tensor Cores constrain: GEMM M, N, K; convolution input/output channels."""
    spec = _model(name)
    if spec is None or not input_shapes:
        return None
    try:
        shapes = json.loads(input_shapes)
    except ValueError:
        return None
    if spec["family"] == "conv":
        w = _shape(shapes, spec.get("weight"))
        if not w or len(w) < 3:
            return None
        return {"C": w[1], "K": w[0]} if not spec.get("transposed_always") else {"C": w[0], "K": w[1]}
    x, w = _shape(shapes, spec.get("a")), _shape(shapes, spec.get("b"))
    if not x or not w:
        return None
    if spec.get("b_transposed"):
        if len(w) != 2:
            return None
        return {"M": int(np.prod(x[:-1])) if len(x) > 1 else 1, "N": w[0], "K": w[1]}
    x2 = [1, *x] if len(x) == 1 else x
    w2 = [*w, 1] if len(w) == 1 else w
    return {"M": x2[-2], "N": w2[-1], "K": x2[-1]}


def _candidates(ctx, multiples: dict) -> pd.DataFrame:
    """One modelled op per eligible root instance (the root itself, else its shallowest modelled
    descendant), with the root's kernel time, precision and FLOPs."""
    eligible = (ctx.col("ops", "eligible_root") >= 0) & ctx.col_in("ops", "precision", multiples)
    if not eligible.any():
        return pd.DataFrame()
    kf = ctx.kernel_facts
    ops = ctx.ops[eligible]
    modelled = ops[[_model(n) is not None and s != "" for n, s in zip(ops["name"], ops["input_shapes"])]]
    modelled = modelled.sort_values("depth").drop_duplicates("eligible_root")
    time = kf[kf["eligible_root"] >= 0].groupby("eligible_root")["dur"].sum()
    modelled = modelled.assign(time=modelled["eligible_root"].map(time).fillna(0).astype(np.int64))
    modelled = modelled[modelled["time"] > 0]
    dims, flops, family = [], [], []
    for op in modelled.itertuples(index=False):
        dims.append(tc_dims(op.name, op.input_shapes))
        cost = op_cost(op.name, op.input_shapes, op.input_dtypes, op.concrete_inputs)
        flops.append(cost.flops if cost else 0)
        model = _model(op.name)
        assert model is not None  # ``modelled`` holds only ops with a model
        family.append(model["family"])
    out = modelled.assign(dims=dims, flops=flops, family=family)
    return out[out["dims"].notna()]


def _excess(c: pd.DataFrame, bad: np.ndarray, window: float) -> np.ndarray:
    """Per misaligned op node: time above what aligned nodes of its family/precision/size would take."""
    nodes = c.groupby("node_id").agg(time=("time", "sum"), flops=("flops", "sum"), calls=("time", "size"),
                                     family=("family", "first"), precision=("precision", "first"),
                                     bad=("bad", "first"))
    nodes["per_call"] = nodes["flops"] / nodes["calls"]
    good = nodes[~nodes["bad"] & (nodes["flops"] > 0)]
    excess = pd.Series(0.0, index=nodes.index)
    for node, row in nodes[nodes["bad"] & (nodes["flops"] > 0)].iterrows():
        ref = good[(good["family"] == row["family"]) & (good["precision"] == row["precision"])
                   & (good["per_call"] >= row["per_call"] / window) & (good["per_call"] <= row["per_call"] * window)]
        if ref.empty:
            continue
        rate = ref["flops"].sum() / ref["time"].sum()
        excess[node] = max(0.0, row["time"] - row["flops"] / rate)
    return excess


@rule("tc_shape_alignment", gpu=True)
def tc_shape_alignment(ctx, cfg):
    multiples = cfg["multiple"]
    c = _candidates(ctx, multiples)
    if c.empty:
        return None
    need = c["precision"].map(multiples).to_numpy()
    bad = np.array([any(v % m for v in d.values()) for d, m in zip(c["dims"], need)])
    c = c.assign(bad=bad)
    bad_rows = c[c["bad"]]
    bad_time, all_time = int(bad_rows["time"].sum()), int(c["time"].sum())
    if bad_rows.empty or bad_time < cfg["min_share"] * all_time:
        return None
    excess = _excess(c, bad, cfg["flop_ratio_window"])
    saving = int(excess.sum())
    n = ctx.config["evidence"]["max_items"]
    worst = bad_rows.sort_values("time", ascending=False).drop_duplicates("node_id")
    examples = "; ".join(
        f"{r.name} " + ", ".join(f"{k}={v}" for k, v in r.dims.items() if v % multiples[r.precision]) +
        f" ({r.precision}, needs multiples of {multiples[r.precision]})" for r in worst.head(3).itertuples())
    root_ids = bad_rows["eligible_root"].to_numpy()
    kf = ctx.kernel_facts
    bk = kf[kf["eligible_root"].isin(root_ids)]
    unit = ctx.matrix_units.singular
    return Finding(
        "tc_shape_alignment",
        f"{plural(worst['node_id'].nunique(), unit.replace(' ', '-') + '-eligible op')} have dimensions that are "
        f"not multiples of the {unit} tile ({fmt_ns(bad_time)}, {100 * bad_time / all_time:.1f}% of their kind's "
        f"kernel time): {examples}.",
        "Pad the dimensions to the multiple: vocabulary and hidden sizes, sequence lengths (pad batches to a "
        "multiple of 8), batch size, and channel counts (pad input channels, e.g. 3 -> 4 or 8 with NHWC). "
        f"See {ctx.link('tc_shape_alignment')}",
        saving,
        {"node_ids": [int(x) for x in worst["node_id"].head(n)], "kernels": top_by(bk, "name", "dur", n),
         "iterations": iterations_of(bad_rows["iteration"]),
         "time_ranges": [[int(s), int(e)] for s, e in zip(bad_rows.sort_values("time", ascending=False)["start"],
                                                          bad_rows.sort_values("time", ascending=False)["end"])][:n],
         "shapes": [{"node_id": int(r.node_id), "op": r.name, "precision": r.precision, "dims": r.dims}
                    for r in worst.head(n).itertuples()],
         "saving_basis": "time above the FLOP rate of aligned ops of the same family, precision and size"})
