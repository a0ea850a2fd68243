"""Finding iterations (training steps) and assigning every event to one.

Order of methods (PRODUCT.md): the user's key node; ProfilerStep#N; the step markers torch records by
default (one DataLoader ``__next__``, ``Optimizer.zero_grad`` or ``Optimizer.step`` per step); step-like
NVTX/annotation ranges; a loop that the whole top-level op sequence repeats; else one iteration covering
everything. The method used is reported, and ``repeating_pattern`` is a guess, said so.

Iteration i's *window* runs from its CPU start to the next iteration's start, so the windows of an
aggregation partition its wall clock; the last window of an aggregation ends with the last CPU op or GPU
activity of its last iteration. CPU events belong to the window holding their start; GPU activity belongs to
the iteration of its launching call, even when it runs after the step (its time is then in the next window's
time figures).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..model import value_counts
from .categories import matches, patterns
from .tensor_core import classify_names

COLUMNS = ["rank", "iteration", "name", "start", "cpu_end"]
#: methods whose split is a guess from the op sequence, not a marker the program recorded
GUESSED = frozenset({"repeating_pattern"})
#: a loop of the whole top-level op sequence must repeat at least this often
MIN_LOOP_REPEATS = 3


@dataclass
class Found:
    """One rank's iterations, how they were found, and key-node candidates seen (for a guessed split or none)."""

    iterations: pd.DataFrame
    method: str
    candidates: list[str] = field(default_factory=list)


def _frame(rank: int, starts, ends, names) -> pd.DataFrame:
    n = len(starts)
    return pd.DataFrame({
        "rank": np.full(n, rank, dtype=np.int64), "iteration": np.arange(n, dtype=np.int64),
        "name": list(names), "start": np.asarray(starts, np.int64), "cpu_end": np.asarray(ends, np.int64),
    })


def _occurrence_steps(rank: int, occ: pd.DataFrame, last_end: int) -> pd.DataFrame:
    """Iterations from one occurrence of a marker to the next; the last runs to the end of CPU activity."""
    occ = occ.sort_values("start", kind="stable")
    occ = occ[~occ["start"].duplicated()]
    starts = occ["start"].to_numpy(np.int64)
    ends = np.empty_like(starts)
    ends[:-1] = starts[1:]
    ends[-1:] = max(int(occ["end"].iloc[-1]), last_end) if len(occ) else 0
    return _frame(rank, starts, ends, occ["name"])


def _outermost(occ: pd.DataFrame) -> pd.DataFrame:
    """Occurrences not nested in an earlier one of the same family (a nested step marker is no new step)."""
    occ = occ.sort_values("start", kind="stable")
    reach = occ["end"].cummax().shift(1, fill_value=np.iinfo(np.int64).min)  # int64: ns epochs exceed float
    return occ[occ["start"].to_numpy(np.int64) >= reach.to_numpy(np.int64)]


def _marker_steps(cands: pd.DataFrame, rank: int, last_end: int) -> pd.DataFrame | None:
    """Steps from the markers torch records once per step: a step starts at its DataLoader ``__next__`` (or
    ``zero_grad``) when those come once per optimizer step, else at each ``Optimizer.step``. ``cands``: the
    rank's candidates (:func:`_named`), at least those that are markers, in their order."""
    found = {kind: _outermost(cands[matches(cands["name"], kind)])
             for kind in ("marker_dataloader", "marker_zero_grad", "marker_optimizer")}
    n_opt = len(found["marker_optimizer"])
    for kind in ("marker_dataloader", "marker_zero_grad", "marker_optimizer"):
        occ = found[kind]
        if len(occ) < 2 or (n_opt and kind != "marker_optimizer" and len(occ) not in (n_opt, n_opt + 1)):
            continue
        steps = _occurrence_steps(rank, occ, last_end)
        if n_opt and kind != "marker_optimizer":
            # a step has an optimizer step: the DataLoader call that ends the loop (StopIteration) is none
            opt = np.sort(found["marker_optimizer"]["start"].to_numpy(np.int64))
            has = (np.searchsorted(opt, steps["cpu_end"].to_numpy(), "left")
                   > np.searchsorted(opt, steps["start"].to_numpy(), "left"))
            keep = has | (np.arange(len(steps)) < len(steps) - 1)
            steps = steps[keep].reset_index(drop=True)
            steps["iteration"] = np.arange(len(steps), dtype=np.int64)
        if len(steps) >= 2:
            return steps
    return None


def _step_like_ranges(ranges: pd.DataFrame, rank: int) -> pd.DataFrame | None:
    """Steps from the family of step-like CPU ranges seen most (``ranges``: the rank's, or those of them that
    are step-like)."""
    cands = ranges[(ranges["device"] < 0) & matches(ranges["name"], "step_like_range")]
    if len(cands) < 2:
        return None
    family = cands["name"].str.replace(r"[\d\s#:=_-]+$", "", regex=True).str.lower()
    best = family.value_counts().index[0]
    steps = _outermost(cands[family == best])
    if len(steps) < 2:
        return None
    return _frame(rank, steps["start"], steps["end"], steps["name"])


def main_thread_roots(ops: pd.DataFrame) -> pd.DataFrame:
    """Top-level ops (op nodes) of each rank's main thread, the one with the most of them (the first seen of
    equals), in time order; all ranks at once, ranks in order."""
    roots = ops[ops["depth"] == 0]
    if roots.empty:
        return roots
    sizes = roots.groupby(["rank", "pid", "tid"], sort=False).size()  # threads in order of first appearance
    rank = sizes.index.get_level_values(0).to_numpy(np.int64)
    order = np.lexsort((np.arange(len(sizes)), -sizes.to_numpy(np.int64), rank))
    first = order[np.r_[True, rank[order][1:] != rank[order][:-1]]]  # each rank's busiest thread
    chosen = sizes.index[first]
    mine = roots[pd.MultiIndex.from_frame(roots[["rank", "pid", "tid"]]).isin(chosen)]
    return mine.iloc[np.lexsort((mine["start"].to_numpy(np.int64), mine["rank"].to_numpy(np.int64)))]


def find_loop(names: np.ndarray) -> tuple[int, int, int] | None:
    """(first index, period, full repeats) of a loop the whole sequence repeats, or None.

    The whole sequence must be periodic: every op equals the op one period later, from the first to the last
    (a trace may start and end inside a repeat), and a full repeat must occur ``MIN_LOOP_REPEATS`` times or
    more. A single forward pass of stacked identical layers is not a loop: its embedding and head do not
    repeat. The shortest such period wins; iterations start at the first op's phase.
    """
    codes = pd.factorize(pd.Series(names, dtype=object))[0]
    n = len(codes)
    if n < MIN_LOOP_REPEATS:
        return None
    # the first op recurs one period later: candidate periods, shortest first
    periods = np.flatnonzero(codes[1:] == codes[0]) + 1
    probe = np.random.default_rng(0).integers(0, n, 64)
    for p in periods[periods * MIN_LOOP_REPEATS <= n]:
        i = probe[probe < n - p]
        if (codes[i] != codes[i + p]).any():  # a cheap look before the full comparison
            continue
        if np.array_equal(codes[:n - p], codes[p:]):
            return 0, int(p), int(n // p)
    return None


def _repeating_top_level(roots: pd.DataFrame, rank: int, last_end: int) -> pd.DataFrame | None:
    """Steps from a loop of the main thread's top-level ops (``roots``: :func:`main_thread_roots`)."""
    loop = find_loop(roots["name"].to_numpy(dtype=object))
    if loop is None:
        return None
    first, period, repeats = loop
    heads = roots.iloc[first:first + period * repeats:period]
    return _occurrence_steps(rank, heads, last_end)


def _marked(names: pd.Series) -> np.ndarray:
    """Names of step markers or step-like ranges (what :func:`key_node_candidates` lists first)."""
    return (matches(names, "marker_dataloader") | matches(names, "marker_zero_grad")
            | matches(names, "marker_optimizer") | matches(names, "step_like_range"))


def key_node_candidates(cands: pd.DataFrame, roots: pd.DataFrame, limit: int = 5) -> list[str]:
    """Names a user could pass as ``--key-node``: step markers, then top-level ops recurring most often.
    ``cands``: a rank's candidates (:func:`_named`), at least those :func:`_marked`, in their order; ``roots``:
    its :func:`main_thread_roots`."""
    marked = cands[_marked(cands["name"])]
    names = list(dict.fromkeys(marked["name"]))
    counts = value_counts(roots["name"])
    names += [n for n in counts[counts >= 2].index if n not in names]
    return names[:limit]


def _without_profiler_steps(marked: pd.DataFrame, step_ranges: pd.DataFrame, roots: pd.DataFrame, rank: int,
                            last_end: int, activity_span: tuple[int, int]) -> Found:
    """The methods after the key node and ProfilerStep#N, in order, for one rank, from its candidates that are
    markers (:func:`_marked`), its step-like CPU ranges and its :func:`main_thread_roots`; ``activity_span``:
    the first start and last end of all its CPU and GPU activity."""
    found = _marker_steps(marked, rank, last_end)
    if found is not None:
        return Found(found, "step_marker")
    found = _step_like_ranges(step_ranges, rank)
    if found is not None:
        return Found(found, "step_ranges")
    candidates = key_node_candidates(marked, roots)
    found = _repeating_top_level(roots, rank, last_end)
    if found is not None:
        return Found(found, "repeating_pattern", candidates)
    whole = _frame(rank, [activity_span[0]], [activity_span[1]], ["whole profile"])
    return Found(whole, "whole_profile", candidates)


@dataclass
class JobIterations:
    """Every rank's iterations (one frame, ranks in order), the method per rank and key-node candidates per
    rank whose split is a guess (or none)."""

    iterations: pd.DataFrame
    methods: dict[int, str]
    candidates: dict[int, list[str]]


def find_job_iterations(ops: pd.DataFrame, ranges: pd.DataFrame, ranks: list[int], key_node: str | None,
                        activity_spans: dict[int, tuple[int, int]]) -> JobIterations:
    """Iterations of every rank of a job and the method that found them, in one pass over the job's columns:
    the key node and ProfilerStep#N (what real captures use) for all ranks at once; the later methods rank by
    rank, only for the ranks that have neither. Each rank's result is the one its rows alone give.

    ``ops`` must carry ``depth`` (from attribution). ``activity_spans``: per rank, the first start and last end
    of all its CPU and GPU activity (the one-iteration fallback, and the end of a rank without ops)."""
    wanted = np.asarray(ranks, dtype=np.int64)
    last_ends = _last_ends(ops, wanted, activity_spans)
    parts, methods, candidates = [], {}, {}
    if key_node:
        found = _job_key_node_steps(ops, ranges, key_node, last_ends)
        parts.append(found)
        methods.update(dict.fromkeys(sorted_ranks(found), "key_node"))
    steps = _named(ops, ranges, lambda frame: matches(frame["name"], "profiler_step"))
    found = _job_profiler_steps(steps[~np.isin(steps["rank"].to_numpy(), list(methods))])
    parts.append(found)
    methods.update(dict.fromkeys(sorted_ranks(found), "profiler_step"))
    left = [int(r) for r in wanted if int(r) not in methods]
    if left:  # only the rows the later methods look at, picked for all those ranks at once
        marked = _named(ops, ranges, lambda frame: np.isin(frame["rank"].to_numpy(), left) & _marked(frame["name"]))
        step_ranges = ranges[np.isin(ranges["rank"].to_numpy(), left) & (ranges["device"] < 0).to_numpy()
                             & matches(ranges["name"], "step_like_range")]
        roots = main_thread_roots(ops[np.isin(ops["rank"].to_numpy(), left)])
        rows = [frame.groupby("rank", sort=False).indices for frame in (marked, step_ranges, roots)]
        none = np.zeros(0, dtype=np.int64)
        for rank in left:
            mine = _without_profiler_steps(marked.iloc[rows[0].get(rank, none)],
                                           step_ranges.iloc[rows[1].get(rank, none)],
                                           roots.iloc[rows[2].get(rank, none)], rank,
                                           int(last_ends[rank]), activity_spans.get(rank, (0, 0)))
            parts.append(mine.iterations)
            methods[rank] = mine.method
            if mine.candidates:
                candidates[rank] = mine.candidates
    both = pd.concat([p for p in parts if len(p)], ignore_index=True)  # an empty part's names are no text
    both = both.iloc[np.argsort(both["rank"].to_numpy(np.int64), kind="stable")].reset_index(drop=True)
    return JobIterations(both, {r: methods[r] for r in sorted(methods)}, candidates)


def sorted_ranks(iterations: pd.DataFrame) -> list[int]:
    """The ranks an iterations frame holds, in order."""
    return sorted(int(r) for r in pd.unique(iterations["rank"]))


def _last_ends(ops: pd.DataFrame, ranks: np.ndarray, spans: dict[int, tuple[int, int]]) -> dict[int, int]:
    """Per rank: the end of its last op, else the end of its activity (a rank without ops)."""
    last = ops.groupby("rank", sort=False)["end"].max() if len(ops) else pd.Series(dtype=np.int64)
    of = {int(r): int(e) for r, e in zip(last.index, last.to_numpy(np.int64))}
    return {int(r): of.get(int(r), spans.get(int(r), (0, 0))[1]) for r in ranks}


def _named(ops: pd.DataFrame, ranges: pd.DataFrame, chosen) -> pd.DataFrame:
    """The candidates for marking iterations (each rank's ranges, then its ops) for which ``chosen(frame)`` is
    true, with their rank: the test runs on each table's own column (a job's text is categorical) and only
    the rows chosen are copied."""
    picked = [(frame, np.flatnonzero(chosen(frame))) for frame in (ranges, ops)]
    return pd.DataFrame({
        "rank": np.concatenate([f["rank"].to_numpy(np.int64)[r] for f, r in picked]),
        "name": np.concatenate([f["name"].take(r).to_numpy(dtype=object) for f, r in picked]),
        "start": np.concatenate([f["start"].to_numpy(np.int64)[r] for f, r in picked]),
        "end": np.concatenate([f["end"].to_numpy(np.int64)[r] for f, r in picked]),
    })


def _job_key_node_steps(ops: pd.DataFrame, ranges: pd.DataFrame, key_node: str, last_ends: dict[int, int]
                        ) -> pd.DataFrame:
    """Every rank's key-node iterations: its occurrences of the name, else of names containing it."""
    occ = _named(ops, ranges, lambda frame: classify_names(frame["name"], lambda n: key_node in n))
    exact = (occ["name"] == key_node).to_numpy()
    has_exact = np.isin(occ["rank"].to_numpy(), occ["rank"].to_numpy()[exact])
    return _job_occurrence_steps(occ[exact | ~has_exact], last_ends)


def _job_occurrence_steps(occ: pd.DataFrame, last_ends: dict[int, int]) -> pd.DataFrame:
    """:func:`_occurrence_steps` of every rank in ``occ`` at once."""
    rank, start = occ["rank"].to_numpy(np.int64), occ["start"].to_numpy(np.int64)
    order = np.lexsort((start, rank))  # stable, as sort_values(kind="stable") per rank
    rank, start = rank[order], start[order]
    keep = np.ones(len(order), dtype=bool)  # the first of equal starts of a rank
    keep[1:] = (rank[1:] != rank[:-1]) | (start[1:] != start[:-1])
    order, rank, start = order[keep], rank[keep], start[keep]
    end = occ["end"].to_numpy(np.int64)[order]
    last = np.ones(len(order), dtype=bool)  # each rank's last occurrence
    last[:-1] = rank[1:] != rank[:-1]
    ends = np.empty_like(start)
    ends[:-1] = start[1:]
    ends[last] = np.maximum(end[last], np.array([last_ends[int(r)] for r in rank[last]], dtype=np.int64))
    return _job_frame(rank, start, ends, occ["name"].to_numpy(dtype=object)[order])


def _job_frame(rank: np.ndarray, starts: np.ndarray, ends: np.ndarray, names: np.ndarray,
               numbers: np.ndarray | None = None) -> pd.DataFrame:
    """:func:`_frame` of rows grouped by rank (each rank's rows together); numbers default to 0, 1, … per rank."""
    if numbers is None:
        first = np.flatnonzero(np.r_[True, rank[1:] != rank[:-1]]) if len(rank) else np.zeros(0, np.int64)
        numbers = np.arange(len(rank)) - np.repeat(first, np.diff(np.r_[first, len(rank)]))
    return pd.DataFrame({"rank": rank.astype(np.int64), "iteration": np.asarray(numbers, dtype=np.int64),
                         "name": list(names), "start": starts.astype(np.int64), "cpu_end": ends.astype(np.int64)})


def _job_profiler_steps(cands: pd.DataFrame) -> pd.DataFrame:
    """Every rank's ProfilerStep#N iterations from the events so named (``cands``): step N from the first start
    to the last end of its events, the steps of a rank in start order (ties: by number)."""
    rx = patterns()["profiler_step"]
    number = classify_names(cands["name"], lambda n: int(rx.match(n).group(1)), dtype=np.int64)
    rank = cands["rank"].to_numpy(np.int64)
    order = np.lexsort((number, rank))  # stable: the first row of a step is its first event
    rank, number = rank[order], number[order]
    first = np.flatnonzero(np.r_[True, (rank[1:] != rank[:-1]) | (number[1:] != number[:-1])]) if len(order) \
        else np.zeros(0, np.int64)
    start = np.minimum.reduceat(cands["start"].to_numpy(np.int64)[order], first) if len(first) else first
    end = np.maximum.reduceat(cands["end"].to_numpy(np.int64)[order], first) if len(first) else first
    names = cands["name"].to_numpy(dtype=object)[order[first]]
    rank, number = rank[first], number[first]
    by_start = np.lexsort((start, rank))  # stable: equal starts keep number order
    return _job_frame(rank[by_start], start[by_start], end[by_start], names[by_start], number[by_start])


def windows(iterations: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Each iteration's CPU window [start, next start) (the last: [start, cpu_end)), in start order."""
    starts = iterations["start"].to_numpy(np.int64)
    ends = np.empty_like(starts)
    ends[:-1] = starts[1:]
    ends[-1:] = iterations["cpu_end"].to_numpy(np.int64)[-1:]
    return starts, np.maximum(ends, starts)


def assign(times: np.ndarray, iterations: pd.DataFrame) -> np.ndarray:
    """Iteration number of each CPU time: the iteration whose window holds it, else -1."""
    if len(iterations) == 0:
        return np.full(len(times), -1, dtype=np.int64)
    it = iterations.sort_values("start", kind="stable")
    starts, ends = windows(it)
    numbers = it["iteration"].to_numpy(np.int64)
    pos = np.searchsorted(starts, times, side="right") - 1
    ok = (pos >= 0) & (times < ends[np.maximum(pos, 0)])
    return np.where(ok, numbers[np.maximum(pos, 0)], -1)


def assign_by_rank(ranks: np.ndarray, times: np.ndarray, iterations: pd.DataFrame) -> np.ndarray:
    """:func:`assign` of each (rank, CPU time) to its rank's iterations, all ranks in one search: each rank's
    windows are laid end to end on one axis (a rank's times measured from its first window, then shifted
    past the ranks before it), so one ``searchsorted`` finds every event's window."""
    times = np.asarray(times, dtype=np.int64)
    ranks = np.asarray(ranks, dtype=np.int64)
    out = np.full(len(times), -1, dtype=np.int64)
    if len(iterations) == 0 or len(times) == 0:
        return out
    it_rank = iterations["rank"].to_numpy(np.int64)
    order = np.lexsort((iterations["start"].to_numpy(np.int64), it_rank))  # stable, as assign's sort
    it_rank = it_rank[order]
    starts = iterations["start"].to_numpy(np.int64)[order]
    numbers = iterations["iteration"].to_numpy(np.int64)[order]
    first = np.flatnonzero(np.r_[True, it_rank[1:] != it_rank[:-1]])
    block_end = np.r_[first[1:], len(order)]
    ends = np.empty_like(starts)  # windows(): to the next start of the rank, its last to its CPU end
    ends[:-1] = starts[1:]
    ends[block_end - 1] = iterations["cpu_end"].to_numpy(np.int64)[order][block_end - 1]
    ends = np.maximum(ends, starts)
    lo, hi = starts[first], np.maximum.reduceat(ends, first)
    spans = [int(h) - int(s) + 2 for s, h in zip(lo.tolist(), hi.tolist())]
    if sum(spans) >= 1 << 62:  # the ranks' windows laid end to end would not fit int64: rank by rank
        for r, a, b in zip(it_rank[first].tolist(), first.tolist(), block_end.tolist()):
            rows = np.flatnonzero(ranks == r)
            out[rows] = assign(times[rows], iterations.iloc[order[a:b]])
        return out
    shift = np.cumsum([0] + spans[:-1], dtype=np.int64)  # where each rank's first window lies on the axis
    block = np.repeat(np.arange(len(first)), np.diff(np.r_[first, len(order)]))
    axis_starts = starts - lo[block] + shift[block]
    known = it_rank[first]
    code = np.minimum(np.searchsorted(known, ranks), len(known) - 1)
    mine = known[code] == ranks
    # outside [lo - 1, hi] a time is in no window of its rank: clipped there it stays so, and cannot overflow
    axis_times = np.clip(times, lo[code] - 1, hi[code]) - lo[code] + shift[code]
    pos = np.searchsorted(axis_starts, axis_times, side="right") - 1
    at = np.maximum(pos, 0)
    ok = mine & (pos >= 0) & (it_rank[at] == ranks) & (times < ends[at])
    out[ok] = numbers[at[ok]]
    return out
