"""One aggregation: an iteration range of one rank and everything DLProf reports over it.

Definitions are PRODUCT.md's: wall clock from the first op of iter_start to the last CPU or GPU activity
of iter_stop; GPU busy = union of a device's kernels inside the window; the resource breakdown cuts the
window into disjoint pieces by priority so its seven parts add up to the wall clock exactly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np
import pandas as pd

from ..errors import DlscopeError
from ..model import string_column
from ..nanoseconds import round_ns
from .analysis import Analysed, _RankTables
from .intervals import clip, covered_by_union, merge, sorted_unique, union_length, union_per_group

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
    #: time on the critical path per rank and category (``whatif.stored.annotate`` fills it before writing)
    critical_path: pd.DataFrame = field(default_factory=pd.DataFrame)


def _rank_frames(an: Analysed, rank: int) -> Mapping[str, pd.DataFrame]:
    return an.rank_tables(rank)


def _rank_column(tables: Mapping[str, pd.DataFrame], name: str, column: str) -> np.ndarray:
    """One column of a rank's table, without cutting the frame out where the tables are a job's."""
    return tables.column(name, column) if isinstance(tables, _RankTables) else tables[name][column].to_numpy()


def _intervals(frame: pd.DataFrame, mask=None) -> tuple[np.ndarray, np.ndarray]:
    f = frame if mask is None else frame[mask]
    return f["start"].to_numpy(np.int64), f["end"].to_numpy(np.int64)


def _name_is(ops: pd.DataFrame, kind: str) -> np.ndarray:
    from .categories import matches

    return matches(ops["name"], kind)


class Segments:
    """The time line of every rank cut at every interval end point, each piece labelled with its breakdown
    category, in one sweep: rank i's time line [lo_i, hi_i] is shifted to follow rank i-1's, so no piece spans
    two ranks. Any window's breakdown (the aggregation's, each iteration's) is then a difference of prefix
    sums, so the parts add up to the window length exactly; only the sums at the windows' points are kept.

    ``sets``: per category in priority order (all but 'other'), (starts, ends, rank of each row: 0..n-1);
    ``points``: per rank, its windows' ends (lo_i and hi_i are their min and max).
    """

    def __init__(self, sets: list[tuple[np.ndarray, np.ndarray, np.ndarray]], points: list[np.ndarray]):
        lo = np.array([p.min() for p in points], dtype=np.int64)
        hi = np.array([p.max() for p in points], dtype=np.int64)
        base = np.concatenate([[0], np.cumsum(hi - lo + 1)[:-1]]).astype(np.int64)
        self.shift = base - lo
        clipped = [_clipped(s, e, r, lo, hi, self.shift) for s, e, r in sets]
        self.points = sorted_unique(np.concatenate([p + self.shift[i] for i, p in enumerate(points)]))
        # a category covers the time line where the union of its intervals does: the pieces need cutting only
        # at the unions' ends (the benchmark trace's 283k ops are 30k disjoint spans), not at every row's
        unions = [merge(s, e) for s, e, _ in clipped]
        bounds = sorted_unique(np.concatenate([self.points, *(x for u in unions for x in u)]))
        at = np.searchsorted(bounds, self.points)  # the points among the bounds
        seg = np.diff(bounds)
        self.cum = np.zeros((len(CATEGORIES), len(self.points)), dtype=np.int64)
        taken = np.zeros(len(seg), dtype=bool)
        for i, union in enumerate(unions):  # by priority: a piece is the first category's that covers it
            if len(union[0]) == 0:
                continue
            cov = covered_by_union(bounds, *union)
            mine = cov & ~taken
            self.cum[i] = _prefix_sums(np.where(mine, seg, 0))[at]
            taken |= cov
        # 'other': the rest of the time line (the pieces before a point add up to its distance from the first)
        self.cum[-1] = (bounds[at] - bounds[0]) - self.cum[:-1].sum(axis=0)
        # the reader cost: all of the time inside data loading, whatever else runs (not only the Dataloader part)
        loader = CATEGORIES.index("dataloader")
        self.has_loader = np.bincount(clipped[loader][2], minlength=len(points)) > 0
        self.loader_cum = np.zeros(len(self.points), dtype=np.int64)
        if len(unions[loader][0]):
            self.loader_cum = _prefix_sums(np.where(covered_by_union(bounds, *unions[loader]), seg, 0))[at]

    def of(self, i: int) -> RankSegments:
        return RankSegments(self, i)

    def windows(self, rank: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`RankSegments.breakdown` (one row per category) and the reader cost (without the rank's
        has-loader test) of many windows [lo, hi) at once, window j of rank index ``rank[j]``."""
        i0 = np.searchsorted(self.points, lo + self.shift[rank])
        i1 = np.searchsorted(self.points, hi + self.shift[rank])
        return self.cum[:, i1] - self.cum[:, i0], self.loader_cum[i1] - self.loader_cum[i0]


def _clipped(starts: np.ndarray, ends: np.ndarray, rank: np.ndarray, lo: np.ndarray, hi: np.ndarray,
             shift: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Intervals of rank index ``rank`` cut to their rank's [lo, hi] and shifted onto the job's time line; empty
    ones dropped. One rank (a single trace): its bounds as scalars, not gathered per row."""
    if len(lo) == 1:
        s, e = np.maximum(starts, lo[0]), np.minimum(ends, hi[0])
        keep = np.flatnonzero(e > s)
        return s[keep] + shift[0], e[keep] + shift[0], rank[keep]
    s, e = np.maximum(starts, lo[rank]), np.minimum(ends, hi[rank])
    keep = np.flatnonzero(e > s)
    r = rank[keep]
    moved = shift[r]
    return s[keep] + moved, e[keep] + moved, r


def _prefix_sums(values: np.ndarray) -> np.ndarray:
    out = np.zeros(len(values) + 1, dtype=np.int64)
    np.cumsum(values, out=out[1:])
    return out


class RankSegments:
    """One rank's view of the job's :class:`Segments` (its own time, not shifted)."""

    def __init__(self, segments: Segments, i: int):
        self.segments, self.i = segments, i

    def _at(self, lo: int, hi: int) -> tuple[int, int]:
        shift = int(self.segments.shift[self.i])
        i0, i1 = np.searchsorted(self.segments.points, [lo + shift, hi + shift])
        return int(i0), int(i1)

    def reader_cost(self, lo: int, hi: int) -> int | None:
        """Time inside data loading (DataLoader ``__next__``, data-loading ranges) in [lo, hi); None when the
        rank's trace shows no data loading at all (it cannot tell whether steps waited for their batches)."""
        if not self.segments.has_loader[self.i]:
            return None
        i0, i1 = self._at(lo, hi)
        return int(self.segments.loader_cum[i1] - self.segments.loader_cum[i0])

    def breakdown(self, lo: int, hi: int) -> dict[str, int]:
        """Time per category inside [lo, hi); lo and hi must be among the rank's points given at build time."""
        i0, i1 = self._at(lo, hi)
        cum = self.segments.cum
        return {name: int(cum[c, i1] - cum[c, i0]) for c, name in enumerate(CATEGORIES)}


def _windows(chosen: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """The aggregation's iteration windows: [start, next start), the last to the end of its own activity
    (its last CPU op or GPU activity), so they partition the wall clock."""
    return _window_arrays(chosen["start"].to_numpy(np.int64), chosen["end"].to_numpy(np.int64))


def _window_arrays(starts: np.ndarray, activity_ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_windows` of iterations given as their start and activity-end arrays (in order of start)."""
    ends = np.empty_like(starts)
    ends[:-1] = starts[1:]
    ends[-1:] = activity_ends[-1:]
    return starts, np.maximum(ends, starts)


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


def _job_gpu_tables(job: _JobTables, windows: dict[int, tuple[int, int]]) -> tuple[pd.DataFrame, list]:
    """:func:`_gpu_table` of every rank at once (with its ``rank`` column), keyed by (rank, device): the rows
    and the slice of each rank's (None where the rank's own must be made: no device, or an empty window)."""
    lo = np.array([windows[r][0] for r in job.ranks], dtype=np.int64)
    hi = np.array([windows[r][1] for r in job.ranks], dtype=np.int64)
    k_start, k_end, k_rank = job.rank_rows("kernels")
    m_start, m_end, m_rank = job.rank_rows("memops")
    k_dev, m_dev = job.device_of["kernels"], job.device_of["memops"]
    width = int(max(k_dev.max(initial=0), m_dev.max(initial=0))) + 2  # device -1..max, as (rank, device) keys
    k_key, m_key = k_rank * width + k_dev + 1, m_rank * width + m_dev + 1
    keys = sorted_unique(np.concatenate([k_key[(k_rank >= 0) & (k_dev >= 0)], m_key[(m_rank >= 0) & (m_dev >= 0)]]))
    pair_rank, device = keys // width, keys % width - 1

    def union_by_pair(starts, ends, key, rank):
        rows = np.flatnonzero((rank >= 0) & np.isin(key, keys))
        r = rank[rows]
        return union_per_group(np.searchsorted(keys, key[rows]), np.clip(starts[rows], lo[r], hi[r]),
                               np.clip(ends[rows], lo[r], hi[r]), len(keys))[0]

    busy = union_by_pair(k_start, k_end, k_key, k_rank)
    memory = union_by_pair(m_start, m_end, m_key, m_rank)
    ak_rank = np.zeros(len(job.ak), dtype=np.int64)
    for i, rows in enumerate(job.ak_at):
        ak_rank[rows] = i
    ak_key = ak_rank * width + job.ak["device"].to_numpy(np.int64) + 1
    listed = np.isin(ak_key, keys)
    pair = np.searchsorted(keys, ak_key[listed])
    dur = job.ak["dur"].to_numpy(np.int64)[listed]
    tc = job.ak["uses_tc"].astype(bool).to_numpy()[listed]
    wall = (hi - lo)[pair_rank]
    with np.errstate(divide="ignore", invalid="ignore"):
        utilization = busy / wall
    table = pd.DataFrame({"device": device, "busy_ns": busy, "utilization": utilization,
                          "kernel_count": np.bincount(pair, minlength=len(keys)).astype(np.int64),
                          "kernel_time_ns": _sum_by(pair, dur, len(keys)),
                          "tc_kernel_time_ns": _sum_by(pair[tc], dur[tc], len(keys)), "memory_ns": memory,
                          "rank": np.array(job.ranks, dtype=np.int64)[pair_rank]})
    first = np.searchsorted(pair_rank, np.arange(len(job.ranks)), side="left")
    last = np.searchsorted(pair_rank, np.arange(len(job.ranks)), side="right")
    at = [slice(int(a), int(b)) if b > a and hi[i] > lo[i] else None for i, (a, b) in enumerate(zip(first, last))]
    return table, at


def _job_iteration_tables(agg: JobAggregation) -> pd.DataFrame:
    """:func:`_iteration_table` of every rank at once (with its ``rank`` column), rank by rank: kernel sums per
    (rank, iteration), every window's breakdown read from the job's :class:`Segments` in one step."""
    job, its = agg.tables, agg.iterations
    rows = np.concatenate(agg.iterations_at)
    rank = np.repeat(np.arange(len(job.ranks)), [len(a) for a in agg.iterations_at])
    numbers = its["iteration"].to_numpy(np.int64)[rows]
    lo, hi = np.empty(len(rows), dtype=np.int64), np.empty(len(rows), dtype=np.int64)
    profiled = np.zeros(len(rows), dtype=bool)
    done = 0
    for r, (starts, ends) in zip(job.ranks, agg.all_windows):  # per rank: its windows (a few numpy steps)
        n = len(starts)
        chosen = job.profiled[r]
        mine = numbers[done: done + n]
        lo[done: done + n] = starts
        hi[done: done + n] = np.where(mine == chosen.max(), agg.bounds_of[r][3], ends)
        profiled[done: done + n] = np.isin(mine, chosen)
        done += n
    k_rank = job.rank_rows("kernels")[2]
    kernels = agg.an.profile.table("kernels")
    launched = k_rank >= 0
    k_it, k_dur = kernels["iteration"].to_numpy(np.int64)[launched], kernels["dur"].to_numpy(np.int64)[launched]
    tc = kernels["uses_tc"].to_numpy(bool)[launched]
    # per (rank, iteration) window: its kernels' count and time, matched on one integer key
    low = min(int(numbers.min(initial=0)), int(k_it.min(initial=0)))
    width = max(int(numbers.max(initial=0)), int(k_it.max(initial=0))) - low + 1
    keys, window = np.unique(rank * width + (numbers - low), return_inverse=True)
    k_key = k_rank[launched] * width + (k_it - low)
    at = np.minimum(np.searchsorted(keys, k_key), max(len(keys) - 1, 0))
    found = keys[at] == k_key if len(keys) else np.zeros(len(k_key), dtype=bool)
    at, tc_at = at[found], at[found & tc]
    sums = {"n": np.bincount(at, minlength=len(keys)).astype(np.int64),  # per key, then per window
            "tc_n": np.bincount(tc_at, minlength=len(keys)).astype(np.int64),
            "t": _sum_by(at, k_dur[found], len(keys)), "tc_t": _sum_by(tc_at, k_dur[found & tc], len(keys))}
    sums = {name: values[window.reshape(-1)] for name, values in sums.items()}
    parts, reader = agg.segments.windows(rank, lo, hi)
    out = pd.DataFrame({
        "iteration": numbers, "profiled": profiled, "start": lo, "end": hi, "duration_ns": hi - lo,
        "kernel_count": sums["n"], "tc_kernel_count": sums["tc_n"],
        "kernel_time_ns": sums["t"], "tc_kernel_time_ns": sums["tc_t"],
        "gpu_busy_ns": parts[0] + parts[1], "reader_cost_ns": reader,
        **{f"{c}_ns": parts[i] for i, c in enumerate(CATEGORIES)},
        "rank": np.array(job.ranks, dtype=np.int64)[rank]})
    return out


NODE_COLUMNS = ["node_id", "op_name", "op_type", "direction", "scope", "input_shapes", "data_type", "calls",
                "kernel_count", "tc_kernel_count", "kernel_time_ns", "gpu_time_ns", "tc_gpu_time_ns",
                "cpu_time_ns", "api_time_ns", "cpu_overhead_ns", "gpu_idle_ns", "tc_eligible", "using_tc",
                "kernels", "stack"]
_NODE_TEXT = {"op_name": "name", "op_type": "op_type", "direction": "direction", "scope": "scope",
              "input_shapes": "input_shapes", "data_type": "data_type", "stack": "stack"}
_NODE_SUMS = {"kernel_count": "kernel_count", "tc_kernel_count": "tc_kernel_count", "kernel_time_ns": "kernel_time",
              "gpu_time_ns": "gpu_time", "tc_gpu_time_ns": "tc_gpu_time", "cpu_time_ns": "dur",
              "api_time_ns": "api_time", "gpu_idle_ns": "gpu_idle"}


def _op_nodes(ops: pd.DataFrame, roots: np.ndarray, op_kernels: pd.DataFrame) -> pd.DataFrame:
    """The aggregation's op nodes (outermost ops): their calls summed, each call inclusive of everything
    launched beneath it, so no time is counted twice. ``roots``: row positions of the op node calls.

    Numbers are summed per integer node id; each node's text is taken once from its first call."""
    if len(roots) == 0:
        return pd.DataFrame(columns=NODE_COLUMNS)
    node = ops["node_id"].to_numpy(np.int64)[roots]
    ids, first, inverse = np.unique(node, return_index=True, return_inverse=True)
    columns: dict = {"node_id": ids, "calls": np.bincount(inverse, minlength=len(ids))}
    for col, src in _NODE_SUMS.items():
        columns[col] = _sum_by(inverse, ops[src].to_numpy(np.int64)[roots], len(ids))
    for col in ("tc_eligible", "using_tc"):
        columns[col] = np.bincount(inverse, weights=ops[col].to_numpy(bool)[roots], minlength=len(ids)) > 0
    firsts = roots[first]
    for col, src in _NODE_TEXT.items():
        columns[col] = _text_values(ops[src].take(firsts))
    columns["cpu_overhead_ns"] = np.maximum(columns["cpu_time_ns"] - columns["api_time_ns"], 0)
    columns["kernels"] = string_column(_top_kernels(op_kernels, "node_id").reindex(ids).fillna("")
                                       .to_numpy(dtype=object))
    out = pd.DataFrame({col: columns[col] for col in NODE_COLUMNS})  # one frame, not a column at a time
    order = np.argsort(first, kind="stable")  # nodes in order of their first call
    return out.iloc[order].reset_index(drop=True)


def group_stats(code: np.ndarray, n: int, columns: dict[str, np.ndarray]
                ) -> tuple[np.ndarray, dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]]:
    """Per group 0..n-1 of ``code``: its row count, and per int64 column its exact (sum, min, max), in one sort
    and ``reduceat`` per column (not a pandas groupby: its set-up dominates small tables); an empty group has
    count, sum, min and max 0."""
    # codes as int16 where they fit: numpy's stable sort of 16-bit integers is a radix sort (one pass, no compares)
    small = bool(len(code)) and -(1 << 15) <= int(code.min()) and int(code.max()) < 1 << 15
    order = np.argsort(code.astype(np.int16) if small else code, kind="stable")
    sorted_code = code[order]
    first = np.flatnonzero(np.concatenate([[True], sorted_code[1:] != sorted_code[:-1]])) if len(code) else \
        np.zeros(0, dtype=np.int64)
    present = sorted_code[first]
    counts = np.zeros(n, dtype=np.int64)
    counts[present] = np.diff(np.append(first, len(code)))
    out = {}
    for name, values in columns.items():
        v = np.asarray(values, dtype=np.int64)[order]
        parts = []
        for ufunc in (np.add, np.minimum, np.maximum):
            full = np.zeros(n, dtype=np.int64)
            if len(first):
                full[present] = ufunc.reduceat(v, first)
            parts.append(full)
        out[name] = (parts[0], parts[1], parts[2])
    return counts, out


def _sum_by(inverse: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """Exact int64 sums per group (np.bincount would go through float64)."""
    out = np.zeros(n, dtype=np.int64)
    np.add.at(out, inverse, values)
    return out


def _top_kernels(op_kernels: pd.DataFrame, by: str, limit: int = 5) -> pd.Series:
    """Per ``by`` (from kernel rows already summed per op node and name), its kernels by GPU time
    ("name ×calls; …"), at most ``limit``; ties by name. Grouped on integer codes with numpy (one sort, sums
    by ``reduceat``): a job has tens of thousands of groups, too many for a pandas aggregation per group."""
    if op_kernels.empty:
        return pd.Series(dtype=object)
    # codes in name order, factorized on the column as it is (an Arrow string column without Python strings)
    all_codes, name_of = pd.factorize(op_kernels["kernel_name"], sort=True)
    named = np.flatnonzero(all_codes >= 0)  # rows without a name are in no group
    if len(named) == 0:
        return pd.Series(dtype=object)
    name_code = all_codes[named]
    by_code, by_of = pd.factorize(op_kernels[by].to_numpy()[named], sort=True)
    pair = by_code.astype(np.int64) * len(name_of) + name_code
    order = np.argsort(pair, kind="stable")
    pair = pair[order]
    first = np.flatnonzero(np.concatenate([[True], pair[1:] != pair[:-1]]))
    gpu = np.add.reduceat(op_kernels["gpu_time_ns"].to_numpy()[named][order], first)
    calls = np.add.reduceat(op_kernels["calls"].to_numpy()[named][order], first)
    pair_by, pair_name = pair[first] // len(name_of), pair[first] % len(name_of)
    ranked = np.lexsort((pair_name, -gpu, pair_by))  # per group: GPU time down, then name
    pair_by, pair_name, calls = pair_by[ranked], pair_name[ranked], calls[ranked]
    starts = np.flatnonzero(np.concatenate([[True], pair_by[1:] != pair_by[:-1]]))
    within = np.arange(len(pair_by)) - np.repeat(starts, np.diff(np.append(starts, len(pair_by))))
    kept = within < limit
    joined = _joined_texts(np.asarray(name_of, dtype=object), pair_name[kept], calls[kept], within[kept], limit)
    return pd.Series(joined, index=np.asarray(by_of)[pair_by[starts]], dtype=object)


def _joined_texts(names: np.ndarray, name_code: np.ndarray, calls: np.ndarray, within: np.ndarray,
                  limit: int) -> np.ndarray:
    """Per group (its items contiguous, ``within`` 0 at each group's first): "name ×calls; …" of its items.
    Groups of the same (name, calls) items share one text, made once (the ranks of a job repeat the same op
    nodes: ~70 distinct texts for 15k nodes), and one string object (Arrow then encodes it once)."""
    first = np.flatnonzero(within == 0)
    group = np.cumsum(within == 0) - 1
    if calls.dtype.kind not in "iu" or len(first) == 0 or calls.max() >= 2 ** 31:  # each group's own text
        text = [f"{n} ×{c}" for n, c in zip(names[name_code].tolist(), calls.tolist())]
        bounds = np.append(first, len(text)).tolist()
        return np.asarray(["; ".join(text[a:b]) for a, b in zip(bounds[:-1], bounds[1:])], dtype=object)
    key = np.full((len(first), 2 * limit), -1, dtype=np.int64)
    key[group, 2 * within] = name_code
    key[group, 2 * within + 1] = calls
    which = np.zeros(len(first), dtype=np.int64)
    for column in key.T:  # rows coded column by column (codes stay below the groups' count)
        which = pd.factorize(which * (int(column.max()) + 2) + column + 1)[0].astype(np.int64)
    one = np.unique(which, return_index=True)[1]  # each distinct row's first group
    texts = np.empty(len(one), dtype=object)
    ends = np.append(first[1:], len(name_code))
    for j, g in enumerate(one.tolist()):
        a, b = int(first[g]), int(ends[g])
        texts[j] = "; ".join(f"{n} ×{c}" for n, c in zip(names[name_code[a:b]].tolist(), calls[a:b].tolist()))
    return texts[which]


OP_TYPE_COLUMNS = ["op_type", "ops", "calls"] + [
    f"{m}_{s}" for m in ("cpu_time", "gpu_time", "cpu_overhead", "gpu_idle") for s in ("total", "avg", "min", "max")
] + ["kernel_count", "tc_eligible", "using_tc", "kernels"]


def _op_types(ops: pd.DataFrame, roots: np.ndarray, nodes: pd.DataFrame, op_kernels: pd.DataFrame) -> pd.DataFrame:
    """Per op type of the op nodes: nodes, calls, and total / average / min / max per call."""
    if len(roots) == 0:
        return pd.DataFrame(columns=OP_TYPE_COLUMNS)
    type_codes, types = pd.factorize(nodes["op_type"])
    return _op_types_coded(ops, roots, nodes, type_codes, np.asarray(types, dtype=object), op_kernels)


def _op_types_coded(ops: pd.DataFrame, roots: np.ndarray, nodes: pd.DataFrame, type_codes: np.ndarray,
                    types: np.ndarray, op_kernels: pd.DataFrame) -> pd.DataFrame:
    """:func:`_op_types` with the nodes' types already coded (``types[type_codes]`` is each node's type)."""
    type_of_node = pd.Series(type_codes, index=nodes["node_id"].to_numpy())
    code = type_of_node.reindex(ops["node_id"].to_numpy()[roots]).to_numpy(np.int64)
    dur, api = ops["dur"].to_numpy(np.int64)[roots], ops["api_time"].to_numpy(np.int64)[roots]
    per_call = {"cpu_time": dur, "gpu_time": ops["gpu_time"].to_numpy(np.int64)[roots],
                "cpu_overhead": np.maximum(dur - api, 0), "gpu_idle": ops["gpu_idle"].to_numpy(np.int64)[roots]}
    calls, stats = group_stats(code, len(types), per_call)
    columns: dict = {"op_type": types, "ops": np.bincount(type_codes, minlength=len(types)), "calls": calls}
    for metric, (total, low, high) in stats.items():
        with np.errstate(divide="ignore", invalid="ignore"):
            avg = total / calls
        columns.update({f"{metric}_total": total, f"{metric}_avg": avg, f"{metric}_min": low,
                        f"{metric}_max": high})
    columns["kernel_count"] = _sum_by(type_codes, nodes["kernel_count"].to_numpy(np.int64), len(types))
    for col in ("tc_eligible", "using_tc"):
        columns[col] = np.bincount(type_codes, weights=nodes[col].to_numpy(bool), minlength=len(types)) > 0
    out = pd.DataFrame(columns)
    typed = op_kernels.assign(code=type_of_node.reindex(op_kernels["node_id"].to_numpy()).to_numpy(np.int64))
    out["kernels"] = string_column(_top_kernels(typed, "code").reindex(np.arange(len(types))).fillna("")
                                   .to_numpy(dtype=object))
    return out[OP_TYPE_COLUMNS]


def _kernel_summary(kernels: pd.DataFrame, codes: np.ndarray, names: pd.Index, by: list[str]) -> pd.DataFrame:
    """Kernel time statistics per kernel name (and ``by``), grouped on integer name codes; the names are taken
    from ``names`` as they are (Arrow strings stay Arrow strings, not converted to Python objects and back),
    ``name_code`` (last) their positions in it."""
    keys = [kernels[b].to_numpy(np.int64) for b in by] + [np.asarray(codes, dtype=np.int64)]
    group = np.zeros(len(kernels), dtype=np.int64)
    for key in keys:  # groups in order of first appearance (as groupby(sort=False)), one key at a time
        low, high = int(key.min(initial=0)), int(key.max(initial=0))
        if high == low and len(key):  # (a constant key, a single trace's rank, splits no group)
            continue
        group = pd.factorize(group * (high - low + 1) + (key - low))[0].astype(np.int64)
    first = _first_rows(group)
    uses_tc = kernels["uses_tc"].to_numpy()
    calls, stats = group_stats(group, len(first), {"dur": kernels["dur"].to_numpy(np.int64),
                                                   "tc": uses_tc.astype(np.int64)})
    total, low_ns, high_ns = stats["dur"]
    code = keys[-1][first] % max(len(names), 1)  # a missing name (-1): the last, as numpy indexes
    return pd.DataFrame({**{b: key[first] for b, key in zip(by, keys)}, "kernel_name": _text_values(names.take(code)),
                         "uses_tc": stats["tc"][2].astype(uses_tc.dtype), "calls": calls, "gpu_time_ns": total,
                         "avg_ns": total / np.maximum(calls, 1), "min_ns": low_ns, "max_ns": high_ns,
                         "name_code": code})  # one frame, not a column inserted after (~3 ms each)


def _first_rows(codes: np.ndarray) -> np.ndarray:
    """The first row of each code, codes numbered by first appearance (``pd.factorize``'s): where their running
    maximum steps up (what ``np.unique(codes, return_index=True)[1]`` gives, without its sort)."""
    if not len(codes):
        return np.zeros(0, np.intp)
    seen = np.maximum.accumulate(codes)
    return np.flatnonzero(np.r_[True, seen[1:] > seen[:-1]])


def _text_values(values: pd.Index | pd.Series):
    """Values to put in a frame's column: a column of pandas' default string dtype its own array (what its
    object array would be converted back to), anything else the object array."""
    return values.array if values.dtype == _DEFAULT_STRINGS else values.to_numpy()


#: the dtype pandas gives a column of Python strings (``str`` in pandas 3, object before)
_DEFAULT_STRINGS = pd.Series(np.array([""], dtype=object)).dtype


GROUP_METRICS = ["calls", "kernel_count", "gpu_time_ns", "tc_gpu_time_ns", "cpu_time_ns", "api_time_ns",
                 "cpu_overhead_ns", "gpu_idle_ns"]


def _groups(nodes: pd.DataFrame, roots: pd.DataFrame, api: pd.DataFrame, gpu: pd.DataFrame,
            lo: int, hi: int) -> pd.DataFrame:
    """The Group Ops tree: every scope prefix is a group of the op nodes below it, op nodes are its leaves.

    A group's CPU, API and GPU times are the *union* of its members' intervals inside the window (their calls,
    the API calls beneath them, the GPU activity they launched), so nothing counts twice and no group exceeds
    the wall clock; its GPU idle is the span of that GPU activity less its union. Calls and kernel counts add.
    """
    columns = ["group_id", "parent_group_id", "is_group", "level", "name", "path", "node_id", *GROUP_METRICS,
               "tc_eligible", "using_tc"]
    if nodes.empty:
        return pd.DataFrame(columns=columns)
    scopes = pd.Index(pd.unique(nodes["scope"].to_numpy(dtype=object)))
    groups: dict[str, int] = {}
    rows: list[dict] = []
    chains = []  # per distinct scope, the group ids of its prefixes (outermost first)
    for scope in scopes:
        parts = [p for p in str(scope).split("/") if p]
        chain, parent = [], -1
        for depth in range(len(parts)):
            path = "/".join(parts[: depth + 1])
            if path not in groups:
                groups[path] = len(groups)
                rows.append({"parent_group_id": parent, "level": depth + 1, "name": parts[depth] + "/",
                             "path": path})
            parent = groups[path]
            chain.append(parent)
        chains.append(chain)
    n_groups = len(rows)
    grp = pd.DataFrame(rows, columns=["parent_group_id", "level", "name", "path"])
    node_scope = pd.Series(scopes.get_indexer(nodes["scope"].to_numpy(dtype=object)), index=nodes["node_id"])

    def expand(node_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(group, row) pairs: each row counted in every group of its node's scope."""
        codes = node_scope.reindex(node_ids).fillna(-1).to_numpy(np.int64)
        lens = np.array([len(c) for c in chains], dtype=np.int64)
        flat = np.array([g for c in chains for g in c], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(lens)[:-1]])
        has = codes >= 0
        rows_ = np.flatnonzero(has)
        n_each = lens[codes[rows_]]
        rep = np.repeat(rows_, n_each)
        within = np.arange(len(rep)) - np.repeat(np.cumsum(n_each) - n_each, n_each)
        return flat[offsets[codes[rep]] + within], rep

    def union_of(frame: pd.DataFrame, node_col: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        starts = np.clip(frame["start"].to_numpy(np.int64), lo, hi)
        ends = np.clip(frame["end"].to_numpy(np.int64), lo, hi)
        g, r = expand(frame[node_col].to_numpy(np.int64))
        return union_per_group(g, starts[r], ends[r], n_groups)

    cpu, _, _ = union_of(roots, "node_id")
    api_u, _, _ = union_of(api, "node_id")
    gpu_u, first, last = union_of(gpu, "node_id")
    tc_u, _, _ = union_of(gpu[gpu["uses_tc"]], "node_id")
    g_nodes, r_nodes = expand(nodes["node_id"].to_numpy(np.int64))
    metrics: dict[str, np.ndarray] = {
        col: np.bincount(g_nodes, weights=nodes[col].to_numpy(np.int64)[r_nodes], minlength=n_groups
                         ).round().astype(np.int64) for col in ("calls", "kernel_count")}
    metrics.update({col: np.bincount(g_nodes, weights=nodes[col].astype(bool).to_numpy()[r_nodes],
                                     minlength=n_groups) > 0 for col in ("tc_eligible", "using_tc")})
    metrics.update(cpu_time_ns=cpu, api_time_ns=api_u, gpu_time_ns=gpu_u, tc_gpu_time_ns=tc_u,
                   cpu_overhead_ns=np.maximum(cpu - api_u, 0), gpu_idle_ns=last - first - gpu_u,
                   is_group=np.ones(n_groups, dtype=bool), node_id=np.full(n_groups, -1, dtype=np.int64),
                   group_id=np.arange(n_groups, dtype=np.int64))
    grp = pd.concat([grp, pd.DataFrame(metrics)], axis=1)  # one frame, not a column at a time
    leaves = nodes.assign(
        group_id=np.arange(n_groups, n_groups + len(nodes), dtype=np.int64),
        parent_group_id=[chains[c][-1] if c >= 0 and chains[c] else -1 for c in node_scope.to_numpy(np.int64)],
        is_group=False, level=[len(chains[c]) + 1 if c >= 0 else 1 for c in node_scope.to_numpy(np.int64)],
        name=nodes["op_name"],
        path=[(sc + "/" if sc else "") + nm for sc, nm in zip(nodes["scope"], nodes["op_name"])])
    out = pd.concat([grp, leaves[columns]], ignore_index=True)[columns]
    return out.astype(dict.fromkeys(GROUP_METRICS, np.int64))


def resolve_range(an: Analysed, rank: int, iter_start: int | None, iter_stop: int | None) -> pd.DataFrame:
    """The iterations of the aggregation, or a clear error for a range outside the profile."""
    return an.iterations.iloc[_chosen_rows(an, rank, iter_start, iter_stop)]


def _chosen_rows(an: Analysed, rank: int, iter_start: int | None, iter_stop: int | None) -> np.ndarray:
    """:func:`resolve_range`'s rows of ``an.iterations`` (by iteration number), found with numpy: a job calls
    it once per rank."""
    if iter_start is not None and iter_stop is not None and iter_stop < iter_start:
        raise DlscopeError(f"--iter-start {iter_start} is after --iter-stop {iter_stop}")
    all_numbers = an.iterations["iteration"].to_numpy()
    rows = np.flatnonzero(an.iterations["rank"].to_numpy() == rank)
    rows = rows[np.argsort(all_numbers[rows], kind="stable")]
    numbers = all_numbers[rows]
    lo = int(numbers.min()) if iter_start is None else int(iter_start)
    hi = int(numbers.max()) if iter_stop is None else int(iter_stop)
    chosen = rows[(numbers >= lo) & (numbers <= hi)]
    if len(chosen) == 0:
        raise DlscopeError(f"no iterations from {lo} to {hi}; the profile has iterations "
                           f"{int(numbers.min())}..{int(numbers.max())}")
    return chosen


def aggregate(an: Analysed, rank: int, iter_start: int | None = None, iter_stop: int | None = None) -> Aggregation:
    """Compute one aggregation of one rank over [iter_start, iter_stop] (inclusive; default all)."""
    return aggregate_ranks(an, [rank], iter_start, iter_stop)[0]


def aggregate_ranks(an: Analysed, ranks: list[int], iter_start: int | None = None,
                    iter_stop: int | None = None) -> list[Aggregation]:
    """One aggregation per rank of ``ranks`` (in that order), each over [iter_start, iter_stop]."""
    job = JobAggregation(an, ranks, iter_start, iter_stop)
    return [job.aggregate(r) for r in ranks]


class JobAggregation:
    """The aggregations of several ranks, their kernel and op tables (kernel statistics, op nodes, op types,
    their top-kernel texts) grouped once over the rows of all ranks (a rank is part of every key), not once
    per rank: a job of many small ranks spent most of its aggregation time in per-call pandas overhead.
    Each rank's rows come out in the order a rank alone gives them, so every aggregation is the one its rank
    alone gives. Built once; :meth:`aggregate` then computes one rank's (forked workers share the object)."""

    def __init__(self, an: Analysed, ranks: list[int], iter_start: int | None = None, iter_stop: int | None = None):
        self.an = an
        self._bounds: dict[int, tuple[int, int, int, int]] | None = None
        starts, ends = (an.iterations[c].to_numpy(np.int64) for c in ("start", "end"))
        self.chosen, self.windows_of = {}, {}
        for r in ranks:  # the rank's iterations in the range, by start
            rows = _chosen_rows(an, r, iter_start, iter_stop)
            rows = rows[np.argsort(starts[rows], kind="stable")]
            self.chosen[r] = an.iterations.iloc[rows]
            self.windows_of[r] = _window_arrays(starts[rows], ends[rows])
        self.tables = _JobTables(an, {r: c["iteration"].to_numpy() for r, c in self.chosen.items()})
        self.groups = _JobGroups(self.tables, an, {r: (b[2], b[3]) for r, b in self.bounds().items()})
        # every iteration of each rank by start (a rank's rows contiguous), and each rank's window points
        self.iterations = an.iterations.sort_values(["rank", "start"], kind="stable").reset_index(drop=True)
        self.iterations_at = _positions(self.iterations["rank"].to_numpy(np.int64), ranks)
        it_start, it_end = (self.iterations[c].to_numpy(np.int64) for c in ("start", "end"))
        self.all_windows = [_window_arrays(it_start[rows], it_end[rows]) for rows in self.iterations_at]
        points = []
        for r, (all_starts, all_ends) in zip(ranks, self.all_windows):
            starts, ends = self.windows_of[r]
            points.append(np.concatenate([[starts[0], ends[-1]], starts, ends, all_starts, all_ends]))
        self.segments = Segments(self.tables.category_sets(), points)
        self.bounds_of = self.bounds()
        self.gpus, self.gpus_at = _job_gpu_tables(self.tables, {r: (b[2], b[3]) for r, b in self.bounds_of.items()})
        self.iteration_rows = _job_iteration_tables(self)
        ends = np.cumsum([len(a) for a in self.iterations_at])
        self.iteration_rows_at = [slice(int(e - len(a)), int(e)) for e, a in zip(ends, self.iterations_at)]

    def bounds(self) -> dict[int, tuple[int, int, int, int]]:
        """Per rank: (iter_start, iter_stop, window_start, window_end) of its aggregation (as its row has them)."""
        if self._bounds is None:  # made once: the set-up and the pipeline ask for it several times
            self._bounds = {}
            for r, chosen in self.chosen.items():
                starts, ends = self.windows_of[r]
                its = chosen["iteration"].to_numpy()
                self._bounds[r] = (int(its.min()), int(its.max()), int(starts[0]), int(ends[-1]))
        return dict(self._bounds)

    def add_node_columns(self, columns: dict) -> None:
        """Add columns to the op nodes of every rank at once (aligned with ``tables.nodes``; e.g. each node's
        MFU): each rank's :attr:`Aggregation.ops` slice then has them, without a frame made per rank."""
        self.tables.nodes = self.tables.nodes.assign(**columns)

    def aggregate(self, rank: int) -> Aggregation:
        i = self.tables.ranks.index(rank)
        at = self.gpus_at[i]
        gpus = None if at is None else self.gpus.iloc[at].reset_index(drop=True)
        iterations = self.iteration_rows.iloc[self.iteration_rows_at[i]].reset_index(drop=True)
        if not self.segments.has_loader[i]:  # no data loading seen: no reader cost, as the rank alone gives
            iterations["reader_cost_ns"] = np.full(len(iterations), None, dtype=object)
        return _aggregate_rank(self.an, rank, self.chosen[rank], self.tables, self.groups,
                               self.segments.of(i), gpus, iterations, self.windows_of[rank])


class _JobTables:
    """The aggregation tables of every rank at once: rows of all ranks in profiled iterations, grouped by
    keys that include the rank (node ids are unique across ranks), then cut back into one slice per rank."""

    def __init__(self, an: Analysed, profiled: dict[int, np.ndarray]):
        self.ranks = list(profiled)
        self.profiled = profiled
        kernels, ops = an.profile.table("kernels"), an.profile.table("ops")
        # op ids are unique across ranks: one map for all (kernels may hang under ops of other iterations)
        self.node_of = pd.Series(ops["node_id"].to_numpy(), index=id_index(ops["op_id"].to_numpy()))
        ops = _rows(ops, _in_profiled(ops, profiled))  # only the chosen ranks' profiled iterations
        self.ops = ops
        ak = _rows(kernels, _in_profiled(kernels, profiled))
        self.ak = ak.assign(node_id=_lookup(self.node_of, ak["root_op_id"]))
        self.ak_at: list = _positions(self.ak["rank"].to_numpy(np.int64), self.ranks)
        self.roots = roots = np.flatnonzero(ops["parent_id"].to_numpy() < 0)

        codes, self.kernel_names = pd.factorize(self.ak["name"])
        launched = self.ak["node_id"].to_numpy() >= 0
        self.op_kernels = _kernel_summary(self.ak[launched], codes[launched], self.kernel_names, ["rank", "node_id"])
        self.op_kernels_at: list = _positions(self.op_kernels.pop("rank").to_numpy(np.int64), self.ranks)
        op_kernel_codes = self.op_kernels.pop("name_code").to_numpy()
        self.nodes = _op_nodes(ops, roots, self.op_kernels)
        root_nodes, first = np.unique(ops["node_id"].to_numpy(np.int64)[roots], return_index=True)
        rank_of_node = pd.Series(ops["rank"].to_numpy(np.int64)[roots][first], index=root_nodes)
        self.node_rank = rank_of_node.reindex(self.nodes["node_id"].to_numpy()).to_numpy(np.int64)
        self.nodes_at: list = _positions(self.node_rank, self.ranks)
        self.kernel_rows = _kernel_summary(self.ak, codes, self.kernel_names, ["rank"])
        self.kernel_rows_at: list = _positions(self.kernel_rows.pop("rank").to_numpy(np.int64), self.ranks)
        op_names = self._kernel_op_names(self.kernel_rows.pop("name_code").to_numpy(), op_kernel_codes)
        self.op_types = self._op_types()
        self._category_columns(an)
        # every per-rank table rank by rank, so that a rank's rows are a slice (a view, not a gather)
        self.kernel_rows["op_names"] = string_column(pd.Series(op_names).fillna("").to_numpy(dtype=object))
        self.ak, self.ak_at = _rank_major(self.ak, self.ak_at)
        self.nodes, self.nodes_at = _rank_major(self.nodes.assign(rank=self.node_rank), self.nodes_at)
        self.op_kernels, self.op_kernels_at = _rank_major(self.op_kernels, self.op_kernels_at)
        self.kernel_rows, self.kernel_rows_at = _rank_major(self.kernel_rows, self.kernel_rows_at)
        i = np.arange(len(self.ranks))
        self.types_at = [slice(int(a), int(b)) for a, b in zip(np.searchsorted(self.type_rank, i, side="left"),
                                                                np.searchsorted(self.type_rank, i, side="right"))]

    def _category_columns(self, an: Analysed) -> None:
        """What :meth:`category_sets` reads, for all ranks' rows at once (every row of a rank counts)."""
        k, m, ops, rg = (an.profile.table(n) for n in ("kernels", "memops", "ops", "ranges"))
        self._cat = {}
        for name, frame in (("kernels", k), ("memops", m), ("ops", ops), ("ranges", rg)):
            self._cat[name] = (frame["start"].to_numpy(np.int64), frame["end"].to_numpy(np.int64),
                               _positions(frame["rank"].to_numpy(np.int64), self.ranks))
        self._tc = k["uses_tc"].to_numpy(bool)
        self.device_of = {"kernels": k["device"].to_numpy(np.int64), "memops": m["device"].to_numpy(np.int64)}
        cpu = rg["device"].to_numpy() < 0
        self._ranges_of = {c: cpu & (rg["category"] == c).to_numpy(bool) for c in ("dataloader", "io")}
        self._ops_of = {c: _name_is(ops, c) for c in ("dataloader", "io")}

    def rank_rows(self, name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(starts, ends, rank index or -1 for ranks not chosen) of every row of one of the tables."""
        starts, ends, at = self._cat[name]
        rank = np.full(len(starts), -1, dtype=np.int64)
        for i, rows in enumerate(at):
            rank[rows] = i
        return starts, ends, rank

    def category_sets(self) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Interval sets of the breakdown categories in priority order (all but 'other'): kernels on and off
        Tensor Cores, memory operations, data loading and I/O (CPU ranges of those categories, then ops named
        so), CPU ops; every row of the chosen ranks, as (starts, ends, rank index)."""
        def of(name: str, mask=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            starts, ends, rank = self.rank_rows(name)
            rows = np.flatnonzero(rank >= 0) if mask is None else np.flatnonzero((rank >= 0) & mask)
            return starts[rows], ends[rows], rank[rows]

        kind = {}
        for c in ("dataloader", "io"):
            ranges, ops = of("ranges", self._ranges_of[c]), of("ops", self._ops_of[c])
            kind[c] = (np.concatenate([ranges[0], ops[0]]), np.concatenate([ranges[1], ops[1]]),
                       np.concatenate([ranges[2], ops[2]]))
        return [of("kernels", self._tc), of("kernels", ~self._tc), of("memops"), kind["dataloader"], kind["io"],
                of("ops")]

    def _kernel_op_names(self, row_codes: np.ndarray, op_kernel_codes: np.ndarray) -> np.ndarray:
        """Per kernel_rows row: the op nodes that launched its kernel name on its rank (``_kernel_ops``);
        ``row_codes``, ``op_kernel_codes``: the kernel names' codes of kernel_rows and op_kernels."""
        rank_code = np.zeros(len(self.kernel_rows), dtype=np.int64)
        for i, rows in enumerate(self.kernel_rows_at):
            rank_code[rows] = i
        n_names = len(self.kernel_names)
        row_key = rank_code * n_names + row_codes
        ok = self.op_kernels
        ok_rank = np.zeros(len(ok), dtype=np.int64)
        for i, rows in enumerate(self.op_kernels_at):
            ok_rank[rows] = i
        named = pd.DataFrame({
            "k": ok_rank * n_names + op_kernel_codes,
            "kernel_name": ok["node_id"].map(self.nodes.set_index("node_id")["op_name"]).to_numpy(dtype=object),
            "gpu_time_ns": ok["gpu_time_ns"].to_numpy(), "calls": ok["calls"].to_numpy()})
        return _top_kernels(named, "k").reindex(row_key).to_numpy(dtype=object)

    def _op_types(self) -> pd.DataFrame:
        """``_op_types`` of every rank: types coded per rank in order of first appearance, codes of a rank
        contiguous (nodes of rank i before those of rank i+1)."""
        order = np.concatenate(self.nodes_at) if self.nodes_at else np.zeros(0, dtype=np.int64)
        nodes = self.nodes.iloc[order]
        rank_code = np.repeat(np.arange(len(self.ranks)), [len(p) for p in self.nodes_at])
        type_codes, _ = pd.factorize(nodes["op_type"])
        pair_codes, pairs = pd.factorize(rank_code * (type_codes.max(initial=0) + 1) + type_codes)
        types = np.asarray(pd.unique(nodes["op_type"].to_numpy(dtype=object)), dtype=object)
        self.type_names = types[pairs % (type_codes.max(initial=0) + 1)] if len(pairs) else np.zeros(0, object)
        self.type_rank = rank_code[np.unique(pair_codes, return_index=True)[1]] if len(pairs) else rank_code[:0]
        return _op_types_coded(self.ops, self.roots, nodes, pair_codes, self.type_names, self.op_kernels)

    def slice(self, frame: pd.DataFrame, at: list, rank: int) -> pd.DataFrame:
        return frame.iloc[at[self.ranks.index(rank)]].reset_index(drop=True)


class _JobGroups:
    """:func:`_groups` of every rank at once: groups keyed by (rank, scope prefix), every rank's intervals in
    one :func:`union_per_group`, each clipped to its rank's window; the rows of rank i come out contiguous and
    numbered as the rank alone numbers them (groups in order of discovery, then the op nodes' leaves)."""

    def __init__(self, job: _JobTables, an: Analysed, windows: dict[int, tuple[int, int]]):
        self.at: list[slice | None] = [None] * len(job.ranks)
        self.table = pd.DataFrame()
        nodes = job.nodes  # rank by rank
        node_rank = np.repeat(np.arange(len(job.ranks)), [a.stop - a.start for a in job.nodes_at])
        scope_codes, scopes = pd.factorize(pd.Series(nodes["scope"].to_numpy(dtype=object)))
        # per distinct scope: its prefixes' paths (outermost first), the group each one names
        path_ids: dict[str, int] = {}
        words: list[str] = []
        chain_of_scope = []
        for scope in scopes:
            parts = [p for p in str(scope).split("/") if p]
            chain = []
            for depth in range(len(parts)):
                path = "/".join(parts[: depth + 1])
                if path not in path_ids:
                    path_ids[path] = len(path_ids)
                    words.append(parts[depth])
                chain.append(path_ids[path])
            chain_of_scope.append(chain)
        paths = np.array(list(path_ids), dtype=object)
        # (rank, scope) pairs in order of the nodes, rank by rank; each pair's chain of prefixes
        pair_codes, pair_keys = pd.factorize(node_rank * (len(scopes) + 1) + scope_codes)
        pair_rank, pair_scope = pair_keys // (len(scopes) + 1), pair_keys % (len(scopes) + 1)
        lens = np.array([len(chain_of_scope[s]) for s in pair_scope], dtype=np.int64)
        flat_path = np.array([p for s in pair_scope for p in chain_of_scope[s]], dtype=np.int64)
        flat_rank = np.repeat(pair_rank, lens)
        flat_depth = np.arange(len(flat_path)) - np.repeat(np.cumsum(lens) - lens, lens)
        # groups: (rank, path) in order of discovery, so each rank's are contiguous and in its own order
        flat_group, first = pd.factorize(flat_rank * (len(paths) + 1) + flat_path)
        n_groups = len(first)
        if n_groups == 0:  # no scopes at all: every rank's table is its own (leaves only, or empty)
            return
        first_at = np.unique(flat_group, return_index=True)[1]
        parent = np.where(flat_depth > 0, np.concatenate([[-1], flat_group[:-1]]), -1)[first_at]
        group_rank = flat_rank[first_at]
        per_rank_groups = np.bincount(group_rank, minlength=len(job.ranks))
        offset = np.concatenate([[0], np.cumsum(per_rank_groups)[:-1]])
        self.pair_flat = (np.concatenate([[0], np.cumsum(lens)[:-1]]), lens, flat_group)
        self.node_pair = pd.Series(pair_codes, index=nodes["node_id"].to_numpy(np.int64))

        lo = np.array([windows[r][0] for r in job.ranks], dtype=np.int64)
        hi = np.array([windows[r][1] for r in job.ranks], dtype=np.int64)
        roots = job.ops.iloc[job.roots]
        # (only the columns read below taken: not a copy of each table's rows in every column)
        api, memops = (_rows(an.profile.table(n)[cols], _in_profiled(an.profile.table(n), job.profiled))
                       for n, cols in (("api_calls", ["op_id", "start", "end"]),
                                       ("memops", ["root_op_id", "start", "end"])))
        ops = an.profile.table("ops")
        root_of = pd.Series(ops["root_id"].to_numpy(), index=id_index(ops["op_id"].to_numpy()))
        api_node = _lookup(job.node_of, _lookup(root_of, api["op_id"]))
        gpu_node = np.concatenate([job.ak["node_id"].to_numpy(np.int64), _lookup(job.node_of, memops["root_op_id"])])
        gpu_start = np.concatenate([job.ak["start"].to_numpy(np.int64), memops["start"].to_numpy(np.int64)])
        gpu_end = np.concatenate([job.ak["end"].to_numpy(np.int64), memops["end"].to_numpy(np.int64)])
        gpu_tc = np.concatenate([job.ak["uses_tc"].to_numpy(bool), np.zeros(len(memops), dtype=bool)])

        def union_of(node_ids: np.ndarray, starts: np.ndarray, ends: np.ndarray):
            g, r = self._expand(node_ids)
            rank = group_rank[g]
            return union_per_group(g, np.clip(starts[r], lo[rank], hi[rank]), np.clip(ends[r], lo[rank], hi[rank]),
                                   n_groups)

        cpu, _, _ = union_of(roots["node_id"].to_numpy(np.int64), roots["start"].to_numpy(np.int64),
                             roots["end"].to_numpy(np.int64))
        api_u, _, _ = union_of(api_node, api["start"].to_numpy(np.int64), api["end"].to_numpy(np.int64))
        gpu_u, g_first, g_last = union_of(gpu_node, gpu_start, gpu_end)
        tc_u, _, _ = union_of(gpu_node[gpu_tc], gpu_start[gpu_tc], gpu_end[gpu_tc])
        g_nodes, r_nodes = self._expand(nodes["node_id"].to_numpy(np.int64))
        metrics: dict[str, np.ndarray] = {
            col: np.bincount(g_nodes, weights=nodes[col].to_numpy(np.int64)[r_nodes], minlength=n_groups
                             ).round().astype(np.int64) for col in ("calls", "kernel_count")}
        metrics.update({col: np.bincount(g_nodes, weights=nodes[col].astype(bool).to_numpy()[r_nodes],
                                         minlength=n_groups) > 0 for col in ("tc_eligible", "using_tc")})
        local_parent = np.where(parent >= 0, parent - offset[group_rank], -1)
        group_path = flat_path[first_at]
        grp = pd.DataFrame({
            "group_id": np.arange(n_groups, dtype=np.int64) - offset[group_rank],
            "parent_group_id": local_parent.astype(np.int64), "is_group": np.ones(n_groups, dtype=bool),
            "level": (flat_depth[first_at] + 1).astype(np.int64),
            "name": np.array([words[p] + "/" for p in group_path], dtype=object), "path": paths[group_path],
            "node_id": np.full(n_groups, -1, dtype=np.int64), **metrics,
            "cpu_time_ns": cpu, "api_time_ns": api_u, "gpu_time_ns": gpu_u, "tc_gpu_time_ns": tc_u,
            "cpu_overhead_ns": np.maximum(cpu - api_u, 0), "gpu_idle_ns": g_last - g_first - gpu_u})
        # the leaves: each op node under the innermost group of its scope
        pair_start, _, _ = self.pair_flat
        node_chain_len = lens[pair_codes]
        last_group = np.where(node_chain_len > 0, flat_group[pair_start[pair_codes] + node_chain_len - 1], -1)
        per_rank_nodes = np.bincount(node_rank, minlength=len(job.ranks))
        node_offset = np.concatenate([[0], np.cumsum(per_rank_nodes)[:-1]])
        within = np.arange(len(nodes)) - node_offset[node_rank]
        leaves = nodes.assign(
            group_id=per_rank_groups[node_rank] + within,
            parent_group_id=np.where(last_group >= 0, last_group - offset[node_rank], -1).astype(np.int64),
            is_group=False, level=node_chain_len + 1, name=nodes["op_name"],
            path=[(sc + "/" if sc else "") + nm for sc, nm in zip(nodes["scope"].to_numpy(dtype=object).tolist(),
                                                                  nodes["op_name"].to_numpy(dtype=object).tolist())])
        columns = ["group_id", "parent_group_id", "is_group", "level", "name", "path", "node_id", *GROUP_METRICS,
                   "tc_eligible", "using_tc"]
        both = pd.concat([grp[columns], leaves[columns]], ignore_index=True)
        # rank by rank: its groups, then its leaves
        order = np.lexsort((np.arange(len(both)), np.concatenate([np.zeros(n_groups), np.ones(len(nodes))]),
                            np.concatenate([group_rank, node_rank])))
        self.table = both.iloc[order].reset_index(drop=True).astype(dict.fromkeys(GROUP_METRICS, np.int64))
        ends = np.cumsum(per_rank_groups + per_rank_nodes)
        for i in range(len(job.ranks)):
            if per_rank_groups[i] and per_rank_nodes[i]:  # else the rank's own (empty or group-less) table
                self.at[i] = slice(int(ends[i] - per_rank_groups[i] - per_rank_nodes[i]), int(ends[i]))

    def _expand(self, node_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(group, row) pairs: each row counted in every group of its node's (rank, scope)."""
        start, lens, flat = self.pair_flat
        codes = self.node_pair.reindex(node_ids).fillna(-1).to_numpy(np.int64)
        rows = np.flatnonzero(codes >= 0)
        n_each = lens[codes[rows]]
        rep = np.repeat(rows, n_each)
        within = np.arange(len(rep)) - np.repeat(np.cumsum(n_each) - n_each, n_each)
        return flat[start[codes[rep]] + within], rep

    def of(self, i: int) -> pd.DataFrame | None:
        """Rank i's table, None when the rank's own computation must make it (no op node or no group)."""
        at = self.at[i]
        return None if at is None else self.table.iloc[at].reset_index(drop=True)


def _in_profiled(frame: pd.DataFrame, profiled: dict[int, np.ndarray]) -> np.ndarray:
    """Rows whose (rank, iteration) is one of the aggregations' profiled iterations."""
    rank, it = frame["rank"].to_numpy(np.int64), frame["iteration"].to_numpy(np.int64)
    if len(profiled) == 1:  # one rank (a single trace): no grouping by rank needed
        (r, numbers), = profiled.items()
        return (rank == r) & in_small(it, numbers)
    # one integer key per (rank, iteration), every rank's profiled keys looked up at once
    wanted_rank = np.repeat(np.array(list(profiled), dtype=np.int64), [len(n) for n in profiled.values()])
    wanted_it = np.concatenate([np.asarray(n, dtype=np.int64) for n in profiled.values()])
    low = min(int(it.min(initial=0)), int(wanted_it.min(initial=0)))
    width = max(int(it.max(initial=0)), int(wanted_it.max(initial=0))) - low + 1
    return in_small(rank * width + (it - low), wanted_rank * width + (wanted_it - low))


def in_small(values: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """``np.isin(values, wanted)`` of integers whose wanted values span a small range (iteration numbers): looked
    up in a table of that range (``np.isin`` compares every value with each of a few dozen wanted in turn)."""
    values, wanted = np.asarray(values), np.asarray(wanted)
    if not len(wanted) or values.dtype.kind not in "iu" or wanted.dtype.kind not in "iu":
        return np.isin(values, wanted)
    lo, hi = int(wanted.min()), int(wanted.max())
    if hi - lo > 1 << 22:
        return np.isin(values, wanted)
    table = np.zeros(hi - lo + 2, bool)  # (the last slot: every value outside the range)
    table[wanted.astype(np.int64) - lo] = True
    at = values.astype(np.int64) - lo
    at[(at < 0) | (at > hi - lo)] = hi - lo + 1
    return table[at]


def _rank_major(frame: pd.DataFrame, at: list[np.ndarray]) -> tuple[pd.DataFrame, list[slice]]:
    """The frame's rows rank by rank (each rank's in its own order), and each rank's slice of them; the frame
    itself when its rows already are (a single trace, or a job whose tables follow the ranks)."""
    sizes = np.array([len(a) for a in at], dtype=np.int64)
    ends = np.cumsum(sizes)
    slices = [slice(int(e - n), int(e)) for e, n in zip(ends, sizes)]
    order = np.concatenate(at) if at else np.zeros(0, dtype=np.int64)
    if len(order) == len(frame) and bool((order == np.arange(len(frame))).all()):
        return frame, slices
    return frame.iloc[order].reset_index(drop=True), slices


def _positions(rank_of_row: np.ndarray, ranks: list[int]) -> list[np.ndarray]:
    """Row positions of each rank (in row order)."""
    order = np.argsort(rank_of_row, kind="stable")
    sorted_ranks = rank_of_row[order]
    lo = np.searchsorted(sorted_ranks, ranks, side="left")
    hi = np.searchsorted(sorted_ranks, ranks, side="right")
    return [order[a:b] for a, b in zip(lo, hi)]


def _aggregate_rank(an: Analysed, rank: int, chosen: pd.DataFrame, job: _JobTables,
                    job_groups: _JobGroups, segments: RankSegments, gpus: pd.DataFrame | None,
                    iterations: pd.DataFrame, windows: tuple[np.ndarray, np.ndarray] | None = None) -> Aggregation:
    """One rank's aggregation: its windows, breakdown, GPUs, iterations and groups, and its slice of the
    job's kernel and op tables."""
    fr = _rank_frames(an, rank)
    profiled = chosen["iteration"].to_numpy()
    starts, ends = _windows(chosen) if windows is None else windows
    lo, hi = int(starts[0]), int(ends[-1])
    wall = hi - lo
    parts = segments.breakdown(lo, hi)

    i = job.ranks.index(rank)
    ak = job.ak.iloc[job.ak_at[i]]
    # the rank's op calls as two columns (its frame is cut out only where a rank alone's tables are made)
    in_ops = in_small(_rank_column(fr, "ops", "iteration"), profiled)
    roots = np.flatnonzero(in_ops & (_rank_column(fr, "ops", "parent_id") < 0))
    if gpus is None:  # no device or an empty window: the rank's own table
        gpus = _gpu_table(fr, lo, hi, wall, ak).assign(rank=rank)
    has_gpu = (fr.rows("kernels") if isinstance(fr, _RankTables) else len(fr["kernels"])) > 0
    util = float(gpus["utilization"].mean()) if has_gpu and len(gpus) else None

    if len(roots):
        op_kernels = job.slice(job.op_kernels, job.op_kernels_at, rank)
        nodes = job.slice(job.nodes, job.nodes_at, rank)
        types = job.slice(job.op_types, job.types_at, rank)
    else:  # no op node: the empty tables a rank alone gives
        ops = fr["ops"]
        op_kernels = job.slice(job.op_kernels, job.op_kernels_at, rank)
        nodes = _op_nodes(ops, roots, op_kernels).assign(rank=rank)
        types = _op_types(ops, roots, nodes, op_kernels)
    node_elig = nodes["tc_eligible"].to_numpy(bool)
    eligible_nodes = np.unique(nodes["node_id"].to_numpy(np.int64)[node_elig])
    ak_dur, ak_tc = ak["dur"].to_numpy(np.int64), ak["uses_tc"].to_numpy(bool)
    elig = np.isin(ak["node_id"].to_numpy(np.int64), eligible_nodes)
    elig_time = int(ak_dur[elig].sum())
    tc_time = int(ak_dur[elig & ak_tc].sum())
    node_time = nodes["gpu_time_ns"].to_numpy(np.int64)
    node_gpu, elig_gpu = int(node_time.sum()), int(node_time[node_elig].sum())

    row = {
        "rank": rank, "iter_start": int(profiled.min()), "iter_stop": int(profiled.max()),
        "key_node": an.key_node or "", "iteration_method": an.iteration_methods.get(rank, "whole_profile"),
        "iterations_profiled": len(profiled), "window_start": lo, "window_end": hi, "wall_clock_ns": wall,
        "avg_iteration_ns": round_ns(Fraction(wall, len(profiled))) if len(profiled) else None,
        "gpu_busy_ns": int(gpus["busy_ns"].sum()) if has_gpu else None,
        "gpu_utilization": util,
        "kernel_count": len(ak), "kernel_time_ns": int(ak_dur.sum()), "tc_kernel_time_ns": int(ak_dur[ak_tc].sum()),
        "tc_eligible_kernel_time_ns": elig_time,
        "tc_kernel_efficiency": tc_time / elig_time if elig_time > 0 else None,
        "memory_ns": parts["memory"], **{f"{c}_ns": v for c, v in parts.items() if c != "memory"},
        "op_count": int(in_ops.sum()), "op_nodes": len(nodes), "tc_eligible_op_nodes": len(eligible_nodes),
        "op_nodes_using_tc": int(nodes["using_tc"].to_numpy(bool).sum()),
        "tc_eligible_gpu_time_pct": 100.0 * elig_gpu / node_gpu if node_gpu > 0 else None,
        "reader_cost_ns": segments.reader_cost(lo, hi),
    }
    groups = job_groups.of(i)
    if groups is None:  # no op node or no group: what the rank alone gives
        ops = fr["ops"]
        in_agg = {name: _rows(fr[name], np.isin(fr[name]["iteration"].to_numpy(), profiled))
                  for name in ("memops", "api_calls")}
        node_of = job.node_of
        api = in_agg["api_calls"]
        api = api[["op_id", "start", "end"]].assign(
            node_id=_lookup(node_of, _lookup(pd.Series(ops["root_id"].to_numpy(), index=ops["op_id"].to_numpy()),
                                             api["op_id"])))
        mem = in_agg["memops"]
        gpu = pd.concat([ak[["node_id", "start", "end", "uses_tc"]],
                         pd.DataFrame({"node_id": _lookup(node_of, mem["root_op_id"]), "start": mem["start"].to_numpy(),
                                       "end": mem["end"].to_numpy(), "uses_tc": False})], ignore_index=True)
        gpu["uses_tc"] = gpu["uses_tc"].astype(bool)
        root_calls = ops[["node_id", "start", "end"]].iloc[roots]
        groups = _groups(nodes, root_calls, api, gpu, lo, hi)
    kernel_rows = job.slice(job.kernel_rows, job.kernel_rows_at, rank)
    return Aggregation(
        row=row, gpus=gpus,
        iterations=iterations,
        ops=nodes, op_types=types, kernels=kernel_rows,
        op_kernels=op_kernels, groups=groups,
    )


def _rows(frame: pd.DataFrame, mask: np.ndarray) -> pd.DataFrame:
    """``frame[mask]``, without copying a table's columns when every row is kept (the usual aggregation)."""
    return frame if mask.all() else frame[mask]


def id_index(ids: np.ndarray, name: str | None = None) -> pd.Index:
    """An index of ids (ops by op id): a ``RangeIndex`` where they are consecutive, as an import numbers them, whose
    look-ups are arithmetic (an integer index hashes every id before its first look-up: ~4 ms per 100k)."""
    ids = np.asarray(ids)
    if len(ids) and ids.dtype.kind in "iu" and int(ids[-1]) - int(ids[0]) == len(ids) - 1 \
            and bool((np.diff(ids) == 1).all()):
        return pd.RangeIndex(int(ids[0]), int(ids[-1]) + 1, name=name)
    return pd.Index(ids, name=name)


def _lookup(mapping: pd.Series, keys, missing=-1) -> np.ndarray:
    """``mapping[key]`` per key (ids to ids or names), ``missing`` where the key is -1 or unknown."""
    out = mapping.reindex(np.asarray(keys)).to_numpy()
    if isinstance(missing, str):
        return np.where(pd.isna(out), missing, out).astype(object)
    return np.where(pd.isna(out), missing, out).astype(np.int64)
