"""Tensor Core precision rules: FP32 where AMP would help, and FP16/BF16 ops that still miss Tensor Cores.

Savings use the GPU's datasheet peaks when dlscope knows the GPU (FP16 Tensor Core peak over the peak the
kernel ran at: FP32 CUDA cores, or TF32 Tensor Cores for kernels that already use them); for an unknown
GPU the saving is the ceiling, the kernels' whole time.
"""

from __future__ import annotations

import numpy as np

from ..context import HALF
from ..evidence import fmt_ns, iterations_of, longest_ranges, plural, short_kernel, top_by
from ..finding import Finding
from ..registry import rule
from ..spans import Span, length


def speedup_factor(ctx, precision: str, on_tc: np.ndarray) -> np.ndarray:
    """Per kernel, the share of its time FP16 Tensor Cores would save: 1 - peak_now / peak_fp16_tc."""
    ceil = ctx.ceilings
    out = np.ones(len(on_tc))
    if ceil is None:
        return out
    target = ceil.peak("fp16", True)
    if target is None:
        return out
    for flag in (False, True):
        now = ceil.peak(precision, flag)
        if now is not None:
            out[on_tc == flag] = max(0.0, 1.0 - now[1] / target[1])
    return out


def _saving(ctx, kernels, precision: str) -> int:
    """Σ dur × speedup share, never more than the kernels' union inside the window."""
    weighted = float((kernels["dur"].to_numpy() * speedup_factor(ctx, precision,
                                                                 kernels["uses_tc"].to_numpy(bool))).sum())
    lo, hi = ctx.window
    union = length(Span(kernels["start"].clip(lo, hi), kernels["end"].clip(lo, hi)))
    return int(min(weighted, union))


def _basis(ctx) -> str:
    c = ctx.ceilings
    return (f"datasheet peaks of {c.name}" if c is not None and c.peak("fp16", True) else
            "ceiling: the GPU is not in dlscope's table, so the whole kernel time is counted")


@rule("amp_not_enabled")
def amp_not_enabled(ctx, cfg):
    kf = ctx.kernel_facts
    elig = kf[kf["eligible_root"] >= 0]
    if elig.empty:
        return None
    cc = ctx.compute_capability
    if cc is not None and cc < cfg["min_compute_capability"]:
        return None
    fp32 = elig[elig["precision"] == "fp32"]
    half_time = int(elig.loc[elig["precision"].isin(HALF), "dur"].sum())
    fp32_time, all_time = int(fp32["dur"].sum()), int(kf["dur"].sum())
    if fp32.empty or fp32_time < cfg["min_eligible_share"] * all_time:
        return None
    if half_time > cfg["max_half_share"] * int(elig["dur"].sum()):
        return None
    n_nodes = fp32["root_node"].nunique()
    saving = _saving(ctx, fp32, "fp32")
    n = ctx.config["evidence"]["max_items"]
    none_or_few = "none are" if half_time == 0 else "almost none are"
    units = ctx.matrix_units.plural
    return Finding(
        "amp_not_enabled",
        f"{plural(n_nodes, 'op')} were eligible to use {units} but {none_or_few} using FP16/BF16: their "
        f"kernels ran {fmt_ns(fp32_time)} in FP32 ({100 * fp32_time / all_time:.1f}% of all kernel time).",
        "Enable automatic mixed precision: wrap the forward pass and loss in torch.autocast(device_type='cuda', "
        "dtype=torch.bfloat16) (or float16 with torch.amp.GradScaler) so GEMMs and convolutions run on "
        f"{units}. See {ctx.link('amp_not_enabled')}",
        saving,
        {"node_ids": top_by(fp32, "root_node", "dur", n), "kernels": top_by(fp32, "name", "dur", n),
         "iterations": iterations_of(fp32["iteration"]),
         "time_ranges": longest_ranges(fp32["start"], fp32["end"], n),
         "eligible_fp32_kernel_time_ns": fp32_time, "eligible_half_kernel_time_ns": half_time,
         "saving_basis": _basis(ctx)})


@rule("tc_eligible_not_using_tc")
def tc_eligible_not_using_tc(ctx, cfg):
    kf = ctx.kernel_facts
    half = kf[(kf["eligible_root"] >= 0) & kf["precision"].isin(HALF)]
    if half.empty:
        return None
    uses = half.groupby("eligible_root")["uses_tc"].any()
    missing = uses.index[~uses.to_numpy()]
    bad = half[half["eligible_root"].isin(missing)]
    bad_time, half_time = int(bad["dur"].sum()), int(half["dur"].sum())
    if bad.empty or bad_time < cfg["min_share"] * half_time:
        return None
    precision = bad["precision"].mode().iloc[0]
    saving = _saving(ctx, bad, precision)
    if ctx.pct(saving) < cfg["min_pct"]:
        return None
    n = ctx.config["evidence"]["max_items"]
    names = ", ".join(short_kernel(k) for k in top_by(bad, "name", "dur", 3))
    units = ctx.matrix_units
    return Finding(
        "tc_eligible_not_using_tc",
        f"{plural(bad['root_node'].nunique(), 'op')} ran in FP16/BF16 but none of their kernels used {units.plural}: "
        f"{fmt_ns(bad_time)} ({100 * bad_time / half_time:.1f}% of the half-precision eligible kernel time), "
        f"mostly {names}.",
        "Check the shapes and layouts of these ops (see tc_shape_alignment), update cuDNN/cuBLAS, and for "
        f"convolutions try torch.backends.cudnn.benchmark = True and channels_last so {units.singular} kernels are "
        f"chosen. See {ctx.link('tc_eligible_not_using_tc')}",
        saving,
        {"node_ids": top_by(bad, "root_node", "dur", n), "kernels": top_by(bad, "name", "dur", n),
         "iterations": iterations_of(bad["iteration"]), "time_ranges": longest_ranges(bad["start"], bad["end"], n),
         "saving_basis": _basis(ctx)})
