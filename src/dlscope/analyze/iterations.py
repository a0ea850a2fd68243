"""Finding iterations (training steps) and assigning every event to one.

Order of methods (PRODUCT.md): ProfilerStep#N; else the user's key node; else step-like NVTX/annotation
ranges; else a repeating top-level op; else one iteration covering everything. The method used is
reported so a user knows how far to trust the split.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .categories import matches, patterns

COLUMNS = ["rank", "iteration", "name", "start", "cpu_end"]


def _frame(rank: int, starts, ends, names, numbers=None) -> pd.DataFrame:
    n = len(starts)
    return pd.DataFrame({
        "rank": np.full(n, rank, dtype=np.int64),
        "iteration": np.asarray(numbers if numbers is not None else np.arange(n), dtype=np.int64),
        "name": list(names), "start": np.asarray(starts, np.int64), "cpu_end": np.asarray(ends, np.int64),
    })


def _profiler_steps(ranges: pd.DataFrame, ops: pd.DataFrame, rank: int) -> pd.DataFrame | None:
    rx = patterns()["profiler_step"]
    cands = pd.concat([ranges[["name", "start", "end"]], ops[["name", "start", "end"]]], ignore_index=True)
    cands = cands[matches(cands["name"], "profiler_step")]
    if cands.empty:
        return None
    cands = cands.assign(number=cands["name"].map(lambda n: int(rx.match(n).group(1))))
    steps = cands.groupby("number", sort=True).agg(start=("start", "min"), end=("end", "max"), name=("name", "first"))
    return _frame(rank, steps["start"], steps["end"], steps["name"], steps.index)


def _occurrence_steps(rank: int, occ: pd.DataFrame, last_end: int) -> pd.DataFrame:
    """Iterations from one occurrence of a marker to the next; the last runs to the end of CPU activity."""
    occ = occ.sort_values("start", kind="stable")
    occ = occ[~occ["start"].duplicated()]
    starts = occ["start"].to_numpy(np.int64)
    ends = np.empty_like(starts)
    ends[:-1] = starts[1:]
    ends[-1:] = max(int(occ["end"].iloc[-1]), last_end) if len(occ) else 0
    return _frame(rank, starts, ends, occ["name"])


def _key_node_steps(ranges, ops, rank, key_node, last_end) -> pd.DataFrame | None:
    cands = pd.concat([ranges[["name", "start", "end"]], ops[["name", "start", "end"]]], ignore_index=True)
    occ = cands[cands["name"] == key_node]
    if occ.empty:
        occ = cands[cands["name"].str.contains(key_node, regex=False)]
    if occ.empty:
        return None
    return _occurrence_steps(rank, occ, last_end)


def _step_like_ranges(ranges: pd.DataFrame, rank: int) -> pd.DataFrame | None:
    cands = ranges[(ranges["device"] < 0) & matches(ranges["name"], "step_like_range")]
    if len(cands) < 2:
        return None
    family = cands["name"].str.replace(r"[\d\s#:=_-]+$", "", regex=True).str.lower()
    best = family.value_counts().index[0]
    steps = cands[family == best].sort_values("start", kind="stable")
    # outermost only: a step range nested in another of the same family is not a new step
    reach = steps["end"].cummax().shift(1, fill_value=-1)  # int64: ns epochs exceed float precision
    steps = steps[steps["start"] >= reach]
    if len(steps) < 2:
        return None
    return _frame(rank, steps["start"], steps["end"], steps["name"])


def _repeating_top_level(ops: pd.DataFrame, rank: int, last_end: int) -> pd.DataFrame | None:
    top = ops[ops["depth"] == 0]
    counts = top["name"].value_counts()
    counts = counts[counts >= 2]
    for name in counts.index[:20]:
        occ = top[top["name"] == name].sort_values("start")
        gaps = np.diff(occ["start"].to_numpy(np.int64)).astype(float)
        if len(gaps) >= 1 and gaps.mean() > 0 and (len(gaps) == 1 or gaps.std() / gaps.mean() < 0.5):
            return _occurrence_steps(rank, occ, last_end)
    return None


def find_iterations(ops: pd.DataFrame, ranges: pd.DataFrame, rank: int, key_node: str | None,
                    activity_span: tuple[int, int]) -> tuple[pd.DataFrame, str]:
    """Iterations of one rank and the method that found them.

    ``ops`` must carry ``depth`` (from attribution). ``activity_span`` is (first start, last end) of all
    CPU and GPU activity of the rank, used for the one-iteration fallback and the last open step.
    """
    last_end = int(ops["end"].max()) if len(ops) else activity_span[1]
    if key_node:
        found = _key_node_steps(ranges, ops, rank, key_node, last_end)
        if found is not None:
            return found, "key_node"
    found = _profiler_steps(ranges, ops, rank)
    if found is not None:
        return found, "profiler_step"
    found = _step_like_ranges(ranges, rank)
    if found is not None:
        return found, "step_ranges"
    found = _repeating_top_level(ops, rank, last_end)
    if found is not None:
        return found, "repeating_pattern"
    return _frame(rank, [activity_span[0]], [activity_span[1]], ["whole profile"]), "whole_profile"


def assign(times: np.ndarray, iterations: pd.DataFrame) -> np.ndarray:
    """Iteration number of each CPU time: the iteration whose CPU interval contains it, else -1."""
    if len(iterations) == 0:
        return np.full(len(times), -1, dtype=np.int64)
    it = iterations.sort_values("start")
    starts = it["start"].to_numpy(np.int64)
    ends = it["cpu_end"].to_numpy(np.int64)
    numbers = it["iteration"].to_numpy(np.int64)
    pos = np.searchsorted(starts, times, side="right") - 1
    ok = (pos >= 0) & (times < ends[np.maximum(pos, 0)])
    return np.where(ok, numbers[np.maximum(pos, 0)], -1)
