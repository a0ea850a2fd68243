"""cuDNN autotuning off (DLProf): convolutions ran with torch.backends.cudnn.benchmark = False.

The profile can tell in two ways: the ``benchmark`` argument recorded in a convolution op's concrete
inputs (Kineto with record_shapes), or cuDNN API calls (nsys with cuDNN tracing: cudnnGet*Algorithm
without cudnnFind*Algorithm). Otherwise the rule stays silent.

The profile does not hold the other algorithms' times, so the saving is priced from the run's own
convolutions: a convolution node slower than the other nodes of the same precision and kernel size with
similar FLOPs per call (their FLOP rate, from the recorded shapes) is one the heuristics served badly;
autotuning is worth at least bringing it up to that rate. Without shapes or peers there is no estimate and,
a finding needing a saving, no finding.
"""

from __future__ import annotations

import json

import pandas as pd

from ...roofline.flops import op_cost
from ..evidence import fmt_ns, iterations_of, longest_ranges, plural, top_by
from ..finding import Finding
from ..registry import rule
from .shapes import _model, _shape

_FALSE = {"false", "0", "False"}
_TRUE = {"true", "1", "True"}


def _flag(concrete: str, index: int) -> bool | None:
    try:
        values = json.loads(concrete)
    except (TypeError, ValueError):
        return None
    if not isinstance(values, list) or index >= len(values):
        return None
    v = str(values[index]).strip()
    return False if v in _FALSE else True if v in _TRUE else None


def _kernel_size(name: str, input_shapes: str) -> str | None:
    """The convolution's spatial kernel size ('3x3') from its weight shape ([K, C, *kernel])."""
    spec = _model(name)
    if spec is None or spec["family"] != "conv" or not input_shapes:
        return None
    try:
        w = _shape(json.loads(input_shapes), spec.get("weight"))
    except ValueError:
        return None
    return "x".join(str(x) for x in w[2:]) if w and len(w) >= 3 else None


def _excess(nodes: pd.DataFrame, window: float) -> pd.Series:
    """Per convolution node run with benchmark off: its kernel time above what the other convolution nodes
    of the same precision and kernel size, with per-call FLOPs within ``window``×, reach (their summed
    FLOPs over their summed time). 0 without such peers."""
    out = pd.Series(0.0, index=nodes.index)
    ok = nodes[(nodes["flops"] > 0) & (nodes["time"] > 0)]
    for node, row in ok[ok["off"]].iterrows():
        peers = ok[(ok.index != node) & (ok["precision"] == row["precision"]) & (ok["ksize"] == row["ksize"])
                   & (ok["per_call"] >= row["per_call"] / window) & (ok["per_call"] <= row["per_call"] * window)]
        if peers.empty:
            continue
        rate = peers["flops"].sum() / peers["time"].sum()
        out[node] = max(0.0, row["time"] - row["flops"] / rate)
    return out


def _nodes(ctx, convs: pd.DataFrame, off_roots: set) -> pd.DataFrame:
    """One row per convolution op node (of the outermost eligible op around each conv call): kernel time,
    FLOPs, calls, precision, kernel size, and whether it ran with benchmark off."""
    ops, k = ctx.ops_all, ctx.kernel_facts
    time = k[k["eligible_root"] >= 0].groupby("eligible_root")["dur"].sum()
    roots = ops.reindex(pd.unique(convs["eligible_root"][convs["eligible_root"] >= 0])).dropna(subset=["name"])
    rows = []
    for r in roots.itertuples(index=False):
        cost = op_cost(r.name, r.input_shapes, r.input_dtypes, r.concrete_inputs)
        rows.append({"node_id": int(r.node_id), "time": int(time.get(r.op_id, 0)), "flops": cost.flops if cost else 0,
                     "precision": r.precision, "ksize": _kernel_size(r.name, r.input_shapes),
                     "off": r.op_id in off_roots})
    frame = pd.DataFrame(rows, columns=["node_id", "time", "flops", "precision", "ksize", "off"])
    nodes = frame.groupby("node_id").agg(time=("time", "sum"), flops=("flops", "sum"), calls=("time", "size"),
                                         precision=("precision", "first"), ksize=("ksize", "first"),
                                         off=("off", "any"))
    nodes["per_call"] = nodes["flops"] / nodes["calls"]
    return nodes


ADVICE = {"training": "Set torch.backends.cudnn.benchmark = True before training",
          "inference": "Set torch.backends.cudnn.benchmark = True before running the model"}


@rule("cudnn_benchmark_off", gpu=True)
def cudnn_benchmark_off(ctx, cfg):
    conv = ctx.col_in("ops", "name", cfg["benchmark_arg"])
    if not conv.any():
        return None
    convs = ctx.ops[conv]
    flags = [_flag(c, cfg["benchmark_arg"][name]) for name, c in zip(convs["name"], convs["concrete_inputs"])]
    finds = ctx.names_match("api_calls", cfg["find_api_pattern"]).any()
    gets = ctx.names_match("api_calls", cfg["get_api_pattern"]).any()
    off_ops = convs[[f is False for f in flags]]
    if any(f is True for f in flags) or finds:
        return None
    if off_ops.empty and not gets:
        return None                                    # the profile cannot tell
    off = off_ops if not off_ops.empty else convs
    nodes = _nodes(ctx, convs, set(off["eligible_root"]))
    excess = _excess(nodes, cfg["flop_ratio_window"])
    saving = int(excess.sum())
    slow = excess[excess > 0].sort_values(ascending=False)
    k = ctx.kernel_facts
    ck = k[k["eligible_root"].isin(set(off["eligible_root"]))]
    n = ctx.config["evidence"]["max_items"]
    how = ("the convolution ops' recorded benchmark=False argument" if not off_ops.empty
           else "cuDNN heuristics calls (cudnnGet*Algorithm) without autotuning (cudnnFind*Algorithm)")
    return Finding(
        "cudnn_benchmark_off",
        f"Convolutions ran with torch.backends.cudnn.benchmark off (seen from {how}): "
        f"{plural(len(slow), 'convolution op')} ran below the FLOP rate that convolutions of the same kernel size "
        f"and precision reach in this run, {fmt_ns(saving)} of {fmt_ns(int(ck['dur'].sum()))} convolution kernel "
        "time; cuDNN's heuristics may have picked a slower algorithm for their shapes.",
        f"{ADVICE[ctx.run_kind]}, so cuDNN times its algorithms and keeps the fastest per shape; it pays off when "
        f"input shapes are stable. See {ctx.link('cudnn_benchmark_off')}",
        saving,
        {"node_ids": [int(x) for x in slow.index[:n]], "kernels": top_by(ck, "name", "dur", n),
         "iterations": iterations_of(ck["iteration"]), "time_ranges": longest_ranges(ck["start"], ck["end"], n),
         "conv_kernel_time_ns": int(ck["dur"].sum()),
         "saving_basis": "per convolution node: kernel time above the FLOP rate of the other convolution nodes "
                         "of the same precision and kernel size (per-call FLOPs within flop_ratio_window) in "
                         "this run"})
