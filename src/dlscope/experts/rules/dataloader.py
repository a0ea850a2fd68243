"""Data-loading bottleneck (DLProf, torch-tb-profiler, seed 000's story): the step waits for its batch.

The saving is the resource breakdown's *Dataloader* time: the CPU is inside data loading while no kernel,
memcpy or memset runs. On a CPU-only profile it is simply the time inside data loading.
"""

from __future__ import annotations

import numpy as np

from ...analyze.intervals import clip
from ..evidence import fmt_ns, longest_ranges, node_ids
from ..finding import Finding
from ..registry import rule


def loader_intervals(ctx) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(starts, ends, op_ids) of data-loading ops and ranges inside the window (op_id -1 for ranges)."""
    lo, hi = ctx.window
    start, end = ctx.col("ops_all", "start"), ctx.col("ops_all", "end")
    o = ctx.ops_named("dataloader") & (end > lo) & (start < hi)
    r = ctx.col("ranges", "category") == "dataloader"
    rs, re_ = ctx.col("ranges", "start")[r], ctx.col("ranges", "end")[r]
    return (np.concatenate([start[o], rs]), np.concatenate([end[o], re_]),
            np.concatenate([ctx.col("ops_all", "op_id")[o], np.full(len(rs), -1, dtype=np.int64)]))


GPU_ADVICE = ("Load batches in parallel with the step: DataLoader(num_workers=N>0, pin_memory=True, "
              "persistent_workers=True, prefetch_factor=2..4); move decoding and augmentation to the GPU with "
              "NVIDIA DALI when the CPU cannot keep up.")
#: a CPU-only run: no pinned memory or GPU decoding, the workers compete with the step for the same cores
CPU_ADVICE = ("Load batches in parallel with the step: DataLoader(num_workers=N>0, persistent_workers=True, "
              "prefetch_factor=2..4), leaving enough cores for the step itself (torch.set_num_threads); cache "
              "decoded samples or move expensive preprocessing offline.")


@rule("dataloader_bottleneck")
def dataloader_bottleneck(ctx, cfg):
    loader_ns = int(ctx.agg["dataloader_ns"] or 0)
    if not ctx.wall or loader_ns < cfg["min_share"] * ctx.wall:
        return None
    s, e, op_ids = loader_intervals(ctx)
    n = ctx.config["evidence"]["max_items"]
    loading = ctx.iteration_col("dataloader_ns").astype(np.int64)
    numbers, per_it = ctx.iteration_col("iteration").astype(np.int64)[loading > 0], loading[loading > 0]
    where = ("while the GPU was idle" if ctx.has_gpu else "of the step (CPU-only profile)")
    cs, ce = clip(s, e, *ctx.window)
    return Finding(
        "dataloader_bottleneck",
        f"{ctx.pct(loader_ns):.1f}% of the aggregated time ({fmt_ns(loader_ns)}, "
        f"{fmt_ns(loader_ns / max(len(loading), 1))} per iteration) was spent in data loading {where}.",
        (GPU_ADVICE if ctx.has_gpu else CPU_ADVICE) + f" See {ctx.link('dataloader_bottleneck')}",
        loader_ns,
        {"node_ids": node_ids(ctx, op_ids[op_ids >= 0]), "iterations": [int(i) for i in numbers],
         "time_ranges": longest_ranges(cs, ce, n),
         "per_iteration_ns": {int(i): int(v) for i, v in zip(numbers, per_it)}})
