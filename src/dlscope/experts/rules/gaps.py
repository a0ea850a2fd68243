"""GPU gaps (nsys analyze's gpu_gaps, with a DL-sized threshold): idle stretches of a device inside the
profiled iterations, located by the kernels (and their ops) on either side. The saving is the idle time
in such gaps, averaged over the GPUs.

What kept the GPU idle is measured, not guessed. Where the kernel after a gap was launched before the gap began,
the GPU had work queued and waited for a dependency (another stream, an event, a collective): the host is not
the cause (``host_bound`` counts only the opposite case). Elsewhere, what the host did meanwhile: data loading (on
any thread), else, on the thread that launched the kernel after the gap, a CUDA API call, an op, or neither (Python
between ops), as ``host_bound`` splits its waits (:func:`.host.host_split`). The advice follows the largest part,
and where the rule that owns that cause fired (``dataloader_bottleneck``, ``host_bound``) the recommendation
points to its finding, which prices the change, instead of repeating it (``Finding.refers``).
"""

from __future__ import annotations

import numpy as np

from ..evidence import fmt_ns, node_ids, short_kernel
from ..finding import Finding
from ..registry import rule
from ..spans import distinct, gaps_in_windows
from .dataloader import GPU_ADVICE, loader_intervals
from .host import HOST_PARTS, HOST_WORDS, host_advice, host_split
from .launch import launches

#: what the host did during the gaps, in the problem's words after "the host was" (``HOST_WORDS`` for the rest)
PART_WORDS = {"dataloader": "loading data", **HOST_WORDS}
#: the parts no host activity explains, each as a sentence after "For N% of it"
OTHER_WORDS = {"queued": "the next kernel had been launched before the gap began: it waited for another stream, an "
                         "event or a collective, not for the host",
               "unknown": "no launching thread is known (no kernel follows the gap, or its launch call lies outside "
                          "the aggregated iterations)"}
#: the part -> the rule whose finding owns that cause
CAUSES = {"dataloader": "dataloader_bottleneck", **dict.fromkeys(HOST_PARTS, "host_bound")}
GENERIC = ("Find what the CPU does during these gaps (data loading, synchronizations, Python work between ops), "
           "move it off the critical path or overlap it with GPU work, and add NVTX / record_function ranges "
           "around suspect code.")
QUEUED = ("The largest part of the gaps' time the GPU had its next kernel queued already and waited for a dependency: "
          "open the timeline at the longest gaps to see which stream, event or collective it waited for, then overlap "
          "that work with compute (other streams, asynchronous collectives) or take it off the step's critical path.")


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
    split = _split(ctx, neighbours, idle_s, idle_e, idle_dev)
    top_part = max(split, key=lambda part: split[part])
    total = int(length.sum())

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
        f"{dev0} in iteration {it0}, lies between {describe(prev)} and {describe(nxt)}." + _split_text(split, total),
        f"{_advice(ctx, top_part)} See {ctx.link('gpu_gaps')}",
        saving,
        {"node_ids": node_ids(ctx, before_ops + after_ops), "kernels": list(dict.fromkeys(kernels)),
         "iterations": [int(i) for i in distinct(idle_it)],
         "time_ranges": [[int(g[0]), int(g[1])] for g in found], "gap_count": len(idle_s),
         "devices": [int(d) for d in distinct(idle_dev)], "host_split_ns": split},
        refers=({CAUSES[top_part]: f"{100 * split[top_part] / total:.0f}% of the gaps' time the host was "
                 f"{PART_WORDS[top_part]}: the {CAUSES[top_part]} finding says what to change and what it saves. "
                 f"See {ctx.link('gpu_gaps')}"} if top_part in CAUSES else {}))


def _split(ctx, neighbours: _Neighbours, idle_s: np.ndarray, idle_e: np.ndarray, idle_dev: np.ndarray) -> dict:
    """Each gap's time by what kept the GPU idle (ns per part): ``queued`` where the kernel after the gap was
    launched before the gap began (``host_bound``'s test the other way round: the GPU had work and waited for a
    dependency), else what the host did meanwhile (:func:`.host.host_split`: data loading, then the launching
    thread's CUDA calls, ops and the time between them; ``unknown`` without a launching thread)."""
    launched = neighbours.after_each(idle_dev, idle_e)  # the kernel that ended each gap (-1: none)
    api_id = np.where(launched >= 0, ctx.col("kernel_facts", "api_id")[np.maximum(launched, 0)], -1)
    pos = ctx.api_rows(api_id)  # its launch call, a graph launch included (it queued the whole graph)
    queued = (pos >= 0) & (ctx.col("api_calls", "start")[np.maximum(pos, 0)] < idle_s)
    api_id = api_id[~queued]
    waited = host_split(ctx, api_id, idle_s[~queued], idle_e[~queued], loader_intervals(ctx)[:2])
    return {"queued": int((idle_e - idle_s)[queued].sum()), **waited}


def _split_text(split: dict, total: int) -> str:
    """" Meanwhile the host was 62% between ops (…), 12% in framework ops. For 25% of it the next kernel had been
    launched before the gap began: …" (parts under half a percent left out)."""
    pct = {part: 100 * ns / total for part, ns in split.items()}
    host = [part for part in sorted(PART_WORDS, key=lambda part: -split[part]) if round(pct[part])]
    text = (" Meanwhile the host was " + ", ".join(f"{pct[part]:.0f}% {PART_WORDS[part]}" for part in host) + "."
            if host else "")
    return text + "".join(f" For {pct[part]:.0f}% of it {OTHER_WORDS[part]}." for part in OTHER_WORDS
                          if round(pct[part]))


def _advice(ctx, part: str) -> str:
    """What to change for the largest part of the gaps' time, in the words of the rule that owns that cause."""
    if part == "dataloader":
        return f"The largest part of the gaps' time is data loading. {ctx.advice('dataloader_bottleneck', GPU_ADVICE)}"
    if part in HOST_PARTS:
        graphed = int(launches(ctx).replayed.sum())
        return (f"The largest part of the gaps' time the host was {PART_WORDS[part]} while the GPU waited for its next "
                f"launch. {ctx.advice('host_bound', host_advice(ctx, graphed))}")
    return QUEUED if part == "queued" else GENERIC


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
