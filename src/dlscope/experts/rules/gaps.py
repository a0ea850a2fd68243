"""GPU gaps (nsys analyze's gpu_gaps, with a DL-sized threshold): idle stretches of a device inside the
profiled iterations, located by the kernels (and their ops) on either side. The saving is the idle time
in such gaps, averaged over the GPUs."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..evidence import fmt_ns, node_ids, short_kernel
from ..finding import Finding
from ..registry import rule
from ..spans import gaps_in_windows


@rule("gpu_gaps", gpu=True)
def gpu_gaps(ctx, cfg):
    if not ctx.has_gpu or not ctx.devices:
        return None
    min_gap = int(cfg["min_gap_us"] * 1000)
    its = ctx.iterations
    per_device = []
    for dev in ctx.devices:
        gs, ge, window = gaps_in_windows(ctx.busy(dev), its["start"].to_numpy(np.int64), its["end"].to_numpy(np.int64))
        keep = (ge - gs) >= min_gap
        per_device.append(pd.DataFrame({"start": gs[keep], "end": ge[keep], "device": dev,
                                        "iteration": its["iteration"].to_numpy(np.int64)[window[keep]]}))
    idle = pd.concat(per_device, ignore_index=True)
    if idle.empty:
        return None
    length = (idle["end"] - idle["start"]).to_numpy(np.int64)
    saving = int(int(length.sum()) / len(ctx.devices))
    if ctx.pct(saving) < cfg["min_pct"]:
        return None
    n = ctx.config["evidence"]["max_items"]
    found = list(idle.iloc[np.argsort(-length, kind="stable")[:n]].itertuples(index=False, name=None))
    neighbours = _Neighbours(ctx.kernel_facts[["device", "start", "end", "op_id", "name"]])
    before_ops, after_ops, kernels, located = [], [], [], []
    for s, e, dev, _it in found:
        prev, nxt = neighbours.before(dev, s), neighbours.after(dev, e)
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
        f"{len(idle):,} idle gaps of at least {fmt_ns(min_gap)} inside iterations leave the GPU idle for "
        f"{fmt_ns(saving)} ({ctx.pct(saving):.1f}% of the aggregated time); the largest, {fmt_ns(e0 - s0)} on GPU "
        f"{dev0} in iteration {it0}, lies between {describe(prev)} and {describe(nxt)}.",
        "Find what the CPU does during these gaps (data loading, synchronizations, Python work between ops), "
        "move it off the critical path or overlap it with GPU work, and add NVTX / record_function ranges "
        f"around suspect code. See {ctx.link('gpu_gaps')}",
        saving,
        {"node_ids": node_ids(ctx, before_ops + after_ops), "kernels": list(dict.fromkeys(kernels)),
         "iterations": sorted(int(i) for i in idle["iteration"].unique()),
         "time_ranges": [[int(g[0]), int(g[1])] for g in found], "gap_count": len(idle),
         "devices": [int(d) for d in np.unique(idle["device"])]})


class _Neighbours:
    """The kernels of a device just before and just after a moment (binary search, no frame filtering)."""

    def __init__(self, kernels: pd.DataFrame):
        self.kernels = kernels
        start, end = kernels["start"].to_numpy(np.int64), kernels["end"].to_numpy(np.int64)
        self.by_end: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.by_start: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for dev, rows in kernels.groupby("device", sort=False).indices.items():
            for times, index in ((end, self.by_end), (start, self.by_start)):
                ordered = rows[np.argsort(times[rows], kind="stable")]
                index[int(dev)] = (ordered, times[ordered])

    def before(self, device: int, t: int) -> pd.DataFrame:
        """The kernel of ``device`` ending last at or before ``t`` (empty when none)."""
        rows, ends = self.by_end.get(int(device), (np.zeros(0, np.int64),) * 2)
        i = int(np.searchsorted(ends, t, side="right"))
        return self.kernels.iloc[rows[max(i - 1, 0):i]]

    def after(self, device: int, t: int) -> pd.DataFrame:
        """The kernel of ``device`` starting first at or after ``t`` (empty when none)."""
        rows, starts = self.by_start.get(int(device), (np.zeros(0, np.int64),) * 2)
        i = int(np.searchsorted(starts, t, side="left"))
        return self.kernels.iloc[rows[i:i + 1]]
