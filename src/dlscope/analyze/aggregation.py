"""One aggregation: an iteration range of one rank and everything DLProf reports over it.

Definitions are PRODUCT.md's: wall clock from the first op of iter_start to the last CPU or GPU activity
of iter_stop; GPU busy = union of a device's kernels inside the window; the resource breakdown cuts the
window into disjoint pieces by priority so its seven parts add up to the wall clock exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..errors import DlscopeError
from .analysis import Analysed
from .intervals import clip, coverage, sorted_unique, union_length

CATEGORIES = ("tensor_core", "non_tensor_core", "memory", "dataloader", "io", "cpu", "other")
#: how reports and the viewer name them (DLProf Viewer's words)
CATEGORY_LABELS = {"tensor_core": "Using Tensor Cores", "non_tensor_core": "Not Using Tensor Cores",
                   "memory": "Memory", "dataloader": "Dataloader", "io": "I/O", "cpu": "CPU", "other": "Other"}


@dataclass
class Aggregation:
    """The summary row plus the per-aggregation tables (agg_* in the database, without agg_id)."""

    row: dict
    gpus: pd.DataFrame
    iterations: pd.DataFrame
    ops: pd.DataFrame
    op_types: pd.DataFrame
    kernels: pd.DataFrame
    op_kernels: pd.DataFrame
    groups: pd.DataFrame


def _rank_frames(an: Analysed, rank: int) -> dict[str, pd.DataFrame]:
    return an.rank_tables(rank)


def _intervals(frame: pd.DataFrame, mask=None) -> tuple[np.ndarray, np.ndarray]:
    f = frame if mask is None else frame[mask]
    return f["start"].to_numpy(np.int64), f["end"].to_numpy(np.int64)


def category_intervals(fr: dict[str, pd.DataFrame]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Interval sets of the breakdown categories in priority order (all but 'other')."""
    k, m, ops, rg = fr["kernels"], fr["memops"], fr["ops"], fr["ranges"]
    cpu_rg = rg[rg["device"] < 0]
    tc = k["uses_tc"].to_numpy(bool)
    loader = pd.concat([cpu_rg[cpu_rg["category"] == "dataloader"][["start", "end"]],
                        ops[_name_is(ops, "dataloader")][["start", "end"]]])
    io = pd.concat([cpu_rg[cpu_rg["category"] == "io"][["start", "end"]], ops[_name_is(ops, "io")][["start", "end"]]])
    return [_intervals(k, tc), _intervals(k, ~tc), _intervals(m), _intervals(loader), _intervals(io),
            _intervals(ops)]


def _name_is(ops: pd.DataFrame, kind: str) -> np.ndarray:
    from .categories import matches

    return matches(ops["name"], kind)


class Segments:
    """The time line cut at every interval end point, each piece labelled with its breakdown category.

    Built once; any window's breakdown (the aggregation's, each iteration's) is then a difference of
    prefix sums, so the parts add up to the window length exactly.
    """

    def __init__(self, sets: list[tuple[np.ndarray, np.ndarray]], points: np.ndarray):
        lo, hi = int(points.min()), int(points.max())
        clipped = [clip(s, e, lo, hi) for s, e in sets]
        self.bounds = sorted_unique(np.concatenate([points] + [np.concatenate([s, e]) for s, e in clipped]))
        seg = np.diff(self.bounds)
        label = np.full(len(seg), len(CATEGORIES) - 1, dtype=np.int64)
        taken = np.zeros(len(seg), dtype=bool)
        for i, (s, e) in enumerate(clipped):
            cov = coverage(self.bounds, s, e) & ~taken
            label[cov] = i
            taken |= cov
        self.cum = np.zeros((len(CATEGORIES), len(self.bounds)), dtype=np.int64)
        for i in range(len(CATEGORIES)):
            self.cum[i, 1:] = np.cumsum(np.where(label == i, seg, 0))

    def breakdown(self, lo: int, hi: int) -> dict[str, int]:
        """Time per category inside [lo, hi); lo and hi must be among the points given at build time."""
        i0, i1 = np.searchsorted(self.bounds, [lo, hi])
        return {name: int(self.cum[c, i1] - self.cum[c, i0]) for c, name in enumerate(CATEGORIES)}


def _window(its: pd.DataFrame, fr: dict[str, pd.DataFrame]) -> tuple[int, int]:
    lo = int(its["start"].min())
    in_range = its["iteration"].to_numpy()
    ends = [int(its["end"].max())]
    for name in ("kernels", "memops", "ops"):
        t = fr[name]
        t = t[np.isin(t["iteration"].to_numpy(), in_range)]
        if len(t):
            ends.append(int(t["end"].max()))
    return lo, max(ends)


def _gpu_table(fr, lo, hi, wall, agg_kernels) -> pd.DataFrame:
    k, m = fr["kernels"], fr["memops"]
    devices = sorted(set(k["device"]).union(m["device"]) - {-1})
    rows = []
    for dev in devices:
        kd, md = k[k["device"] == dev], m[m["device"] == dev]
        ak = agg_kernels[agg_kernels["device"] == dev]
        busy = union_length(*clip(*_intervals(kd), lo, hi))
        rows.append({"device": int(dev), "busy_ns": busy, "utilization": busy / wall if wall > 0 else None,
                     "kernel_count": len(ak), "kernel_time_ns": int(ak["dur"].sum()),
                     "tc_kernel_time_ns": int(ak.loc[ak["uses_tc"].astype(bool), "dur"].sum()),
                     "memory_ns": union_length(*clip(*_intervals(md), lo, hi))})
    return pd.DataFrame(rows, columns=["device", "busy_ns", "utilization", "kernel_count", "kernel_time_ns",
                                       "tc_kernel_time_ns", "memory_ns"])


def _iteration_table(its_all: pd.DataFrame, profiled: np.ndarray, fr, segments: Segments) -> pd.DataFrame:
    k = fr["kernels"]
    kit = k["iteration"].to_numpy()
    tc_all = k["uses_tc"].to_numpy(bool)
    dur = k["dur"].to_numpy(np.int64)
    rows = []
    for it in its_all.itertuples(index=False):
        lo, hi = int(it.start), int(it.end)
        sel = kit == it.iteration
        tc = tc_all & sel
        parts = segments.breakdown(lo, hi)
        row = {"iteration": int(it.iteration), "profiled": bool(it.iteration in profiled), "start": lo,
               "end": hi, "duration_ns": hi - lo, "kernel_count": int(sel.sum()), "tc_kernel_count": int(tc.sum()),
               "kernel_time_ns": int(dur[sel].sum()), "tc_kernel_time_ns": int(dur[tc].sum()),
               "gpu_busy_ns": parts["tensor_core"] + parts["non_tensor_core"]}
        row.update({f"{c}_ns": v for c, v in parts.items()})
        rows.append(row)
    return pd.DataFrame(rows)


def _op_nodes(ops: pd.DataFrame) -> pd.DataFrame:
    """Ops of the aggregation summed per op node (same name, direction, scope, input shapes)."""
    if ops.empty:
        return pd.DataFrame(columns=["node_id", "op_name", "op_type", "direction", "scope", "input_shapes",
                                     "data_type", "calls", "kernel_count", "tc_kernel_count", "gpu_time_ns",
                                     "tc_gpu_time_ns", "cpu_time_ns", "api_time_ns", "cpu_overhead_ns",
                                     "gpu_idle_ns", "tc_eligible", "using_tc"])
    g = ops.assign(tc_kernels=ops["using_tc"].astype(int)).groupby("node_id", sort=False)
    out = g.agg(op_name=("name", "first"), op_type=("op_type", "first"), direction=("direction", "first"),
                scope=("scope", "first"), input_shapes=("input_shapes", "first"), data_type=("data_type", "first"),
                calls=("op_id", "size"), kernel_count=("kernel_count", "sum"), gpu_time_ns=("gpu_time", "sum"),
                tc_gpu_time_ns=("tc_gpu_time", "sum"), cpu_time_ns=("dur", "sum"), api_time_ns=("api_time", "sum"),
                gpu_idle_ns=("gpu_idle", "sum"), tc_eligible=("tc_eligible", "max"), using_tc=("using_tc", "max"))
    out = out.reset_index()
    out["op_type"] = out["op_type"].where(out["op_type"] != "", out["op_name"])
    out["cpu_overhead_ns"] = (out["cpu_time_ns"] - out["api_time_ns"]).clip(lower=0)
    return out


def _tc_kernel_counts(kernels: pd.DataFrame, nodes: pd.DataFrame, op_node: pd.Series) -> pd.Series:
    k = kernels[kernels["op_id"] >= 0]
    node = op_node.reindex(k["op_id"]).to_numpy()
    return pd.Series(k["uses_tc"].to_numpy(int), index=node).groupby(level=0).sum()


def _op_types(ops: pd.DataFrame, nodes: pd.DataFrame) -> pd.DataFrame:
    cols = ["op_type", "ops", "calls"] + [f"{m}_{s}" for m in ("cpu_time", "gpu_time", "cpu_overhead", "gpu_idle")
                                          for s in ("total", "avg", "min", "max")] + ["kernel_count", "tc_eligible", "using_tc"]
    if ops.empty:
        return pd.DataFrame(columns=cols)
    inst = ops.assign(op_type=ops["op_type"].where(ops["op_type"] != "", ops["name"]),
                      cpu_overhead=(ops["dur"] - ops["api_time"]).clip(lower=0))
    g = inst.groupby("op_type", sort=False)
    out = pd.DataFrame({"ops": g["node_id"].nunique(), "calls": g.size(), "kernel_count": g["kernel_count"].sum(),
                        "tc_eligible": g["tc_eligible"].max(), "using_tc": g["using_tc"].max()})
    for metric, col in (("cpu_time", "dur"), ("gpu_time", "gpu_time"), ("cpu_overhead", "cpu_overhead"),
                        ("gpu_idle", "gpu_idle")):
        out[f"{metric}_total"] = g[col].sum()
        out[f"{metric}_avg"] = g[col].mean()
        out[f"{metric}_min"] = g[col].min()
        out[f"{metric}_max"] = g[col].max()
    return out.reset_index()[cols]


def _kernel_summary(kernels: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    g = kernels.groupby(by + ["name"], sort=False)
    out = g.agg(uses_tc=("uses_tc", "max"), calls=("dur", "size"), gpu_time_ns=("dur", "sum"),
                avg_ns=("dur", "mean"), min_ns=("dur", "min"), max_ns=("dur", "max"))
    return out.reset_index().rename(columns={"name": "kernel_name"})


def _groups(nodes: pd.DataFrame) -> pd.DataFrame:
    """The Group Ops tree: every scope prefix is a group summing the op nodes below it."""
    metrics = ["calls", "kernel_count", "gpu_time_ns", "tc_gpu_time_ns", "cpu_time_ns", "api_time_ns",
               "cpu_overhead_ns", "gpu_idle_ns"]
    groups: dict[str, dict] = {}
    rows = []
    for node in nodes.itertuples(index=False):
        parts = [p for p in str(node.scope).split("/") if p] if node.scope else []
        parent = -1
        for depth in range(len(parts)):
            path = "/".join(parts[: depth + 1])
            grp = groups.get(path)
            if grp is None:
                grp = {"group_id": len(rows), "parent_group_id": parent, "is_group": True, "level": depth + 1,
                       "name": parts[depth] + "/", "path": path, "node_id": -1, "tc_eligible": False,
                       "using_tc": False, **dict.fromkeys(metrics, 0)}
                groups[path] = grp
                rows.append(grp)
            for m in metrics:
                grp[m] += int(getattr(node, m))
            grp["tc_eligible"] |= bool(node.tc_eligible)
            grp["using_tc"] |= bool(node.using_tc)
            parent = grp["group_id"]
        rows.append({"group_id": len(rows), "parent_group_id": parent, "is_group": False, "level": len(parts) + 1,
                     "name": node.op_name, "path": (node.scope + "/" if node.scope else "") + node.op_name,
                     "node_id": int(node.node_id), "tc_eligible": bool(node.tc_eligible),
                     "using_tc": bool(node.using_tc), **{m: int(getattr(node, m)) for m in metrics}})
    return pd.DataFrame(rows)


def resolve_range(an: Analysed, rank: int, iter_start: int | None, iter_stop: int | None) -> pd.DataFrame:
    """The iterations of the aggregation, or a clear error for a range outside the profile."""
    its = an.iterations[an.iterations["rank"] == rank].sort_values("iteration")
    numbers = its["iteration"].to_numpy()
    if iter_start is not None and iter_stop is not None and iter_stop < iter_start:
        raise DlscopeError(f"--iter-start {iter_start} is after --iter-stop {iter_stop}")
    lo = int(numbers.min()) if iter_start is None else int(iter_start)
    hi = int(numbers.max()) if iter_stop is None else int(iter_stop)
    chosen = its[(its["iteration"] >= lo) & (its["iteration"] <= hi)]
    if chosen.empty:
        raise DlscopeError(f"no iterations from {lo} to {hi}; the profile has iterations "
                           f"{int(numbers.min())}..{int(numbers.max())}")
    return chosen


def aggregate(an: Analysed, rank: int, iter_start: int | None = None, iter_stop: int | None = None) -> Aggregation:
    """Compute one aggregation of one rank over [iter_start, iter_stop] (inclusive; default all)."""
    chosen = resolve_range(an, rank, iter_start, iter_stop)
    fr = _rank_frames(an, rank)
    profiled = chosen["iteration"].to_numpy()
    lo, hi = _window(chosen, fr)
    wall = hi - lo
    its_all = an.iterations[an.iterations["rank"] == rank].sort_values("iteration")
    points = np.concatenate([[lo, hi], its_all["start"].to_numpy(np.int64), its_all["end"].to_numpy(np.int64)])
    segments = Segments(category_intervals(fr), points)
    parts = segments.breakdown(lo, hi)

    in_agg = {name: fr[name][np.isin(fr[name]["iteration"].to_numpy(), profiled)] for name in ("ops", "kernels")}
    ak, aops = in_agg["kernels"], in_agg["ops"]
    gpus = _gpu_table(fr, lo, hi, wall, ak)
    has_gpu = len(fr["kernels"]) > 0
    util = float(gpus["utilization"].mean()) if has_gpu and len(gpus) else None

    eligible_ops = set(aops.loc[aops["tc_eligible"].astype(bool), "op_id"])
    elig_k = ak[ak["op_id"].isin(eligible_ops)]
    elig_time = int(elig_k["dur"].sum())
    tc_time = int(elig_k.loc[elig_k["uses_tc"].astype(bool), "dur"].sum())

    nodes = _op_nodes(aops)
    op_node = pd.Series(fr["ops"]["node_id"].to_numpy(), index=fr["ops"]["op_id"].to_numpy())
    tc_counts = _tc_kernel_counts(ak, nodes, op_node)
    nodes["tc_kernel_count"] = nodes["node_id"].map(tc_counts).fillna(0).astype(np.int64)
    ak_nodes = ak.assign(node_id=op_node.reindex(ak["op_id"]).fillna(-1).to_numpy(np.int64))

    row = {
        "rank": rank, "iter_start": int(profiled.min()), "iter_stop": int(profiled.max()),
        "key_node": an.key_node or "", "iteration_method": an.iteration_methods.get(rank, "whole_profile"),
        "iterations_profiled": len(profiled), "window_start": lo, "window_end": hi, "wall_clock_ns": wall,
        "avg_iteration_ns": wall / len(profiled) if len(profiled) else None,
        "gpu_busy_ns": int(gpus["busy_ns"].sum()) if has_gpu else None,
        "gpu_utilization": util,
        "kernel_count": len(ak), "kernel_time_ns": int(ak["dur"].sum()),
        "tc_kernel_time_ns": int(ak.loc[ak["uses_tc"].astype(bool), "dur"].sum()),
        "tc_eligible_kernel_time_ns": elig_time,
        "tc_kernel_efficiency": tc_time / elig_time if elig_time > 0 else None,
        "memory_ns": parts["memory"], **{f"{c}_ns": v for c, v in parts.items() if c != "memory"},
        "op_count": len(aops), "tc_eligible_op_count": int(nodes["tc_eligible"].astype(bool).sum()),
        "using_tc_op_count": int(nodes["using_tc"].astype(bool).sum()),
    }
    return Aggregation(
        row=row, gpus=gpus.assign(rank=rank),
        iterations=_iteration_table(its_all, profiled, fr, segments).assign(rank=rank),
        ops=nodes.assign(rank=rank), op_types=_op_types(aops, nodes), kernels=_kernel_summary(ak, []),
        op_kernels=_kernel_summary(ak_nodes[ak_nodes["node_id"] >= 0], ["node_id"]), groups=_groups(nodes),
    )
