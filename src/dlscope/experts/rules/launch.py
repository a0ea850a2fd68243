"""Launch-bound execution (HTA's launch statistics): many short kernels whose CPU launch takes at least as
long as the kernel runs, so the GPU waits for the host between them.

The saving is the *host-wait* idle time before those kernels (HTA's definition: the kernel's launch call
started after the GPU's previous activity ended), each gap capped at ``max_launch_gap_us`` so longer CPU
stalls that CUDA graphs would not remove are not counted.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...analyze.intervals import merge
from ..evidence import fmt_ns, iterations_of, node_ids, plural, top_by
from ..finding import Finding
from ..registry import rule


def host_wait(ctx, k: pd.DataFrame, launch_start: np.ndarray) -> np.ndarray:
    """Per kernel, the idle time before it on its device when the host launched it after that idle began."""
    out = np.zeros(len(k), dtype=np.int64)
    for dev in k["device"].unique():
        rows = np.flatnonzero(k["device"].to_numpy() == dev)
        bs, be = merge(*ctx.busy(int(dev)))
        s = k["start"].to_numpy(np.int64)[rows]
        idx = np.searchsorted(bs, s, side="right") - 1
        ok = (idx >= 1) & (bs[np.maximum(idx, 0)] == s)
        prev_end = np.where(ok, be[np.maximum(idx - 1, 0)], s)
        waited = ok & (launch_start[rows] >= prev_end)
        out[rows] = np.where(waited, s - prev_end, 0)
    return out


@rule("launch_bound", gpu=True)
def launch_bound(ctx, cfg):
    k = ctx.kernel_facts
    if len(k) < cfg["min_kernels"]:
        return None
    api = ctx.api_calls
    pos = pd.Index(api["api_id"].to_numpy()).get_indexer(k["api_id"].to_numpy())
    has = pos >= 0
    api_start, api_end = api["start"].to_numpy(np.int64), api["end"].to_numpy(np.int64)
    launch_start = np.where(has, api_start[np.maximum(pos, 0)], k["start"].to_numpy())
    launch_dur = np.where(has, (api_end - api_start)[np.maximum(pos, 0)], 0)
    dur = k["dur"].to_numpy(np.int64)
    short = has & (dur < cfg["short_kernel_us"] * 1000) & (launch_dur >= dur)
    if short.mean() < cfg["min_short_share"]:
        return None
    wait = np.minimum(host_wait(ctx, k, launch_start), int(cfg["max_launch_gap_us"] * 1000))
    saving = int(wait[short].sum())
    if ctx.pct(saving) < cfg["min_pct"]:
        return None
    sk = k.loc[short, ["op_id", "name", "iteration", "start"]].assign(wait=wait[short])
    n = ctx.config["evidence"]["max_items"]
    waited = np.flatnonzero(wait[short] > 0)
    longest = waited[np.argsort(-wait[short][waited], kind="stable")[:n]]  # nlargest: ties in row order
    return Finding(
        "launch_bound",
        f"{plural(int(short.sum()), 'kernel')} ({100 * short.mean():.0f}% of {len(k):,}) ran shorter than "
        f"{cfg['short_kernel_us']} µs and no longer than their CPU launch (median kernel "
        f"{fmt_ns(float(np.median(dur[short])))}, median launch {fmt_ns(float(np.median(launch_dur[short])))}); "
        f"the GPU waited {fmt_ns(saving)} for the host to launch them.",
        ctx.advice("launch_bound",
                   "Cut per-kernel launch overhead: capture the step with CUDA graphs (torch.cuda.graphs or "
                   "torch.compile(mode='reduce-overhead'))"
                   + (", fuse small ops with torch.compile, and raise the batch size so each kernel does more work."
                      if ctx.is_training else " and fuse small ops with torch.compile."))
        + f" See {ctx.link('launch_bound')}",
        saving,
        {"node_ids": node_ids(ctx, top_by(sk[sk["op_id"] >= 0], "op_id", "wait", n)),
         "kernels": top_by(sk, "name", "wait", n), "iterations": iterations_of(sk["iteration"]),
         "time_ranges": [[int(s - w), int(s)] for s, w in
                         zip(sk["start"].to_numpy()[longest], wait[short][longest])],
         "short_kernels": int(short.sum()), "kernels_total": int(len(k))})
