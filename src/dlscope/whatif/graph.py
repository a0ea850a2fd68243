"""The dependency graph of a job's iterations, built so that replaying it unchanged gives the measured times.

Vertices are instants: the start and end of every op, CUDA API call and GPU activity (kernel, memcpy,
memset), the start and CPU end of every iteration, and one barrier per cross-rank collective. They lie on
*chains*: each CPU thread and each GPU stream is a chain whose consecutive vertices are joined by a chain
edge. *Cross edges* join chains:

- launch: a launch call's start -> its GPU activity's start (correlation id);
- sync: the GPU activity a blocking call waited for -> the call's end (device/stream/event synchronize,
  cudaFree, synchronous and pageable copies);
- thread handoff: one thread going idle -> another resuming (the autograd thread starting when the main
  thread calls backward, the main thread resuming when it finishes);
- stream wait: an activity on another stream of the device that ended just before an activity started
  later than its own stream and launch allow (what cudaStreamWaitEvent does; inferred from the times);
- collective: every rank's start of a collective -> its barrier (the last arrival) -> each rank's end.

A vertex happens at the latest of (predecessor + edge weight) over its incoming edges. Weights are the
*intrinsic* costs measured in the trace: CPU work between two instants of a thread, GPU durations, and for
edges that wait (launch latency, the gap between queued kernels) the typical latency of this GPU, never the
time spent waiting. Whatever a vertex waited beyond its constraints (the residual) is added to its binding
edge, so every vertex has a tight incoming edge and the unchanged replay equals the measured times exactly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..analyze.categories import graph_launch_ids, matches
from ..analyze.intervals import merge
from ..distributed.figures import collective_type, is_nccl_kernel
from .job import Job

# vertex kinds
OP_START, OP_END, API_START, API_END, RANGE_START, RANGE_END, IT_START, IT_END, GPU_START, GPU_END, BARRIER = \
    range(11)

#: by vertex kind (looked up per vertex, not searched): a start, an iteration mark, a range's, a busy start
_IS_START = np.isin(np.arange(11), [OP_START, API_START, RANGE_START])
_IS_MARK = np.isin(np.arange(11), [IT_START, IT_END])
_IS_RANGE = np.isin(np.arange(11), [RANGE_START, RANGE_END])
_IS_BUSY = np.isin(np.arange(11), [OP_START, API_START])
_IS_CALL = np.isin(np.arange(11), [API_START, API_END])
_IS_STATE = np.isin(np.arange(11), [OP_START, OP_END, API_START, API_END])  # a thread's op or call changes

#: what the time of an edge on the critical path is (chain edges by their vertex, cross edges by kind)
CATEGORIES = ("cpu_op", "cpu_other", "dataloader", "cuda_api", "sync", "kernel", "memcpy", "memset",
              "communication", "launch", "gpu_gap", "thread_wait", "stream_wait", "before_trace")
CAT = {name: i for i, name in enumerate(CATEGORIES)}

# cross edge kinds (BYPASS: stream order around communication, used only when it overlaps)
LAUNCH, SYNC, HANDOFF, STREAM_WAIT, ARRIVE, COLLECTIVE, BYPASS = range(7)
CROSS_CATEGORY = np.array([CAT["launch"], CAT["sync"], CAT["thread_wait"], CAT["stream_wait"], CAT["communication"],
                           CAT["communication"], CAT["gpu_gap"]], np.int8)

#: calls that block the host until GPU work finishes (CUDA's "API synchronization behavior")
SYNC_CALL = re.compile(r"^(cuda|cu|hip)(Device|Stream|Event|Ctx|Thread)Synchronize|^(cudaFree|cuMemFree|hipFree)"
                       r"(_v\d+)?$")
#: copy and memset calls that return only when done (the non-Async forms)
SYNC_COPY = re.compile(r"^(cuda|hip)Mem(cpy|set)([23]D)?(ToSymbol|FromSymbol|Peer)?(_v\d+)?$|"
                       r"^cuMemcpy([HD]to[HD]|Peer)?(_v\d+)?$|^cuMemsetD(8|16|32)(_v\d+)?$")

#: a thread idle this long before resuming (or after stopping) may be waiting for another thread
HANDOFF_MIN_GAP_NS = 100_000
#: ...when the other thread stopped (or resumed) at most this long before
HANDOFF_MAX_LATENCY_NS = 2_000_000
#: an activity that started this much later than its own stream and launch allow, right after an activity on
#: another stream ended, waited for that one
STREAM_WAIT_MAX_LATENCY_NS = 20_000


@dataclass(frozen=True)
class Sparse:
    """A column per vertex that is zero nearly everywhere (the residual waits), kept as its nonzero positions
    (sorted) and values: read like the dense array, ``column[vertices]``."""

    at: np.ndarray
    values: np.ndarray
    size: int

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, vertices: np.ndarray) -> np.ndarray:
        vertices = np.asarray(vertices)
        if not len(self.at):
            return np.zeros(vertices.shape, self.values.dtype)
        pos = np.minimum(np.searchsorted(self.at, vertices), len(self.at) - 1)
        return np.where(self.at[pos] == vertices, self.values[pos], 0)

    def dense(self) -> np.ndarray:
        out = np.zeros(self.size, self.values.dtype)
        out[self.at] = self.values
        return out


@dataclass
class Graph:
    """The job's dependency graph. Vertices of a chain are contiguous and in time order; CPU chains come
    before GPU chains (the replay sweeps threads, then streams). Times are relative to ``t0`` on the
    aligned clock (each rank's clock shifted by ``offsets[rank]`` so collectives end together)."""

    t: np.ndarray              # measured vertex times (int64, relative)
    first: np.ndarray          # first vertex of its chain (chains are numbered in vertex order: see ``chain``)
    kind: np.ndarray           # vertex kind (OP_START ...)
    rank: np.ndarray
    wc: np.ndarray             # weight of the chain edge into each vertex (0 for the first of a chain)
    cat: np.ndarray            # category of the chain edge into each vertex
    owner: np.ndarray          # op_id the chain edge's time belongs to (-1: none)
    act: np.ndarray            # activity row of GPU vertices (-1 elsewhere)
    src: np.ndarray            # cross edges, sorted by dst
    dst: np.ndarray
    wx: np.ndarray
    xkind: np.ndarray
    xowner: np.ndarray         # op_id a cross edge's time belongs to
    xoff: np.ndarray           # cross edges off unless a scenario turns them on (BYPASS)
    rc: Sparse                 # the part of each chain weight that is unexplained waiting (the residual)
    rx: np.ndarray             # the same for cross edges
    n_cpu: int                 # vertices [0, n_cpu) are on CPU chains
    t0: int
    offsets: dict[int, int]
    activities: pd.DataFrame   # kernels and memops: table ('kernel'/'memop'), id, name, rank, device, stream,
    #                            start, end (effective), op_id, root_op_id, iteration, is_comm, start_v, end_v
    chains: pd.DataFrame       # chain, rank, pid, tid, device, stream, is_gpu
    iterations: pd.DataFrame   # the job's iterations with start_v, cpu_end_v
    blocking: pd.DataFrame     # blocking calls: api_id, how ('sync'/'copy'), end_v, waited_v, waited_comm
    op_end_v: np.ndarray       # end vertex of each op, indexed by op_id (the last slot: none)
    job: Job
    notes: list[str] = field(default_factory=list)
    launch_latency: dict = field(default_factory=dict)   # (rank, device) -> ns
    queue_gap: dict = field(default_factory=dict)        # (rank, device) -> ns
    #: what scenarios derive from the graph alone (spans, shares, candidates), found once per graph: a job's
    #: findings apply the same scenarios again in each rank's combination
    memo: dict = field(default_factory=dict)
    #: the activities' distinct names; ``activities["name_code"]`` indexes them (-1: no name)
    activity_names: np.ndarray = field(default_factory=lambda: np.zeros(0, object))

    def memoized(self, key, make):
        """``make()``, computed once per graph for ``key``."""
        if key not in self.memo:
            self.memo[key] = make()
        return self.memo[key]

    def name_codes(self, rows: np.ndarray | None = None, na_sentinel: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """``pd.factorize`` of the activities' names (of ``rows``): codes in order of first appearance and the
        names, found from the integer name codes (no string hashed per row)."""
        code = self.activities["name_code"].to_numpy(np.int64)
        code = code if rows is None else code[rows]
        if (code < 0).any():  # a missing name: factorize the text itself, as pandas treats missing values
            names = self.activities["name"] if rows is None else self.activities["name"].iloc[rows]
            found, distinct = pd.factorize(names, use_na_sentinel=na_sentinel)
            return np.asarray(found, np.int64), np.asarray(distinct, object)
        found, first = pd.factorize(code)
        return np.asarray(found, np.int64), self.activity_names[first]

    @property
    def n(self) -> int:
        return len(self.t)

    @property
    def chain(self) -> np.ndarray:
        """Chain of each vertex: derived from ``first`` when a scenario asks (every chain has vertices, numbered
        in vertex order), not kept beside it (an array per vertex fewer at the replay's peak)."""
        chain = np.cumsum(self.first, dtype=fitting(self.n))
        chain -= 1
        return chain

    def vertex_time(self, absolute_ns: np.ndarray, rank: np.ndarray) -> np.ndarray:
        """Absolute trace times of ``rank`` on this graph's relative, aligned clock."""
        off = pd.Series(self.offsets).reindex(np.asarray(rank)).fillna(0).to_numpy(np.int64)
        return np.asarray(absolute_ns, np.int64) - off - self.t0

    def absolute(self, t: np.ndarray, rank: int) -> np.ndarray:
        return np.asarray(t, np.int64) + self.t0 + self.offsets.get(rank, 0)


# ----------------------------------------------------------------------------------------------- helpers


def fitting(largest: int) -> np.dtype:
    """int32 for indexes and ids up to ``largest``, when they fit (half the memory of int64), else int64."""
    return np.dtype(np.int32 if int(largest) < 2 ** 31 - 1 else np.int64)


def _small(largest: int) -> np.dtype:
    """int16 for small numbers (ranks: -1 up to ``largest``) when they fit, else as :func:`fitting`."""
    return np.dtype(np.int16) if int(largest) < 2 ** 15 - 1 else fitting(largest)


def _narrowed(values: np.ndarray) -> np.ndarray:
    """``values`` (indexes or ids, >= -1) as int32 when they fit."""
    return values.astype(fitting(int(values.max()) if len(values) else 0), copy=False)


def _latest_defined(defined: np.ndarray) -> np.ndarray:
    """Each position's latest defined position at or before it (``defined`` must hold at every chain's first
    vertex): ``values[_latest_defined(defined)]`` carries each defined value forward."""
    idx = np.where(defined, np.arange(len(defined), dtype=fitting(len(defined))), 0)
    return np.maximum.accumulate(idx, out=idx)


def op_flags(ops: pd.DataFrame, own: np.ndarray) -> np.ndarray:
    """Per op row: it or an enclosing op has the flag (propagated down the op tree level by level)."""
    flag = np.asarray(own, bool).copy()
    if not flag.any():  # nothing to hand down (e.g. no data-loading op)
        return flag
    pos = positions(ops["op_id"].to_numpy(np.int64))
    parent = ops["parent_id"].to_numpy(np.int64)
    depth = ops["depth"].to_numpy(np.int64)
    for d in np.unique(depth[depth > 0]):
        rows = np.flatnonzero((depth == d) & (parent >= 0))
        prow = pos[parent[rows]]
        ok = prow >= 0
        flag[rows[ok]] |= flag[prow[ok]]
    return flag


def positions(ids: np.ndarray) -> np.ndarray:
    """An array indexed by id giving the row holding it (-1 where no row does); ids are unique, >= -1."""
    ids = np.asarray(ids, np.int64)
    out = np.full(int(ids.max()) + 2 if len(ids) else 1, -1, fitting(len(ids)))  # (rows: int32 where they fit)
    ok = ids >= 0
    out[ids[ok]] = np.flatnonzero(ok)
    out[-1] = -1  # id -1 looks up "none"
    return out


def row_codes(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(code of each row, the distinct rows in sorted order) of an integer matrix: what ``pd.factorize`` of a
    MultiIndex with ``sort=True`` gives, without building a tuple per row (a third of the graph's build).
    Rows are numbered in mixed radix (each column less its minimum, by the spans of the columns after it), which
    keeps their order: where those numbers are few, the distinct ones are marked in a table (no hash, no sort);
    else hashed, and only the distinct ones sorted."""
    keys = np.asarray(keys, np.int64)
    if not len(keys):
        return np.zeros(0, np.int64), keys
    lows = keys.min(axis=0)
    spans = [int(hi) - int(lo) + 1 for lo, hi in zip(lows.tolist(), keys.max(axis=0).tolist())]
    size = 1
    for span in spans:
        size *= span
    if size >= 2 ** 62:
        return _hashed_row_codes(keys)
    combined = keys[:, 0] - lows[0]
    for j in range(1, keys.shape[1]):
        combined *= np.int64(spans[j])
        combined += keys[:, j]
        combined -= lows[j]
    if size <= 4 * len(keys) + 1024:
        seen = np.zeros(size, bool)
        seen[combined] = True
        rank = np.cumsum(seen, dtype=np.int64)
        rank -= 1
        code, distinct = rank[combined], np.flatnonzero(seen)
    else:
        found, distinct = pd.factorize(combined)
        order = np.argsort(distinct)
        rank = np.empty(len(distinct), np.int64)
        rank[order] = np.arange(len(distinct))
        code, distinct = rank[found], distinct[order]
    rows = np.empty((len(distinct), keys.shape[1]), np.int64)
    for j in range(keys.shape[1] - 1, -1, -1):
        distinct, rows[:, j] = np.divmod(distinct, np.int64(spans[j]))
        rows[:, j] += lows[j]
    return code, rows


def _hashed_row_codes(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`row_codes` of columns whose spans multiply past an int64: each column's values hashed to codes."""
    combined = np.zeros(len(keys), np.int64)
    size = 1
    for j in range(keys.shape[1]):
        code, distinct = pd.factorize(keys[:, j])
        size *= len(distinct)
        if size >= 2 ** 62:  # too many combinations for one integer: sort the rows
            return _sorted_row_codes(keys)
        combined = combined * len(distinct) + code
    code, distinct = pd.factorize(combined)
    first = np.empty(len(distinct), np.int64)
    first[code] = np.arange(len(keys))   # a row holding each distinct combination
    rows = keys[first]
    order = np.lexsort(rows.T[::-1])
    rank = np.empty(len(rows), np.int64)
    rank[order] = np.arange(len(rows))
    return rank[code], rows[order]


def _sorted_row_codes(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.lexsort(keys.T[::-1])
    ranked = keys[order]
    new = np.r_[True, (ranked[1:] != ranked[:-1]).any(axis=1)]
    codes = np.empty(len(keys), np.int64)
    codes[order] = np.cumsum(new) - 1
    return codes, ranked[new]


def _lexsort_pairs(major: np.ndarray, time: np.ndarray, minor: np.ndarray, sub: np.ndarray) -> np.ndarray:
    """``np.lexsort((sub, minor, time, major))`` (major, minor: small non-negative codes), with each pair of keys
    packed into one integer when its span allows (two sorts instead of four)."""
    def packed(code: np.ndarray, value: np.ndarray) -> np.ndarray | None:
        if not len(value):
            return value
        lo, span = int(value.min()), int(value.max()) - int(value.min()) + 1
        if (int(code.max()) + 1) * span >= 2 ** 62:
            return None
        out = np.subtract(value, lo, dtype=np.int64)  # (two arrays made, not four)
        out += np.multiply(code, np.int64(span), dtype=np.int64)
        return out
    first, second = packed(major, time), packed(minor, sub)
    if first is None or second is None:
        return np.lexsort((sub, minor, time, major))
    # the first key alone orders nearly all rows (nearly sorted already: one fast stable sort); only the runs
    # it ties are ordered by the second key
    idx = np.argsort(first, kind="stable")
    f = first[idx]
    tie = f[1:] == f[:-1]
    if tie.any():
        at = np.flatnonzero(np.r_[tie, False] | np.r_[False, tie])
        rows = idx[at]   # in row order within each tie (the sort is stable)
        idx[at] = rows[np.lexsort((second[rows], f[at]))]
    return idx


def _member(values: np.ndarray, few: np.ndarray) -> np.ndarray:
    """``np.isin(values, few)`` of integers, ``few`` a short list: each value searched among them sorted (``isin``
    compares every value with each of a few dozen in turn: 11 ms for the ops' starts against 51 iterations')."""
    few = np.unique(few)
    if not len(few):
        return np.zeros(len(values), bool)
    at = np.searchsorted(few, values)
    np.minimum(at, len(few) - 1, out=at)
    return few[at] == values


def _text_codes(column: pd.Series) -> tuple[np.ndarray, pd.Index]:
    """(code of each row, -1 where missing; the distinct texts) of a text column, categorical or not."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        return column.cat.codes.to_numpy(np.int64), pd.Index(column.cat.categories, dtype=object)
    code, distinct = pd.factorize(column)
    return np.asarray(code, np.int64), pd.Index(np.asarray(distinct, object), dtype=object)


def _repeated(text: str, index: pd.Index) -> pd.Series:
    """``text`` on every row of ``index``, as a string column (one Arrow value taken, not a string per row)."""
    return pd.Series(pd.array([text], dtype="str").take(np.zeros(len(index), np.int64)), index=index)


def _pair_values(keys: np.ndarray, values: dict) -> np.ndarray:
    """``values[(a, b)]`` for each row (a, b) of ``keys``, looked up once per distinct pair."""
    codes, uniques = row_codes(keys)
    return np.array([values[(int(a), int(b))] for a, b in uniques], np.int64)[codes] if len(codes) else codes


# ----------------------------------------------------------------------------------------- clock alignment


def _collectives(job: Job, nccl: np.ndarray) -> pd.DataFrame:
    """NCCL kernels (``nccl``: which of the job's kernels are) matched across ranks by type and occurrence
    (only when every rank of the job is here)."""
    k = job.kernels
    rows = k[nccl][["kernel_id", "rank", "start", "end", "name"]].copy()
    ranks = job.ranks
    worlds = {job.world_sizes.get(r, 1) for r in ranks}
    if rows.empty or len(ranks) < 2 or worlds != {len(ranks)}:
        return rows.iloc[0:0].assign(collective="", call_index=0)
    rows["collective"] = rows["name"].map(collective_type)
    rows = rows.sort_values(["rank", "start"], kind="stable")
    rows["call_index"] = rows.groupby(["rank", "collective"]).cumcount()
    counts = rows.groupby(["collective", "rank"]).size().unstack(fill_value=0)
    complete = counts.index[(counts.min(axis=1) == counts.max(axis=1)) & (counts.shape[1] == len(ranks))]
    return rows[rows["collective"].isin(complete)].reset_index(drop=True)


def _offsets(job: Job, coll: pd.DataFrame) -> dict[int, int]:
    """Per rank, its clock minus the first rank's: the median difference of the ends of the same collectives
    (a collective ends at about the same moment everywhere); 0 without collectives."""
    offsets = {r: 0 for r in job.ranks}
    if coll.empty:
        return offsets
    # every rank has every matched collective once: a matrix of ends, one row per collective call, one column
    # per rank (in rank order); the first rank is the reference
    rank = coll["rank"].to_numpy(np.int64)
    ranks = np.unique(rank)
    call = row_codes(np.column_stack([pd.factorize(coll["collective"])[0], coll["call_index"].to_numpy(np.int64)]))[0]
    at = (call, np.searchsorted(ranks, rank))
    ends = np.zeros((int(call.max()) + 1, len(ranks)), np.int64)
    ends[at] = coll["end"].to_numpy(np.int64)
    have = np.zeros(ends.shape, bool)
    have[at] = True
    for j, r in enumerate(ranks.tolist()):
        diff = (ends[:, j] - ends[:, 0]).astype(np.float64)  # differences of integers, exact
        diff[~(have[:, j] & have[:, 0])] = np.nan
        offsets[int(r)] = int(np.round(np.nanmedian(diff)))
    return offsets


# ----------------------------------------------------------------------------------------------- building


def build(job: Job) -> Graph:
    """The dependency graph of every iteration of every rank in ``job``."""
    nccl = is_nccl_kernel(job.kernels["name"]) if len(job.kernels) else np.zeros(0, bool)
    coll = _collectives(job, nccl)
    offsets = _offsets(job, coll)
    return _Builder(job, coll, offsets, nccl).graph()


class _Builder:
    def __init__(self, job: Job, coll: pd.DataFrame, offsets: dict[int, int], nccl: np.ndarray):
        self.job, self.coll, self.offsets, self.nccl = job, coll, offsets, nccl
        self.notes: list[str] = []

    def _aligned(self, frame: pd.DataFrame, col: str) -> np.ndarray:
        return frame[col].to_numpy(np.int64) - self._rank_offsets(frame)

    def _rank_offsets(self, frame: pd.DataFrame) -> np.ndarray | int:
        """Each row's clock offset (0 for all when no rank is shifted: a single trace)."""
        if not any(self.offsets.values()):
            return 0
        return frame["rank"].map(self.offsets).fillna(0).to_numpy(np.int64)

    # ---------------------------------------------------------------- CPU points

    def _iteration_threads(self, coded: tuple[np.ndarray, np.ndarray] | None = None) -> pd.DataFrame:
        """Each iteration with the thread its start lies on (an op or range starting there, else the rank's
        busiest thread). ``coded``: as for :meth:`_busiest_threads`."""
        job = self.job
        its = job.iterations.sort_values(["rank", "start"], kind="stable").reset_index(drop=True)
        # the first op or range starting at each iteration's start (only those starting at some iteration's
        # start can be it)
        starts = its["start"].to_numpy(np.int64)
        cols = ["rank", "pid", "tid", "start"]
        cpu_rg = job.ranges[job.ranges["device"] < 0]
        cpu = pd.concat([frame.loc[_member(frame["start"].to_numpy(np.int64), starts), cols]
                         for frame in (job.ops, cpu_rg)], ignore_index=True).drop_duplicates(["rank", "start"])
        hit = its[["rank", "start"]].merge(cpu, on=["rank", "start"], how="left")
        busiest = self._busiest_threads(coded)
        for col in ("pid", "tid"):
            fallback = its["rank"].map(busiest[col]) if len(busiest) else pd.Series(-1, index=its.index)
            its[col] = hit[col].fillna(fallback).fillna(-1).to_numpy(np.int64)
        return its

    def _busiest_threads(self, coded: tuple[np.ndarray, np.ndarray] | None = None) -> pd.DataFrame:
        """Per rank (index), the thread (pid, tid) with the most ops and API calls; ties: the first seen.
        ``coded``: the ops' then the calls' threads as :func:`row_codes` of a matrix that may hold more threads
        (the CPU points code them once for both)."""
        job = self.job
        if coded is None:
            keys = np.vstack([job.ops[["rank", "pid", "tid"]].to_numpy(np.int64),
                              job.api_calls[["rank", "pid", "tid"]].to_numpy(np.int64)])
            coded = row_codes(keys) if len(keys) else (np.zeros(0, np.int64), keys)
        code, rows = coded
        if not len(code):
            return pd.DataFrame(columns=["pid", "tid"], index=pd.Index([], name="rank"))
        count = np.bincount(code, minlength=len(rows))
        seen = pd.factorize(code)[1]            # the threads in order of first appearance
        first = np.zeros(len(rows), np.int64)
        first[seen] = np.arange(len(seen))
        has = np.flatnonzero(count > 0)  # (threads of neither: not candidates)
        rows, count, first = rows[has], count[has], first[has]
        order = np.lexsort((first, -count, rows[:, 0]))
        top = order[np.r_[True, rows[order[1:], 0] != rows[order[:-1], 0]]]
        return pd.DataFrame({"pid": rows[top, 1], "tid": rows[top, 2]}, index=pd.Index(rows[top, 0], name="rank"))

    def _cpu_points(self) -> dict[str, np.ndarray]:
        """Every CPU instant (start and end of ops, API calls, step and data-loading ranges, iterations), in
        chain then time order: columns rank, pid, tid, time, kind, ref, other (the item's other end), chain."""
        job = self.job
        ops, api = job.ops, job.api_calls
        rg = job.ranges[(job.ranges["device"] < 0) & job.ranges["category"].isin(["step", "dataloader"])]
        parts: dict[str, list] = {c: [] for c in ("thread", "time", "kind", "ref", "other")}
        threads: list[np.ndarray] = []  # each item's (rank, pid, tid): its start and end lie on the same thread

        def add(frame, time, kind, ref, other):
            parts["thread"].append(len(threads) - 1)
            parts["time"].append(np.asarray(time, np.int64))
            parts["kind"].append(np.full(len(frame), kind, np.int8))
            parts["ref"].append(np.asarray(ref, np.int64))
            parts["other"].append(np.asarray(other, np.int64))

        for frame, start_kind, end_kind, ref in ((ops, OP_START, OP_END, ops["op_id"]),
                                                 (api, API_START, API_END, api["api_id"]),
                                                 (rg, RANGE_START, RANGE_END, rg["range_id"])):
            threads.append(frame[["rank", "pid", "tid"]].to_numpy(np.int64))
            off = self._rank_offsets(frame)
            s = frame["start"].to_numpy(np.int64) - off
            e = np.maximum(frame["end"].to_numpy(np.int64) - off, s)
            add(frame, s, start_kind, ref, e)
            add(frame, e, end_kind, ref, s)
        # the threads of ops, calls and ranges coded once (each rank's busiest thread is found from them), then
        # the iterations' among their distinct ones: what coding all of them together gives
        head_code, head_rows = row_codes(np.vstack(threads))
        its = self._iteration_threads((head_code[:len(threads[0]) + len(threads[1])], head_rows))
        self.its = its
        threads.append(its[["rank", "pid", "tid"]].to_numpy(np.int64))
        both, uniques = row_codes(np.vstack([head_rows, threads[-1]]))
        item_codes = np.r_[both[:len(head_rows)][head_code], both[len(head_rows):]]
        off = self._rank_offsets(its)
        s = its["start"].to_numpy(np.int64) - off
        add(its, s, IT_START, np.arange(len(its)), s)
        add(its, np.maximum(its["cpu_end"].to_numpy(np.int64) - off, s), IT_END, np.arange(len(its)), s)
        # threads coded once per item, not once per point
        item_at = np.cumsum([0] + [len(x) for x in threads])
        codes = np.concatenate([item_codes[item_at[i]:item_at[i + 1]] for i in parts.pop("thread")])
        # each column joined, its pieces let go at once (``add`` holds ``parts``: emptied, not deleted)
        pts = {c: np.concatenate(parts.pop(c)) for c in list(parts)}
        # same instant: ends of earlier items (inner first), marks, starts (outer first), ends of empty items
        kind, time, other = pts["kind"], pts["time"], pts["other"]
        order = np.equal(time, other).view(np.int8) * np.int8(3)  # (kinds looked up in a table, not searched)
        order[_IS_START[kind]] = 2
        order[_IS_MARK[kind]] = 1
        pts["chain"] = codes
        np.negative(other, out=other)  # (the last key descending: negated in place for the sort, then back)
        idx = _lexsort_pairs(codes, time, order, other)
        np.negative(other, out=other)
        pts = {c: v[idx] for c, v in pts.items()}
        pts["rank"] = uniques[pts["chain"], 0] if len(uniques) else np.zeros(0, np.int64)
        self.cpu_chains = pd.DataFrame(list(uniques), columns=["rank", "pid", "tid"]) if len(uniques) else \
            pd.DataFrame(columns=["rank", "pid", "tid"])
        return pts

    # ---------------------------------------------------------------- GPU activities

    def _activities(self) -> pd.DataFrame:
        job = self.job
        k, m = job.kernels, job.memops
        # string columns stay Arrow arrays (a Python string per row made again costs a third of this step)
        frames = [pd.DataFrame({"table": _repeated("kernel", k.index), "id": k["kernel_id"].to_numpy(np.int64),
                                "name": k["name"], "kind": _repeated("kernel", k.index), "rank": k["rank"],
                                "device": k["device"], "stream": k["stream"],
                                "start": self._aligned(k, "start"), "end": self._aligned(k, "end"),
                                "api_id": k["api_id"], "launch": self._aligned(k, "launch_ts"),
                                "op_id": k["op_id"], "root_op_id": k["root_op_id"], "iteration": k["iteration"],
                                "is_comm": self.nccl,
                                "pageable": False}),
                  pd.DataFrame({"table": _repeated("memop", m.index), "id": m["memop_id"].to_numpy(np.int64),
                                "name": m["name"], "kind": m["kind"],
                                "rank": m["rank"], "device": m["device"],
                                "stream": m["stream"], "start": self._aligned(m, "start"),
                                "end": self._aligned(m, "end"), "api_id": m["api_id"],
                                "launch": self._aligned(m, "launch_ts"), "op_id": m["op_id"],
                                "root_op_id": m["root_op_id"], "iteration": m["iteration"], "is_comm": False,
                                "pageable": ((m["src_mem"] == "pageable") | (m["dst_mem"] == "pageable")).to_numpy()})]
        act = pd.concat(frames, ignore_index=True)
        # names as integer codes into one list of distinct names (the tables' categories, joined)
        (ck, nk), (cm, nm) = _text_codes(k["name"]), _text_codes(m["name"])
        joined, words = pd.factorize(nk.append(nm))
        lookup = np.r_[np.asarray(joined, np.int64), -1]
        act["name_code"] = np.r_[lookup[np.where(ck >= 0, ck, len(joined))],
                                 lookup[np.where(cm >= 0, len(nk) + cm, len(joined))]]
        self.activity_names = np.asarray(words, object)
        act["launch"] = np.where(act["api_id"].to_numpy() >= 0, act["launch"].to_numpy(), act["start"].to_numpy())
        order = np.lexsort([act[c].to_numpy(np.int64) for c in ("end", "start", "stream", "device", "rank")])
        act = act.take(order).reset_index(drop=True)   # by (rank, device, stream, start, end), stably
        # one stream runs one activity at a time: overlaps from clock rounding are serialised
        codes, uniques = row_codes(act[["rank", "device", "stream"]].to_numpy(np.int64))
        act["chain_local"] = codes
        s, e = act["start"].to_numpy(np.int64), act["end"].to_numpy(np.int64)
        e = np.maximum(e, s)
        firsts = np.r_[True, codes[1:] != codes[:-1]] if len(codes) else np.zeros(0, bool)
        run = _segment_cummax(e, firsts)
        prev = np.r_[np.iinfo(np.int64).min, run[:-1]] if len(run) else run
        prev[firsts] = np.iinfo(np.int64).min
        act["start"] = np.maximum(s, prev)
        act["end"] = np.maximum(e, act["start"].to_numpy())
        self.gpu_chains = pd.DataFrame(list(uniques), columns=["rank", "device", "stream"]) if len(uniques) else \
            pd.DataFrame(columns=["rank", "device", "stream"])
        return act

    # ---------------------------------------------------------------- assembly

    def graph(self) -> Graph:
        job = self.job
        pts = self._cpu_points()
        act = self._activities()
        ncpu = len(pts["time"])
        nact = len(act)
        coll_rows = self._collective_rows(act)
        nbar = len(coll_rows[1]) if coll_rows is not None else 0
        n = ncpu + 2 * nact + nbar
        t = np.empty(n, np.int64)
        kind = np.empty(n, np.int8)
        # indexes and ids as int32 where they fit (times stay int64): a few arrays per vertex, kept by the replay
        index = fitting(n)
        ref = np.full(n, -1, fitting(max(int(pts["ref"].max()) if ncpu else 0, nact, nbar)))
        rank = np.empty(n, _small(max(self.job.ranks, default=0)))
        chain = np.empty(n, index)
        actv = np.full(n, -1, index)
        # CPU
        t[:ncpu] = pts.pop("time")  # (the times are the vertex times now: not kept twice)
        kind[:ncpu] = pts["kind"]
        ref[:ncpu] = pts["ref"]
        rank[:ncpu] = pts.pop("rank")  # (the other columns are read again below)
        chain[:ncpu] = pts["chain"]
        # the points read again below: views of the vertex arrays, not copies beside them
        pts["kind"], pts["ref"], pts["chain"] = kind[:ncpu], ref[:ncpu], chain[:ncpu]
        n_cpu_chains = len(self.cpu_chains)
        # GPU: start, end per activity
        g = slice(ncpu, ncpu + 2 * nact)
        t[g] = np.column_stack([act["start"].to_numpy(np.int64), act["end"].to_numpy(np.int64)]).ravel()
        kind[g] = np.tile(np.array([GPU_START, GPU_END], np.int8), nact)
        actv[g] = np.repeat(np.arange(nact), 2)
        ref[g] = actv[g]
        rank[g] = np.repeat(act["rank"].to_numpy(np.int64), 2)
        chain[g] = n_cpu_chains + np.repeat(act["chain_local"].to_numpy(np.int64), 2)
        act["start_v"] = ncpu + 2 * np.arange(nact)
        act["end_v"] = act["start_v"] + 1
        # barriers: one chain each
        n_gpu_chains = len(self.gpu_chains)
        if nbar:
            inst = coll_rows[1]
            b = slice(ncpu + 2 * nact, n)
            t[b] = inst["arrival"].to_numpy(np.int64)
            kind[b] = BARRIER
            ref[b] = np.arange(nbar)
            rank[b] = -1
            chain[b] = n_cpu_chains + n_gpu_chains + np.arange(nbar)
        t0 = int(t.min()) if n else 0
        t -= t0
        pts["other"] -= t0  # (in place) on the vertex times' relative clock, as the handoffs read them
        first = np.r_[True, chain[1:] != chain[:-1]] if n else np.zeros(0, bool)
        del chain  # (the graph derives it from ``first``; the CPU points' view holds it until they are let go)

        chains = pd.concat([self.cpu_chains.assign(device=-1, stream=-1, is_gpu=False),
                            self.gpu_chains.assign(pid=-1, tid=-1, is_gpu=True),
                            pd.DataFrame({"rank": np.full(nbar, -1), "pid": -1, "tid": -1, "device": -1, "stream": -1,
                                          "is_gpu": True})], ignore_index=True)
        chains["chain"] = np.arange(len(chains))

        # lookups: op, api and iteration rows to vertices
        size = int(job.api_calls["api_id"].max()) + 2 if len(job.api_calls) else 1
        api_start_v = np.full(size, -1, np.int64)   # indexed by api_id (-1 -> the last slot, none)
        api_end_v = np.full(size, -1, np.int64)
        kind_cpu, ref_cpu = kind[:ncpu], ref[:ncpu]
        for k_, arr in ((API_START, api_start_v), (API_END, api_end_v)):
            at = np.flatnonzero(kind_cpu == k_)
            arr[ref_cpu[at]] = at
        self.api_start_v, self.api_end_v = api_start_v, api_end_v
        op_end_v = np.full(int(job.ops["op_id"].max()) + 2 if len(job.ops) else 1, -1, index)
        at = np.flatnonzero(kind_cpu == OP_END)
        op_end_v[ref_cpu[at]] = at
        its = self.its
        its["start_v"] = -1
        its["cpu_end_v"] = -1
        at = np.flatnonzero(kind_cpu == IT_START)
        its.loc[ref_cpu[at], "start_v"] = at
        at = np.flatnonzero(kind_cpu == IT_END)
        its.loc[ref_cpu[at], "cpu_end_v"] = at
        del at

        # chain edges: CPU work as measured, GPU durations; attribution of each edge
        wc = np.zeros(n, np.int64)
        wc[1:] = t[1:] - t[:-1]
        wc[first] = 0
        cat, owner = self._cpu_attribution(pts, ncpu, n, int(act["op_id"].max()) if nact else 0)
        gk = act["kind"].to_numpy(object)
        run_cat = np.where(act["is_comm"].to_numpy(bool), CAT["communication"],
                           np.where(gk == "memcpy", CAT["memcpy"], np.where(gk == "memset", CAT["memset"],
                                                                            CAT["kernel"])))
        cat[g] = np.column_stack([np.full(nact, CAT["gpu_gap"]), run_cat]).ravel()
        owner[g] = np.repeat(act["op_id"].to_numpy(np.int64), 2)
        if nbar:
            cat[ncpu + 2 * nact:] = CAT["communication"]

        self.t, self.first, self.act, self.kind = t, first, act, kind
        self.ncpu, self.rank = ncpu, rank
        edges = [self._launch_edges(), self._sync_edges(wc), self._handoff_edges(pts, wc)]
        del pts, kind_cpu, ref_cpu  # the CPU points are in the vertex arrays now
        if nbar:
            edges.append(self._collective_edges(coll_rows, wc))
        src, dst, w, xk, xo = (np.concatenate([e[i] for e in edges]) for i in range(5))
        self._gpu_latencies(wc, src, dst, w, xk)
        src, dst, w, xk, xo = self._stream_waits(wc, src, dst, w, xk, xo)
        wc, w = self._residuals(wc, src, dst, w)
        bypass = self._bypass_edges()
        xoff = np.r_[np.zeros(len(src), bool), np.ones(len(bypass[0]), bool)]
        rx = np.r_[self.rx, np.zeros(len(bypass[0]), np.int64)]
        src, dst, w, xk, xo = (np.concatenate([a, b]) for a, b in zip((src, dst, w, xk, xo), bypass))
        order = np.argsort(dst, kind="stable")
        src, dst, w, xk, xo, xoff, rx = (src[order], dst[order], w[order], xk[order], xo[order], xoff[order],
                                         rx[order])
        src, dst = _narrowed(src), _narrowed(dst)
        owner, xo = _narrowed(owner), _narrowed(xo)
        return Graph(t=t, first=first, kind=kind, rank=rank, wc=wc, cat=cat, owner=owner,
                     act=actv, src=src, dst=dst, wx=w, xkind=xk, xowner=xo, xoff=xoff, rc=self.rc, rx=rx,
                     n_cpu=ncpu, t0=t0,
                     offsets=self.offsets, activities=act, chains=chains, iterations=its, blocking=self.blocking,
                     op_end_v=op_end_v, job=job, notes=self.notes, launch_latency=self.launch_latency,
                     queue_gap=self.queue_gap, activity_names=self.activity_names)

    # ---------------------------------------------------------------- attribution of CPU time

    def _cpu_attribution(self, pts: dict[str, np.ndarray], ncpu: int, n: int,
                         gpu_owner_max: int) -> tuple[np.ndarray, np.ndarray]:
        """Category and owner op of each CPU chain edge: the state of its thread after the edge's first
        vertex (inside which op, inside which API call, inside data loading)."""
        job = self.job
        ops, api = job.ops, job.api_calls
        kind, ref, chain = pts["kind"], pts["ref"], pts["chain"]
        firsts = np.r_[True, chain[1:] != chain[:-1]] if ncpu else np.zeros(0, bool)
        op_pos = positions(ops["op_id"].to_numpy(np.int64))
        api_pos = positions(api["api_id"].to_numpy(np.int64))
        parent = ops["parent_id"].to_numpy(np.int64)
        api_op = api["op_id"].to_numpy(np.int64)
        ids = fitting(max([int(x.max()) for x in (ref, parent, api_op) if len(x)], default=0))
        op_state = np.full(ncpu, -1, ids)
        api_state = np.full(ncpu, -1, ids)
        # (vertices of each kind found once, as positions; both states defined at the same vertices: the latest
        # defined vertex before each found once for both)
        s = np.flatnonzero(kind == OP_START)
        op_state[s] = ref[s]
        e = np.flatnonzero(kind == OP_END)
        parent_row = op_pos[ref[e]]
        op_state[e] = np.where(parent_row >= 0, parent[parent_row], -1)
        a = np.flatnonzero(kind == API_START)
        api_state[a] = ref[a]
        calls = np.flatnonzero(_IS_CALL[kind])
        op_state[calls] = api_op[api_pos[ref[calls]]]
        latest = _latest_defined(firsts | _IS_STATE[kind])
        op_state = op_state[latest]
        api_state = api_state[latest]
        # data loading: an op named like it (or one enclosing it), or inside a dataloader range
        dl_op = op_flags(ops, matches(ops["name"], "dataloader") if len(ops) else np.zeros(0, bool))
        rg = job.ranges
        rg_dl = np.zeros(int(rg["range_id"].max()) + 2 if len(rg) else 1, bool)
        rg_dl[rg.loc[rg["category"] == "dataloader", "range_id"].to_numpy(np.int64)] = True
        is_range = _IS_RANGE[kind]
        dl_range = np.zeros(ncpu, bool)
        dl_range[is_range] = rg_dl[ref[is_range]]
        in_dl = np.zeros(ncpu, bool)  # (each term only where it can hold: per-vertex arrays are the peak here)
        if dl_range.any():
            delta = np.where(dl_range, np.where(kind == RANGE_START, 1, -1), 0)
            in_dl |= _segment_cumsum(delta, firsts) > 0
        if dl_op.any():
            op_row = op_pos[op_state]  # op_state -1 looks up the "none" slot
            in_dl |= (op_row >= 0) & dl_op[np.maximum(op_row, 0)]
        cat_after = np.full(ncpu, CAT["cpu_other"], np.int8)
        cat_after[op_state >= 0] = CAT["cpu_op"]
        cat_after[in_dl] = CAT["dataloader"]
        cat_after[api_state >= 0] = CAT["cuda_api"]
        owner_after = op_state
        cat = np.zeros(n, np.int8)
        owner = np.full(n, -1, fitting(max(int(op_state.max()) if ncpu else 0, gpu_owner_max)))  # (GPU ones too)
        cat[1:ncpu] = cat_after[:-1]
        owner[1:ncpu] = owner_after[:-1]
        return cat, owner

    # ---------------------------------------------------------------- cross edges

    def _launch_edges(self):
        """Launch call start -> activity start. Kernels replayed from a CUDA graph carry the correlation id of
        their capture, not of the cudaGraphLaunch that ran them: an activity without a launch call of its own
        follows the latest graph launch of its rank before it."""
        act, t = self.act, self.t
        api_id = act["api_id"].to_numpy(np.int64)
        has = (api_id >= 0) & (api_id < len(self.api_start_v))
        srcv = np.full(len(act), -1, np.int64)
        srcv[has] = self.api_start_v[api_id[has]]
        graph_calls = graph_launch_ids(self.job.api_calls)
        orphan = np.flatnonzero(srcv < 0)
        if len(graph_calls) and len(orphan):
            gv = self.api_start_v[graph_calls]
            gv = gv[gv >= 0]
            ranks = self.rank[gv]
            big = np.int64(t.max() + 1)
            key = ranks * big + t[gv]
            order = np.argsort(key, kind="stable")
            key, gv = key[order], gv[order]
            sv = act["start_v"].to_numpy(np.int64)[orphan]
            q = act["rank"].to_numpy(np.int64)[orphan] * big + t[sv]
            p = np.searchsorted(key, q, side="right") - 1
            ok = (p >= 0) & (key[np.maximum(p, 0)] // big == q // big)
            srcv[orphan[ok]] = gv[p[ok]]
        dstv = act["start_v"].to_numpy(np.int64)
        ok = (srcv >= 0) & (t[np.maximum(srcv, 0)] <= t[dstv])
        return (srcv[ok], dstv[ok], t[dstv[ok]] - t[srcv[ok]], np.full(ok.sum(), LAUNCH, np.int8),
                act["op_id"].to_numpy(np.int64)[ok])

    def _blocking_calls(self) -> pd.DataFrame:
        """The calls that block the host, how (waiting for prior GPU work, or for their own copy), and the
        stream a stream synchronize names."""
        job = self.job
        api = job.api_calls
        code, names = pd.factorize(api["name"], use_na_sentinel=False)  # each distinct name judged once
        sync_name = np.array([bool(SYNC_CALL.search(x)) for x in names], bool)[code] if len(api) else \
            np.zeros(0, bool)
        copy_name = np.array([bool(SYNC_COPY.search(x)) for x in names], bool)[code] if len(api) else \
            np.zeros(0, bool)
        # synchronizations the trace recorded (linked by launch call or by correlation)
        sy = job.syncs[job.syncs["kind"] != "stream_wait_event"]
        linked = sy[sy["api_id"] >= 0][["api_id", "stream", "kind"]]
        unlinked = sy[sy["api_id"] < 0]  # (none: no join with every call)
        by_corr = linked.iloc[0:0]
        if len(unlinked):
            by_corr = unlinked.merge(api[["rank", "correlation", "api_id"]], on=["rank", "correlation"],
                                     suffixes=("_s", ""))[["api_id", "stream", "kind"]]
        recorded = pd.concat([linked, by_corr]).drop_duplicates("api_id").set_index("api_id")
        api_pos = positions(api["api_id"].to_numpy(np.int64))
        is_sync = sync_name.copy()
        rec_rows = api_pos[recorded.index.to_numpy(np.int64)]
        ok = rec_rows >= 0
        is_sync[rec_rows[ok]] = True
        stream = np.full(len(api), -1, np.int64)
        rec_stream = np.where(recorded["kind"].to_numpy(object) == "stream", recorded["stream"].to_numpy(np.int64), -1)
        stream[rec_rows[ok]] = rec_stream[ok]
        # copies: a non-Async copy/memset call, or any copy touching pageable host memory
        # (the activities' rows with a launch call, by position: the frame's index is its row numbers)
        act = self.act
        act_api = act["api_id"].to_numpy(np.int64)
        own = np.flatnonzero(act_api >= 0)
        own_rows = api_pos[act_api[own]]
        is_copy = np.zeros(len(api), bool)
        copy_act = np.full(len(api), -1, np.int64)
        sel = (own_rows >= 0) & (copy_name[np.maximum(own_rows, 0)] | act["pageable"].to_numpy(bool)[own]) & \
            (act["table"] == "memop").to_numpy(bool)[own]
        is_copy[own_rows[sel]] = True
        copy_act[own_rows[sel]] = own[sel]
        rows = np.flatnonzero(is_sync | is_copy)
        return pd.DataFrame({"api_row": rows, "api_id": api["api_id"].to_numpy(np.int64)[rows],
                             "how": np.where(is_copy[rows], "copy", "sync"), "stream": stream[rows],
                             "copy_act": copy_act[rows], "rank": api["rank"].to_numpy(np.int64)[rows],
                             "start": self._aligned(api, "start")[rows], "end": self._aligned(api, "end")[rows]})

    def _waited(self, calls: pd.DataFrame, acts: pd.DataFrame) -> np.ndarray:
        """Per call, the activity row (of ``acts``) it waited for: the latest to end by the call's end among
        those launched before the call started (-1: none)."""
        out = np.full(len(calls), -1, np.int64)
        if acts.empty or calls.empty:
            return out
        a_rank, a_stream = acts["rank"].to_numpy(np.int64), acts["stream"].to_numpy(np.int64)
        a_end, a_launch = acts["end"].to_numpy(np.int64), acts["launch"].to_numpy(np.int64)
        a_rows = acts.index.to_numpy(np.int64)
        # activities of each rank, and of each (rank, stream), by end (ties in row order): sorted once
        by_rank = np.lexsort((a_end, a_rank))
        by_stream = np.lexsort((a_end, a_stream, a_rank))
        rank_sorted = a_rank[by_rank]
        pair_sorted = np.column_stack([a_rank[by_stream], a_stream[by_stream]])
        c_rank, c_stream = calls["rank"].to_numpy(np.int64), calls["stream"].to_numpy(np.int64)
        c_start, c_end = calls["start"].to_numpy(np.int64), calls["end"].to_numpy(np.int64)
        order = np.lexsort((c_stream, c_rank))
        cut = np.flatnonzero((np.diff(c_rank[order]) != 0) | (np.diff(c_stream[order]) != 0)) + 1
        for idx in np.split(order, cut):
            rank, stream = int(c_rank[idx[0]]), int(c_stream[idx[0]])
            if stream >= 0:
                lo = np.searchsorted(pair_sorted[:, 0], rank, "left")
                hi = np.searchsorted(pair_sorted[:, 0], rank, "right")
                lo, hi = lo + np.searchsorted(pair_sorted[lo:hi, 1], stream, "left"), \
                    lo + np.searchsorted(pair_sorted[lo:hi, 1], stream, "right")
                sel = by_stream[lo:hi]
            else:
                sel = by_rank[np.searchsorted(rank_sorted, rank, "left"):np.searchsorted(rank_sorted, rank, "right")]
            if len(sel) == 0:
                continue
            ends, launches, rows = a_end[sel], a_launch[sel], a_rows[sel]
            cs, ce = c_start[idx], c_end[idx]
            p = np.searchsorted(ends, ce, side="right") - 1
            for _ in range(64):  # step back over activities launched after the call (few)
                bad = (p >= 0) & (launches[np.maximum(p, 0)] >= cs)
                if not bad.any():
                    break
                p[bad] -= 1
            found = (p >= 0) & (launches[np.maximum(p, 0)] < cs)
            out[idx] = np.where(found, rows[np.maximum(p, 0)], -1)
        return out

    def _sync_edges(self, wc: np.ndarray):
        """A blocking call ends at max(its previous instant, the instant of the GPU work it waited for) plus its
        own cost after that (measured): end' = max(prev', g') + (end - max(prev, g))."""
        calls = self._blocking_calls().reset_index(drop=True)
        act = self.act
        t = self.t
        if act.empty:
            calls = calls.iloc[0:0]
        end_v = self.api_end_v[calls["api_id"].to_numpy(np.int64)]
        calls["end_v"] = end_v
        syn = calls["how"].to_numpy(object) == "sync"
        waited = np.full(len(calls), -1, np.int64)
        waited_nc = np.full(len(calls), -1, np.int64)
        acts = act[["rank", "stream", "start", "end", "launch", "is_comm"]]
        waited[syn] = self._waited(calls[syn], acts)
        if act["is_comm"].any():
            waited_nc[syn] = self._waited(calls[syn], acts[~acts["is_comm"]])
        # copies wait for their own copy: its end when it ended before the call returned, else its start
        cp = np.flatnonzero(~syn)
        ca = calls["copy_act"].to_numpy(np.int64)[cp]
        ends_ok = act["end"].to_numpy(np.int64)[ca] <= calls["end"].to_numpy(np.int64)[cp]
        starts_ok = act["start"].to_numpy(np.int64)[ca] <= calls["end"].to_numpy(np.int64)[cp]
        copy_v = np.where(ends_ok, act["end_v"].to_numpy(np.int64)[ca],
                          np.where(starts_ok, act["start_v"].to_numpy(np.int64)[ca], -1))
        gv = np.full(len(calls), -1, np.int64)
        gv[syn] = np.where(waited[syn] >= 0, act["end_v"].to_numpy(np.int64)[np.maximum(waited[syn], 0)], -1)
        gv[cp] = copy_v
        gv_nc = np.where(waited_nc >= 0, act["end_v"].to_numpy(np.int64)[np.maximum(waited_nc, 0)], -1)
        ok = (gv >= 0) & (end_v >= 0)
        ok[ok] &= ~self.first[end_v[ok]]
        ev, g = end_v[ok], gv[ok]
        prev = t[ev - 1]
        post = t[ev] - np.maximum(prev, t[g])
        ok_post = post >= 0
        ev, g, post = ev[ok_post], g[ok_post], post[ok_post]
        wc[ev] = post
        calls["waited_v"] = -1
        calls["waited_comm"] = False
        idx = np.flatnonzero(ok)[ok_post]
        calls.loc[idx, "waited_v"] = g
        is_comm_v = np.zeros(len(t), bool)
        is_comm_v[act["end_v"].to_numpy(np.int64)[act["is_comm"].to_numpy(bool)]] = True
        calls.loc[idx, "waited_comm"] = is_comm_v[g]
        self.blocking = calls
        owner = self.job.api_calls["op_id"].to_numpy(np.int64)[calls["api_row"].to_numpy(np.int64)[idx]]
        src, dst, w = [g], [ev], [post]
        kinds, owners = [np.full(len(g), SYNC, np.int8)], [owner]
        # the same call also waited for the latest non-communication work (what remains when comm overlaps)
        alt = gv_nc[idx]
        keep = (alt >= 0) & (alt != g)
        if keep.any():
            alt_ev, alt_g = ev[keep], alt[keep]
            src.append(alt_g)
            dst.append(alt_ev)
            w.append(np.minimum(post[keep], t[alt_ev] - t[alt_g]))
            kinds.append(np.full(len(alt_g), SYNC, np.int8))
            owners.append(owner[keep])
        return (np.concatenate(src), np.concatenate(dst), np.concatenate(w), np.concatenate(kinds),
                np.concatenate(owners))

    def _handoff_edges(self, pts: dict[str, np.ndarray], wc: np.ndarray):
        """Thread handoffs inside a process: a thread that resumes after a long idle gap right after another
        thread stopped before one (fork: the autograd thread starting backward when the main thread calls it;
        join: the main thread resuming when backward is done). The resuming thread's idle gap then costs
        nothing of its own; the handoff edge carries the measured latency."""
        empty = (np.zeros(0, np.int64),) * 3 + (np.zeros(0, np.int8), np.zeros(0, np.int64))
        ncpu = self.ncpu
        if len(self.cpu_chains) < 2 or ncpu == 0:
            return empty
        t = self.t[:ncpu]
        chain, kind = pts["chain"], pts["kind"]
        busy = _IS_BUSY[kind]
        if not busy.any():
            return empty
        big = np.int64(t.max() + 1)
        # busy intervals of each thread (ops and API calls), merged, on a per-chain axis
        busy_v = np.flatnonzero(busy)  # (found once, read by position)
        busy_t = t[busy_v]
        bs = chain[busy_v] * big + busy_t
        # a start point's own end (relative, as ``t``): read here last, let go before the merge
        be = bs + (pts.pop("other")[busy_v] - busy_t)
        del busy_v, busy_t
        ms, me = merge(bs, be)
        mc = ms // big
        gap_before = np.r_[np.iinfo(np.int64).max, ms[1:] - me[:-1]]
        gap_before[np.r_[True, mc[1:] != mc[:-1]]] = np.iinfo(np.int64).max
        gap_after = np.r_[gap_before[1:], np.iinfo(np.int64).max]
        resume = gap_before >= HANDOFF_MIN_GAP_NS
        stop = gap_after >= HANDOFF_MIN_GAP_NS
        key = chain * big + t  # vertices are sorted on this axis
        resume_v = np.searchsorted(key, ms[resume], side="left")
        stop_v = np.searchsorted(key, me[stop], side="right") - 1
        # the process of each thread; a resume matches the latest stop on another thread of it
        proc = row_codes(self.cpu_chains[["rank", "pid"]].to_numpy(np.int64))[0]
        r_chain, s_chain = mc[resume], mc[stop]
        r_t, s_t = t[resume_v], t[stop_v]
        s_key = proc[s_chain] * big + s_t
        order = np.argsort(s_key, kind="stable")
        s_key, s_chain, s_v, s_t = s_key[order], s_chain[order], stop_v[order], s_t[order]
        p = np.searchsorted(s_key, proc[r_chain] * big + r_t, side="right") - 1
        src = np.full(len(resume_v), -1, np.int64)
        for _ in range(4):  # step over stops of the resuming thread itself
            live = (p >= 0) & (src < 0)
            live[live] &= proc[s_chain[p[live]]] == proc[r_chain[live]]
            own = live.copy()
            own[live] = s_chain[p[live]] == r_chain[live]
            take = live & ~own
            src[take] = s_v[p[take]]
            p = np.where(own, p - 1, -1)
        ok = src >= 0
        ok[ok] &= (r_t[ok] - t[src[ok]]) <= HANDOFF_MAX_LATENCY_NS
        dst, src = resume_v[ok], src[ok]
        notfirst = ~self.first[dst]
        wc[dst[notfirst]] = 0
        return (src, dst, t[dst] - t[src], np.full(len(dst), HANDOFF, np.int8), np.full(len(dst), -1, np.int64))

    def _collective_rows(self, act: pd.DataFrame):
        coll = self.coll
        if coll.empty:
            return None
        rows = act[act["table"] == "kernel"][["id"]].reset_index().rename(columns={"index": "act_row"})
        m = coll.merge(rows, left_on="kernel_id", right_on="id", how="inner")
        a_start = act["start"].to_numpy(np.int64)[m["act_row"].to_numpy()]
        m["a_start"] = a_start
        inst = m.groupby(["collective", "call_index"], sort=True)["a_start"].max().rename("arrival").reset_index()
        inst["barrier"] = np.arange(len(inst))
        m = m.merge(inst, on=["collective", "call_index"])
        return m, inst

    def _collective_edges(self, coll_rows, wc: np.ndarray):
        """Every rank's start of a collective -> its barrier (the last arrival) -> every rank's end: a
        collective ends its measured transfer time after the last rank arrived (no earlier than it began
        plus that time)."""
        m, inst = coll_rows
        act, t = self.act, self.t
        bar_v = self.ncpu + 2 * len(act) + m["barrier"].to_numpy(np.int64)
        rows = m["act_row"].to_numpy(np.int64)
        sv, ev = act["start_v"].to_numpy(np.int64)[rows], act["end_v"].to_numpy(np.int64)[rows]
        owner = act["op_id"].to_numpy(np.int64)[rows]
        arrive = (sv, bar_v, np.zeros(len(sv), np.int64), np.full(len(sv), ARRIVE, np.int8), owner)
        ok = t[ev] >= t[bar_v]
        transfer = t[ev] - np.maximum(t[sv], t[bar_v])
        wc[ev[ok]] = transfer[ok]   # its own run: the transfer after everyone arrived
        self.notes.append(f"{len(inst)} collectives matched across {len(self.job.ranks)} ranks")
        return (np.concatenate([arrive[0], bar_v[ok]]), np.concatenate([arrive[1], ev[ok]]),
                np.concatenate([arrive[2], transfer[ok]]),
                np.concatenate([arrive[3], np.full(ok.sum(), COLLECTIVE, np.int8)]),
                np.concatenate([arrive[4], owner[ok]]))

    # ---------------------------------------------------------------- waiting edges: intrinsic weights

    def _gpu_latencies(self, wc, src, dst, w, xk) -> None:
        """Per device, the typical launch latency (launch call start -> start, on an idle stream) and the gap
        between queued activities (previous end -> start, launched well before): the medians measured."""
        act, t = self.act, self.t
        sv = act["start_v"].to_numpy(np.int64)
        prev_end = np.where(self.first[sv], np.iinfo(np.int64).min // 2, t[sv - 1])
        launch = np.full(len(act), np.iinfo(np.int64).min // 2, np.int64)
        lk = xk == LAUNCH
        pos = np.searchsorted(sv, dst[lk])  # start vertices are increasing with the activity row
        launch[pos] = t[src[lk]]
        has_launch = launch > np.iinfo(np.int64).min // 2
        idle = has_launch & (prev_end <= launch)
        queued = has_launch & (launch < prev_end)
        lat = t[sv] - launch
        gap = t[sv] - prev_end
        self.launch_latency, self.queue_gap = {}, {}
        keys = act[["rank", "device"]].to_numpy(np.int64)
        frame = pd.DataFrame({"rank": keys[:, 0], "device": keys[:, 1], "lat": np.where(idle, lat, np.nan),
                              "gap": np.where(queued, gap, np.nan)})
        med = frame.groupby(["rank", "device"])[["lat", "gap"]].median()
        for (r, d), row in med.iterrows():
            self.launch_latency[(int(r), int(d))] = int(row["lat"]) if np.isfinite(row["lat"]) else 0
            self.queue_gap[(int(r), int(d))] = int(row["gap"]) if np.isfinite(row["gap"]) else 0
        lat_cap = _pair_values(keys, self.launch_latency)
        gap_cap = _pair_values(keys, self.queue_gap)
        # intrinsic: the measured slack, never more than the typical latency
        notfirst = ~self.first[sv]
        wc[sv[notfirst]] = np.minimum(wc[sv[notfirst]], gap_cap[notfirst])
        w[lk] = np.minimum(w[lk], lat_cap[pos])

    def _stream_waits(self, wc, src, dst, w, xk, xo):
        """An activity that started later than its own stream and launch allow, shortly after an activity on
        another stream of its device ended, waited for it (an event wait)."""
        act, t = self.act, self.t
        # the streams (distinct, sorted by rank, device, stream): some device has two when a pair repeats
        pairs = self.gpu_chains[["rank", "device"]].to_numpy(np.int64)
        if act.empty or not (pairs[1:] == pairs[:-1]).all(axis=1).any():
            return src, dst, w, xk, xo
        sv, evs = act["start_v"].to_numpy(np.int64), act["end_v"].to_numpy(np.int64)
        m = self._bounds(sv, wc, src, dst, w)
        resid = t[sv] - m
        cand = np.flatnonzero(resid > 0)
        if len(cand) == 0:
            return src, dst, w, xk, xo
        dev = row_codes(pairs)[0][act["chain_local"].to_numpy(np.int64)]  # (every stream has activities)
        big = np.int64(t.max() + 1)
        key_end = dev * big + t[evs]
        order = np.argsort(key_end, kind="stable")
        ke = key_end[order]
        p = np.searchsorted(ke, dev[cand] * big + t[sv[cand]], side="left") - 1  # strictly before the start
        ok = p >= 0
        other = order[np.maximum(p, 0)]
        ok &= dev[other] == dev[cand]
        ok &= act["stream"].to_numpy(np.int64)[other] != act["stream"].to_numpy(np.int64)[cand]
        x = t[evs[other]]
        ok &= (x >= m[cand]) & (t[sv[cand]] - x <= STREAM_WAIT_MAX_LATENCY_NS)
        ns, nd = evs[other[ok]], sv[cand[ok]]
        return (np.r_[src, ns], np.r_[dst, nd], np.r_[w, t[nd] - t[ns]],
                np.r_[xk, np.full(len(nd), STREAM_WAIT, np.int8)],
                np.r_[xo, act["op_id"].to_numpy(np.int64)[cand[ok]]])

    def _bypass_edges(self):
        """For overlapped communication: the activity after a run of communication kernels on a stream follows
        the last non-communication activity before that run (stream order without the communication)."""
        act, t = self.act, self.t
        empty = (np.zeros(0, np.int64),) * 3 + (np.zeros(0, np.int8), np.zeros(0, np.int64))
        comm = act["is_comm"].to_numpy(bool)
        if not comm.any():
            return empty
        chain = act["chain_local"].to_numpy(np.int64)
        idx = np.arange(len(act))
        last_compute = np.maximum.accumulate(np.where(~comm, idx, -1))
        first = np.r_[True, chain[1:] != chain[:-1]]
        chain_first = np.maximum.accumulate(np.where(first, idx, 0))
        nxt = idx[:-1][comm[:-1] & ~comm[1:] & (chain[1:] == chain[:-1])] + 1
        before = last_compute[nxt - 1]
        ok = before >= chain_first[nxt]
        nxt, before = nxt[ok], before[ok]
        sv, ev = act["start_v"].to_numpy(np.int64)[nxt], act["end_v"].to_numpy(np.int64)[before]
        gap = _pair_values(act[["rank", "device"]].to_numpy(np.int64)[nxt], self.queue_gap)
        return (ev, sv, np.maximum(np.minimum(gap, t[sv] - t[ev]), 0), np.full(len(sv), BYPASS, np.int8),
                act["op_id"].to_numpy(np.int64)[nxt])

    def _bounds(self, vertices, wc, src, dst, w) -> np.ndarray:
        """Per vertex of ``vertices`` (increasing), the latest of its incoming constraints at the measured times
        (no input: -inf): found for those vertices only, not for every vertex of the graph."""
        t = self.t
        low = np.iinfo(np.int64).min // 2
        m = np.full(len(vertices), low, np.int64)
        inner = ~self.first[vertices]
        m[inner] = t[vertices[inner] - 1] + wc[vertices[inner]]
        if len(dst) and len(vertices):
            at = np.minimum(np.searchsorted(vertices, dst), len(vertices) - 1)
            into = vertices[at] == dst
            np.maximum.at(m, at[into], t[src[into]] + w[into])
        return m

    def _residuals(self, wc, src, dst, w):
        """Add what each vertex waited beyond its constraints to its binding edge, so the unchanged replay
        reproduces every measured time."""
        t = self.t
        low = np.iinfo(np.int64).min // 2
        # one array per vertex made at a time, reused in place: the chain term, then the latest input, then the
        # residual (this is the graph build's peak)
        # (the chain term added in place over shifted views: no index or temporary array per vertex)
        resid = np.empty(len(t), np.int64)
        np.add(t[:-1], wc[1:], out=resid[1:])
        resid[self.first] = low
        # the latest cross input of each vertex that has one (few: kept per destination, not per vertex)
        vals = t[src] + w
        by_dst = np.argsort(dst, kind="stable")
        d = dst[by_dst]
        starts = np.flatnonzero(np.r_[True, d[1:] != d[:-1]]) if len(d) else np.zeros(0, np.int64)
        cross_at = d[starts]
        cross_term = np.maximum.reduceat(vals[by_dst], starts) if len(d) else np.zeros(0, np.int64)
        del by_dst, d, starts
        has_input = ~self.first
        has_input[cross_at[cross_term > low]] = True
        # binding: the chain edge on ties (the thread or stream itself), else the first cross edge at the max
        chain_binds = has_input.copy()
        chain_binds[cross_at] &= resid[cross_at] >= cross_term
        resid[cross_at] = np.maximum(resid[cross_at], cross_term)
        np.subtract(t, resid, out=resid)
        resid[~has_input] = 0
        if (resid < 0).any():
            bad = int((resid < 0).sum())
            raise AssertionError(f"{bad} vertices with an edge heavier than the measured slack")
        w_before = w.copy()
        binds = np.flatnonzero(chain_binds & (resid != 0))  # few: most vertices wait for nothing unexplained
        self.rc = Sparse(binds, resid[binds], len(t))
        wc[binds] += self.rc.values  # the caller's own array (made by the build)
        cross_v = np.flatnonzero(has_input & ~chain_binds & (resid > 0))
        if len(cross_v):
            at_max = vals == cross_term[np.searchsorted(cross_at, dst)]  # (every destination has its latest)
            e_idx = np.flatnonzero(at_max)
            e_dst = dst[e_idx]
            order = np.lexsort((e_idx, e_dst))
            e_idx, e_dst = e_idx[order], e_dst[order]
            firsts = np.r_[True, e_dst[1:] != e_dst[:-1]]
            e_idx, e_dst = e_idx[firsts], e_dst[firsts]
            pick = e_idx[np.isin(e_dst, cross_v)]
            w = w.copy()
            w[pick] += resid[dst[pick]]
        self.rx = w - w_before
        return wc, w


def _segment_cumsum(values: np.ndarray, firsts: np.ndarray) -> np.ndarray:
    """Running sum restarted at each ``firsts`` position."""
    total = np.cumsum(values)
    starts = np.flatnonzero(firsts)
    base = np.repeat(total[starts] - values[starts], np.diff(np.r_[starts, len(values)]))
    return total - base


def _segment_cummax(values: np.ndarray, firsts: np.ndarray) -> np.ndarray:
    """Running maximum restarted at each ``firsts`` position."""
    if len(values) == 0:
        return values
    seg = np.cumsum(firsts) - 1
    lo = values.min()
    span = np.int64(values.max() - lo + 1)
    if span > 0 and int(seg[-1]) * int(span) < 2 ** 62:
        z = np.maximum.accumulate((values - lo) + seg * span)
        return z - seg * span + lo
    return pd.Series(values).groupby(seg).cummax().to_numpy(np.int64)
