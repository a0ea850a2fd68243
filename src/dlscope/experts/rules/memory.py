"""GPU memory underutilized (DLProf 21.03): in a training run, the peak memory the allocator held is far
below the GPU's capacity, so a larger batch fits. Needs memory samples (table ``memory``), the capacity
(``gpus.memory_bytes``) and a training run (``Context.is_training``: an inference run's batch is set by
its requests, not by memory); otherwise silent.

The bound is real: the largest power of two ``f`` that keeps the whole peak, scaled by ``f``, under
``target_share`` of capacity (weights and optimizer state do not grow with the batch, so this is on the
safe side), and never more than ``max_batch_factor``. The advice is a direction ("raise the batch size,
up to about f×"), not a prescription.

The saving models what a larger batch amortizes: per-step overhead while the GPU idles on the CPU
(breakdown categories *CPU* and *Other*: launches, Python, framework work) stays per step while kernel work
grows with the batch, so processing the same samples in f× larger steps saves that overhead × (1 − 1/f).
Data loading and I/O scale with the samples and are not counted.
"""

from __future__ import annotations

import math

from ..evidence import fmt_ns
from ..finding import Finding
from ..registry import rule


@rule("gpu_memory_underutilized", gpu=True)
def gpu_memory_underutilized(ctx, cfg):
    if not ctx.is_training:
        return None
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
    fits = 2 ** int(math.floor(math.log2(cfg["target_share"] * total / used)))
    factor = int(min(fits, cfg["max_batch_factor"]))
    if factor < 2:
        return None
    overhead = int(ctx.agg["cpu_ns"] or 0) + int(ctx.agg["other_ns"] or 0)
    saving = int(overhead * (1 - 1 / factor))
    capped = " (capped by max_batch_factor)" if factor < fits else ""
    return Finding(
        "gpu_memory_underutilized",
        f"GPU memory is underutilized: the peak was {used / 2**30:,.2f} GiB of {total / 2**30:,.1f} GiB "
        f"({100 * share:.1f}%) on GPU {dev}, while each step spends {fmt_ns(overhead / max(len(ctx.iterations), 1))} "
        f"with the GPU waiting on per-step CPU work.",
        f"Raise the batch size step by step (2× first; the memory peak leaves room for up to about {factor}×"
        f"{capped}), scaling the learning rate with it, and check the memory peak and the accuracy after each "
        f"step; larger steps amortize the per-step overhead. See {ctx.link('gpu_memory_underutilized')}",
        saving,
        {"peak_bytes": used, "capacity_bytes": total, "device": dev, "batch_factor": factor,
         "batch_factor_memory_allows": fits, "per_step_overhead_ns": overhead,
         "saving_basis": f"per-step CPU/Other overhead × (1 − 1/{factor}) over the aggregated window"})
