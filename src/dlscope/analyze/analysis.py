"""From an imported :class:`~dlscope.model.Profile` to an analysed one: attribution, iterations, Tensor
Core verdicts and per-op-instance metrics. Aggregations (``aggregation.py``) are computed from this.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..model import Profile, make_table, string_column
from .attribution import attribute, gpu_idle_per_owner, thread_keys
from .categories import matches
from .iterations import assign, find_iterations
from .nesting import Nesting
from .tensor_core import classify_names, kernel_uses_tc, op_type_tc_eligible

_DTYPES = {
    "float": "float32", "double": "float64", "c10::Half": "float16", "c10::BFloat16": "bfloat16",
    "long int": "int64", "long": "int64", "int": "int32", "short int": "int16", "bool": "bool",
    "unsigned char": "uint8", "signed char": "int8", "c10::complex<float>": "complex64",
    "c10::Float8_e4m3fn": "float8_e4m3fn", "c10::Float8_e5m2": "float8_e5m2",
    "half": "float16", "bfloat16": "bfloat16", "float16": "float16", "float32": "float32",
    "float64": "float64", "int64": "int64", "int32": "int32", "int8": "int8", "uint8": "uint8",
}


@dataclass
class Analysed:
    """The profile with attribution columns, plus iterations and how they were found (per rank)."""

    profile: Profile
    iterations: pd.DataFrame
    iteration_methods: dict[int, str] = field(default_factory=dict)
    key_node: str | None = None
    _by_rank: dict | None = field(default=None, repr=False)

    RAW = ("ops", "ranges", "api_calls", "kernels", "memops", "syncs", "memory", "gpus")

    def rank_tables(self, rank: int) -> dict[str, pd.DataFrame]:
        """The raw tables of one rank; split once for all ranks (a job of many ranks aggregates each)."""
        if self._by_rank is None:
            split: dict = {}
            for name in self.RAW:
                frame = self.profile.table(name)
                if frame["rank"].nunique() <= 1:
                    groups = {int(r): frame for r in frame["rank"].unique()}
                else:
                    groups = {int(r): g for r, g in frame.groupby("rank", sort=False)}
                for r in self.ranks:
                    split.setdefault(r, {})[name] = groups.get(r, frame.iloc[0:0])
            self._by_rank = split
        return self._by_rank[rank]

    @property
    def ranks(self) -> list[int]:
        ranks = set()
        for name in ("ops", "kernels", "ranges", "api_calls", "memops"):
            ranks.update(self.profile.table(name)["rank"].unique().tolist())
        return sorted(int(r) for r in ranks) or [0]


def _first_dtype(text: str) -> str:
    """The data type of an op: its first tensor input's dtype, in numpy spelling."""
    if not text:
        return ""
    try:
        types = json.loads(text)
    except ValueError:
        return ""
    for t in types if isinstance(types, list) else []:
        if isinstance(t, str) and t in _DTYPES:
            return _DTYPES[t]
    return ""


def _renumber(profile: Profile) -> None:
    """Make each id column equal its row number so ids index arrays directly."""
    for name, col in (("ops", "op_id"), ("ranges", "range_id"), ("api_calls", "api_id"),
                      ("kernels", "kernel_id"), ("memops", "memop_id"), ("syncs", "sync_id")):
        frame = profile.table(name).reset_index(drop=True)
        frame[col] = np.arange(len(frame), dtype=np.int64)
        setattr(profile, name, frame)


def _scopes(ops: pd.DataFrame, ranges: pd.DataFrame, skip_ranges: np.ndarray) -> np.ndarray:
    """Group path of each op: the importer's scope, else the names of its enclosing ops and ranges."""
    cpu = ranges[(ranges["device"] < 0) & ~skip_ranges]
    both = pd.concat([ops[["rank", "pid", "tid", "name", "start", "end"]],
                      cpu[["rank", "pid", "tid", "name", "start", "end"]]], ignore_index=True)
    (keys,) = thread_keys([both])
    nest = Nesting.build(keys, both["start"].to_numpy(), both["end"].to_numpy())
    names = both["name"].to_numpy(dtype=object)
    path = np.empty(len(both), dtype=object)
    path[:] = ""
    for d in range(1, int(nest.depth.max(initial=0)) + 1):
        rows = np.flatnonzero(nest.depth == d)
        parents = nest.parent[rows]
        ok = parents >= 0
        rows, parents = rows[ok], parents[ok]
        prefix = path[parents]
        path[rows] = np.where(prefix == "", names[parents], prefix + "/" + names[parents])
    own = ops["scope"].to_numpy(dtype=object)
    return np.where(own != "", own, path[: len(ops)])


def _activity_spans(profile: Profile) -> dict[int, tuple[int, int]]:
    """Per rank: the first start and last end of any op, range, kernel, memop or API call."""
    frames = [profile.table(name)[["rank", "start", "end"]] for name in ("ops", "ranges", "kernels", "memops",
                                                                         "api_calls")]
    spans = pd.concat(frames, ignore_index=True).groupby("rank").agg(start=("start", "min"), end=("end", "max"))
    return {int(r): (int(s), int(e)) for r, s, e in zip(spans.index, spans["start"], spans["end"])}


def _promote_launching_ranges(profile: Profile) -> tuple[Nesting, np.ndarray] | None:
    """Annotation ranges that launch GPU work outside any framework op stand for an op (e.g. a custom
    extension's kernels under a ``record_function``); they join the ops so their kernels are attributed.

    Returns the ops' nesting and each API call's innermost op row when no range was promoted (the ops are
    then unchanged and attribution reuses them), else None.
    """
    ops, ranges, api = profile.ops, profile.ranges, profile.api_calls
    op_keys, api_keys = thread_keys([ops, api])
    nest = Nesting.build(op_keys, ops["start"].to_numpy(), ops["end"].to_numpy())
    api_op_row = nest.innermost_at(api_keys, api["start"].to_numpy())
    outside = api_op_row < 0
    cand = ranges[(ranges["device"] < 0) & ~matches(ranges["name"], "profiler_step")
                  & ~matches(ranges["name"], "step_like_range")]
    if not outside.any() or cand.empty:
        return nest, api_op_row
    rng_keys, out_keys = thread_keys([cand, api[outside]])
    hit = Nesting.build(rng_keys, cand["start"].to_numpy(), cand["end"].to_numpy()).innermost_at(
        out_keys, api.loc[outside, "start"].to_numpy())
    rows = np.unique(hit[hit >= 0])
    if len(rows) == 0:
        return nest, api_op_row
    promoted = cand.iloc[rows]
    new_ops = make_table("ops", {c: promoted[c].to_numpy() for c in ("rank", "pid", "tid", "name", "start", "end")})
    new_ops["op_type"] = new_ops["name"]
    profile.ops = _after_own_rank(ops, new_ops)
    profile.ranges = ranges.drop(index=promoted.index)
    return None


def _after_own_rank(ops: pd.DataFrame, new_ops: pd.DataFrame) -> pd.DataFrame:
    """``new_ops`` placed after the ops of their rank, so each rank's ops stay one block in input order
    and its ids are the same whether the job is analysed whole or rank by rank."""
    both = pd.concat([ops, new_ops], ignore_index=True)
    block = pd.factorize(both["rank"])[0]  # ranks numbered in order of first appearance
    order = np.lexsort((np.arange(len(both)), np.arange(len(both)) >= len(ops), block))
    return both.iloc[order].reset_index(drop=True)


def analyse(profile: Profile, key_node: str | None = None) -> Analysed:
    """Attribute GPU activity to ops and iterations and compute per-op-instance metrics."""
    nesting = _promote_launching_ranges(profile)
    _renumber(profile)  # keeps row order, so an unchanged ops table keeps its nesting
    ops, kernels, memops, syncs, api_calls, ranges = (profile.ops, profile.kernels, profile.memops,
                                                       profile.syncs, profile.api_calls, profile.ranges)
    for frame in (ops, kernels, memops):
        frame["dur"] = (frame["end"] - frame["start"]).clip(lower=0)
    attribute(ops, api_calls, {"kernels": kernels, "memops": memops, "syncs": syncs}, nesting)

    ranges["category"] = np.select(
        [matches(ranges["name"], "profiler_step"), matches(ranges["name"], "dataloader"),
         matches(ranges["name"], "io")], ["step", "dataloader", "io"], "")

    iterations, methods, spans = [], {}, _activity_spans(profile)
    for rank in sorted(set(ops["rank"]).union(ranges["rank"], kernels["rank"], api_calls["rank"]) or {0}):
        its, method = find_iterations(ops[ops["rank"] == rank], ranges[ranges["rank"] == rank], int(rank),
                                      key_node, spans.get(int(rank), (0, 0)))
        iterations.append(its)
        methods[int(rank)] = method
    iterations = pd.concat(iterations, ignore_index=True)

    # ranges that are a rank's iterations are not a scope of its ops
    steps = iterations[iterations["rank"].map(methods) != "whole_profile"]
    step_keys = pd.MultiIndex.from_frame(steps[["rank", "name"]])
    skip_ranges = (pd.MultiIndex.from_frame(ranges[["rank", "name"]]).isin(step_keys)
                   | (ranges["category"] == "step").to_numpy())
    ops["scope"] = string_column(_scopes(ops, ranges, skip_ranges))

    for frame, time_col in ((ops, "start"), (ranges, "start"), (api_calls, "start"), (kernels, "launch_ts"),
                            (memops, "launch_ts"), (syncs, "launch_ts")):
        frame["iteration"] = _assign_by_rank(frame, time_col, iterations)
    # GPU activity belongs to the iteration of its launching op when the launch sits in a gap
    iterations["end"] = _iteration_ends(iterations, kernels, memops)

    kernels["uses_tc"] = classify_names(kernels["name"], kernel_uses_tc)
    _op_metrics(ops, kernels, memops)
    ops["node_id"] = ops.groupby(["rank", "name", "direction", "scope", "input_shapes"], sort=False).ngroup()
    return Analysed(profile, iterations, methods, key_node)


def _assign_by_rank(frame: pd.DataFrame, time_col: str, iterations: pd.DataFrame) -> np.ndarray:
    out = np.full(len(frame), -1, dtype=np.int64)
    for rank, its in iterations.groupby("rank"):
        rows = np.flatnonzero(frame["rank"].to_numpy() == rank)
        out[rows] = assign(frame[time_col].to_numpy(np.int64)[rows], its)
    return out


def _iteration_ends(iterations: pd.DataFrame, kernels: pd.DataFrame, memops: pd.DataFrame) -> np.ndarray:
    """End of each iteration: its CPU end or the end of its last GPU activity, whichever is later."""
    gpu = pd.concat([kernels[["rank", "iteration", "end"]], memops[["rank", "iteration", "end"]]])
    last = gpu[gpu["iteration"] >= 0].groupby(["rank", "iteration"])["end"].max()
    keyed = pd.MultiIndex.from_frame(iterations[["rank", "iteration"]])
    gpu_end = last.reindex(keyed, fill_value=-1).to_numpy(np.int64)  # no NaN: ns epochs exceed float precision
    return np.maximum(iterations["cpu_end"].to_numpy(np.int64), gpu_end)


def _op_metrics(ops: pd.DataFrame, kernels: pd.DataFrame, memops: pd.DataFrame) -> None:
    """Per op instance: its own kernels' count and time, TC use, eligibility, GPU idle, data type."""
    n = len(ops)
    k_op = kernels["op_id"].to_numpy(np.int64)
    has = k_op >= 0
    dur = kernels["dur"].to_numpy(np.int64)
    tc = kernels["uses_tc"].to_numpy(bool)
    ops["kernel_count"] = np.bincount(k_op[has], minlength=n)[:n] if n else np.zeros(0, np.int64)
    ops["gpu_time"] = np.bincount(k_op[has], weights=dur[has], minlength=n)[:n].astype(np.int64) if n else 0
    ops["tc_gpu_time"] = (np.bincount(k_op[has & tc], weights=dur[has & tc], minlength=n)[:n].astype(np.int64)
                          if n else 0)
    ops["using_tc"] = (np.bincount(k_op[has & tc], minlength=n)[:n] > 0) if n else False
    ops["tc_eligible"] = classify_names(ops["op_type"].where(ops["op_type"] != "", ops["name"]), op_type_tc_eligible)
    owner = np.concatenate([k_op, memops["op_id"].to_numpy(np.int64)])
    starts = np.concatenate([kernels["start"].to_numpy(np.int64), memops["start"].to_numpy(np.int64)])
    ends = np.concatenate([kernels["end"].to_numpy(np.int64), memops["end"].to_numpy(np.int64)])
    ops["gpu_idle"] = gpu_idle_per_owner(owner, starts, ends, n)
    ops["data_type"] = string_column(classify_names(ops["input_dtypes"], _first_dtype, dtype=object))
