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

import numpy as np
import pandas as pd

from ..evidence import fmt_ns, node_ids
from ..finding import Finding
from ..registry import rule
from ..spans import distinct


@rule("gpu_memory_underutilized", gpu=True)
def gpu_memory_underutilized(ctx, cfg):
    if not ctx.is_training:
        return None
    device = ctx.col("memory", "device")
    if not len(device) or not len(ctx.col("gpus", "device")):
        return None
    on = device >= 0
    held = np.maximum(ctx.col("memory", "total_allocated")[on], ctx.col("memory", "total_reserved")[on])
    cap = dict(zip(ctx.col("gpus", "device").tolist(), ctx.col("gpus", "memory_bytes").tolist()))
    rows = []
    for dev in distinct(device[on]).tolist():  # the peak per device: the larger of allocated and reserved
        used, total = int(held[device[on] == dev].max()), cap.get(dev)
        if used <= 0 or total is None or total <= 0:
            continue
        rows.append((int(dev), used, int(total)))
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
    per_step = overhead / max(len(ctx.iteration_col("iteration")), 1)
    return Finding(
        "gpu_memory_underutilized",
        f"GPU memory is underutilized: the peak was {used / 2**30:,.2f} GiB of {total / 2**30:,.1f} GiB "
        f"({100 * share:.1f}%) on GPU {dev}, while each step spends {fmt_ns(per_step)} "
        f"with the GPU waiting on per-step CPU work.",
        f"Raise the batch size step by step (2× first; the memory peak leaves room for up to about {factor}×"
        f"{capped}), scaling the learning rate with it, and check the memory peak and the accuracy after each "
        f"step; larger steps amortize the per-step overhead. See {ctx.link('gpu_memory_underutilized')}",
        saving,
        {"peak_bytes": used, "capacity_bytes": total, "device": dev, "batch_factor": factor,
         "batch_factor_memory_allows": fits, "per_step_overhead_ns": overhead,
         "saving_basis": f"per-step CPU/Other overhead × (1 − 1/{factor}) over the aggregated window"})


def _window_of(iterations, iteration: int) -> list[list[int]]:
    """The iteration's window as the evidence's time range (the Timeline opens there, memory lanes included)."""
    row = iterations[iterations["iteration"] == iteration]
    return [[int(row["start"].iloc[0]), int(row["end"].iloc[0])]] if len(row) else []


def _largest_share(ctx, memory: pd.DataFrame, gpus: pd.DataFrame, rows: np.ndarray | None) -> float:
    """The largest share of a GPU's memory the allocator held at a profiled iteration's peak, as
    ``memory_peaks``' figures give it (allocated, or reserved when larger), -inf without one: the rule is
    silent below its threshold, and only then are the ops at the peaks located (a nesting index of every op)."""
    from ...analyze.memory import device_peaks

    capacity = {int(d): int(b) for d, b in zip(gpus["device"], gpus["memory_bytes"]) if b > 0}
    largest = -math.inf
    for device, (allocated, reserved) in device_peaks(memory, ctx.iterations, rows).items():
        used = max(allocated, reserved if reserved > 0 else -1)
        if capacity.get(device) and used > 0:
            largest = max(largest, used / capacity[device])
    return largest


def _op_in_node(d: dict, held: str = "allocated") -> str:
    """'aten::empty (in aten::linear)': the op at the ``held`` peak and the op node it runs in."""
    op, node = d[f"peak_{held}_op"], d.get(f"peak_{held}_op_node")
    if not op:
        return "no recorded op"
    return op if not node or node == op else f"{op} (in {node})"


@rule("gpu_memory_near_capacity", gpu=True)
def gpu_memory_near_capacity(ctx, cfg):
    """The peak the allocator held (reserved, else allocated) within the profiled iterations is at least
    ``min_used_share`` of the GPU's memory: the next larger input runs out of memory, and the caching allocator
    already returns blocks to the driver and asks again. The finding names the op running at the peak and the
    allocations live then, and the headroom left. Priced by what memory pressure costs in time here: the
    allocator's driver calls (``allocator_calls``: cudaMalloc/cudaFree and kin) inside the profiled iterations.
    Without any, the run loses no time to it yet but is one larger batch or sequence from running out of memory:
    reported as a risk (``not_priced`` says so, severity ``unpriced_severity``), never as a 0 ns saving."""
    from ...analyze.memory import memory_peaks

    if not len(ctx.col("memory", "device")) or not len(ctx.col("gpus", "device")):
        return None  # (the columns answer without making the rank's frames)
    mem, gpus = ctx.memory, ctx.gpus
    on_gpu = mem["device"].to_numpy() >= 0
    # the GPU samples by position, not a filtered copy of the frame (0.17x a trace's tables)
    rows = None if on_gpu.all() else np.flatnonzero(on_gpu)
    if _largest_share(ctx, mem, gpus, rows) < cfg["min_used_share"]:
        return None
    every = ctx.ops_all  # its columns shared, not copied out of its blocks (10 MiB on 283k ops)
    ops = pd.DataFrame({c: np.full(len(every), ctx.rank, np.int64) if c == "rank" else every[c].array
                        for c in ("op_id", "name", "rank", "pid", "tid", "start", "end")}, copy=False)
    peaks = memory_peaks(mem, ctx.iterations, ops, gpus, kept=rows)["devices"]
    rows = []
    for d in peaks:
        used = max(d["peak_allocated_bytes"], d["peak_reserved_bytes"] or -1)
        if d["capacity_bytes"] and used > 0:
            rows.append((used / d["capacity_bytes"], used, d))
    if not rows:
        return None
    share, used, d = max(rows, key=lambda r: r[0])
    if share < cfg["min_used_share"]:
        return None
    calls = ctx.api_calls
    allocator = calls[calls["name"].isin(cfg["allocator_calls"])]
    saving = int((allocator["end"] - allocator["start"]).sum())
    reserved = d["peak_reserved_bytes"] is not None and d["peak_reserved_bytes"] >= d["peak_allocated_bytes"]
    held = "reserved" if reserved else "allocated"
    op = d[f"peak_{held}_op"]
    node = d.get(f"peak_{held}_op_node")
    headroom = d["capacity_bytes"] - used
    iteration = d["peak_reserved_iteration"] if reserved else d["peak_allocated_iteration"]
    live = d["live_at_peak"]
    largest = "; ".join(f"{a['bytes'] / 2**20:,.0f} MiB from {a['op'] or 'an unknown op'}" for a in live["largest"][:3])
    gib = 2**30
    return Finding(
        "gpu_memory_near_capacity",
        f"GPU memory is near capacity: the allocator {held} {used / gib:,.2f} GiB of {d['capacity_bytes'] / gib:,.1f} "
        f"GiB ({100 * share:.1f}%) on GPU {d['device']} in iteration {iteration}, "
        f"while {_op_in_node(d, held)} ran, leaving {headroom:,} bytes ({headroom / gib:,.2f} GiB) of headroom. "
        f"At the allocated peak ({d['peak_allocated_bytes'] / gib:,.2f} GiB, during "
        f"{_op_in_node(d)}) {live['count']:,} allocations of this trace were live"
        + (f", the largest {largest}" if largest else "")
        + (f"; {len(allocator):,} allocator calls ({', '.join(sorted(set(allocator['name'])))}) took {fmt_ns(saving)}."
           if saving > 0 else "; the allocator made no driver calls in the profiled iterations."),
        f"Lower the peak before it runs out: recompute activations of the layers live at the peak "
        f"(torch.utils.checkpoint), run them in BF16/FP16 (autocast), or split the batch into micro-batches with "
        f"gradient accumulation; when reserved is far above allocated, set "
        f"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True against fragmentation. See "
        f"{ctx.link('gpu_memory_near_capacity')}",
        saving if saving > 0 else None,
        {"device": d["device"], "peak_bytes": used, "capacity_bytes": d["capacity_bytes"], "share": round(share, 4),
         "headroom_bytes": headroom, "peak_op_node": node,
         "peak_allocated_bytes": d["peak_allocated_bytes"], "peak_reserved_bytes": d["peak_reserved_bytes"],
         "peak_op": op, "peak_allocated_op": d["peak_allocated_op"],
         "peak_allocated_op_node": d.get("peak_allocated_op_node"), "live_allocations": live["count"],
         "live_bytes": live["bytes"], "allocator_calls": len(allocator),
         "iterations": [iteration], "time_ranges": _window_of(ctx.iterations, iteration),
         "node_ids": node_ids(ctx, [d["peak_allocated_node_op_id"]]) if d["peak_allocated_node_op_id"] >= 0 else [],
         "saving_basis": "time of the allocator's driver calls in the profiled iterations"},
        severity=None if saving > 0 else cfg["unpriced_severity"],
        not_priced=None if saving > 0 else (
            f"a risk, not time lost: no allocator driver call ({', '.join(cfg['allocator_calls'][:2])}, …) ran in "
            f"the profiled iterations, so memory pressure costs no time yet; with {headroom / gib:,.2f} GiB of "
            f"headroom a larger batch or input runs out of memory"))
