"""Exposed communication (HTA / TraceLens comm-compute overlap): NCCL kernels running while no compute
kernel runs on the same GPU. The saving is that exposed time (mean over GPUs): perfectly overlapped
communication would hide it."""

from __future__ import annotations

import numpy as np

from ...analyze.intervals import clip
from ..evidence import fmt_ns, iterations_of, longest_ranges, node_ids, top_by
from ..finding import Finding
from ..registry import rule
from ..spans import Span, distinct, length, minus


@rule("exposed_communication", gpu=True)
def exposed_communication(ctx, cfg):
    device, start, end = (ctx.col("kernel_facts", c) for c in ("device", "start", "end"))
    if not len(device):
        return None
    comm_mask = ctx.names_match("kernel_facts", cfg["kernel_patterns"])
    if not comm_mask.any():
        return None
    lo, hi = ctx.window
    exposed_total, comm_total, parts, devices = 0, 0, [], distinct(device[comm_mask]).tolist()
    for dev in devices:
        on = device == dev
        comm = clip(start[comm_mask & on], end[comm_mask & on], lo, hi)
        comp = Span(start[~comm_mask & on], end[~comm_mask & on])
        exposed = minus(comm, comp)
        exposed_total += length(exposed)
        comm_total += length(comm)
        parts.append(exposed)
    saving = int(exposed_total / len(devices))
    if saving < cfg["min_share"] * ctx.wall:
        return None
    ck = {c: ctx.col("kernel_facts", c)[comm_mask] for c in ("op_id", "name", "dur", "iteration")}
    launched = {c: values[ck["op_id"] >= 0] for c, values in ck.items()}
    n = ctx.config["evidence"]["max_items"]
    es = np.concatenate([p[0] for p in parts])
    ee = np.concatenate([p[1] for p in parts])
    overlap = 1 - exposed_total / comm_total if comm_total else 0.0
    return Finding(
        "exposed_communication",
        f"Communication kernels ran {fmt_ns(comm_total / len(devices))} per GPU, of which {fmt_ns(saving)} "
        f"({ctx.pct(saving):.1f}% of the aggregated time) had no compute kernel alongside "
        f"({100 * overlap:.0f}% overlapped).",
        "Overlap communication with computation: DDP gradient bucketing (tune bucket_cap_mb), FSDP prefetching "
        "(forward_prefetch / backward_prefetch), gradient accumulation with no_sync(), or fewer, larger "
        f"collectives. See {ctx.link('exposed_communication')}",
        saving,
        {"node_ids": node_ids(ctx, top_by(launched, "op_id", "dur", n)),
         "kernels": top_by(ck, "name", "dur", n), "iterations": iterations_of(ck["iteration"]),
         "time_ranges": longest_ranges(es, ee, n), "comm_ns": int(comm_total / len(devices)),
         "overlap_share": round(overlap, 4)})
