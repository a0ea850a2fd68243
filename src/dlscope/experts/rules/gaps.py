"""GPU gaps (nsys analyze's gpu_gaps, with a DL-sized threshold): idle stretches of a device inside the
profiled iterations, located by the kernels (and their ops) on either side. The saving is the idle time
in such gaps, averaged over the GPUs.

What the host did meanwhile is measured, not guessed: data loading (on any thread), else, on the thread that
launched the kernel after the gap, a CUDA API call, an op, or neither (Python between ops), as ``host_bound``
splits its waits (:func:`.host.host_split`). The advice follows the largest part, and where the rule that owns
that cause fired (``dataloader_bottleneck``, ``host_bound``) the recommendation points to its finding, which
prices the change, instead of repeating it (``Finding.refers``).
"""

from __future__ import annotations

import numpy as np

from ..evidence import fmt_ns, node_ids, short_kernel
from ..finding import Finding
from ..registry import rule
from ..spans import distinct, gaps_in_windows
from .dataloader import GPU_ADVICE, loader_intervals
from .host import HOST_PARTS, HOST_WORDS, host_advice, host_split

#: the parts of the gaps' time by what the host did, in the problem's words (``HOST_WORDS`` for the rest)
PART_WORDS = {"dataloader": "loading data", **HOST_WORDS,
              "unknown": "unaccounted for (no kernel with a launch call in the trace follows the gap)"}
#: the part -> the rule whose finding owns that cause
CAUSES = {"dataloader": "dataloader_bottleneck", **dict.fromkeys(HOST_PARTS, "host_bound")}
GENERIC = ("Find what the CPU does during these gaps (data loading, synchronizations, Python work between ops), "
           "move it off the critical path or overlap it with GPU work, and add NVTX / record_function ranges "
           "around suspect code.")


@rule("gpu_gaps", gpu=True)
def gpu_gaps(ctx, cfg):
    if not ctx.has_gpu or not ctx.devices:
        return None
    min_gap = int(cfg["min_gap_us"] * 1000)
    it_start, it_end, it_number = (ctx.iteration_col(c).astype(np.int64) for c in ("start", "end", "iteration"))
    parts = []
    for dev in ctx.devices:
        gs, ge, window = gaps_in_windows(ctx.busy(dev), it_start, it_end)
        keep = (ge - gs) >= min_gap
        parts.append((gs[keep], ge[keep], np.full(int(keep.sum()), dev, dtype=np.int64), it_number[window[keep]]))
    idle_s, idle_e, idle_dev, idle_it = (np.concatenate(c) for c in zip(*parts))
    if not len(idle_s):
        return None
    length = idle_e - idle_s
    saving = int(int(length.sum()) / len(ctx.devices))
    if ctx.pct(saving) < cfg["min_pct"]:
        return None
    n = ctx.config["evidence"]["max_items"]
    top = np.argsort(-length, kind="stable")[:n]
    found = list(zip(idle_s[top].tolist(), idle_e[top].tolist(), idle_dev[top].tolist(), idle_it[top].tolist()))
    neighbours = _Neighbours(*(ctx.col("kernel_facts", c) for c in ("device", "start", "end")))
    op_id, kernel_name = ctx.col("kernel_facts", "op_id"), ctx.col("kernel_facts", "name")
    before_ops, after_ops, kernels, located = [], [], [], []
    for s, e, dev, _it in found:
        prev, nxt = neighbours.before(dev, s), neighbours.after(dev, e)
        located.append((prev, nxt))
        for row, bucket in ((prev, before_ops), (nxt, after_ops)):
            if row >= 0:
                bucket.append(int(op_id[row]))
                kernels.append(kernel_name[row])
    s0, e0, dev0, it0 = found[0]
    prev, nxt = located[0]
    launched = neighbours.after_each(idle_dev, idle_e)  # the kernel that ended each gap (-1: none)
    api_id = np.where(launched >= 0, ctx.col("kernel_facts", "api_id")[np.maximum(launched, 0)], -1)
    split = host_split(ctx, api_id, idle_s, idle_e, loader_intervals(ctx)[:2])
    top_part = max(split, key=lambda part: split[part])

    def describe(row: int) -> str:
        if row < 0:
            return "the iteration boundary"
        pos = int(ctx.op_rows([op_id[row]])[0])
        op = ctx.col("ops_all", "name")[pos] if pos >= 0 else "?"
        return f"{short_kernel(kernel_name[row])} (op {op})"

    return Finding(
        "gpu_gaps",
        f"{len(idle_s):,} idle gaps of at least {fmt_ns(min_gap)} inside iterations leave the GPU idle for "
        f"{fmt_ns(saving)} ({ctx.pct(saving):.1f}% of the aggregated time); the largest, {fmt_ns(e0 - s0)} on GPU "
        f"{dev0} in iteration {it0}, lies between {describe(prev)} and {describe(nxt)}. Meanwhile the host was "
        + ", ".join(f"{100 * split[part] / int(length.sum()):.0f}% {PART_WORDS[part]}"
                    for part in sorted(split, key=lambda part: -split[part])
                    if round(100 * split[part] / int(length.sum()))) + ".",
        f"{_advice(ctx, top_part)} See {ctx.link('gpu_gaps')}",
        saving,
        {"node_ids": node_ids(ctx, before_ops + after_ops), "kernels": list(dict.fromkeys(kernels)),
         "iterations": [int(i) for i in distinct(idle_it)],
         "time_ranges": [[int(g[0]), int(g[1])] for g in found], "gap_count": len(idle_s),
         "devices": [int(d) for d in distinct(idle_dev)], "host_split_ns": split},
        refers=({CAUSES[top_part]: f"{100 * split[top_part] / int(length.sum()):.0f}% of the gaps' time the host "
                 f"was {PART_WORDS[top_part]}: the {CAUSES[top_part]} finding says what to change and what it saves. "
                 f"See {ctx.link('gpu_gaps')}"} if top_part in CAUSES else {}))


def _advice(ctx, part: str) -> str:
    """What to change for the largest part of the gaps' time, in the words of the rule that owns that cause."""
    if part == "dataloader":
        return f"Most of the gaps' time is data loading. {ctx.advice('dataloader_bottleneck', GPU_ADVICE)}"
    if part in HOST_PARTS:
        return (f"Most of the gaps' time the host was {PART_WORDS[part]} while the GPU waited for its next launch. "
                + ctx.advice("host_bound", host_advice(ctx, graphed=False)))
    return GENERIC


class _Neighbours:
    """The kernels of a device just before and just after a moment (binary search, no frame filtering)."""

    def __init__(self, device: np.ndarray, start: np.ndarray, end: np.ndarray):
        self.by_end: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.by_start: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for dev in distinct(device).tolist():
            rows = np.flatnonzero(device == dev)
            for times, index in ((end, self.by_end), (start, self.by_start)):
                ordered = rows[np.argsort(times[rows], kind="stable")]
                index[dev] = (ordered, times[ordered])

    def before(self, device: int, t: int) -> int:
        """The row of the kernel of ``device`` ending last at or before ``t`` (-1 when none)."""
        rows, ends = self.by_end.get(int(device), (np.zeros(0, np.int64),) * 2)
        i = int(np.searchsorted(ends, t, side="right"))
        return int(rows[i - 1]) if i > 0 else -1

    def after_each(self, device: np.ndarray, t: np.ndarray) -> np.ndarray:
        """:meth:`after` for each (device, moment) pair at once."""
        out = np.full(len(t), -1, dtype=np.int64)
        for dev in distinct(device).tolist():
            mine = np.flatnonzero(device == dev)
            rows, starts = self.by_start.get(int(dev), (np.zeros(0, np.int64),) * 2)
            i = np.searchsorted(starts, t[mine], side="left")
            found = i < len(rows)
            out[mine[found]] = rows[i[found]]
        return out

    def after(self, device: int, t: int) -> int:
        """The row of the kernel of ``device`` starting first at or after ``t`` (-1 when none)."""
        rows, starts = self.by_start.get(int(device), (np.zeros(0, np.int64),) * 2)
        i = int(np.searchsorted(starts, t, side="left"))
        return int(rows[i]) if i < len(rows) else -1
