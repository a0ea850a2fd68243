"""Replayed iteration times, the critical path of an aggregation and the what-if predictions, as one dict.

Iteration windows are the aggregation's (docs/metrics.md): iteration i runs from its start to the next
iteration's start, the last one to the end of its own activity. Replayed, each boundary is the replayed time
of the same instant, so the replayed windows add up to the replayed wall clock as the measured ones do.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import pandas as pd

from ..errors import DlscopeError
from .graph import CATEGORIES, Graph, fitting
from .replay import Binding, Result, Weights, binding, critical_path_pieces, path_columns, solve
from .scenarios import Scenario, for_rule, parse

GENERAL_ASSUMPTIONS = [
    ("The replay keeps every measured duration and the order of work on each CPU thread and GPU stream; an "
     "unchanged replay reproduces the measured times exactly."),
    ("Waiting is not work: launch latency and the gap between queued kernels are this GPU's typical values "
     "(medians measured in the trace); any longer wait stays attached to what the event waited for."),
    ("Host synchronizations wait for the last GPU work launched before them; an activity on another stream "
     "that ended just before a late start is taken as what it waited for; thread handoffs are inferred from "
     "one thread going idle as another resumes."),
    ("Changed durations do not change other durations: no CPU contention, clock, cache or memory-bandwidth "
     "effects are modelled."),
]


@dataclass
class Windows:
    """The aggregation's iterations on the graph: their start vertices and the vertices that can end the last."""

    rank: int
    iterations: np.ndarray     # iteration numbers, in time order
    start_v: np.ndarray
    last_end_v: np.ndarray     # the last iteration's own activity: its ops, GPU work and CPU end

    def bounds(self, t: np.ndarray) -> tuple[np.ndarray, int]:
        """(start of each window, index of the vertex ending the last) under replayed times ``t``."""
        return t[self.start_v], int(self.last_end_v[np.argmax(t[self.last_end_v])])

    def durations(self, t: np.ndarray) -> np.ndarray:
        starts, end_v = self.bounds(t)
        return np.diff(np.r_[starts, t[end_v]])

    def wall(self, t: np.ndarray) -> int:
        starts, end_v = self.bounds(t)
        return int(t[end_v] - starts[0])


class IterationRows:
    """Positions of each (rank, iteration)'s ops and GPU activities in the graph's tables, found once for
    a caller that takes the windows of every rank (one pass, not one filter of the whole job per rank)."""

    def __init__(self, g: Graph):
        ops, act = g.job.ops, g.activities
        self.op_ids = ops["op_id"].to_numpy(np.int64)
        self.end_v = act["end_v"].to_numpy(np.int64)
        self._ops = _rows_by(ops["rank"].to_numpy(np.int64), ops["iteration"].to_numpy(np.int64))
        self._acts = _rows_by(act["rank"].to_numpy(np.int64), act["iteration"].to_numpy(np.int64))
        # each rank's iterations in time order (as one rank's rows sorted by start, stably)
        its = g.iterations.sort_values(["rank", "start"], kind="stable")
        rank = its["rank"].to_numpy(np.int64)
        cut = np.flatnonzero(rank[1:] != rank[:-1]) + 1
        cols = {c: its[c].to_numpy(np.int64) for c in ("iteration", "start_v", "cpu_end_v")}
        self._its = {int(rank[a]): {c: v[a:b] for c, v in cols.items()}
                     for a, b in zip(np.r_[0, cut], np.r_[cut, len(rank)])} if len(rank) else {}

    def iterations(self, rank: int) -> dict[str, np.ndarray]:
        """The rank's iterations in time order: iteration, start_v, cpu_end_v."""
        return self._its.get(rank, {c: _NONE for c in ("iteration", "start_v", "cpu_end_v")})

    def ops(self, rank: int, iteration: int) -> np.ndarray:
        return self.op_ids[self._ops.get((rank, iteration), _NONE)]

    def activity_ends(self, rank: int, iteration: int) -> np.ndarray:
        return self.end_v[self._acts.get((rank, iteration), _NONE)]


_NONE = np.zeros(0, dtype=np.int64)


def _rows_by(rank: np.ndarray, iteration: np.ndarray) -> dict[tuple[int, int], np.ndarray]:
    """(rank, iteration) -> row positions, in row order."""
    if len(rank) == 0:
        return {}
    order = np.lexsort((iteration, rank)).astype(fitting(len(rank)))  # (kept: its slices are the rows)
    r, i = rank[order], iteration[order]
    cut = np.flatnonzero((r[1:] != r[:-1]) | (i[1:] != i[:-1])) + 1
    return {(int(r[a]), int(i[a])): order[a:b] for a, b in zip(np.r_[0, cut], np.r_[cut, len(order)])}


def windows(g: Graph, rank: int, iter_start: int | None = None, iter_stop: int | None = None,
            rows: IterationRows | None = None) -> Windows:
    """``rows``: :class:`IterationRows` of ``g`` when the caller takes many ranks' windows."""
    if rows is None:
        its = g.iterations[g.iterations["rank"] == rank].sort_values("start", kind="stable")
        mine = {c: its[c].to_numpy(np.int64) for c in ("iteration", "start_v", "cpu_end_v")}
    else:
        mine = rows.iterations(rank)
    number = mine["iteration"]
    lo = (number.min() if len(number) else np.nan) if iter_start is None else iter_start
    hi = (number.max() if len(number) else np.nan) if iter_stop is None else iter_stop
    keep = (number >= lo) & (number <= hi)
    if not keep.any():
        raise DlscopeError(f"no iterations {lo}..{hi} of rank {rank} in the database's iterations (an aggregation "
                           f"made before a re-split with another key node? replay the newest one)")
    number, start_v, cpu_end_v = number[keep], mine["start_v"][keep], mine["cpu_end_v"][keep]
    last = int(number[-1])
    if rows is not None:
        op_ids, act_ends = rows.ops(rank, last), rows.activity_ends(rank, last)
    else:
        ops = g.job.ops
        op_ids = ops.loc[(ops["rank"] == rank) & (ops["iteration"] == last), "op_id"].to_numpy(np.int64)
        act = g.activities
        on = (act["rank"].to_numpy() == rank) & (act["iteration"].to_numpy() == last)
        act_ends = act["end_v"].to_numpy(np.int64)[on]
    ends = np.r_[g.op_end_v[op_ids], act_ends, cpu_end_v[-1:]]
    return Windows(rank, number, start_v, ends[ends >= 0])


def replay_errors(g: Graph, win: Windows, result: Result) -> pd.DataFrame:
    """Per iteration: its measured window, its replayed window and the error in percent."""
    measured = win.durations(g.t)
    replayed = win.durations(result.t)
    err = np.where(measured > 0, 100.0 * (replayed - measured) / np.where(measured > 0, measured, 1), 0.0)
    return pd.DataFrame({"iteration": win.iterations, "measured_ns": measured, "replayed_ns": replayed,
                         "error_pct": err})


PATH_COLUMNS = ["category", "op_id", "act", "rank", "ns", "unexplained", "iteration"]


def path_of(g: Graph, win: Windows, result: Result, bound: Binding | None = None) -> pd.DataFrame:
    """The critical path of every window (the edges that set its end, walked back to its start): one row
    per edge with its category, owner op, activity and time inside the window; per window they add up to its
    replayed duration. ``bound``: ``binding(g, result)`` when the caller walks many windows of one replay."""
    parts = path_arrays(g, win, result, bound)
    return pd.DataFrame(parts) if parts else pd.DataFrame(columns=PATH_COLUMNS)


def path_arrays(g: Graph, win: Windows, result: Result, bound: Binding | None = None) -> dict[str, np.ndarray]:
    """:func:`path_of`'s columns as arrays (empty dict: no window), without a frame per window."""
    tables = list(path_parts(g, win, result, bound))
    return {c: np.concatenate([tb[c] for tb in tables]) for c in PATH_COLUMNS} if tables else {}


def path_parts(g: Graph, win: Windows, result: Result, bound: Binding | None = None,
               size: int | None = None, unexplained: bool = True) -> Iterator[dict[str, np.ndarray]]:
    """:func:`path_arrays`' columns one iteration window at a time (and, with ``size``, at most about that many
    edges at a time): a caller that sums them holds one window's path, not the whole trace's, and not its
    columns. ``unexplained`` False: without that column (see :func:`path_columns`)."""
    t = result.t
    b = binding(g, result) if bound is None else bound
    starts, last_end = win.bounds(t)
    ends = np.r_[win.start_v[1:], last_end]
    for it, lo, end_v in zip(win.iterations, starts, ends):
        for piece in critical_path_pieces(g, result, b, int(end_v), int(lo), size):
            cols = path_columns(g, piece, unexplained)
            cols["iteration"] = np.full(len(cols["ns"]), int(it), np.int64)
            yield cols


def summarize_path(g: Graph, path: pd.DataFrame, wall: int, top: int = 10) -> list[dict]:
    """Time on the critical path by category, op node and kernel name (integers; shares of the wall clock)."""
    out = []

    def row(kind: str, name: str, ns: int, **extra) -> dict:
        return {"kind": kind, "name": name, "time_ns": int(ns), "share": round(ns / wall, 4) if wall else None,
                **extra}

    by_cat = path.groupby("category")["ns"].sum().sort_values(ascending=False)
    out += [row("category", CATEGORIES[int(c)], v) for c, v in by_cat.items()]
    ranked = path[path["rank"] >= 0]
    if len(g.job.ranks) > 1:  # a job: which ranks' work holds this one back (collectives cross ranks)
        by_rank = ranked.groupby("rank")["ns"].sum().sort_values(ascending=False)
        out += [row("rank", f"rank {int(r)}", v, rank=int(r)) for r, v in by_rank.items()]
    ops = g.job.ops.set_index("op_id")
    owned = path[path["op_id"] >= 0]
    if len(owned):
        root = ops["root_id"].reindex(owned["op_id"].to_numpy()).to_numpy()
        root = np.where(pd.isna(root), owned["op_id"].to_numpy(), root).astype(np.int64)
        names = ops["name"].reindex(root).fillna("").to_numpy(object)
        nodes = ops["node_id"].reindex(root).fillna(-1).to_numpy(np.int64)
        by_op = (pd.DataFrame({"node_id": nodes, "name": names, "ns": owned["ns"].to_numpy()})
                 .groupby(["node_id", "name"], sort=False)["ns"].sum().sort_values(ascending=False).head(top))
        out += [row("op", name, v, node_id=int(node)) for (node, name), v in by_op.items()]
    runs = path[path["act"] >= 0]
    if len(runs):
        names = g.activities["name"].to_numpy(object)[runs["act"].to_numpy(np.int64)]
        by_k = pd.Series(runs["ns"].to_numpy(), index=names).groupby(level=0).sum().sort_values(ascending=False)
        out += [row("kernel", str(name), v) for name, v in by_k.head(top).items()]
    return out


def avg(wall: int, n: int) -> int:
    """The mean iteration time as the aggregation rounds it (nearest ns, ties to even)."""
    return round(Fraction(int(wall), int(n)))


def predict(g: Graph, win: Windows, scenarios: list[Scenario], baseline_ns: int | None = None,
            top: int = 10) -> dict:
    """The replay of the aggregation, each scenario's prediction, all of them together, and the critical
    path. Savings are against the unchanged replay (which equals the measured time)."""
    n = len(win.iterations)
    base = solve(g, Weights.measured(g))
    replay_wall = win.wall(base.t)
    replay_avg = avg(replay_wall, n)
    errors = replay_errors(g, win, base)
    out_scen = []
    combined = Weights.measured(g)
    for sc in scenarios:
        w = Weights.measured(g)
        changed = sc.apply(g, w)
        sc.apply(g, combined)
        r = solve(g, w, start=base.t)
        pred = avg(win.wall(r.t), n)
        out_scen.append({"name": sc.name, "predicted_iteration_ns": pred, "saving_ns": replay_avg - pred,
                         "changed": changed})
    r = solve(g, combined, start=base.t) if scenarios else base
    comb = avg(win.wall(r.t), n)
    path = path_of(g, win, base)
    return {
        "rank": win.rank, "iterations": n,
        "baseline_iteration_ns": int(baseline_ns) if baseline_ns is not None else avg(win.wall(g.t), n),
        "replay_iteration_ns": replay_avg,
        "scenarios": out_scen,
        "combined": {"predicted_iteration_ns": comb, "saving_ns": replay_avg - comb},
        "critical_path": summarize_path(g, path, replay_wall, top),
        "replay": {"iterations": [{"iteration": int(r_.iteration), "measured_ns": int(r_.measured_ns),
                                   "replayed_ns": int(r_.replayed_ns)} for r_ in errors.itertuples()],
                   "max_abs_error_pct": float(np.abs(errors["error_pct"]).max()) if len(errors) else 0.0,
                   # time on the critical path the model kept as measured waiting rather than work
                   "unexplained_wait_ns": int(path["unexplained"].sum()),
                   "sweeps": base.rounds, "notes": list(g.notes)},
        "assumptions": GENERAL_ASSUMPTIONS + [f"{sc.name}: {sc.assumes}" for sc in scenarios],
    }


def parse_all(names: list[str]) -> list[Scenario]:
    return [parse(n) for n in names]


def price_findings(g: Graph, win: Windows, findings: list[tuple[str, int | None]],
                   unchanged: Result | None = None, replays: dict | None = None) -> dict:
    """Each expert finding whose advice a scenario models, priced by replay (its saving over the aggregation,
    as findings count theirs), and all of them together (overlaps counted once). ``unchanged``: the unchanged
    replay when the caller has it already; ``replays``: replays by the scenarios applied, kept by a caller that
    prices the windows of every rank on one graph (a scenario changes the whole job, whatever the window); without
    it each scenario's replay is let go once priced."""
    base = win.wall((unchanged or solve(g, Weights.measured(g))).t)
    shared = replays is not None
    replays = {} if replays is None else replays
    rows: list[dict] = []
    used: list[Scenario] = []
    for rule, estimate in findings:
        sc = for_rule(rule)
        if sc is None:
            continue
        try:
            r = _replayed(g, [sc], replays, unchanged)
        except DlscopeError as e:  # e.g. amp on a GPU with no known FP16 Tensor Core peak: say so, price the rest
            rows.append({"rule": rule, "scenario": sc.name, "est_saving_ns": estimate, "simulated_saving_ns": None,
                         "not_priced": str(e)})
            continue
        if sc.name not in [u.name for u in used]:  # the same change twice (sync_memcpy, pageable_memcpy) is one
            used.append(sc)
        rows.append({"rule": rule, "scenario": sc.name, "est_saving_ns": estimate,
                     "simulated_saving_ns": base - win.wall(r.t)})
        if not shared:  # no other window reads it: one scenario's times alive at a time (a vertex each)
            del r
            replays.clear()
    together = base - win.wall(_replayed(g, used, replays, unchanged).t) if used else None
    return {"findings": rows, "combined_saving_ns": together}


def _replayed(g: Graph, scenarios: list[Scenario], replays: dict, unchanged: Result | None = None) -> Result:
    """The graph replayed with ``scenarios`` applied in order (or the error applying them), once per graph;
    swept from the ``unchanged`` replay when given (same times, fewer sweeps)."""
    key = tuple(sc.name for sc in scenarios)
    if key not in replays:
        w = Weights.measured(g)
        try:
            for sc in scenarios:
                sc.apply(g, w)
            # only its times are read again: its weights let go (and used as the replay's scratch space)
            replays[key] = solve(g, w, start=unchanged.t if unchanged is not None else None, scratch=True)
            del w
        except DlscopeError as e:
            replays[key] = e
    if isinstance(replays[key], DlscopeError):
        raise replays[key]
    return replays[key]
