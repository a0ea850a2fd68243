"""Fusion candidates (HTA's frequent CUDA kernel sequences): short kernels that follow each other on a
stream in the same order again and again, e.g. batch-norm + add + relu.

A sequence is a run of kernels shorter than ``short_kernel_us`` with gaps below ``max_gap_us`` between
them, outside the optimizer step (unfused_optimizer owns that) and not all of one name (a per-parameter
loop, not a chain). For every occurrence the saving is its kernels' time minus the longest one plus the
gaps between them: a fused kernel launches once and passes over memory once, so roughly the longest piece
remains. Patterns are taken greedily by saving, each kernel counted in at most one.

An occurrence whose kernels were all replayed from a CUDA graph (launched by a graph launch call,
``Context.graph_launches``) is priced by its repeated memory passes only (its kernels' time minus the longest):
the graph already removed its launches, and what lies between its kernels is the graph's node-to-node latency
and its memset/memcpy nodes, not launch latency that fusing would remove. Its gaps are left out and said in the
evidence (an H200 transformer captured with its forward and backward graphed was told fusing would save 35 ms
"of launches, gaps and repeated memory passes", the launches being those the graph had removed).
"""

from __future__ import annotations

import re

import numpy as np

from ..evidence import fmt_ns, node_ids, plural, short_kernel
from ..finding import Finding
from ..registry import rule
from ..spans import distinct


def _runs(k: dict[str, np.ndarray], short_ns: int, max_gap_ns: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Maximal runs (length >= 2) of short, closely spaced kernels per stream and iteration.

    Returns ``order`` (row positions, grouped by stream and iteration in order of first appearance, by
    start within a group) and each run's ``[lo, hi)`` bounds in it.
    """
    group = _first_seen_groups(*(k[c] for c in ("device", "stream", "iteration")))
    start, end = k["start"], k["end"]
    order = np.lexsort((start, group))
    ok = k["dur"][order] <= short_ns
    same = group[order][1:] == group[order][:-1]
    gap = start[order][1:] - end[order][:-1]
    joined = np.concatenate([[False], same & ok[1:] & ok[:-1] & (gap <= max_gap_ns), [False]])
    edges = np.diff(joined.astype(np.int8))  # +1: the next kernel joins this one; -1: this one ends a run
    lo = np.flatnonzero(edges == 1)
    hi = np.flatnonzero(edges == -1) + 1
    return order, lo, hi


def _first_seen_groups(*columns: np.ndarray) -> np.ndarray:
    """Per row, its group of equal values in ``columns``, numbered in order of first appearance (what
    ``groupby(sort=False).ngroup()`` gives, without its per-call cost): a stable sort by the columns puts
    each group's first row first."""
    n = len(columns[0])
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort(columns[::-1])
    new = np.ones(n, dtype=bool)
    new[1:] = np.logical_or.reduce([col[order][1:] != col[order][:-1] for col in columns])
    group_in_sort = np.cumsum(new) - 1
    number = np.empty(int(new.sum()), dtype=np.int64)
    number[np.argsort(order[new], kind="stable")] = np.arange(len(number))  # groups by their first row
    out = np.empty(n, dtype=np.int64)
    out[order] = number[group_in_sort]
    return out


def _factorized(job_codes: np.ndarray, job_names: np.ndarray, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``pd.factorize`` of the kept rows' names (codes numbered in order of first appearance, -1 for a
    missing name; the names by code), from the codes of the whole job's names."""
    kept = job_codes[keep]
    known = kept >= 0
    codes = np.full(len(kept), -1, dtype=np.int64)
    if known.any():
        codes[known] = _first_seen_groups(kept[known])
        first = np.zeros(int(codes.max()) + 1, dtype=np.int64)
        first[codes[known]] = kept[known]  # every row of a group has the same job code
        return codes, job_names[first]
    return codes, job_names[:0]


def _distinct_rows(pattern: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(distinct rows in lexicographic order, each row's index in them, the rows ordered by it, stable):
    ``np.unique(pattern, axis=0, return_inverse=True)`` and a stable argsort of its inverse, by one sort of
    the rows read as numbers in base (largest code + 2) when they fit in an int64 (codes are >= -1)."""
    size = pattern.shape[1]
    base = int(pattern.max()) + 2 if len(pattern) else 1
    if base ** size >= 2 ** 62:
        distinct, which = np.unique(pattern, axis=0, return_inverse=True)
        which = which.ravel()
        return distinct, which, np.argsort(which, kind="stable")
    key = np.zeros(len(pattern), dtype=np.int64)
    for i in range(size):
        key = key * base + (pattern[:, i] + 1)
    by = np.argsort(key, kind="stable")
    new = np.ones(len(by), dtype=bool)
    new[1:] = key[by][1:] != key[by][:-1]
    which = np.empty(len(by), dtype=np.int64)
    which[by] = np.cumsum(new) - 1
    return pattern[by[new]], which, by


def _windows(order: np.ndarray, lo: np.ndarray, hi: np.ndarray, size: int) -> np.ndarray:
    """Row positions (n, size) of every ``size`` consecutive kernels inside a run, run by run."""
    counts = np.maximum(hi - lo - size + 1, 0)
    first = np.repeat(lo, counts) + np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    return order[first[:, None] + np.arange(size)]


def _gaps(rows: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per occurrence (a row of ``rows``): the idle time between its kernels."""
    return (start[rows[:, 1:]] - end[rows[:, :-1]]).clip(0).sum(axis=1)


def _gains(rows: np.ndarray, start: np.ndarray, end: np.ndarray, dur: np.ndarray,
           replayed: np.ndarray | None = None) -> np.ndarray:
    """Per occurrence (a row of ``rows``): its kernels' time minus the longest, plus the gaps inside it unless all
    its kernels were replayed from a CUDA graph (``replayed``: per kernel row)."""
    gaps = _gaps(rows, start, end)
    if replayed is not None:
        gaps = np.where(replayed[rows].all(axis=1), 0, gaps)
    return dur[rows].sum(axis=1) - dur[rows].max(axis=1) + gaps


def _occurrences(codes: np.ndarray, order: np.ndarray, lo: np.ndarray, hi: np.ndarray, sizes: range,
                 start: np.ndarray, end: np.ndarray, dur: np.ndarray,
                 min_count: float = 0,
                 replayed: np.ndarray | None = None) -> dict[tuple, tuple[np.ndarray, np.ndarray]]:
    """Each pattern (tuple of name codes, not all one name) occurring at least ``min_count`` times -> its
    occurrences' rows and gains (:func:`_gains`)."""
    out = {}
    for size in sizes:
        rows = _windows(order, lo, hi, size)
        pattern = codes[rows]
        mixed = (pattern != pattern[:, :1]).any(axis=1)
        rows, pattern = rows[mixed], pattern[mixed]
        if not len(rows):
            continue
        gains = _gains(rows, start, end, dur, replayed)
        distinct, which, by = _distinct_rows(pattern)  # by: occurrences of a pattern stay in run order
        counts = np.bincount(which, minlength=len(distinct))
        frequent = np.flatnonzero(counts >= min_count)
        if not len(frequent):
            continue
        bounds = np.concatenate([[0], np.cumsum(counts)])
        for p, a, b in zip(distinct[frequent].tolist(), bounds[frequent].tolist(), bounds[frequent + 1].tolist()):
            out[tuple(p)] = (rows[by[a:b]], gains[by[a:b]])
    return out


def _in_optimizer(ctx, op_id: np.ndarray) -> np.ndarray:
    """Kernels (by their op ids) launched by ops inside an optimizer step."""
    named = ctx.names_match("ops", ctx.config["unfused_optimizer"]["step_op_patterns"])
    inside = np.zeros(len(op_id), dtype=bool)
    if not named.any():
        return inside
    steps = zip(*(ctx.col("ops", c)[named].tolist() for c in ("tid", "start", "end")))
    pos = ctx.op_rows(op_id)
    start = np.where(pos >= 0, ctx.col("ops_all", "start")[np.maximum(pos, 0)], -1)
    tid = np.where(pos >= 0, ctx.col("ops_all", "tid")[np.maximum(pos, 0)], -1)
    for s_tid, s_start, s_end in steps:
        inside |= (tid == s_tid) & (start >= s_start) & (start <= s_end)
    return inside


#: NCCL kernels are communication, never fused
_NCCL = re.compile("nccl", re.IGNORECASE)


@rule("fusion_candidates", gpu=True)
def fusion_candidates(ctx, cfg):
    keep = (ctx.col("kernel_facts", "eligible_root") < 0) & ~ctx.frames.matching("kernel_facts", _NCCL, ctx.rank)
    keep[keep] = ~_in_optimizer(ctx, ctx.col("kernel_facts", "op_id")[keep])
    if not keep.any():
        return None
    k = {c: ctx.col("kernel_facts", c)[keep] for c in ("device", "stream", "iteration", "start", "end", "dur", "op_id")}
    replayed = np.isin(ctx.col("kernel_facts", "api_id")[keep], ctx.graph_launches)
    codes, names = _factorized(*ctx.frames.name_codes("kernel_facts", ctx.rank), keep)
    start, end, dur = k["start"], k["end"], k["dur"]
    order, lo, hi = _runs(k, int(cfg["short_kernel_us"] * 1000), int(cfg["max_gap_us"] * 1000))
    n_its = max(len(ctx.iteration_col("iteration")), 1)
    min_occ = cfg["min_occurrences_per_iteration"] * n_its
    occurrences = _occurrences(codes, order, lo, hi, range(cfg["min_length"], cfg["max_length"] + 1),
                               start, end, dur, min_occ, replayed)
    scored = sorted(((int(gains.sum()), p) for p, (rows, gains) in occurrences.items()), reverse=True)
    used = np.zeros(len(start), dtype=bool)
    chosen = []
    for _, pattern in scored:
        rows, gains = occurrences[pattern]
        fresh = ~used[rows].any(axis=1)
        used[rows[fresh]] = True
        gain = int(gains[fresh].sum())
        if fresh.sum() >= min_occ and gain > 0:
            chosen.append((gain, pattern, int(fresh.sum()), rows[fresh]))
        if len(chosen) >= cfg["top_k"]:
            break
    saving = sum(c[0] for c in chosen)
    if not chosen or ctx.pct(saving) < cfg["min_pct"]:
        return None
    chosen.sort(key=lambda c: -c[0])
    n = ctx.config["evidence"]["max_items"]
    gain, pattern, count, rows_all = chosen[0]
    text = " + ".join(short_kernel(names[c]) for c in pattern)
    ex_rows = np.concatenate([rs[:n].ravel() for _, _, _, rs in chosen])
    ex_ops = k["op_id"][ex_rows]
    # occurrences wholly replayed from CUDA graphs, per chosen pattern (patterns differ in length)
    graphed = [replayed[rs].all(axis=1) for _, _, _, rs in chosen]
    occurrences_n, graphed_n = sum(len(g) for g in graphed), int(sum(g.sum() for g in graphed))
    replayed_rows = [rs[g] for (_, _, _, rs), g in zip(chosen, graphed)]
    graphed_saving = sum(int(_gains(rs, start, end, dur, replayed).sum()) for rs in replayed_rows)
    graphed_gaps = sum(int(_gaps(rs, start, end).sum()) for rs in replayed_rows)
    kinds = f"{plural(len(chosen), 'short kernel sequence')} repeat{'s' if len(chosen) == 1 else ''} on the same stream"
    if graphed_n == occurrences_n:
        kinds += ", all replayed from CUDA graphs"
        what = (f"of repeated memory passes (the graph already removed their launches; the {fmt_ns(graphed_gaps)} "
                "between their kernels inside the graph is not counted)")
    elif graphed_n:
        what = (f"of launches, gaps and repeated memory passes ({fmt_ns(graphed_saving)} of it in the "
                f"{graphed_n:,} occurrences replayed from CUDA graphs, priced by their memory passes only: "
                "the graph already removed their launches)")
    else:
        what = "of launches, gaps and repeated memory passes"
    return Finding(
        "fusion_candidates",
        f"{kinds}; the most costly, {text}, occurs {count / n_its:,.0f} times per iteration. Fusing the "
        f"{'sequence' if len(chosen) == 1 else f'{len(chosen)} sequences'} would save about {fmt_ns(saving)} {what}.",
        ctx.advice("fusion_candidates",
                   "Fuse these elementwise/normalization chains: torch.compile the model (or the block), use fused "
                   "modules (e.g. fused bias+activation, fused layer norm), or write a Triton kernel for the hot "
                   "chain.") + f" See {ctx.link('fusion_candidates')}",
        saving,
        {"node_ids": node_ids(ctx, ex_ops[ex_ops >= 0]), "kernels": [names[c] for c in pattern],
         "iterations": [int(i) for i in distinct(k["iteration"])],
         "time_ranges": [[int(start[r[0]]), int(end[r[-1]])] for r in rows_all[:n]],
         "patterns": [{"kernels": [names[c] for c in p], "occurrences": c, "saving_ns": g,
                       "graph_replayed_occurrences": int(gr.sum())}
                      for (g, p, c, _), gr in zip(chosen, graphed)],
         "occurrences": occurrences_n, "graph_replayed_occurrences": graphed_n,
         "graph_replayed_saving_ns": graphed_saving, "graph_replayed_gaps_not_counted_ns": graphed_gaps})
