"""Fusion candidates (HTA's frequent CUDA kernel sequences): short kernels that follow each other on a
stream in the same order again and again, e.g. batch-norm + add + relu.

A sequence is a run of kernels shorter than ``short_kernel_us`` with gaps below ``max_gap_us`` between
them, outside the optimizer step (unfused_optimizer owns that) and not all of one name (a per-parameter
loop, not a chain). For every occurrence the saving is its kernels' time minus the longest one plus the
gaps between them: a fused kernel launches once and passes over memory once, so roughly the longest piece
remains. Patterns are taken greedily by saving, each kernel counted in at most one.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pandas as pd

from ..context import compile_any, names_matching
from ..evidence import fmt_ns, node_ids, short_kernel
from ..finding import Finding
from ..registry import rule


def _runs(k: pd.DataFrame, short_ns: int, max_gap_ns: int) -> list[np.ndarray]:
    """Row positions of maximal runs (length >= 2) of short, closely spaced kernels per stream."""
    out = []
    for _, g in k.groupby(["device", "stream", "iteration"], sort=False):
        g = g.sort_values("start")
        idx = g.index.to_numpy()
        ok = g["dur"].to_numpy() <= short_ns
        gap = g["start"].to_numpy()[1:] - g["end"].to_numpy()[:-1]
        joined = np.concatenate([[False], ok[1:] & ok[:-1] & (gap <= max_gap_ns)])
        a = None
        for i in range(len(g) + 1):
            if i < len(g) and joined[i]:
                a = i - 1 if a is None else a
            elif a is not None:
                out.append(idx[a:i])
                a = None
    return out


def _in_optimizer(ctx, k: pd.DataFrame) -> np.ndarray:
    """Kernels launched by ops inside an optimizer step."""
    ops = ctx.ops
    steps = ops[names_matching(ops["name"], compile_any(ctx.config["unfused_optimizer"]["step_op_patterns"]))]
    pos = ctx.ops_all.index.get_indexer(k["op_id"])
    inside = np.zeros(len(k), dtype=bool)
    if steps.empty:
        return inside
    o = ctx.ops_all
    start = np.where(pos >= 0, o["start"].to_numpy()[np.maximum(pos, 0)], -1)
    tid = np.where(pos >= 0, o["tid"].to_numpy()[np.maximum(pos, 0)], -1)
    for s in steps.itertuples(index=False):
        inside |= (tid == s.tid) & (start >= s.start) & (start <= s.end)
    return inside


def _gain(rows: np.ndarray, start, end, dur) -> int:
    return int(dur[rows].sum() - dur[rows].max() + (start[rows[1:]] - end[rows[:-1]]).clip(0).sum())


@rule("fusion_candidates")
def fusion_candidates(ctx, cfg):
    k = ctx.kernel_facts
    k = k[(k["eligible_root"] < 0) & ~k["name"].str.contains("nccl", case=False, regex=False)]
    k = k[~_in_optimizer(ctx, k)].reset_index(drop=True)
    if k.empty:
        return None
    codes, names = k["name"].factorize()
    start, end, dur = (k[c].to_numpy(np.int64) for c in ("start", "end", "dur"))
    occurrences = defaultdict(list)
    for run in _runs(k, int(cfg["short_kernel_us"] * 1000), int(cfg["max_gap_us"] * 1000)):
        for size in range(cfg["min_length"], cfg["max_length"] + 1):
            for i in range(len(run) - size + 1):
                rows = run[i:i + size]
                pattern = tuple(codes[rows])
                if len(set(pattern)) > 1:
                    occurrences[pattern].append(rows)
    n_its = max(len(ctx.iterations), 1)
    min_occ = cfg["min_occurrences_per_iteration"] * n_its
    scored = sorted(((sum(_gain(r, start, end, dur) for r in occ), p) for p, occ in occurrences.items()
                     if len(occ) >= min_occ), reverse=True)
    used = np.zeros(len(k), dtype=bool)
    chosen = []
    for _, pattern in scored:
        fresh = [r for r in occurrences[pattern] if not used[r].any()]
        for r in fresh:
            used[r] = True
        gain = sum(_gain(r, start, end, dur) for r in fresh)
        if len(fresh) >= min_occ and gain > 0:
            chosen.append((gain, pattern, len(fresh), fresh))
        if len(chosen) >= cfg["top_k"]:
            break
    saving = sum(c[0] for c in chosen)
    if not chosen or ctx.pct(saving) < cfg["min_pct"]:
        return None
    chosen.sort(key=lambda c: -c[0])
    n = ctx.config["evidence"]["max_items"]
    gain, pattern, count, rows_all = chosen[0]
    text = " + ".join(short_kernel(names[c]) for c in pattern)
    ex_rows = np.concatenate([r for _, _, _, rs in chosen for r in rs[:n]])
    ex_ops = k["op_id"].to_numpy()[ex_rows]
    return Finding(
        "fusion_candidates",
        f"{len(chosen)} short kernel sequences repeat on the same stream; the most costly, {text}, occurs "
        f"{count / n_its:,.0f} times per iteration. Fusing the {len(chosen)} sequences would save about "
        f"{fmt_ns(saving)} of launches, gaps and repeated memory passes.",
        "Fuse these elementwise/normalization chains: torch.compile the model (or the block), use fused "
        "modules (e.g. fused bias+activation, fused layer norm), or write a Triton kernel for the hot chain. "
        f"See {ctx.link('fusion_candidates')}",
        saving,
        {"node_ids": node_ids(ctx, ex_ops[ex_ops >= 0]), "kernels": [names[c] for c in pattern],
         "iterations": sorted(int(i) for i in k["iteration"].unique()),
         "time_ranges": [[int(start[r[0]]), int(end[r[-1]])] for r in rows_all[:n]],
         "patterns": [{"kernels": [names[c] for c in p], "occurrences": c, "saving_ns": g}
                      for g, p, c, _ in chosen]})
