"""Host-blocking transfers and synchronizations (nsys analyze's cuda_memcpy_async, cuda_memcpy_sync,
cuda_memset_sync and cuda_api_sync rules), limited to the profiled iterations.

A blocking call holds the CPU until the GPU queue drains; without it the CPU would have had that time to
queue the next work. That only shortens the step where the GPU later waits for the CPU: the *refill gap*
from the call's return to the next GPU activity (minus time in data loading or I/O, which other rules
own). The saving of sync_memcpy and sync_api is, per call, the smaller of the time it blocked and its
refill gap. A pageable copy cannot
overlap compute; its saving is the copy time not overlapped by any kernel (what pinned memory plus
non_blocking=True lets overlap).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...analyze.intervals import clip, merge
from ..evidence import fmt_ns, iterations_of, longest_ranges, node_ids, plural
from ..finding import Finding
from ..registry import rule
from ..spans import Span, covered_lengths, length, minus


def refill_gaps(ctx, call_ends: np.ndarray) -> np.ndarray:
    """Per call (in the given order): the GPU idle time from its return to the next GPU activity, not
    counting time in data loading or I/O."""
    bs, be = merge(*ctx.busy())
    lo, hi = ctx.window
    ends = np.asarray(call_ends, dtype=np.int64)
    idx = np.searchsorted(bs, ends, side="right")          # first busy interval starting after the call
    inside = np.zeros(len(ends), dtype=bool)
    prev = idx - 1
    ok = prev >= 0
    inside[ok] = ends[ok] < be[prev[ok]]
    nxt = np.where(idx < len(bs), bs[np.minimum(idx, len(bs) - 1)] if len(bs) else hi, hi)
    gap_end = np.where(~inside, np.minimum(nxt, hi), ends)
    other = ctx.ops_named("dataloader") | ctx.ops_named("io")
    rg = ctx.col_in("ranges", "category", ("dataloader", "io"))
    owned = Span(np.concatenate([ctx.col("ops_all", "start")[other], ctx.col("ranges", "start")[rg]]),
                 np.concatenate([ctx.col("ops_all", "end")[other], ctx.col("ranges", "end")[rg]]))
    s, e = np.clip(ends, lo, hi), np.clip(gap_end, lo, hi)
    return np.where(e > s, (e - s) - covered_lengths(owned, s, e), 0)


def _calls(ctx, patterns: list[str]) -> dict[str, np.ndarray]:
    """The API calls whose names match, as columns."""
    hit = ctx.names_match("api_calls", patterns)
    return {c: ctx.col("api_calls", c)[hit] for c in ("name", "start", "end", "op_id", "iteration")}


def _most_called(names: np.ndarray, count: int) -> str:
    """'name ×calls' of the ``count`` most called names (ties in order of first call)."""
    codes, uniques = pd.factorize(names, sort=False)
    calls = np.bincount(codes[codes >= 0], minlength=len(uniques))
    order = np.argsort(-calls, kind="stable")[:count]
    return ", ".join(f"{name} ×{n}" for name, n in zip(np.asarray(uniques, dtype=object)[order], calls[order]))


def _blocking_finding(ctx, cfg, rule_id: str, calls: dict[str, np.ndarray], what: str, advice: str):
    if not len(calls["end"]):
        return None
    refill = refill_gaps(ctx, calls["end"])
    blocked_each = calls["end"] - calls["start"]
    saving = int(np.minimum(refill, blocked_each).sum())
    if ctx.pct(saving) < cfg["min_pct"]:
        return None
    n = ctx.config["evidence"]["max_items"]
    blocked, count = int(blocked_each.sum()), len(calls["end"])
    names = _most_called(calls["name"], 4)
    callers = calls["op_id"][calls["op_id"] >= 0]
    pos = ctx.op_rows(callers)
    caller_names = ", ".join(pd.unique(ctx.col("ops_all", "name")[pos[pos >= 0]])[:3]) or "no framework op"
    return Finding(
        rule_id,
        f"{plural(count, what)} inside the step ({names}) blocked the CPU for {fmt_ns(blocked)}; after they "
        f"returned the GPU sat idle for {fmt_ns(int(refill.sum()))} until new work arrived, "
        f"{fmt_ns(saving)} ({ctx.pct(saving):.1f}%) of which the CPU could have filled instead of waiting. "
        f"Called from: {caller_names}.",
        f"{advice} See {ctx.link(rule_id)}",
        saving,
        {"node_ids": node_ids(ctx, callers), "iterations": iterations_of(calls["iteration"]),
         "time_ranges": longest_ranges(calls["start"], calls["end"], n), "calls": count,
         "blocked_cpu_ns": blocked, "idle_after_ns": int(refill.sum())})


@rule("sync_memcpy", gpu=True)
def sync_memcpy(ctx, cfg):
    return _blocking_finding(
        ctx, cfg, "sync_memcpy", _calls(ctx, cfg["api_names"]), "synchronous memcpy/memset call",
        "Use the asynchronous forms (cudaMemcpyAsync / cudaMemsetAsync; in PyTorch tensor.to(device, "
        "non_blocking=True) from pinned memory) and read results back only when needed.")


@rule("sync_api", gpu=True)
def sync_api(ctx, cfg):
    return _blocking_finding(
        ctx, cfg, "sync_api", _calls(ctx, cfg["api_names"]), "device/stream synchronization",
        "Avoid synchronizing inside the training loop: .item(), .cpu(), .numpy(), print(tensor) and "
        "torch.cuda.synchronize() wait for the GPU. Accumulate metrics on the GPU and read them every N steps; "
        "use CUDA events (cudaStreamWaitEvent / torch.cuda.Event) to order work instead.")


@rule("pageable_memcpy", gpu=True)
def pageable_memcpy(ctx, cfg):
    def memops(c: str) -> np.ndarray:
        return ctx.col("memops", c)

    sel = (memops("kind") == "memcpy") & ctx.col_in("memops", "copy_kind", cfg["copy_kinds"]) & \
        ((memops("src_mem") == "pageable") | (memops("dst_mem") == "pageable"))
    if not sel.any():
        return None
    copies = {c: memops(c)[sel] for c in ("start", "end", "dur", "bytes", "op_id", "iteration")}
    lo, hi = ctx.window
    span = clip(copies["start"], copies["end"], lo, hi)
    exposed = minus(span, ctx.busy(kinds=("kernel",)))
    saving = length(exposed)
    if ctx.pct(saving) < cfg["min_pct"]:
        return None
    n = ctx.config["evidence"]["max_items"]
    nbytes = int(copies["bytes"][copies["bytes"] > 0].sum())
    return Finding(
        "pageable_memcpy",
        f"{plural(len(copies['dur']), 'host-to-device copy', 'host-to-device copies')} came from pageable memory "
        f"({nbytes / 2**20:,.1f} MiB, "
        f"{fmt_ns(int(copies['dur'].sum()))} on the GPU); pageable copies are staged and synchronous, and "
        f"{fmt_ns(saving)} of them ran with no kernel alongside.",
        "Copy from pinned memory asynchronously: DataLoader(pin_memory=True) or tensor.pin_memory(), then "
        f"tensor.to('cuda', non_blocking=True). See {ctx.link('pageable_memcpy')}",
        saving,
        {"node_ids": node_ids(ctx, copies["op_id"][copies["op_id"] >= 0]),
         "iterations": iterations_of(copies["iteration"]),
         "time_ranges": longest_ranges(copies["start"], copies["end"], n), "bytes": nbytes,
         "copies": int(len(copies["dur"]))})
