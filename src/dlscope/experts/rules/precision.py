"""Tensor Core precision rules: FP32 where AMP would help, and FP16/BF16 ops that still miss Tensor Cores.

A kernel's precision is its launching op's input dtype, or, when the trace has no dtypes (recorded without
record_shapes), the one its name tells (``experts.precision_names``, data/kernel_precision.json). FP32 on
Tensor Cores is TF32, a different case from FP32 on CUDA cores: already on Tensor Cores, at half the
FP16/BF16 peak. Savings use the GPU's datasheet peaks when dlscope knows the GPU (FP16 Tensor Core peak over
the peak the kernel ran at: FP32 CUDA cores, or TF32 Tensor Cores); for an unknown GPU the saving is the
ceiling, the kernels' whole time.
"""

from __future__ import annotations

import numpy as np

from ..context import HALF
from ..evidence import fmt_ns, iterations_of, longest_ranges, plural, short_kernel, top_by
from ..finding import Finding
from ..registry import rule
from ..spans import Span, distinct, length


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


def _saving(ctx, kernels, precision: str, on_tc: np.ndarray | None = None, tf32_ratio: float | None = None) -> int:
    """Σ dur × speedup share, never more than the kernels' union inside the window. ``on_tc`` (default:
    the kernels' uses_tc) says which peak each ran at. ``tf32_ratio``: FP16/TF32 peak ratio to use for FP32
    kernels on Tensor Cores when the datasheet does not give both peaks (never the whole-time ceiling:
    TF32 kernels are already on Tensor Cores)."""
    flags = np.asarray(kernels["uses_tc"], dtype=bool) if on_tc is None else np.asarray(on_tc, dtype=bool)
    share = speedup_factor(ctx, precision, flags)
    if tf32_ratio and not _known_tf32(ctx):
        share[flags] = 1.0 - 1.0 / tf32_ratio
    weighted = float((np.asarray(kernels["dur"]) * share).sum())
    lo, hi = ctx.window
    union = length(Span(np.clip(kernels["start"], lo, hi), np.clip(kernels["end"], lo, hi)))
    return int(min(weighted, union))


def _basis(ctx) -> str:
    c = ctx.ceilings
    return (f"datasheet peaks of {c.name}" if c is not None and c.peak("fp16", True) else
            "ceiling: the GPU is not in dlscope's table, so the whole kernel time is counted")


def _tf32_gain(ctx) -> str:
    """'2.0× the peak (156 → 312 TFLOP/s on A100)' from the datasheet, or a plain 'twice the peak'. FP32 on the
    matrix units is TF32 on NVIDIA, FP32 itself on AMD matrix cores (``peak("fp32", True)`` gives either)."""
    c = ctx.ceilings
    tf32, half = (c.peak("fp32", True), c.peak("fp16", True)) if c is not None else (None, None)
    if not tf32 or not half:
        return f"about {ctx.config['amp_not_enabled']['tf32_to_half_peak_ratio']:g}× the peak"
    return f"{half[1] / tf32[1]:.1f}× the peak ({tf32[1] / 1e12:,.0f} → {half[1] / 1e12:,.0f} TFLOP/s on {c.name})"


AMP_ADVICE = {
    "training": "Enable automatic mixed precision: wrap the forward pass and loss in "
                "torch.autocast(device_type='cuda', dtype=torch.bfloat16) (or float16 with torch.amp.GradScaler) "
                "so GEMMs and convolutions run on BF16/FP16 Tensor Cores.",
    "inference": "Run the model in reduced precision: torch.autocast(device_type='cuda', dtype=torch.bfloat16) "
                 "around the forward pass, or model.to(torch.bfloat16) / .half() (check accuracy), or an "
                 "inference engine (TensorRT, torch.compile) with FP16/BF16 enabled.",
}


#: what the precision rules read of the kernels
_COLUMNS = ["name", "start", "end", "dur", "iteration", "uses_tc", "precision", "precision_source", "eligible_root",
            "root_node", "replayed"]


def _kernels(ctx, rows: np.ndarray) -> dict[str, np.ndarray]:
    """The :data:`_COLUMNS` of the rank's kernel facts at ``rows`` (a mask), as numpy arrays."""
    return {c: ctx.col("kernel_facts", c)[rows] for c in _COLUMNS}


def _rows(kernels: dict[str, np.ndarray], rows: np.ndarray) -> dict[str, np.ndarray]:
    return {c: values[rows] for c, values in kernels.items()}


@rule("amp_not_enabled", gpu=True)
def amp_not_enabled(ctx, cfg):
    """Eligible ops computing in FP32: on CUDA cores (the FP32 peak) or on TF32 Tensor Cores (half the
    FP16/BF16 peak). Precision is the op's input dtype, else the kernel's name (``precision_names``)."""
    eligible = ctx.col("kernel_facts", "eligible_root") >= 0
    if not eligible.any():
        return None
    cc = ctx.compute_capability
    if cc is not None and cc < cfg["min_compute_capability"]:
        return None
    elig = _kernels(ctx, eligible)
    prec, on_tc = elig["precision"], elig["uses_tc"]
    is_single = (prec == "fp32") | (prec == "tf32")
    single, single_tc = _rows(elig, is_single), ((prec == "tf32") | on_tc)[is_single]  # FP32 on Tensor Cores is TF32
    half_time = int(elig["dur"][np.isin(prec, HALF)].sum())
    single_time, all_time = int(single["dur"].sum()), int(ctx.col("kernel_facts", "dur").sum())
    if not is_single.any() or not all_time or single_time < cfg["min_eligible_share"] * all_time:
        return None
    if half_time > cfg["max_half_share"] * int(elig["dur"].sum()):
        return None
    saving = _saving(ctx, single, "fp32", single_tc, cfg["tf32_to_half_peak_ratio"])
    fp32_time, tf32_time = int(single["dur"][~single_tc].sum()), int(single["dur"][single_tc].sum())
    by_name = int(single["dur"][single["precision_source"] == "name"].sum())
    n = ctx.config["evidence"]["max_items"]
    parts = []
    units = ctx.matrix_units.plural
    amd = ctx.ceilings is not None and ctx.ceilings.vendor == "AMD"
    if fp32_time:
        parts.append(f"{fmt_ns(fp32_time)} on {'vector units' if amd else 'CUDA cores'}, not using {units}")
    if tf32_time:
        as_what = ctx.ceilings.matrix_precision("fp32").upper() if ctx.ceilings is not None else "TF32"
        parts.append(f"{fmt_ns(tf32_time)} as {as_what} on {units} already, where BF16/FP16 would give "
                     f"{_tf32_gain(ctx)}")
    replayed = int(single["dur"][single["replayed"]].sum())   # judged by name too, for another reason
    no_dtypes = by_name - replayed
    how = (", precision read from the kernel names as the trace has no input dtypes" if no_dtypes == single_time else
           f", the precision of {fmt_ns(no_dtypes)} read from the kernel names" if no_dtypes else "")
    if replayed:
        how += (f", {'all' if replayed == single_time else fmt_ns(replayed)} replayed from CUDA graphs and judged by "
                "the kernels' names (the ops that captured them are not in the trace)")
    none_or_few = "none are" if half_time == 0 else "almost none are"
    # a graph replay's op node is not a Tensor Core-eligible op (PRODUCT.md; the summary's Model line counts it so):
    # it is named for what it is, not counted among the eligible ops
    replays = len(distinct(single["root_node"][single["replayed"]]))
    n_ops = len(distinct(single["root_node"][~single["replayed"]]))
    who = ([f"{plural(n_ops, 'op')} {'was' if n_ops == 1 else 'were'} eligible for FP16/BF16 {units}"] if n_ops else [])
    if replays:
        who.append(f"{plural(replays, 'CUDA graph replay')} ran matrix products eligible for FP16/BF16 {units}")
    return Finding(
        "amp_not_enabled",
        f"{' and '.join(who)} but {none_or_few} "
        f"using FP16/BF16: their kernels ran {fmt_ns(single_time)} in FP32 ({100 * single_time / all_time:.1f}% of "
        f"all kernel time){how}: {', and '.join(parts)}.",
        f"{ctx.advice('amp_not_enabled', AMP_ADVICE[ctx.run_kind])} See {ctx.link('amp_not_enabled')}",
        saving,
        {"node_ids": top_by(single, "root_node", "dur", n), "kernels": top_by(single, "name", "dur", n),
         "iterations": iterations_of(single["iteration"]),
         "time_ranges": longest_ranges(single["start"], single["end"], n),
         "eligible_fp32_kernel_time_ns": fp32_time, "eligible_tf32_kernel_time_ns": tf32_time,
         "eligible_half_kernel_time_ns": half_time, "precision_from_kernel_names_ns": by_name,
         "run_kind": ctx.run_kind, **({"replayed_from_cuda_graphs_ns": replayed} if replayed else {}),
         "saving_basis": _basis(ctx) + (f"; TF32 kernels: the FP16/TF32 peak ratio, {cfg['tf32_to_half_peak_ratio']:g}×"
                                        if tf32_time and not _known_tf32(ctx) else "")})


def _known_tf32(ctx) -> bool:
    """Both peaks of the FP32-on-matrix-units → FP16 step are in the table (TF32 on NVIDIA, FP32 MFMA on AMD)."""
    c = ctx.ceilings
    return c is not None and bool(c.peak("fp32", True)) and bool(c.peak("fp16", True))


@rule("tc_eligible_not_using_tc", gpu=True)
def tc_eligible_not_using_tc(ctx, cfg):
    half = _kernels(ctx, (ctx.col("kernel_facts", "eligible_root") >= 0)
                    & ctx.col_in("kernel_facts", "precision", HALF))
    if not len(half["dur"]):
        return None
    roots = half["eligible_root"]
    missing = ~np.isin(roots, roots[half["uses_tc"]])  # ops none of whose kernels used Tensor Cores
    bad = _rows(half, missing)
    bad_time, half_time = int(bad["dur"].sum()), int(half["dur"].sum())
    if not missing.any() or bad_time < cfg["min_share"] * half_time:
        return None
    values, counts = np.unique(bad["precision"], return_counts=True)
    precision = values[counts == counts.max()][0]  # the mode (the first in order on a tie)
    saving = _saving(ctx, bad, precision)
    if ctx.pct(saving) < cfg["min_pct"]:
        return None
    n = ctx.config["evidence"]["max_items"]
    n_ops = len(distinct(bad["root_node"]))
    names = ", ".join(short_kernel(k) for k in top_by(bad, "name", "dur", 3))
    units = ctx.matrix_units
    return Finding(
        "tc_eligible_not_using_tc",
        f"{plural(n_ops, 'op')} ran in FP16/BF16 but none of their kernels used {units.plural}: "
        f"{fmt_ns(bad_time)} ({100 * bad_time / half_time:.1f}% of the half-precision eligible kernel time), "
        f"mostly {names}.",
        "Check the shapes and layouts of these ops (see tc_shape_alignment), update cuDNN/cuBLAS, and for "
        f"convolutions try torch.backends.cudnn.benchmark = True and channels_last so {units.singular} kernels are "
        f"chosen. See {ctx.link('tc_eligible_not_using_tc')}",
        saving,
        {"node_ids": top_by(bad, "root_node", "dur", n), "kernels": top_by(bad, "name", "dur", n),
         "iterations": iterations_of(bad["iteration"]), "time_ranges": longest_ranges(bad["start"], bad["end"], n),
         "saving_basis": _basis(ctx)})
