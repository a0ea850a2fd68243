"""Iteration variation inside the aggregated range (DLProf's "contains a lot of variation"), with the
first-step warm-up told apart from real variation.

Warm-up: the profile's first iteration, when it is in the aggregated range and slower than the median of
the iterations after it by more than ``tolerance`` (a share of that median): a one-off cost (CUDA context,
cuDNN autotuning, allocator growth, compilation). It needs only 2 iterations. It is said as warm-up, and the
remaining iterations are judged without it.

Variation: among the iterations after any warm-up (at least ``min_iterations``), an outlier differs from
their median by more than ``tolerance``. Slower outliers add time; shorter ones (an incomplete step, a step
that skipped work) are listed but add nothing to the saving. The suggested range is the longest run of
consecutive steady iterations (at least 2), unless the outliers recur on both sides of it and it holds fewer
than ``min_steady_share`` of the judged iterations: then no stretch is representative (a host-bound run with
DataLoader workers on an H200: 100 iterations with slow and short steps spread from 9 to 93, longest steady run
13 iterations) and the advice is to find what differs between steps instead of aggregating a sliver.

The saving is how much the warm-up and the slow outliers add to the aggregated time beyond the median:
what the suggested range removes from every per-iteration figure, and what fixing a recurring stall saves.

GPU behind the CPU: an iteration's window runs from its CPU start to the next one's (docs/metrics.md), so where
the GPU is the bottleneck and the CPU queues work ahead, the windows time the CPU's pace and the last window
holds every earlier iteration's unfinished GPU work (an H200 capture: nine 8 ms windows, then a 372 ms one,
for iterations that each took 44 ms of GPU time). When the iterations' GPU work ends, on the median, later than
``tolerance`` of a window after their windows, each iteration is timed on the GPU instead: from the end of the
previous iteration's GPU work to the end of its own (the first from its window's start): ``analyze.gpu_timing``,
which the summary uses too.
"""

from __future__ import annotations

import numpy as np

from ...analyze import gpu_timing
from ...analyze.gpu_timing import GpuTimed
from ..evidence import fmt_ns
from ..finding import Finding
from ..registry import rule


def steady_range(durations: np.ndarray, iterations: np.ndarray, tolerance: float) -> tuple[int, int, np.ndarray]:
    """(first, last) iteration of the longest run of non-outliers, and the outlier mask; (-1, -1) when no
    two consecutive iterations are steady."""
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
    if best_len < 2:
        return -1, -1, outlier
    return int(iterations[best[0]]), int(iterations[best[1]]), outlier


def _recurring(numbers: np.ndarray, outlier: np.ndarray, steady: tuple[int, int], min_share: float) -> bool:
    """Outliers both before and after the steady run, which holds fewer than ``min_share`` of the iterations:
    aggregating the run would keep a sliver, not the steady state after a warm-up or before a wind-down."""
    before = bool((outlier & (numbers < steady[0])).any())
    after = bool((outlier & (numbers > steady[1])).any())
    held = int(((numbers >= steady[0]) & (numbers <= steady[1])).sum())
    return before and after and held < min_share * len(numbers)


def _listed(numbers, durations, med: float) -> str:
    return ", ".join(f"{int(i)} ({fmt_ns(float(x))}, {100 * (x - med) / med:+.0f}%)"
                     for i, x in zip(numbers, durations))


def gpu_timed(ctx, numbers: np.ndarray, tolerance: float) -> GpuTimed | None:
    """The iterations timed on the GPU where the GPU ran behind the CPU (``analyze.gpu_timing``), else None."""
    return gpu_timing.gpu_timed(
        np.concatenate([ctx.col("kernels", "iteration"), ctx.col("memops", "iteration")]).astype(np.int64),
        np.concatenate([ctx.col("kernels", "end"), ctx.col("memops", "end")]).astype(np.int64),
        numbers, ctx.iteration_col("start"), ctx.iteration_col("end"), tolerance)


@rule("iteration_variance")
def iteration_variance(ctx, cfg):
    if ctx.whole_profile or len(ctx.iteration_col("iteration")) < 2:
        return None
    its = ctx.iterations
    d = its["duration_ns"].to_numpy(np.float64)
    numbers = its["iteration"].to_numpy(np.int64)
    tol = cfg["tolerance"]
    ranges = np.column_stack([its["start"].to_numpy(np.int64), its["end"].to_numpy(np.int64)])
    on_gpu = gpu_timed(ctx, numbers, tol)
    if on_gpu is not None:
        d, starts, lag = on_gpu.durations.astype(np.float64), on_gpu.starts, on_gpu.lag_ns
        ranges = np.column_stack([starts, starts + d.astype(np.int64)])
    first_of_profile = int(ctx.aggregation.iterations["iteration"].to_numpy().min())
    rest_med = float(np.median(d[1:]))
    warmup = int(numbers[0]) == first_of_profile and rest_med > 0 and d[0] > (1 + tol) * rest_med
    rd, rn = (d[1:], numbers[1:]) if warmup else (d, numbers)
    saving, sentences, evidence = 0, [], {}
    if on_gpu is not None:
        evidence["timed_on_gpu"] = True
        evidence["median_gpu_lag_ns"] = lag
    steady: tuple[int, int] | None = (int(rn[0]), int(rn[-1]))
    if warmup:
        saving += int(d[0] - rest_med)
        sentences.append(f"iteration {int(numbers[0])} is a warm-up step: {fmt_ns(float(d[0]))}, "
                         f"{100 * (d[0] - rest_med) / rest_med:+.0f}% over the median of the iterations after it "
                         f"({fmt_ns(rest_med)}); it is a one-off cost (CUDA context, cuDNN autotuning, allocator "
                         f"growth, compilation), excluded from the judgement below")
        evidence["warmup_iteration"] = int(numbers[0])
    outlier = np.zeros(len(rd), dtype=bool)
    recurring = False
    if len(rd) >= cfg["min_iterations"]:
        first, last, outlier = steady_range(rd, rn, tol)
        med = float(np.median(rd))
        slow, fast = outlier & (rd > med), outlier & (rd < med)
        saving += int((rd[slow] - med).sum())
        if outlier.any():
            which = "remaining iterations" if warmup else "iterations"
            parts = [f"the {which} {int(rn[0])} to {int(rn[-1])} vary around a median of {fmt_ns(med)}"]
            if slow.any():
                parts.append(f"slower: {_listed(rn[slow], rd[slow], med)}")
            if fast.any():
                parts.append(f"shorter: {_listed(rn[fast], rd[fast], med)} (an incomplete step or one that skipped "
                             "work; it lowers the average without saving anything)")
            steady = (first, last) if first >= 0 else None
            if steady is not None and _recurring(rn, outlier, steady, cfg["min_steady_share"]):
                parts.append(f"they recur throughout the range ({int(outlier.sum())} of {len(rn)} iterations off "
                             f"the median by more than {100 * tol:.0f}%; the longest steady run, {first} to {last}, "
                             f"holds {last - first + 1})")
                steady, recurring = None, True
            sentences.append("; ".join(parts))
            evidence["median_iteration_ns"] = int(med)
    if not sentences or saving <= 0 or ctx.pct(saving) < cfg["min_pct"]:
        return None
    flagged = np.isin(numbers, np.concatenate([numbers[:1] if warmup else numbers[:0], rn[outlier]]))
    if steady is not None:
        advice = (f"Aggregate the steady iterations only: dlscope aggregate PROFILE.sqlite --iter-start {steady[0]} "
                  f"--iter-stop {steady[1]}; when profiling, skip warm-up with torch.profiler.schedule(wait=1, "
                  f"warmup=1, active=N).")
    elif recurring:
        advice = ("Uneven steps recur throughout the range, so no stretch of it is representative: find what differs "
                  "between the slow steps and the others (data loading, synchronizations, garbage collection, "
                  "checkpointing, recompilation); until then the per-iteration figures are averages over them.")
    else:
        advice = ("No two consecutive iterations are steady: find what differs between steps (data loading, "
                  "synchronizations, garbage collection, checkpointing, recompilation) before trusting "
                  "per-iteration figures, and profile more steps with torch.profiler.schedule(wait=1, warmup=1, "
                  "active=N).")
    if on_gpu is not None:
        sentences.insert(0, f"the GPU ran behind the CPU (an iteration's GPU work ended {fmt_ns(float(lag))} after "
                            "its CPU step on the median), so each iteration is timed on the GPU, from the end of the "
                            "previous iteration's GPU work to the end of its own")
    return Finding(
        "iteration_variance",
        f"The aggregated iteration range {int(numbers[0])} to {int(numbers[-1])} is not steady: "
        + "; ".join(sentences) + ".",
        f"{advice} See {ctx.link('iteration_variance')}",
        saving,
        {"iterations": [int(i) for i in numbers[flagged]],
         "time_ranges": ranges[flagged].tolist(),
         "steady_iter_start": None if steady is None else steady[0],
         "steady_iter_stop": None if steady is None else steady[1], **evidence})
