"""Iteration rules: outlier iterations inside the aggregated range (DLProf's "contains a lot of
variation"), and profiles that could not be split into iterations at all.

Variation: an iteration is an outlier when its duration differs from the median by more than
``tolerance`` (a share of the median). The suggested range is the longest run of consecutive steady
iterations. The saving is how much the outliers add to the aggregated time beyond the median: the
distortion the steady range removes from every per-iteration figure.
"""

from __future__ import annotations

import numpy as np

from ..evidence import fmt_ns
from ..finding import Finding
from ..registry import rule


def steady_range(durations: np.ndarray, iterations: np.ndarray, tolerance: float) -> tuple[int, int, np.ndarray]:
    """(first, last) iteration of the longest run of non-outliers, and the outlier mask."""
    med = float(np.median(durations))
    outlier = np.abs(durations - med) > tolerance * med
    best, cur_start, best_len = (0, -1), None, 0
    for i, bad in enumerate(list(outlier) + [True]):
        if not bad and cur_start is None:
            cur_start = i
        elif bad and cur_start is not None:
            if i - cur_start > best_len:
                best, best_len = (cur_start, i - 1), i - cur_start
            cur_start = None
    if best_len == 0:
        return int(iterations[0]), int(iterations[-1]), outlier
    return int(iterations[best[0]]), int(iterations[best[1]]), outlier


@rule("iteration_variance")
def iteration_variance(ctx, cfg):
    its = ctx.iterations
    if ctx.whole_profile or len(its) < cfg["min_iterations"]:
        return None
    d = its["duration_ns"].to_numpy(np.float64)
    numbers = its["iteration"].to_numpy(np.int64)
    first, last, outlier = steady_range(d, numbers, cfg["tolerance"])
    if not outlier.any() or last <= first:
        return None
    med = float(np.median(d))
    saving = int(np.clip(d[outlier] - med, 0, None).sum())
    if ctx.pct(saving) < cfg["min_pct"]:
        return None
    worst = int(np.argmax(np.abs(d - med)))
    listed = ", ".join(f"{int(i)} ({fmt_ns(float(x))})" for i, x in zip(numbers[outlier], d[outlier]))
    return Finding(
        "iteration_variance",
        f"The aggregated iteration range {int(numbers[0])} to {int(numbers[-1])} contains a lot of variation: "
        f"median iteration {fmt_ns(med)}, outliers {listed}; iteration {int(numbers[worst])} is "
        f"{100 * (d[worst] - med) / med:+.0f}% off the median.",
        f"Limit the aggregation to the steady range: dlscope aggregate PROFILE.sqlite --iter-start {first} "
        f"--iter-stop {last} (or skip warm-up with torch.profiler.schedule(wait=1, warmup=1, ...)). "
        f"See {ctx.link('iteration_variance')}",
        saving,
        {"iterations": [int(i) for i in numbers[outlier]],
         "time_ranges": [[int(s), int(e)] for s, e in zip(its["start"][outlier], its["end"][outlier])],
         "steady_iter_start": first, "steady_iter_stop": last, "median_iteration_ns": int(med)})


@rule("iterations_not_found")
def iterations_not_found(ctx, cfg):
    if not ctx.whole_profile:
        return None
    key = ctx.agg["key_node"]
    why = (f"key node '{key}' was not found" if key else
           "no ProfilerStep#N annotations, step-like NVTX ranges or repeating op pattern were found")
    return Finding(
        "iterations_not_found",
        f"Unable to split the profile into iterations: {why}, so every figure covers the whole profile "
        f"({fmt_ns(ctx.wall)}) and warm-up is mixed in.",
        "Mark the steps: call prof.step() once per iteration with torch.profiler (ProfilerStep#N), call "
        "dlscope.step() in the training loop, wrap each step in an NVTX range named like 'step 12', or re-run "
        "with --key-node NAME of an op that runs once per iteration. "
        f"See {ctx.link('iterations_not_found')}",
        None,
        {"iterations": [], "time_ranges": [[ctx.window[0], ctx.window[1]]],
         "saving_basis": "no runtime saving: the fix makes per-iteration figures possible"},
        severity="medium")
