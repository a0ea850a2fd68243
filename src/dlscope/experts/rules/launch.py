"""Launch-bound execution (HTA's launch statistics): many short kernels whose CPU launch takes at least as
long as the kernel runs, so the GPU waits for the host between them.

The saving is the *host-wait* idle time before those kernels (HTA's definition: the kernel's launch call
started after the GPU's previous activity ended), each gap capped at ``max_launch_gap_us`` so longer CPU
stalls that CUDA graphs would not remove are not counted.

Kernels replayed from a CUDA graph are not launched one by one: the graph's one launch call runs them all, so
they are left out (an H200 capture whose forward and backward were graphed was told its 23,160 short kernels
waited on a "median launch" of 446 µs, the cudaGraphLaunch, and advised to use CUDA graphs). What is judged are
the kernels still launched one by one, and the advice then is to bring them into the graph.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...analyze.intervals import merge
from ..evidence import fmt_ns, iterations_of, node_ids, plural, top_by
from ..finding import Finding
from ..registry import rule
from ..spans import distinct


def host_wait(ctx, device: np.ndarray, start: np.ndarray, launch_start: np.ndarray) -> np.ndarray:
    """Per kernel (its device and start), the idle time before it on its device when the host launched it
    after that idle began."""
    out = np.zeros(len(start), dtype=np.int64)
    for dev in distinct(device).tolist():
        rows = np.flatnonzero(device == dev)
        bs, be = merge(*ctx.busy(dev))
        s = start[rows]
        idx = np.searchsorted(bs, s, side="right") - 1
        ok = (idx >= 1) & (bs[np.maximum(idx, 0)] == s)
        prev_end = np.where(ok, be[np.maximum(idx - 1, 0)], s)
        waited = ok & (launch_start[rows] >= prev_end)
        out[rows] = np.where(waited, s - prev_end, 0)
    return out


@dataclass(frozen=True)
class Launches:
    """Per kernel of the aggregation (a row of ``kernel_facts``): how the host launched it."""

    one_by_one: np.ndarray  # its launch call is known and launched it alone (not a CUDA/HIP graph launch)
    replayed: np.ndarray  # run by a graph launch call
    launch_start: np.ndarray  # its launch call's start (the kernel's own start where no call is known)
    launch_dur: np.ndarray  # its launch call's duration (0 where none is known)
    wait: np.ndarray  # :func:`host_wait` before it, uncapped; 0 unless launched one by one, and counted once
    # for kernels that end the same idle together (:func:`once_per_idle`)


def launches(ctx) -> Launches:
    """The aggregation's kernels and their launch calls, found once per context (``launch_bound`` and
    ``host_bound`` read them)."""
    return ctx.derived("launches", lambda: _launches(ctx))


def _launches(ctx) -> Launches:
    start = ctx.col("kernel_facts", "start")
    api_id = ctx.col("kernel_facts", "api_id")
    pos = ctx.api_rows(api_id)
    replayed = np.isin(api_id, ctx.graph_launches)
    has = (pos >= 0) & ~replayed
    api_start, api_end = ctx.col("api_calls", "start"), ctx.col("api_calls", "end")
    launch_start = np.where(has, api_start[np.maximum(pos, 0)], start)
    launch_dur = np.where(has, (api_end - api_start)[np.maximum(pos, 0)], 0)
    device = ctx.col("kernel_facts", "device")
    wait = host_wait(ctx, device, start, launch_start) if len(start) else np.zeros(0, np.int64)
    wait = np.where(has, wait, 0)
    return Launches(has, replayed, launch_start, launch_dur, np.where(once_per_idle(wait > 0, device, start), wait, 0))


def once_per_idle(waited: np.ndarray, device: np.ndarray, start: np.ndarray) -> np.ndarray:
    """``waited`` with one kernel per idle stretch: kernels of two streams that start at the same instant after
    the same idle (a trace in whole microseconds has them) end it together, and it counts once (the first row)."""
    rows = np.flatnonzero(waited)
    order = rows[np.lexsort((start[rows], device[rows]))]
    again = (device[order][1:] == device[order][:-1]) & (start[order][1:] == start[order][:-1])
    out = waited.copy()
    out[order[1:][again]] = False
    return out


def short_launches(ctx, cfg) -> np.ndarray:
    """Per kernel: launched one by one, shorter than ``short_kernel_us`` and no longer than its launch call
    (``cfg``: launch_bound's thresholds)."""
    facts = launches(ctx)
    dur = ctx.col("kernel_facts", "dur")
    return facts.one_by_one & (dur < cfg["short_kernel_us"] * 1000) & (facts.launch_dur >= dur)


def launch_bound_holds(ctx, cfg) -> bool:
    """launch_bound's conditions on the kernels (before its saving is judged): at least ``min_kernels`` not
    replayed from a graph, and at least ``min_short_share`` of them short launches (``cfg``: its thresholds)."""
    start = ctx.col("kernel_facts", "start")
    if len(start) < cfg["min_kernels"]:
        return False
    judged = len(start) - int(launches(ctx).replayed.sum())
    return judged >= cfg["min_kernels"] and short_launches(ctx, cfg).sum() >= cfg["min_short_share"] * judged


@rule("launch_bound", gpu=True)
def launch_bound(ctx, cfg):
    if not launch_bound_holds(ctx, cfg):
        return None
    start, dur = ctx.col("kernel_facts", "start"), ctx.col("kernel_facts", "dur")
    facts = launches(ctx)
    replayed, launch_dur = facts.replayed, facts.launch_dur
    judged = len(start) - int(replayed.sum())
    short = short_launches(ctx, cfg)
    wait = np.minimum(facts.wait, int(cfg["max_launch_gap_us"] * 1000))
    saving = int(wait[short].sum())
    if ctx.pct(saving) < cfg["min_pct"]:
        return None
    sk = {c: ctx.col("kernel_facts", c)[short] for c in ("op_id", "iteration", "start")}
    sk["wait"] = wait[short]
    launched = sk["op_id"] >= 0
    n = ctx.config["evidence"]["max_items"]
    waited = np.flatnonzero(wait[short] > 0)
    longest = waited[np.argsort(-wait[short][waited], kind="stable")[:n]]  # nlargest: ties in row order
    graphed = int(replayed.sum())
    of = (f"{judged:,} launched one by one; {plural(graphed, 'kernel')} replayed from CUDA graphs are left out: "
          "one launch call runs a whole graph" if graphed else f"{len(start):,}")
    capture = ("Cut per-kernel launch overhead: bring the kernels still launched one by one into the CUDA graph "
               "(capture the whole step, optimizer included, with torch.cuda.graphs or "
               "torch.compile(mode='reduce-overhead'))" if graphed else
               "Cut per-kernel launch overhead: capture the step with CUDA graphs (torch.cuda.graphs or "
               "torch.compile(mode='reduce-overhead'))")
    return Finding(
        "launch_bound",
        f"{plural(int(short.sum()), 'kernel')} ({100 * short.sum() / judged:.0f}% of {of}) ran shorter than "
        f"{cfg['short_kernel_us']} µs and no longer than their CPU launch (median kernel "
        f"{fmt_ns(float(np.median(dur[short])))}, median launch {fmt_ns(float(np.median(launch_dur[short])))}); "
        f"the GPU waited {fmt_ns(saving)} for the host to launch them.",
        ctx.advice("launch_bound", capture
                   + (", fuse small ops with torch.compile, and raise the batch size so each kernel does more work."
                      if ctx.is_training else " and fuse small ops with torch.compile."))
        + f" See {ctx.link('launch_bound')}",
        saving,
        {"node_ids": node_ids(ctx, top_by({c: v[launched] for c, v in sk.items()}, "op_id", "wait", n)),
         "kernels": top_names(ctx, short, sk["wait"], n), "iterations": iterations_of(sk["iteration"]),
         "time_ranges": [[int(s - w), int(s)] for s, w in
                         zip(sk["start"][longest], wait[short][longest])],
         "short_kernels": int(short.sum()), "kernels_total": int(len(start)), "graph_replayed_kernels": graphed})


def top_names(ctx, rows: np.ndarray, weight: np.ndarray, n: int) -> list:
    """``top_by`` of the kernel names at ``rows`` of the rank's kernels (``weight`` per row), on the job's name
    codes instead of the names (a rank's hashing of its names cost more than the rule's work); rows without a
    name are left out, as ``top_by`` leaves them out."""
    codes, names = ctx.frames.name_codes("kernel_facts", ctx.rank)
    mine = codes[rows]
    named = mine >= 0
    return [names[c] for c in top_by({"code": mine[named], "w": weight[named]}, "code", "w", n)]
