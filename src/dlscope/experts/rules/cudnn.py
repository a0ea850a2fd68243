"""cuDNN autotuning off (DLProf): convolutions ran with torch.backends.cudnn.benchmark = False.

The profile can tell in two ways: the ``benchmark`` argument recorded in a convolution op's concrete
inputs (Kineto with record_shapes), or cuDNN API calls (nsys with cuDNN tracing: cudnnGet*Algorithm
without cudnnFind*Algorithm). Otherwise the rule stays silent. The saving cannot be priced from the
profile (it does not contain the alternative algorithms' times); the evidence gives the convolutions'
kernel time as the ceiling.
"""

from __future__ import annotations

import json
import re

from ..context import names_matching
from ..evidence import fmt_ns, iterations_of, longest_ranges, node_ids, top_by
from ..finding import Finding
from ..registry import rule

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


@rule("cudnn_benchmark_off")
def cudnn_benchmark_off(ctx, cfg):
    ops = ctx.ops
    convs = ops[ops["name"].isin(list(cfg["benchmark_arg"]))]
    if convs.empty:
        return None
    flags = [_flag(c, cfg["benchmark_arg"][name]) for name, c in zip(convs["name"], convs["concrete_inputs"])]
    api = ctx.api_calls
    finds = names_matching(api["name"], re.compile(cfg["find_api_pattern"])).any()
    gets = names_matching(api["name"], re.compile(cfg["get_api_pattern"])).any()
    off_ops = convs[[f is False for f in flags]]
    if any(f is True for f in flags) or finds:
        return None
    if off_ops.empty and not gets:
        return None                                    # the profile cannot tell
    k = ctx.kernel_facts
    conv_roots = set((off_ops if not off_ops.empty else convs)["eligible_root"])
    ck = k[k["eligible_root"].isin(conv_roots)]
    n = ctx.config["evidence"]["max_items"]
    how = ("the convolution ops' recorded benchmark=False argument" if not off_ops.empty
           else "cuDNN heuristics calls (cudnnGet*Algorithm) without autotuning (cudnnFind*Algorithm)")
    return Finding(
        "cudnn_benchmark_off",
        f"Convolution operations were detected ({fmt_ns(int(ck['dur'].sum()))} of kernel time) but "
        f"torch.backends.cudnn.benchmark was not enabled (seen from {how}).",
        "Set torch.backends.cudnn.benchmark = True before training so cuDNN times its algorithms and keeps the "
        "fastest per shape; it pays off when input shapes are stable. "
        f"See {ctx.link('cudnn_benchmark_off')}",
        None,
        {"node_ids": node_ids(ctx, (off_ops if not off_ops.empty else convs)["op_id"]),
         "kernels": top_by(ck, "name", "dur", n), "iterations": iterations_of(ck["iteration"]),
         "time_ranges": longest_ranges(ck["start"], ck["end"], n), "conv_kernel_time_ns": int(ck["dur"].sum()),
         "saving_basis": "not priceable from the profile; conv_kernel_time_ns is the ceiling"})
