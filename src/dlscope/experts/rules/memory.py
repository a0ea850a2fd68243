"""GPU memory underutilized (DLProf 21.03): the peak memory the allocator held is far below the GPU's
capacity, so a larger batch fits. Needs memory samples (table ``memory``) and the capacity
(``gpus.memory_bytes``); otherwise silent.

The batch factor is the largest power of two that keeps the scaled peak under ``target_share`` of
capacity. The saving is the GPU's idle time in the window (wall clock × (1 − utilization)): the part of
each step a larger batch can fill, as a ceiling.
"""

from __future__ import annotations

import math

from ..evidence import fmt_ns
from ..finding import Finding
from ..registry import rule


@rule("gpu_memory_underutilized")
def gpu_memory_underutilized(ctx, cfg):
    mem, gpus = ctx.memory, ctx.gpus
    if mem.empty or gpus.empty:
        return None
    mem = mem[mem["device"] >= 0]
    peak = mem.groupby("device")[["total_allocated", "total_reserved"]].max().max(axis=1)
    cap = gpus.set_index("device")["memory_bytes"]
    rows = []
    for dev, used in peak.items():
        total = cap.get(dev)
        if used is None or used <= 0 or total is None or total <= 0:
            continue
        rows.append((int(dev), int(used), int(total)))
    if not rows:
        return None
    dev, used, total = max(rows, key=lambda r: r[1] / r[2])
    share = used / total
    if share >= cfg["max_used_share"]:
        return None
    factor = 2 ** max(1, int(math.floor(math.log2(cfg["target_share"] * total / used))))
    util = ctx.agg["gpu_utilization"]
    saving = int(ctx.wall * (1 - util)) if util is not None else None
    return Finding(
        "gpu_memory_underutilized",
        f"GPU memory is underutilized: the peak was {used / 2**30:,.2f} GiB of {total / 2**30:,.1f} GiB "
        f"({100 * share:.1f}%) on GPU {dev}.",
        f"Try increasing the batch size by {factor}x (scale the learning rate accordingly) to raise "
        f"throughput; the GPU is idle {fmt_ns(saving)} of the aggregated time, which a larger batch can fill. "
        f"See {ctx.link('gpu_memory_underutilized')}",
        saving,
        {"peak_bytes": used, "capacity_bytes": total, "device": dev, "batch_factor": factor,
         "saving_basis": "GPU idle time in the window (ceiling)"})
