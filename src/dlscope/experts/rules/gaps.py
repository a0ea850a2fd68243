"""GPU gaps (nsys analyze's gpu_gaps, with a DL-sized threshold): idle stretches of a device inside the
profiled iterations, located by the kernels (and their ops) on either side. The saving is the idle time
in such gaps, averaged over the GPUs."""

from __future__ import annotations

import numpy as np

from ..evidence import fmt_ns, node_ids, short_kernel
from ..finding import Finding
from ..registry import rule
from ..spans import gaps


@rule("gpu_gaps")
def gpu_gaps(ctx, cfg):
    if not ctx.has_gpu or not ctx.devices:
        return None
    min_gap = int(cfg["min_gap_us"] * 1000)
    found = []  # (start, end, device, iteration)
    for dev in ctx.devices:
        busy = ctx.busy(dev)
        for it in ctx.iterations.itertuples(index=False):
            gs, ge = gaps(busy, int(it.start), int(it.end))
            keep = (ge - gs) >= min_gap
            found += [(int(s), int(e), dev, int(it.iteration)) for s, e in zip(gs[keep], ge[keep])]
    if not found:
        return None
    total = sum(e - s for s, e, _, _ in found)
    saving = int(total / len(ctx.devices))
    if ctx.pct(saving) < cfg["min_pct"]:
        return None
    found.sort(key=lambda g: g[0] - g[1])
    n = ctx.config["evidence"]["max_items"]
    k = ctx.kernel_facts.sort_values("end")
    before_ops, after_ops, kernels, located = [], [], [], []
    for s, e, dev, it in found[:n]:
        kd = k[k["device"] == dev]
        prev = kd[kd["end"] <= s].tail(1)
        nxt = kd[kd["start"] >= e].sort_values("start").head(1)
        located.append((prev, nxt))
        for frame, bucket in ((prev, before_ops), (nxt, after_ops)):
            if len(frame):
                bucket.append(int(frame["op_id"].iloc[0]))
                kernels.append(frame["name"].iloc[0])
    s0, e0, dev0, it0 = found[0]
    prev, nxt = located[0]

    def describe(frame) -> str:
        if frame.empty:
            return "the iteration boundary"
        op = ctx.ops_all["name"].get(int(frame["op_id"].iloc[0]), "?")
        return f"{short_kernel(frame['name'].iloc[0])} (op {op})"

    return Finding(
        "gpu_gaps",
        f"{len(found):,} idle gaps of at least {fmt_ns(min_gap)} inside iterations leave the GPU idle for "
        f"{fmt_ns(saving)} ({ctx.pct(saving):.1f}% of the aggregated time); the largest, {fmt_ns(e0 - s0)} on GPU "
        f"{dev0} in iteration {it0}, lies between {describe(prev)} and {describe(nxt)}.",
        "Find what the CPU does during these gaps (data loading, synchronizations, Python work between ops), "
        "move it off the critical path or overlap it with GPU work, and add NVTX / record_function ranges "
        f"around suspect code. See {ctx.link('gpu_gaps')}",
        saving,
        {"node_ids": node_ids(ctx, before_ops + after_ops), "kernels": list(dict.fromkeys(kernels)),
         "iterations": sorted({g[3] for g in found}), "time_ranges": [[g[0], g[1]] for g in found[:n]],
         "gap_count": len(found), "devices": [int(d) for d in np.unique([g[2] for g in found])]})
