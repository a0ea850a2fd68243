"""What-if scenarios: each changes some edge weights of the measured graph, then the graph is replayed.

A scenario never invents work: it removes or shortens what the trace measured (CPU time inside some ops,
GPU durations, host synchronizations, dependencies on communication) and lets the replay say how much of
that reaches the iteration time.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import numpy as np
import pandas as pd

from ..analyze.categories import graph_launch_ids, matches
from ..analyze.dtypes import precision as dtype_precision
from ..analyze.intervals import merge, sorted_unique
from ..analyze.nesting import levels
from ..errors import DlscopeError
from ..experts.precision_names import kernel_precisions
from ..roofline.ceilings import find_ceilings
from .graph import (
    ARRIVE,
    BYPASS,
    COLLECTIVE,
    GPU_START,
    SYNC,
    Graph,
    op_flags,
    positions,
    row_codes,
)
from .replay import Weights

NAMES = ("no-dataloader", "amp", "no-sync", "cuda-graphs", "overlap-comm", "no-straggler", "scale:PATTERN=FACTOR")


@dataclass
class Scenario:
    name: str                                   # as the user wrote it
    assumes: str                                # what the model assumes, one sentence
    apply: Callable[[Graph, Weights], str]      # changes the weights in place; returns what it changed


# ----------------------------------------------------------------------------------------------- helpers


def _cpu_chain_of(g: Graph, frame: pd.DataFrame) -> np.ndarray:
    """The CPU chain of each row's thread (-1 when the thread has no chain)."""
    if not len(frame):
        return np.zeros(0, np.int64)
    cpu = g.chains[~g.chains["is_gpu"]]  # CPU chains come first: a row here is its chain
    known = cpu[["rank", "pid", "tid"]].to_numpy(np.int64)
    codes = row_codes(np.vstack([known, frame[["rank", "pid", "tid"]].to_numpy(np.int64)]))[0]
    chain_of = np.full(int(codes.max()) + 1, -1, np.int64)
    chain_of[codes[:len(known)]] = np.arange(len(known))
    return chain_of[codes[len(known):]]


def keep_cpu_spans(g: Graph, w: Weights, chain: np.ndarray, start: np.ndarray, end: np.ndarray,
                   keep: np.ndarray | float) -> int:
    """Keep only the ``keep`` share of the CPU time inside the spans (aligned, relative times on the given
    chains; disjoint per chain): each CPU chain edge loses (1 - keep) of its overlap with them, in proportion
    of its weight, and so does a synchronization's wait cost on the same edge. Returns the CPU time removed."""
    return keep_cpu_shares(g, w, cpu_span_shares(g, chain, start, end, keep))


def cpu_span_shares(g: Graph, chain: np.ndarray, start: np.ndarray, end: np.ndarray,
                    keep: np.ndarray | float) -> tuple[np.ndarray, np.ndarray] | None:
    """The CPU chain edges (their vertex) and the share of each that the spans remove (None: no span): what
    :func:`keep_cpu_spans` applies, found from the graph alone (so once per graph)."""
    keep = np.broadcast_to(np.asarray(keep, np.float64), np.shape(start))
    ok = (chain >= 0) & (end > start)
    if not ok.any():
        return None
    n_cpu = g.n_cpu
    t = g.t[:n_cpu]
    big = np.int64(max(int(t.max()) + 1, int(end[ok].max()) + 1)) if n_cpu else np.int64(1)
    ks = chain[ok] * big + start[ok]
    ke = chain[ok] * big + end[ok]
    rate = 1.0 - keep[ok]
    order = np.argsort(ks, kind="stable")
    ks, ke, rate = ks[order], ke[order], rate[order]
    cum = np.r_[0.0, np.cumsum((ke - ks) * rate)]

    def removed_before(x: np.ndarray) -> np.ndarray:
        i = np.searchsorted(ks, x, side="right") - 1
        inside = np.clip(x - ks[np.maximum(i, 0)], 0, (ke - ks)[np.maximum(i, 0)])
        return np.where(i >= 0, cum[np.maximum(i, 0)] + rate[np.maximum(i, 0)] * inside, 0.0)

    v = np.flatnonzero(~g.first[:n_cpu])
    removed = removed_before(g.chain[:n_cpu] * big + t)  # at every CPU instant once (each edge reads two)
    length = (t[v] - t[v - 1]).astype(np.float64)
    gone = removed[v] - removed[v - 1]
    share = np.where(length > 0, np.clip(gone / np.where(length > 0, length, 1), 0, 1), 0.0)
    return v, share


def keep_cpu_shares(g: Graph, w: Weights, shares: tuple[np.ndarray, np.ndarray] | None) -> int:
    """Remove the shares :func:`cpu_span_shares` found from the CPU chain edges and the synchronizations'
    wait costs on them; returns the CPU time removed."""
    if shares is None:
        return 0
    v, share = shares
    before = int(w.wc[v].sum())
    w.wc[v] = np.rint(w.wc[v] * (1.0 - share)).astype(np.int64)
    factor = np.ones(g.n)
    factor[v] = 1.0 - share
    sync = g.xkind == SYNC
    w.wx[sync] = np.rint(w.wx[sync] * factor[g.dst[sync]]).astype(np.int64)
    return before - int(w.wc[v].sum())


def scale_activities(g: Graph, w: Weights, rows: np.ndarray, factor: np.ndarray | float) -> int:
    """Multiply the durations of GPU activities (rows of ``g.activities``); returns the time removed."""
    rows = np.asarray(rows, np.int64)
    if len(rows) == 0:
        return 0
    ev = g.activities["end_v"].to_numpy(np.int64)[rows]
    before = w.wc[ev].copy()
    w.wc[ev] = np.rint(before * np.broadcast_to(np.asarray(factor, np.float64), ev.shape)).astype(np.int64)
    coll = (g.xkind == COLLECTIVE) & np.isin(g.dst, ev)  # a collective's transfer rides on its cross edge
    if coll.any():
        f = pd.Series(np.broadcast_to(np.asarray(factor, np.float64), ev.shape), index=ev)
        f = f[~f.index.duplicated()]
        w.wx[coll] = np.rint(w.wx[coll] * f.reindex(g.dst[coll]).to_numpy()).astype(np.int64)
    return int((before - w.wc[ev]).sum())


def _spans(g: Graph, frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The union of the rows' [start, end) per CPU chain, on the graph's clock."""
    chain = _cpu_chain_of(g, frame)
    s = g.vertex_time(frame["start"].to_numpy(np.int64), frame["rank"].to_numpy(np.int64))
    e = g.vertex_time(frame["end"].to_numpy(np.int64), frame["rank"].to_numpy(np.int64))
    ok = chain >= 0
    big = np.int64(max(int(e[ok].max()) if ok.any() else 0, int(g.t.max()) if g.n else 0) + 1)
    ms, me = merge(chain[ok] * big + s[ok], chain[ok] * big + e[ok])
    return ms // big, ms % big, me - (ms // big) * big


def _launch_cost(g: Graph) -> dict[int, int]:
    """Per rank, the median duration of a call that launched GPU work (what one graph launch costs)."""
    api = g.job.api_calls
    launched = sorted_unique(g.activities["api_id"].to_numpy(np.int64))
    a = api[api["api_id"].isin(launched[launched >= 0])]
    med = (a["end"] - a["start"]).groupby(a["rank"]).median()
    return {int(r): int(v) for r, v in med.items()}


# ----------------------------------------------------------------------------------------------- scenarios


def _no_dataloader(g: Graph, w: Weights) -> str:
    n_spans, shares = g.memoized("no-dataloader", lambda: _dataloader_shares(g))
    removed = keep_cpu_shares(g, w, shares)
    return f"{n_spans} data-loading spans, {removed} ns of CPU time removed"


def _dataloader_shares(g: Graph) -> tuple[int, tuple[np.ndarray, np.ndarray] | None]:
    ops, rg = g.job.ops, g.job.ranges
    dl = pd.concat([ops.loc[matches(ops["name"], "dataloader"), ["rank", "pid", "tid", "start", "end"]],
                    rg.loc[(rg["device"] < 0) & (rg["category"] == "dataloader"),
                           ["rank", "pid", "tid", "start", "end"]]],
                   ignore_index=True)
    chain, s, e = _spans(g, dl)
    return len(s), cpu_span_shares(g, chain, s, e, 0.0)


def _no_sync_of(how: str | None) -> Callable[[Graph, Weights], str]:
    """Blocking calls (``how``: only synchronizations 'sync', or only copies 'copy'; None: all) stop waiting."""
    def calls(g: Graph) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
        b = g.blocking[g.blocking["waited_v"] >= 0]
        if how:
            # a copy op (tensor.to) that blocks also synchronizes its stream: both go with non_blocking=True
            op = g.job.api_calls.set_index("api_id")["op_id"].reindex(b["api_id"].to_numpy()).to_numpy()
            copy_ops = set(op[(b["how"] == "copy").to_numpy() & (op >= 0)].tolist())
            same_op = np.isin(op, list(copy_ops)) if how == "copy" else np.zeros(len(b), bool)
            b = b[(b["how"] == how).to_numpy() | same_op]
        ev = b["end_v"].to_numpy(np.int64)
        cap = b["rank"].map(_launch_cost(g)).fillna(0).to_numpy(np.int64)
        return len(b), ev, (g.xkind == SYNC) & np.isin(g.dst, ev), cap

    def apply(g: Graph, w: Weights) -> str:
        n, ev, off, cap = g.memoized(("no-sync", how), lambda: calls(g))
        w.off |= off
        w.wc[ev] = np.minimum(w.wc[ev], cap)
        return f"{n} blocking calls return at once (each costs one launch call)"
    return apply


_no_sync = _no_sync_of(None)


def _cuda_graphs(g: Graph, w: Weights) -> str:
    """Runs of op nodes that launch GPU work, between a synchronization or data loading and the next, are
    captured: replaying them costs one launch call on the CPU; the GPU work is unchanged."""
    found = g.memoized("cuda-graphs", lambda: _captured_runs(g))
    if isinstance(found, str):
        return found
    n_runs, shares = found
    removed = keep_cpu_shares(g, w, shares)
    return f"{n_runs} captured runs of op nodes, {removed} ns of CPU time removed"


def _captured_runs(g: Graph) -> str | tuple[int, tuple[np.ndarray, np.ndarray] | None]:
    """The captured runs' count and the CPU shares they remove (or why there is none)."""
    ops = g.job.ops
    roots = ops[ops["parent_id"] < 0]
    if roots.empty:
        return "no ops"
    pos = positions(ops["op_id"].to_numpy(np.int64))
    blocking_api = g.blocking.loc[g.blocking["waited_v"] >= 0, "api_id"].to_numpy(np.int64)
    api = g.job.api_calls
    api_ops = api.set_index("api_id")["op_id"].reindex(blocking_api).to_numpy(np.int64)
    blocks = np.zeros(len(ops), bool)
    rows = pos[api_ops[api_ops >= 0]]
    blocks[rows[rows >= 0]] = True
    root_id = ops["root_id"].to_numpy(np.int64)
    blocked_root = np.zeros(len(ops), bool)
    rr = pos[root_id[blocks]]
    blocked_root[rr[rr >= 0]] = True
    dl = op_flags(ops, matches(ops["name"], "dataloader"))
    r = roots.assign(breaks=(blocked_root | dl)[roots.index.to_numpy()],
                     launches=roots["kernel_count"].to_numpy(np.int64) > 0)
    r = r.sort_values(["rank", "pid", "tid", "start"], kind="stable")
    thread = row_codes(r[["rank", "pid", "tid"]].to_numpy(np.int64))[0]
    # a run: consecutive roots of a thread in one iteration (a graph is replayed once a step) with no breaking
    # root between them, from its first launching root to its last
    it = r["iteration"].to_numpy(np.int64)
    new_run = np.r_[True, (thread[1:] != thread[:-1]) | (it[1:] != it[:-1])] | r["breaks"].to_numpy(bool)
    run = np.cumsum(new_run)
    cand = r[r["launches"].to_numpy(bool) & ~r["breaks"].to_numpy(bool)].assign(run=run[r["launches"].to_numpy(bool)
                                                                                         & ~r["breaks"].to_numpy(bool)])
    if cand.empty:
        return "no op launched GPU work outside a synchronization"
    spans = cand.groupby("run").agg(rank=("rank", "first"), pid=("pid", "first"), tid=("tid", "first"),
                                    start=("start", "min"), end=("end", "max"))
    chain = _cpu_chain_of(g, spans)
    s = g.vertex_time(spans["start"].to_numpy(np.int64), spans["rank"].to_numpy(np.int64))
    e = g.vertex_time(spans["end"].to_numpy(np.int64), spans["rank"].to_numpy(np.int64))
    cost = spans["rank"].map(_launch_cost(g)).fillna(0).to_numpy(np.float64)
    keep = np.clip(cost / np.maximum(e - s, 1), 0, 1)
    return len(spans), cpu_span_shares(g, chain, s, e, keep)


def _overlap_comm(g: Graph, w: Weights) -> str:
    act = g.activities
    comm = act["is_comm"].to_numpy(bool)
    if not comm.any():
        return "no communication kernels"
    ev = act["end_v"].to_numpy(np.int64)
    sv = act["start_v"].to_numpy(np.int64)
    # the next activity on the same stream no longer waits for a communication kernel before it
    nxt = ev[comm] + 1
    ok = nxt < g.n
    nxt = nxt[ok]
    same = (g.chain[nxt] == g.chain[ev[comm][ok]]) & (g.kind[nxt] == GPU_START)
    nxt_act = g.act[nxt]
    keep = same & ~comm[np.maximum(nxt_act, 0)]
    w.cut[nxt[keep]] = True
    # nor does anything else that waited for one (host syncs, other streams); collectives still meet
    comm_v = np.zeros(g.n, bool)
    comm_v[ev[comm]] = True
    comm_v[sv[comm]] = True
    out = comm_v[g.src] & ~np.isin(g.xkind, [ARRIVE, COLLECTIVE])
    w.off |= out
    bypass = g.xkind == BYPASS
    w.off[bypass] = False
    return f"{int(comm.sum())} communication kernels no longer hold back compute or the host"


def _no_straggler(g: Graph, w: Weights) -> str:
    act = g.activities
    arrive = g.xkind == ARRIVE
    if not arrive.any():
        return "not a job of several ranks with matched collectives: nothing to compare"
    # lateness at each collective: a rank's arrival minus the median arrival
    starts = pd.DataFrame({"rank": g.rank[g.src[arrive]], "barrier": g.dst[arrive], "t": g.t[g.src[arrive]]})
    starts["late"] = starts["t"] - starts.groupby("barrier")["t"].transform("median")
    lateness = starts.groupby("rank")["late"].mean()
    straggler = int(lateness.idxmax())
    # per rank: non-communication GPU time and CPU time (measured)
    gpu = act[~act["is_comm"]].assign(d=act["end"] - act["start"]).groupby("rank")["d"].sum()
    cpu_v = np.flatnonzero(~g.first[:g.n_cpu])
    cpu = pd.Series(g.wc[cpu_v], index=g.rank[cpu_v]).groupby(level=0).sum()
    parts = []
    for name, per_rank in (("GPU", gpu), ("CPU", cpu)):
        if straggler not in per_rank.index or per_rank[straggler] <= 0:
            continue
        f = min(1.0, float(per_rank.median()) / float(per_rank[straggler]))
        if name == "GPU":
            rows = np.flatnonzero((act["rank"].to_numpy() == straggler) & ~act["is_comm"].to_numpy(bool))
            scale_activities(g, w, rows, f)
        else:
            chains = g.chains.index[(~g.chains["is_gpu"]) & (g.chains["rank"] == straggler)].to_numpy()
            sel = cpu_v[np.isin(g.chain[cpu_v], chains)]
            w.wc[sel] = np.rint(w.wc[sel] * f).astype(np.int64)
        parts.append(f"{name} time ×{f:.3f}")
    return f"rank {straggler} (latest to arrive at collectives): " + (", ".join(parts) or "already at the median")


@lru_cache(maxsize=1)
def _math_kernel() -> tuple[re.Pattern, re.Pattern]:
    ref = json.loads(resources.files("dlscope.data").joinpath("kernel_precision.json").read_text())
    return re.compile(ref["math_kernel"]["pattern"]), re.compile(ref["not_math"]["pattern"])


def amp_candidates(g: Graph) -> pd.DataFrame:
    """GEMM / convolution / attention kernels of Tensor-Core-eligible ops computing in FP32 (on CUDA cores,
    or as TF32): their rows of ``g.activities`` (the index) with rank, device and ``on_tc``. Precision: the
    launching op's (or an enclosing op's) input dtype, else the kernel's name. A kernel replayed from a CUDA
    graph was launched by the graph's launch call, so the op around it is the replay (``Graphed``), not the
    GEMM that captured it: such math kernels are judged by their own names alone (precision included)."""
    job, act = g.job, g.activities
    ops = job.ops
    is_k = (act["table"] == "kernel").to_numpy(bool)
    k_rows = np.flatnonzero(is_k)  # (the kernels' columns read, not a copy of their rows of every column)
    if not len(k_rows):
        return pd.DataFrame({"rank": np.zeros(0, np.int64), "device": np.zeros(0, np.int64), "on_tc": False})
    math, not_math = _math_kernel()
    # names are judged once per distinct name
    name_code, distinct = g.name_codes(np.flatnonzero(is_k), na_sentinel=False)
    is_math = np.array([bool(math.search(n)) and not not_math.search(n) for n in distinct], bool)[name_code]
    pos = positions(ops["op_id"].to_numpy(np.int64))
    own = np.array([dtype_precision(x) if x else "" for x in pd.unique(ops["data_type"])], object)
    # each op's own precision as a code of the distinct texts: the walk below compares and copies integers
    own_code, texts = pd.factorize(own) if len(own) else (np.zeros(0, np.int64), np.zeros(0, object))
    texts = np.asarray(texts, object)
    code = own_code[pd.factorize(ops["data_type"])[0]].astype(np.int64) if len(ops) else np.zeros(0, np.int64)
    blank = np.flatnonzero(texts == "")
    unknown = int(blank[0]) if len(blank) else -2  # (no op's own precision unknown: none inherits)
    # inherit: the nearest op up the tree with a precision; eligible: it or an enclosing op is eligible
    parent = ops["parent_id"].to_numpy(np.int64)
    depth = ops["depth"].to_numpy(np.int64)
    # (one walk down the levels for both: what ``op_flags`` does for the flag; the levels from one sort)
    eligible = ops["tc_eligible"].to_numpy(np.int64) > 0
    for rows in levels(depth)[1:]:
        rows = rows[parent[rows] >= 0]
        prow = pos[parent[rows]]
        found = prow >= 0
        rows, prow = rows[found], prow[found]
        mine = code[rows]
        code[rows] = np.where(mine == unknown, code[prow], mine)
        eligible[rows] |= eligible[prow]
    krow = pos[act["op_id"].to_numpy(np.int64)[k_rows]]
    has = krow >= 0
    kprec = np.where(has, texts[code[np.maximum(krow, 0)]] if len(ops) else "", "").astype(object)
    by_name = kernel_precisions(pd.Series(np.asarray(distinct, object), dtype=object))[name_code]
    kprec = np.where(kprec == "", by_name, kprec)
    kernel_row = positions(job.kernels["kernel_id"].to_numpy(np.int64))
    kid = act["id"].to_numpy(np.int64)[k_rows]
    krow_k = np.where(kid < len(kernel_row) - 1, kernel_row[np.minimum(kid, len(kernel_row) - 1)], -1)
    uses_tc = np.where(krow_k >= 0, job.kernels["uses_tc"].to_numpy()[np.maximum(krow_k, 0)], 0) > 0
    graph_calls = graph_launch_ids(job.api_calls)
    kapi = np.where(krow_k >= 0, job.kernels["api_id"].fillna(-1).to_numpy(np.int64)[np.maximum(krow_k, 0)], -1)
    # as the rules judge them (experts.context kernel_facts): a replayed kernel whose name gives its precision
    replayed = (np.isin(kapi, graph_calls) & (by_name != "")) if len(graph_calls) else np.zeros(len(k_rows), bool)
    kprec = np.where(replayed, by_name, kprec)
    elig = (has & (eligible[np.maximum(krow, 0)] if len(ops) else False)) | replayed
    sel = elig & is_math & np.isin(kprec, ["fp32", "tf32"])
    rows = k_rows[sel]  # (the columns the plan reads, not a copy of every column of these rows)
    return pd.DataFrame({"rank": act["rank"].to_numpy()[rows], "device": act["device"].to_numpy()[rows],
                         "on_tc": uses_tc[sel] | (kprec[sel] == "tf32")}, index=act.index[rows])


def _amp(factor: float | None) -> Callable[[Graph, Weights], str]:
    def plan(g: Graph) -> str | tuple[np.ndarray, np.ndarray, list[str]] | DlscopeError:
        cand = amp_candidates(g)
        if cand.empty:
            return "no FP32 GEMM/convolution kernels of Tensor-Core-eligible ops"
        keep = np.ones(len(cand))
        how = []
        if factor is not None:
            keep[:] = factor
            how.append(f"duration ×{factor:g} (given)")
        else:
            # per (rank, device) in sorted order; each distinct GPU matched to the spec table once
            codes, keys = row_codes(cand[["rank", "device"]].to_numpy(np.int64))
            on_tc = cand["on_tc"].to_numpy(bool)
            has = [np.bincount(codes[on_tc == flag], minlength=len(keys)) > 0 for flag in (False, True)]
            gpus = g.job.gpus
            by_pair: dict[tuple[int, int], int] = {}
            by_rank: dict[int, int] = {}
            for i, (r_, d_) in enumerate(gpus[["rank", "device"]].to_numpy(np.int64).tolist()):
                by_pair.setdefault((r_, d_), i)
                by_rank.setdefault(r_, i)
            found: dict[tuple, tuple] = {}
            factor_of = np.ones((2, len(keys)))
            for j, (rank, device) in enumerate(keys.tolist()):
                at_row = by_pair.get((rank, device), by_rank.get(rank))
                ceil = None
                if at_row is not None:
                    r = gpus.iloc[at_row]
                    cc = f"{r['cc_major']}.{r['cc_minor']}" if r["cc_major"] >= 0 else None
                    spec = (r["name"] or None, cc, r["sm_count"])
                    if spec not in found:
                        found[spec] = find_ceilings(*spec)
                    ceil, _ = found[spec]
                target = ceil.peak("fp16", True) if ceil is not None else None
                if ceil is None or target is None:
                    name = gpus.iloc[at_row]["name"] if at_row is not None else "unknown"
                    return DlscopeError(f"amp: no FP16 Tensor Core peak for GPU '{name}' (rank {rank}); give the "
                                        f"speed-up as a duration factor, e.g. amp=0.5")
                for flag in (False, True):
                    now = ceil.peak("fp32", flag)
                    if now is not None and has[flag][j]:
                        factor_of[int(flag), j] = min(1.0, now[1] / target[1])
                        how.append(f"{'TF32' if flag else 'FP32'} → FP16 Tensor Cores on {ceil.name}: "
                                   f"×{now[1] / target[1]:.3f}")
            keep = factor_of[on_tc.astype(np.int64), codes]
        return cand.index.to_numpy(), keep, how

    def apply(g: Graph, w: Weights) -> str:
        found = g.memoized(("amp", factor), lambda: plan(g))
        if isinstance(found, DlscopeError):
            raise DlscopeError(str(found))
        if isinstance(found, str):
            return found
        rows, keep, how = found
        removed = scale_activities(g, w, rows, keep)
        return f"{len(rows)} kernels ({'; '.join(dict.fromkeys(how))}), {removed} ns of GPU time removed"
    return apply


def _inside_spans(g: Graph, chain: np.ndarray, start: np.ndarray, span_chain: np.ndarray, span_start: np.ndarray,
                  span_end: np.ndarray) -> np.ndarray:
    """Whether each instant (chain, start) lies in one of the disjoint spans."""
    if len(span_start) == 0 or len(start) == 0:
        return np.zeros(len(start), bool)
    big = np.int64(max(int(g.t.max()), int(span_end.max()), int(start.max())) + 1)
    ks = span_chain * big + span_start
    order = np.argsort(ks, kind="stable")
    ks, ke = ks[order], (span_chain * big + span_end)[order]
    x = chain * big + start
    i = np.searchsorted(ks, x, side="right") - 1
    return (chain >= 0) & (i >= 0) & (x < ke[np.maximum(i, 0)])


def _scale(pattern: str, factor: float) -> Callable[[Graph, Weights], str]:
    rx = re.compile(pattern, re.IGNORECASE)

    def hit(names: pd.Series) -> np.ndarray:
        distinct = pd.unique(names)
        verdict = dict(zip(distinct, [bool(rx.search(str(n))) for n in distinct]))
        return names.map(verdict).to_numpy(bool) if len(names) else np.zeros(0, bool)

    def apply(g: Graph, w: Weights) -> str:
        act, ops, rg = g.activities, g.job.ops, g.job.ranges
        by_name = hit(act["name"])
        op_hit = hit(ops["name"])
        under = op_flags(ops, op_hit) if len(ops) else op_hit
        pos = positions(ops["op_id"].to_numpy(np.int64))
        arow = pos[act["op_id"].to_numpy(np.int64)]
        beneath = (arow >= 0) & (under[np.maximum(arow, 0)] if len(ops) else False)
        # annotation ranges (record_function, NVTX) by name too: their CPU time and what was launched in them
        rg_hit = rg[(rg["device"] < 0) & hit(rg["name"])]
        cpu_frames = pd.concat([ops.loc[op_hit, ["rank", "pid", "tid", "start", "end"]],
                                rg_hit[["rank", "pid", "tid", "start", "end"]]], ignore_index=True)
        chain, s, e = _spans(g, cpu_frames)
        api = g.job.api_calls.set_index("api_id")
        calls = api.reindex(act["api_id"].to_numpy(np.int64))
        has = calls["rank"].notna().to_numpy()
        call_chain = np.full(len(act), -1, np.int64)
        call_chain[has] = _cpu_chain_of(g, calls[has].astype({"rank": np.int64, "pid": np.int64, "tid": np.int64}))
        call_t = np.zeros(len(act), np.int64)
        call_t[has] = g.vertex_time(calls.loc[has, "start"].to_numpy(np.int64),
                                    calls.loc[has, "rank"].to_numpy(np.int64))
        in_range = _inside_spans(g, call_chain, call_t, chain, s, e)
        rows = np.flatnonzero(by_name | beneath | in_range)
        gpu = scale_activities(g, w, rows, factor)
        cpu = keep_cpu_spans(g, w, chain, s, e, factor)
        return (f"{len(rows)} GPU activities, {int(op_hit.sum())} op calls and {len(rg_hit)} ranges matching "
                f"/{pattern}/: {gpu} ns of GPU and {cpu} ns of CPU time removed")
    return apply


ASSUMES = {
    "no-dataloader": "the step never waits for its batch: CPU time inside data loading (DataLoader __next__ and "
                     "data-loading ranges) is removed; copies to the GPU stay; the workers' own CPU use is not "
                     "modelled",
    "amp": "eligible FP32 GEMM/convolution/attention kernels of Tensor-Core-eligible ops run at the FP16 Tensor "
           "Core / FP32 (or TF32) datasheet peak ratio of this GPU (an upper bound: kernels rarely reach peak); "
           "other kernels and the CPU are unchanged",
    "no-sync": "host synchronizations (device/stream/event synchronize, cudaFree, synchronous and pageable "
               "copies) no longer wait for the GPU and return after one launch call's time",
    "cuda-graphs": "in each iteration and thread, the run of op nodes from the first to the last that launches GPU "
                   "work, cut at synchronizations and data loading, is one CUDA graph: its CPU time (framework, "
                   "launch calls and the Python between them) becomes one launch call (an upper bound: whatever "
                   "else that Python did is removed too); GPU work, its order and the GPU's own gaps are "
                   "unchanged",
    "overlap-comm": "communication kernels overlap compute perfectly: nothing waits for them but the end of "
                    "the iteration and other collectives",
    "no-straggler": "the rank that arrives last at collectives runs its CPU and non-communication GPU work at "
                    "the median rank's pace",
    "scale": "kernels, ops and annotation ranges whose name matches PATTERN (and the GPU work launched inside "
             "those ops and ranges) take FACTOR times their measured time",
}


#: the expert rules whose finding a scenario prices: rule -> the scenario (a rule's own subset of it)
RULE_SCENARIOS = {"dataloader_bottleneck": "no-dataloader", "sync_api": "no-sync", "sync_memcpy": "no-sync",
                  "pageable_memcpy": "no-sync", "launch_bound": "cuda-graphs", "host_bound": "cuda-graphs",
                  "amp_not_enabled": "amp"}


def for_rule(rule: str) -> Scenario | None:
    """The scenario that prices an expert finding: what the rule's advice would change, and only that."""
    if rule in ("sync_memcpy", "pageable_memcpy"):
        return Scenario("no-sync (copies)", "synchronous and pageable copies (and the synchronize of the op that "
                        "made them) no longer block the host",
                        _no_sync_of("copy"))
    if rule == "sync_api":
        return Scenario("no-sync (synchronizations)", "synchronize calls no longer block the host",
                        _no_sync_of("sync"))
    return parse(RULE_SCENARIOS[rule]) if rule in RULE_SCENARIOS else None


def parse(text: str) -> Scenario:
    """A scenario from its command-line name."""
    name = text.strip()
    if name == "no-dataloader":
        return Scenario(name, ASSUMES[name], _no_dataloader)
    if name == "no-sync":
        return Scenario(name, ASSUMES[name], _no_sync)
    if name == "cuda-graphs":
        return Scenario(name, ASSUMES[name], _cuda_graphs)
    if name == "overlap-comm":
        return Scenario(name, ASSUMES[name], _overlap_comm)
    if name == "no-straggler":
        return Scenario(name, ASSUMES[name], _no_straggler)
    if name == "amp" or name.startswith("amp="):
        factor = _factor(name[4:], name) if "=" in name else None
        return Scenario(name, ASSUMES["amp"] if factor is None else
                        f"eligible FP32 GEMM/convolution/attention kernels take {factor:g} of their time", _amp(factor))
    if name.startswith("scale:") and "=" in name:
        pattern, _, value = name[len("scale:"):].rpartition("=")
        if not pattern:
            raise DlscopeError(f"{name}: give a name pattern, e.g. scale:conv=0.5")
        try:
            re.compile(pattern)
        except re.error as e:
            raise DlscopeError(f"{name}: bad pattern ({e})") from None
        return Scenario(name, ASSUMES["scale"].replace("PATTERN", f"/{pattern}/").replace("FACTOR", value),
                        _scale(pattern, _factor(value, name)))
    raise DlscopeError(f"unknown scenario '{name}'; known: {', '.join(NAMES)} (amp=FACTOR for a given speed-up)")


def _factor(text: str, name: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise DlscopeError(f"{name}: the factor must be a number (a duration multiplier, 0.5 = twice as "
                           f"fast)") from None
    if not np.isfinite(value) or value < 0:
        raise DlscopeError(f"{name}: the factor must be >= 0 (a duration multiplier)")
    return value
