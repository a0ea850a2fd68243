"""Layout transposes: time in cuDNN's NCHW<->NHWC conversion kernels, which channels_last removes.
The saving is the union of those kernels' time in the window."""

from __future__ import annotations

from ...analyze.intervals import clip
from ..evidence import fmt_ns, iterations_of, longest_ranges, node_ids, plural, top_by
from ..finding import Finding
from ..registry import rule
from ..spans import length


@rule("layout_transposes", gpu=True)
def layout_transposes(ctx, cfg):
    dur = ctx.col("kernel_facts", "dur")
    if not len(dur):
        return None
    hit = ctx.names_match("kernel_facts", cfg["kernel_patterns"])
    t = {c: ctx.col("kernel_facts", c)[hit] for c in ("op_id", "name", "start", "end", "dur", "iteration")}
    share = t["dur"].sum() / max(int(dur.sum()), 1)
    if not hit.any() or share < cfg["min_share"]:
        return None
    saving = length(clip(t["start"], t["end"], *ctx.window))
    n = ctx.config["evidence"]["max_items"]
    return Finding(
        "layout_transposes",
        f"{plural(len(t['dur']), 'layout conversion kernel')} (NCHW<->NHWC) took {fmt_ns(int(t['dur'].sum()))}, "
        f"{100 * share:.1f}% of kernel time: the convolutions want NHWC but get NCHW tensors.",
        "Keep activations in NHWC: model = model.to(memory_format=torch.channels_last) and "
        f"input = input.to(memory_format=torch.channels_last). See {ctx.link('layout_transposes')}",
        saving,
        {"node_ids": node_ids(ctx, top_by({c: v[t["op_id"] >= 0] for c, v in t.items()}, "op_id", "dur", 10 * n))[:n],
         "kernels": top_by(t, "name", "dur", n), "iterations": iterations_of(t["iteration"]),
         "time_ranges": longest_ranges(t["start"], t["end"], n)})
