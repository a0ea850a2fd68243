"""Host-bound steps: the GPU runs out of work and waits for the host to launch the next kernel.

The wait is HTA's host-wait (:func:`.launch.host_wait`, shared with ``launch_bound``): the idle time of a device
that ends with a kernel whose launch call started after that idle began, for every kernel launched one by one
(kernels replayed from a CUDA graph are left out: one launch call runs a whole graph). The part of it the host
spent in data loading is ``dataloader_bottleneck``'s and is not counted here, nor is the idle before the first
iteration starts. What is left is the time the step loses to the host's own pace: the framework's ops, the
Python between them and the launch calls themselves, which CUDA graphs, torch.compile and fewer, larger ops
remove. ``launch_bound`` (short kernels no longer than their launch) is a case of it: where this rule fires it
says what launch_bound would have said, and launch_bound's own finding is dropped (``subsumes``).

An H200 capture of an FP32 transformer LM (batch 16) ran at 51.4 % GPU utilization, its critical path 52 % in
framework ops, and CUDA graphs took its step from 23.2 to 12.8 ms; no finding said so, since its FP32 GEMMs are
too long for launch_bound, its utilization just above gpu_underutilized's 50 % and its gaps shorter than
gpu_gaps' 1 ms.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...analyze.intervals import merge
from ..evidence import fmt_ns, iterations_of, node_ids, plural, top_by
from ..finding import Finding
from ..registry import rule
from ..spans import covered_lengths, distinct
from .dataloader import loader_intervals
from .launch import launch_bound_holds, launches, once_per_idle, short_launches, top_names

#: what the launching threads did while the GPU waited, in the critical path's words (whatif.graph.CATEGORIES)
HOST_PARTS = ("cpu_op", "cpu_other", "cuda_api")
HOST_WORDS = {"cpu_op": "in framework ops", "cpu_other": "between ops (Python, the framework's dispatch)",
              "cuda_api": "in CUDA API calls"}


@rule("host_bound", gpu=True, subsumes=("launch_bound",))
def host_bound(ctx, cfg):
    if not ctx.wall or len(ctx.col("kernel_facts", "start")) < cfg["min_kernels"]:
        return None
    facts = launches(ctx)
    judged = int(facts.one_by_one.sum())
    if judged < cfg["min_kernels"]:
        return None
    start, device = ctx.col("kernel_facts", "start"), ctx.col("kernel_facts", "device")
    lo, hi = ctx.window
    first = _opens_window(ctx, device, start)
    # a device's first activity in the window: idle since the window began, waiting when launched after that
    since = np.where(first & (facts.launch_start >= lo), start - lo, facts.wait)
    since = np.where(facts.one_by_one, since, 0)
    ws, we = np.maximum(start - since, lo), np.minimum(start, hi)  # the wait inside the window
    waited = once_per_idle((since > 0) & (we > ws), device, start)
    ws, we = np.where(waited, ws, 0), np.where(waited, we, 0)
    loader = loader_intervals(ctx)[:2]
    loading = covered_lengths(loader, ws, we)
    wait = (we - ws) - loading
    rows = np.flatnonzero(wait > 0)
    if not len(rows):
        return None
    n_devices = len(distinct(device[rows]))
    saving = int(wait.sum()) // n_devices
    if ctx.pct(saving) < cfg["min_pct"]:
        return None
    split = host_split(ctx, ctx.col("kernel_facts", "api_id")[rows], ws[rows], we[rows], loader)
    split = {part: split[part] for part in HOST_PARTS}  # (its data loading is dataloader_wait_ns; each has a call)
    graphed = int(facts.replayed.sum())
    n = ctx.config["evidence"]["max_items"]
    # op nodes are the outermost ops (agg_ops): each waiting kernel's root op, not the op that launched it
    op_id, iteration = ctx.col("kernel_facts", "root_op_id")[rows], ctx.col("kernel_facts", "iteration")[rows]
    launched = op_id >= 0
    longest = rows[np.argsort(-wait[rows], kind="stable")[:n]]  # nlargest: ties in row order
    its = iterations_of(iteration)
    per_it = np.zeros(len(its), np.int64)
    np.add.at(per_it, np.searchsorted(its, iteration), wait[rows])  # (every waiting kernel is in an iteration)
    n_its = max(len(ctx.iteration_col("iteration")), 1)
    lb_cfg = ctx.config["launch_bound"]
    short = short_launches(ctx, lb_cfg)
    launch_bound = launch_bound_holds(ctx, lb_cfg)
    util = ctx.agg.get("gpu_utilization")
    of = (f"{judged:,} launched one by one ({plural(graphed, 'kernel')} replayed from CUDA graphs are left out: "
          "one launch call runs a whole graph)" if graphed else f"{judged:,}")
    problem = (
        f"The GPU waits for the host: {plural(len(rows), 'kernel')} of {of} started only after the GPU had run "
        f"out of work, their launch call made after it went idle; the GPU waited {fmt_ns(saving)} for them "
        f"({ctx.pct(saving):.1f}% of the aggregated time, {fmt_ns(saving / n_its)} per iteration"
        + (f"; GPU utilization {100 * util:.1f}%" if util is not None else "")
        + (f"; averaged over {n_devices} GPUs" if n_devices > 1 else "") + "). "
        + _where(ctx, op_id, wait[rows], saving / max(int(wait.sum()), 1))
        + "Meanwhile the launching threads were " + ", ".join(
            f"{100 * split[p] / max(sum(split.values()), 1):.0f}% {HOST_WORDS[p]}"
            for p in sorted(HOST_PARTS, key=lambda p: -split[p])) + ".")
    if launch_bound:
        d = ctx.col("kernel_facts", "dur")[short]
        problem += (f" Launch-bound: {plural(int(short.sum()), 'kernel')} ({100 * short.sum() / judged:.0f}%) ran "
                    f"shorter than {lb_cfg['short_kernel_us']} µs and no longer than their launch call (median "
                    f"kernel {fmt_ns(float(np.median(d)))}, median launch "
                    f"{fmt_ns(float(np.median(facts.launch_dur[short])))}).")
    in_loading = int(loading.sum()) // n_devices
    if in_loading:
        problem += (f" Another {fmt_ns(in_loading)} of such waits fell in data loading and is not counted here "
                    "(DataLoader workers remove it, not CUDA graphs).")
    return Finding(
        "host_bound", problem,
        ctx.advice("host_bound", host_advice(ctx, graphed)) + f" See {ctx.link('host_bound')}",
        saving,
        {"node_ids": node_ids(ctx, top_by({"op_id": op_id[launched], "wait": wait[rows][launched]}, "op_id",
                                          "wait", n)),
         "kernels": top_names(ctx, rows, wait[rows], n), "iterations": its,
         "time_ranges": [[int(ws[r]), int(we[r])] for r in longest],
         "waiting_kernels": int(len(rows)), "kernels_judged": judged, "graph_replayed_kernels": graphed,
         "host_wait_ns": int(wait.sum()), "dataloader_wait_ns": int(loading.sum()), "host_split_ns": split,
         "per_iteration_ns": dict(zip(its, per_it.tolist())), "short_kernels": int(short.sum()),
         "launch_bound": bool(launch_bound), "devices": [int(d) for d in distinct(device[rows])]})


def _where(ctx, op_id: np.ndarray, wait: np.ndarray, scale: float, k: int = 3) -> str:
    """The outermost ops, by name, whose kernels waited longest (``op_id``: each kernel's outermost op; ``scale``:
    the per-GPU share of the summed wait), as a sentence; empty when no waiting kernel has a launching op."""
    pos = ctx.op_rows(op_id)
    names, w = ctx.col("ops_all", "name")[pos[pos >= 0]], wait[pos >= 0]
    if not len(names):
        return ""
    codes, uniques = pd.factorize(names, sort=False)
    sums = np.zeros(len(uniques), np.int64)
    np.add.at(sums, codes, w)
    top = np.argsort(-sums, kind="stable")[:k]
    return "The longest waits come before the kernels of " + ", ".join(
        f"{uniques[i]} ({fmt_ns(sums[i] * scale)})" for i in top) + ". "


def _opens_window(ctx, device: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Per kernel: whether it starts its device's first GPU activity in the window (no activity before it
    there, so :func:`.launch.host_wait`, which looks for the previous one, sees no idle before it)."""
    out = np.zeros(len(start), dtype=bool)
    for dev in distinct(device).tolist():
        bs, _ = merge(*ctx.busy(dev))
        if len(bs):
            rows = np.flatnonzero(device == dev)
            out[rows] = start[rows] == bs[0]
    return out


def host_advice(ctx, graphed: int) -> str:
    """What to change where the host is the bottleneck (PyTorch's words; ``ctx.advice`` gives other frameworks')."""
    batch = (", and raise the batch size so each launch does more work (the host's cost per step stays the same, "
             "the GPU's grows)" if ctx.is_training else "")
    if graphed:
        return ("Kernels still launched one by one beside the CUDA graphs keep the GPU waiting: bring them into the "
                "graph (capture the whole step, optimizer and loss scaling included, with torch.cuda.graphs or "
                "torch.compile(mode='reduce-overhead')), or launch fewer, larger kernels for them (a fused optimizer: "
                f"foreach=True or fused=True){batch}.")
    return ("The host cannot launch work as fast as the GPU runs it: capture the step with CUDA graphs "
            "(torch.cuda.graphs, with static shapes and memory) or compile it with "
            "torch.compile(mode='reduce-overhead'), so that one launch call replays all its kernels; launch fewer, "
            "larger kernels (fuse elementwise chains with torch.compile, use a fused optimizer: foreach=True or "
            f"fused=True, and fused layers such as scaled_dot_product_attention){batch}.")


def host_split(ctx, api_ids: np.ndarray, ws: np.ndarray, we: np.ndarray, loader: tuple) -> dict[str, int]:
    """What the host did during each window [ws, we) in which the GPU waited, in ns per part: ``dataloader`` where
    data loading (on any thread) covers it, else, on the thread that made the API call ``api_ids[i]`` (the launch
    that ended the wait), the parts of ``HOST_PARTS``: inside a CUDA API call, else inside an op, else between
    ops; ``unknown`` where no such call is in the trace. Shared by ``host_bound`` and ``gpu_gaps``."""
    api_pos = ctx.api_rows(api_ids)
    in_loading = covered_lengths(loader, ws, we)
    out = {"dataloader": int(in_loading.sum()), **dict.fromkeys(HOST_PARTS, 0),
           "unknown": int(((we - ws) - in_loading)[api_pos < 0].sum())}
    known = api_pos >= 0
    pos, ws, we = api_pos[known], ws[known], we[known]
    pid, tid = ctx.col("api_calls", "pid")[pos], ctx.col("api_calls", "tid")[pos]
    threads, which = _threads(pid, tid)
    # Only what overlaps some wait is looked at, and of the ops only the outermost: an op starts inside its parent,
    # so each outermost op and all beneath it cover one stretch, from its start to the latest end beneath it
    # (:func:`_outermost_extents`). A 2.9 GB trace's 17M ops and 12.7M calls, merged whole three times, cost the
    # import 18 s and 330 MB.
    api_start, api_end = ctx.col("api_calls", "start"), ctx.col("api_calls", "end")
    api = np.flatnonzero(_touching(api_start, api_end, ws, we))
    api_start, api_end = api_start[api], api_end[api]
    api_pid, api_tid = ctx.col("api_calls", "pid")[api], ctx.col("api_calls", "tid")[api]
    root, op_start, op_end = ctx.derived("outermost_op_extents", lambda: _outermost_extents(ctx))
    op = np.flatnonzero(_touching(op_start, op_end, ws, we))
    op_start, op_end, root = op_start[op], op_end[op], root[op]
    op_pid, op_tid = ctx.col("ops_all", "pid")[root], ctx.col("ops_all", "tid")[root]
    for t, (p, th) in enumerate(threads.tolist()):
        mine = which == t
        s, e = ws[mine], we[mine]
        a = (api_pid == p) & (api_tid == th)
        o = (op_pid == p) & (op_tid == th)
        spans = [loader, (api_start[a], api_end[a]), (op_start[o], op_end[o])]
        covered = [covered_lengths(tuple(np.concatenate([sp[i] for sp in spans[:k + 1]]) for i in (0, 1)), s, e)
                   for k in range(3)]
        out["cuda_api"] += int((covered[1] - covered[0]).sum())
        out["cpu_op"] += int((covered[2] - covered[1]).sum())
        out["cpu_other"] += int(((e - s) - covered[2]).sum())
    return out


def _threads(pid: np.ndarray, tid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct (pid, tid) pairs and each row's pair, by one 64-bit key where both fit 32 bits (a 2-column
    ``np.unique(axis=0)`` sorts a structured view, several times slower), else by rows."""
    if len(pid) and pid.min() >= 0 and tid.min() >= 0 and pid.max() < 2**31 and tid.max() < 2**32:
        keys, which = np.unique((pid.astype(np.int64) << 32) | tid.astype(np.int64), return_inverse=True)
        return np.stack([keys >> 32, keys & (2**32 - 1)], axis=1), which.reshape(-1)
    threads, which = np.unique(np.stack([pid, tid], axis=1), axis=0, return_inverse=True)
    return threads, which.reshape(-1)


def _touching(starts: np.ndarray, ends: np.ndarray, ws: np.ndarray, we: np.ndarray) -> np.ndarray:
    """Per interval [starts, ends): whether it overlaps some window [ws, we) (the windows' union, sorted and
    disjoint: the last window that starts before an interval ends is the one with the latest end)."""
    s, e = merge(ws, we)
    if not len(s):
        return np.zeros(len(starts), bool)
    j = np.searchsorted(s, ends, side="left") - 1
    return (j >= 0) & (e[np.maximum(j, 0)] > starts)


def _outermost_extents(ctx) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(row, start, end) per outermost op of the rank (``ops_all`` rows at depth 0): from its start to the latest
    end of any op beneath it. Each op starts while its parent is open, so an outermost op and everything beneath it
    cover exactly that stretch, and the union of all the rank's ops on a thread is the union of these. Made once
    per rank (``host_bound`` and ``gpu_gaps`` both split by it); it holds a row per outermost op only."""
    depth = ctx.col("ops_all", "depth")
    parent, end = ctx.col("ops_all", "parent_id"), ctx.col("ops_all", "end").astype(np.int64)
    top = np.arange(len(depth))  # each op's outermost op's row, found one nesting level at a time
    for level in range(1, int(depth.max()) + 1 if len(depth) else 0):
        rows = np.flatnonzero(depth == level)
        up = ctx.op_rows(parent[rows])
        top[rows] = np.where(up >= 0, top[np.maximum(up, 0)], rows)
    roots = np.flatnonzero(top == np.arange(len(top)))  # depth 0, and any op whose parent is not among them
    latest = np.full(len(depth), np.iinfo(np.int64).min)
    np.maximum.at(latest, top, end)
    return roots, ctx.col("ops_all", "start")[roots].astype(np.int64), latest[roots]
