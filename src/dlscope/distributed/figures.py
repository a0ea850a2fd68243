"""Per-rank figures of a job, its NCCL collectives, and which ranks straggle.

Per rank, inside its aggregation window, the GPU time line is cut by priority so the parts add up to
the wall clock: compute (any non-NCCL kernel runs) > exposed communication (only NCCL kernels run) >
memcpy (only memcpy/memset runs) > idle. ``communication_ns`` is all NCCL kernel time (the union),
overlapped or not; ``exposed_communication_ns`` is the part no compute kernel hides.

A collective ends at about the same moment on every rank, so the rank that arrives last has the
shortest kernel and the others wait for it: a rank's arrival lag in one collective is the longest
duration of that collective over the ranks minus its own. This needs no clock alignment across hosts.
Collectives are matched across ranks by type and occurrence number. The straggler score (0..1, 1 =
always last) is the mean normalised arrival lag where collectives match, else the normalised average
iteration time.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache

import numpy as np
import pandas as pd

from ..analyze.aggregation import id_index
from ..analyze.analysis import Analysed
from ..analyze.attribution import pack_keys
from ..analyze.dtypes import bytes_per_element
from ..analyze.intervals import clip, union_length, union_per_group
from ..nanoseconds import round_ns, round_ns_column
from .tables import table

RANK_COLUMNS = ["rank", "host", "world_size", "source_path", "iterations_profiled", "wall_clock_ns",
                "avg_iteration_ns", "gpu_utilization", "compute_ns", "communication_ns",
                "exposed_communication_ns", "memcpy_ns", "idle_ns", "comm_overlap", "collective_count",
                "collective_bytes", "busbw_gbps", "collective_lag_ns", "iteration_lag_ns", "straggler_score",
                "straggler_rank"]
COLLECTIVE_COLUMNS = ["collective_id", "rank", "source", "collective", "call_index", "name", "device", "stream",
                      "start", "end", "dur_ns", "iteration", "in_nelems", "out_nelems", "dtype", "msg_bytes",
                      "group_size", "algbw_gbps", "busbw_gbps", "arrival_lag_ns", "pg_name"]


@lru_cache(maxsize=1)
def _patterns() -> tuple[re.Pattern, re.Pattern]:
    t = table()
    return re.compile(t["nccl_kernel_pattern"]), re.compile(t["nvtx_collective_pattern"])


def collective_type(name: str) -> str:
    """Canonical collective ("allreduce", "allgather", ...) from a collective or kernel name, else ""."""
    names = table()["collective_names"]
    key = name.strip().lower()
    if key in names:
        return names[key]
    kernel, nvtx = _patterns()
    m = kernel.match(name) or nvtx.match(name)
    return names.get(m.group(1).lower(), m.group(1).lower()) if m else ""


def is_nccl_kernel(names: pd.Series) -> np.ndarray:
    """Whether each kernel name is an NCCL kernel (matched once per distinct name)."""
    kernel, _ = _patterns()
    if not len(names):
        return np.zeros(0, bool)
    code, distinct = pd.factorize(names, use_na_sentinel=False)
    return np.array([bool(kernel.match(n)) for n in distinct], bool)[code]


def busbw_factor(collective: str, n: int) -> float | None:
    """NCCL's bus-bandwidth factor: allreduce 2(n-1)/n, allgather/reducescatter/alltoall (n-1)/n, else 1."""
    spec = table()["busbw"].get(collective)
    if spec is None or n is None or n < 1:
        return None
    return spec["scale"] * ((n - 1) / n if spec["ring"] else 1.0)


def dtype_bytes(dtype: str) -> int:
    return bytes_per_element(dtype)


def _per_distinct(values, verdict) -> np.ndarray:
    """``[verdict(v) for v in values]`` as an object array, each distinct value looked at once (a job's 10k
    collectives repeat a few names and dtypes: ``Series.map`` called the function per row)."""
    values = np.asarray(values, dtype=object)
    if not len(values):
        return np.zeros(0, dtype=object)
    codes, distinct = pd.factorize(values, use_na_sentinel=False)
    out = np.empty(len(distinct), dtype=object)
    out[:] = [verdict(v) for v in distinct]
    return out[codes]


# ------------------------------------------------------------------------------------- collectives


def _comm_ops(an: Analysed) -> pd.DataFrame:
    """record_param_comms ops with their collective metadata (args, else their first input tensor)."""
    ops = an.profile.ops
    rpc = ops.loc[(ops["name"] == "record_param_comms").to_numpy(bool),  # only the columns read taken
                  ["op_id", "rank", "pid", "tid", "name", "start", "end", "input_shapes", "input_dtypes"]]
    args = an.profile.comm_args
    if len(args):
        args = args[args["kind"] == "op"].drop(columns=["kind", "device", "stream", "end"])
        rpc = rpc.merge(args.drop_duplicates(["rank", "pid", "tid", "start", "name"]),
                        on=["rank", "pid", "tid", "start", "name"], how="left")
    for col, fill in (("collective", ""), ("in_nelems", -1), ("out_nelems", -1), ("group_size", -1),
                      ("dtype", ""), ("pg_name", "")):
        rpc[col] = rpc[col].fillna(fill) if col in rpc else fill
    # each distinct (shapes, dtypes) pair read once, the rows carried as codes
    shape_code, shapes = pd.factorize(rpc["input_shapes"], use_na_sentinel=False)
    dtype_code, dtypes = pd.factorize(rpc["input_dtypes"], use_na_sentinel=False)
    width = max(len(dtypes), 1)
    pair, pairs = pd.factorize(shape_code.astype(np.int64) * width + dtype_code)
    firsts = [_first_tensor(shapes[int(p) // width], dtypes[int(p) % width]) for p in pairs]
    shape_n = np.array([n for n, _ in firsts], np.int64)[pair]
    shape_dtype = np.array([d for _, d in firsts], object)[pair]
    missing = rpc["in_nelems"].to_numpy(np.int64) < 0
    rpc["in_nelems"] = np.where(missing, shape_n, rpc["in_nelems"].to_numpy(np.int64))
    rpc["dtype"] = np.where(missing & (rpc["dtype"] == ""), shape_dtype, rpc["dtype"])
    return rpc


def _first_tensor(shapes: str, dtypes: str) -> tuple[int, str]:
    """Element count and dtype of the first tensor input (-1, "" when the op records none)."""
    try:
        shape_list, dtype_list = json.loads(shapes or "[]"), json.loads(dtypes or "[]")
    except ValueError:
        return -1, ""
    if shape_list and isinstance(shape_list[0], list) and shape_list[0] and dtype_list \
            and dtype_bytes(dtype_list[0]) > 0:
        return int(np.prod(shape_list[0])), str(dtype_list[0])
    return -1, ""


def _enclosing(kernels: pd.DataFrame, ops: pd.DataFrame, comm_ops: pd.DataFrame) -> np.ndarray:
    """Row of ``comm_ops`` enclosing each kernel's launching op on its thread (-1 when none).

    One sort of the communication ops and the launch times together by (thread, time), instead of a filter of all
    communication ops per thread: the op a launch falls in is the last one of its thread starting at or before it.
    """
    out = np.full(len(kernels), -1, dtype=np.int64)
    if comm_ops.empty or kernels.empty:
        return out
    # each kernel's launching op's row (-1: none), by arithmetic where the op ids are consecutive, as analysed
    at = id_index(ops["op_id"].to_numpy(np.int64)).get_indexer(kernels["op_id"].to_numpy(np.int64))
    launched = np.flatnonzero(at >= 0)  # the kernels whose launching op is known, and that op's row
    at = at[launched]
    keys = ["rank", "pid", "tid"]
    cand_key, query_key = pack_keys([[comm_ops[c].to_numpy(np.int64), ops[c].to_numpy(np.int64)[at]] for c in keys])
    cand_thread, threads = pd.factorize(cand_key)
    query_thread = pd.Index(threads).get_indexer(query_key)
    asked = query_thread >= 0
    query_thread, t = query_thread[asked], ops["start"].to_numpy(np.int64)[at][asked]
    n_cand = len(comm_ops)
    thread = np.concatenate([cand_thread, query_thread])
    time = np.concatenate([comm_ops["start"].to_numpy(np.int64), t])
    is_query = np.concatenate([np.zeros(n_cand, np.int8), np.ones(len(t), np.int8)])
    order = np.lexsort((np.arange(len(thread)), is_query, time, thread))  # ops starting at the launch come first
    latest = np.where(order < n_cand, order, -1)
    latest = np.maximum.accumulate(np.where(latest >= 0, np.arange(len(order)), -1))  # last op at or before
    position = np.empty(len(order), np.int64)
    position[order] = np.arange(len(order))
    at = latest[position[n_cand:]]
    cand = np.where(at >= 0, order[np.maximum(at, 0)], -1)
    same = (cand >= 0) & (cand_thread[np.maximum(cand, 0)] == query_thread)
    ends = comm_ops["end"].to_numpy(np.int64)
    hit = np.where(same & (ends[np.maximum(cand, 0)] >= t), cand, -1)
    out[launched[asked]] = hit
    return out


def collective_rows(an: Analysed) -> pd.DataFrame:
    """The collectives of the ranks in ``an`` before sizes and bandwidths (which compare ranks)."""
    p = an.profile
    k = p.kernels.loc[is_nccl_kernel(p.kernels["name"]),  # only the columns read taken
                      ["rank", "name", "device", "stream", "start", "end", "iteration", "op_id"]]
    comm_ops = _comm_ops(an)
    rows = pd.DataFrame({
        "rank": k["rank"].to_numpy(np.int64), "source": "kernel", "name": k["name"].to_numpy(object),
        "device": k["device"].to_numpy(np.int64), "stream": k["stream"].to_numpy(np.int64),
        "start": k["start"].to_numpy(np.int64), "end": k["end"].to_numpy(np.int64),
        "iteration": k["iteration"].to_numpy(np.int64)})
    rows["collective"] = _per_distinct(rows["name"], collective_type)
    for col, fill in (("in_nelems", -1), ("out_nelems", -1), ("group_size", -1), ("dtype", ""), ("pg_name", "")):
        rows[col] = fill
    enc = _enclosing(k, p.ops, comm_ops)
    has = enc >= 0
    if has.any():
        src = comm_ops.iloc[enc[has]]
        for col in ("in_nelems", "out_nelems", "group_size", "dtype", "pg_name"):
            rows.loc[has, col] = src[col].to_numpy()
        named = _per_distinct(src["collective"], collective_type)
        rows.loc[has, "collective"] = np.where(named != "", named, rows.loc[has, "collective"].to_numpy(object))
    args = p.comm_args
    if len(args) and (args["kind"] == "kernel").any():
        own = args[args["kind"] == "kernel"].drop_duplicates(["rank", "device", "stream", "start"])
        joined = rows[["rank", "device", "stream", "start"]].merge(own, how="left", on=["rank", "device", "stream",
                                                                                        "start"])
        found = joined["in_nelems"].notna().to_numpy() & (joined["in_nelems"].fillna(-1).to_numpy() >= 0)
        for col in ("in_nelems", "out_nelems", "group_size", "dtype", "pg_name"):
            rows.loc[found, col] = joined.loc[found, col].to_numpy()
        named = _per_distinct(joined.loc[found, "collective"], collective_type)
        rows.loc[found, "collective"] = np.where(named != "", named, rows.loc[found, "collective"].to_numpy(object))
    return pd.concat([rows, _nvtx_collectives(an)], ignore_index=True)


def _nvtx_collectives(an: Analysed) -> pd.DataFrame:
    """NCCL's own NVTX ranges (``NCCL:ncclAllGather``) when the input has no kernels (range-only)."""
    r = an.profile.ranges
    kernel_ranks = set(an.profile.kernels["rank"].unique().tolist())
    _, nvtx = _patterns()
    # names judged only on the ranks without kernels (none, in a trace with kernels: no name read at all)
    rankless = ~r["rank"].isin(kernel_ranks).to_numpy()
    named = np.zeros(len(r), bool)
    if rankless.any():
        names = r["name"][rankless]
        distinct = {n: bool(nvtx.match(n)) for n in pd.unique(names)}
        named[rankless] = names.map(distinct).fillna(False).to_numpy(bool)
    sel = r[named & rankless]
    out = pd.DataFrame({
        "rank": sel["rank"].to_numpy(np.int64), "source": "nvtx", "name": sel["name"].to_numpy(object),
        "device": np.full(len(sel), -1, np.int64), "stream": np.full(len(sel), -1, np.int64),
        "start": sel["start"].to_numpy(np.int64), "end": sel["end"].to_numpy(np.int64),
        "iteration": sel["iteration"].to_numpy(np.int64) if "iteration" in sel else -1})
    out["collective"] = _per_distinct(out["name"], collective_type)
    out = out[out["collective"].isin(table()["busbw"].keys())]
    for col, fill in (("in_nelems", -1), ("out_nelems", -1), ("group_size", -1), ("dtype", ""), ("pg_name", "")):
        out[col] = fill
    return out


def _sizes_and_bandwidth(rows: pd.DataFrame, world_sizes: dict[int, int]) -> pd.DataFrame:
    rows = rows.sort_values(["rank", "start", "end"], kind="stable").reset_index(drop=True)
    for col in ("in_nelems", "out_nelems", "group_size"):
        rows[col] = rows[col].astype(np.int64)
    rows["dur_ns"] = (rows["end"] - rows["start"]).clip(lower=0)
    elem = _per_distinct(rows["dtype"], dtype_bytes).astype(np.int64)
    use_out = rows["collective"].map(table()["message_size_from"]).fillna("in").to_numpy(object) == "out"
    nelems = np.where(use_out, rows["out_nelems"].to_numpy(np.int64), rows["in_nelems"].to_numpy(np.int64))
    known = (nelems >= 0) & (elem > 0)
    rows["msg_bytes"] = np.where(known, nelems * elem, -1)
    group = rows["group_size"].to_numpy(np.int64)
    group = np.where(group > 0, group, rows["rank"].map(world_sizes).fillna(1).to_numpy(np.int64))
    rows["group_size"] = group
    seconds = rows["dur_ns"].to_numpy(np.float64) / 1e9
    with np.errstate(divide="ignore", invalid="ignore"):
        algbw = np.where(known & (seconds > 0), rows["msg_bytes"].to_numpy(np.float64) / seconds / 1e9, np.nan)
    # per distinct (collective, group size): a job's collectives repeat a few
    kind, kinds = pd.factorize(rows["collective"], use_na_sentinel=False)
    lo, width = (int(group.min()), int(group.max()) - int(group.min()) + 1) if len(group) else (0, 1)
    pair_of_row, pairs = pd.factorize(kind.astype(np.int64) * width + (group - lo))
    factor = np.array([busbw_factor(kinds[int(p) // width], int(p) % width + lo) or np.nan for p in pairs],
                      np.float64)[pair_of_row]
    rows["algbw_gbps"] = algbw
    rows["busbw_gbps"] = algbw * factor
    rows["call_index"] = rows.groupby(["rank", "source", "collective"], sort=False).cumcount().astype(np.int64)
    rows["arrival_lag_ns"] = round_ns_column(pd.Series(_arrival_lags(rows), index=rows.index))
    rows["collective_id"] = np.arange(len(rows), dtype=np.int64)
    return rows[COLLECTIVE_COLUMNS]


def _arrival_lags(rows: pd.DataFrame) -> np.ndarray:
    """Longest duration of the same collective over the ranks minus this rank's (GPU kernels only)."""
    lag = np.full(len(rows), np.nan)
    gpu = rows["source"].to_numpy(object) == "kernel"
    if not gpu.any():
        return lag
    key = rows.loc[gpu, ["collective", "call_index"]]
    g = rows.loc[gpu].groupby(["collective", "call_index"])["dur_ns"]
    longest, count = g.transform("max").to_numpy(np.float64), g.transform("size").to_numpy()
    mine = rows.loc[gpu, "dur_ns"].to_numpy(np.float64)
    lag[np.flatnonzero(gpu)] = np.where(count >= 2, longest - mine, np.nan)
    del key
    return lag


# ------------------------------------------------------------------------------------- per rank


def _gpu_parts(kernels: pd.DataFrame, memops: pd.DataFrame, lo: int, hi: int) -> dict[str, int]:
    nccl = is_nccl_kernel(kernels["name"])
    ks, ke = kernels["start"].to_numpy(np.int64), kernels["end"].to_numpy(np.int64)
    compute = clip(ks[~nccl], ke[~nccl], lo, hi)
    comm = clip(ks[nccl], ke[nccl], lo, hi)
    mem = clip(memops["start"].to_numpy(np.int64), memops["end"].to_numpy(np.int64), lo, hi)
    compute_ns = union_length(*compute)
    kernels_ns = union_length(np.concatenate([compute[0], comm[0]]), np.concatenate([compute[1], comm[1]]))
    busy_ns = union_length(np.concatenate([compute[0], comm[0], mem[0]]), np.concatenate([compute[1], comm[1], mem[1]]))
    return {"compute_ns": compute_ns, "communication_ns": union_length(*comm),
            "exposed_communication_ns": kernels_ns - compute_ns, "memcpy_ns": busy_ns - kernels_ns,
            "idle_ns": (hi - lo) - busy_ns}


def rank_figures(an: Analysed, aggs: list) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per-rank figures, collectives) of a job; ``aggs`` are the import's aggregations, one per rank."""
    gpu = _job_gpu_parts(an, aggs)
    return job_figures([rank_parts(an, agg, part) for agg, part in zip(aggs, gpu)], collective_rows(an),
                       world_sizes(_sources(an)))


def _job_gpu_parts(an: Analysed, aggs: list) -> list[dict | None]:
    """:func:`_gpu_parts` of every aggregation's rank in its window, for all ranks at once (the rank in every
    interval's group: a job of many small ranks spent its figures in per-rank pandas calls); None for a rank
    without GPU activity (range-only), or every one when a rank has more than one aggregation."""
    ranks = [int(agg.row["rank"]) for agg in aggs]
    if len(set(ranks)) != len(ranks):
        return [_rank_gpu_parts(an, agg) for agg in aggs]
    k, m = an.profile.table("kernels"), an.profile.table("memops")
    order = np.argsort(ranks, kind="stable")
    sorted_ranks = np.asarray(ranks, dtype=np.int64)[order]
    lo = np.array([int(agg.row["window_start"]) for agg in aggs], dtype=np.int64)
    hi = np.array([int(agg.row["window_end"]) for agg in aggs], dtype=np.int64)

    def cut(frame: pd.DataFrame):
        """(aggregation, start, end) of each row cut to its rank's window, whether it is a chosen rank's and
        not empty there, and each aggregation's row count."""
        rank = frame["rank"].to_numpy(np.int64)
        at = np.minimum(np.searchsorted(sorted_ranks, rank), max(len(ranks) - 1, 0))
        group = np.where(sorted_ranks[at] == rank, order[at], -1) if len(ranks) else np.full(len(rank), -1)
        s = np.maximum(frame["start"].to_numpy(np.int64), np.where(group >= 0, lo[group], 0))
        e = np.minimum(frame["end"].to_numpy(np.int64), np.where(group >= 0, hi[group], 0))
        return group, s, e, (group >= 0) & (e > s), np.bincount(group[group >= 0], minlength=len(ranks))

    def clipped(cuts, rows: np.ndarray | None = None):
        """The cut rows (of ``rows``) kept: empty ones and other ranks' dropped."""
        group, s, e, ok, count = cuts
        keep = ok if rows is None else ok & rows
        return group[keep], s[keep], e[keep], count

    nccl = is_nccl_kernel(k["name"])
    kernel_cuts = cut(k)  # cut once for the three kinds of kernels
    compute, comm, everything = clipped(kernel_cuts, ~nccl), clipped(kernel_cuts, nccl), clipped(kernel_cuts)
    del kernel_cuts
    mem = clipped(cut(m))
    n = len(ranks)

    def union(*parts) -> np.ndarray:
        return union_per_group(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]),
                               np.concatenate([p[2] for p in parts]), n)[0]

    compute_ns, comm_ns, kernels_ns, busy_ns = union(compute), union(comm), union(everything), union(everything, mem)
    has_gpu = (everything[3] + mem[3]) > 0
    return [{"compute_ns": int(compute_ns[i]), "communication_ns": int(comm_ns[i]),
             "exposed_communication_ns": int(kernels_ns[i] - compute_ns[i]),
             "memcpy_ns": int(busy_ns[i] - kernels_ns[i]), "idle_ns": int((hi[i] - lo[i]) - busy_ns[i])}
            if has_gpu[i] else None for i in range(n)]


def _rank_gpu_parts(an: Analysed, agg) -> dict | None:
    """:func:`_gpu_parts` of the aggregation's rank in its window; None without GPU activity."""
    own = an.rank_tables(int(agg.row["rank"]))
    k, m = own["kernels"], own["memops"]
    if not (len(k) or len(m)):
        return None
    return _gpu_parts(k, m, int(agg.row["window_start"]), int(agg.row["window_end"]))


def world_sizes(sources: list[dict]) -> dict[int, int]:
    """Each rank's world size, from the job's source metas."""
    return {int(s.get("rank", 0)): int(s.get("world_size") or 1) for s in sources}


def _sources(an: Analysed) -> list[dict]:
    return an.profile.meta.get("sources", [an.profile.meta])


def rank_parts(an: Analysed, agg, gpu: dict | None | bool = False) -> dict:
    """One rank's figures from its own activity in its aggregation window (all but the collectives); ``gpu``:
    its :func:`_gpu_parts` when the caller made them for all ranks at once (None: no GPU activity)."""
    row = agg.row
    rank, lo, hi = int(row["rank"]), int(row["window_start"]), int(row["window_end"])
    src = next((s for s in _sources(an) if int(s.get("rank", 0)) == rank), {})
    if gpu is False:
        gpu = _rank_gpu_parts(an, agg)
    out = {"rank": rank, "host": str(src.get("hostname") or ""), "world_size": int(src.get("world_size") or 1),
           "source_path": str(src.get("source_path") or ""),
           "iterations_profiled": row["iterations_profiled"] if row["iteration_method"] != "whole_profile" else None,
           "wall_clock_ns": int(row["wall_clock_ns"]),
           "avg_iteration_ns": (round_ns(row["avg_iteration_ns"]) if row["iteration_method"] != "whole_profile"
                                else None),
           "gpu_utilization": row["gpu_utilization"], "window": (lo, hi)}
    if isinstance(gpu, dict):
        out.update(gpu)
        comm = out["communication_ns"]
        out["comm_overlap"] = 1 - out["exposed_communication_ns"] / comm if comm > 0 else None
    else:  # range-only input: no GPU activity was recorded, so none is claimed
        out.update(dict.fromkeys(("compute_ns", "communication_ns", "exposed_communication_ns", "memcpy_ns",
                                  "idle_ns", "comm_overlap")))
    return out


def job_figures(parts: list[dict], rows: pd.DataFrame, sizes: dict[int, int]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The job's figures from each rank's :func:`rank_parts` and all ranks' :func:`collective_rows`."""
    coll = _sizes_and_bandwidth(rows, sizes)
    out_rows = []
    rank, start = coll["rank"].to_numpy(np.int64), coll["start"].to_numpy(np.int64)
    msg, dur = coll["msg_bytes"].to_numpy(np.int64), coll["dur_ns"].to_numpy(np.int64)
    busbw, lag = (coll["busbw_gbps"].to_numpy(np.float64),
                  coll["arrival_lag_ns"].to_numpy(np.float64, na_value=np.nan))
    order = np.argsort(rank, kind="stable")  # each rank's collectives in the table's order
    bounds = np.searchsorted(rank[order], [int(part["rank"]) for part in parts], side="left")
    ends = np.searchsorted(rank[order], [int(part["rank"]) for part in parts], side="right")
    for part, first, last in zip(parts, bounds, ends):
        out = dict(part)
        lo, hi = out.pop("window")
        own = order[first:last]
        mine = own[(start[own] >= lo) & (start[own] < hi)]
        sized = mine[msg[mine] >= 0]
        sized_ns = int(dur[sized].sum())
        lags = lag[mine]
        out.update({"collective_count": len(mine),
                    "collective_bytes": int(msg[sized].sum()) if len(sized) else None,
                    "busbw_gbps": float(np.nansum(busbw[sized] * dur[sized]) / sized_ns)  # GB/s × ns = bytes
                    if len(sized) and sized_ns > 0 else None,
                    "collective_lag_ns": round_ns(float(np.nanmean(lags))) if (~np.isnan(lags)).any() else None})
        out_rows.append(out)
    ranks = pd.DataFrame(out_rows, columns=[c for c in RANK_COLUMNS if c not in ("iteration_lag_ns", "straggler_score",
                                                                                 "straggler_rank")])
    return _stragglers(ranks, coll), coll


def _stragglers(ranks: pd.DataFrame, coll: pd.DataFrame) -> pd.DataFrame:
    ranks = ranks.copy()
    its = pd.to_numeric(ranks["avg_iteration_ns"], errors="coerce").to_numpy(np.float64)
    if len(ranks) < 2:
        ranks["iteration_lag_ns"] = np.nan
        ranks["straggler_score"] = np.nan
        ranks["straggler_rank"] = np.nan
        return ranks[RANK_COLUMNS].astype({"straggler_rank": object}).where(ranks[RANK_COLUMNS].notna(), None)
    ranks["iteration_lag_ns"] = [round_ns(lag) for lag in its - np.nanmin(its)] if np.isfinite(its).any() else None
    score = pd.Series(np.nan, index=ranks.index)
    lagged = coll[coll["arrival_lag_ns"].notna()]
    if len(lagged):
        g = lagged.groupby(["collective", "call_index"])["dur_ns"]
        spread = (g.transform("max") - g.transform("min")).to_numpy(np.float64)
        norm = np.where(spread > 0, lagged["arrival_lag_ns"].to_numpy(np.float64) / np.where(spread > 0, spread, 1),
                        np.nan)
        per_rank = pd.Series(norm, index=lagged["rank"].to_numpy()).groupby(level=0).mean()
        score = ranks["rank"].map(per_rank)
    if score.isna().all() and np.isfinite(its).any():
        span = np.nanmax(its) - np.nanmin(its)
        score = pd.Series((its - np.nanmin(its)) / span if span > 0 else np.zeros(len(its)), index=ranks.index)
    ranks["straggler_score"] = score.to_numpy(np.float64)
    order = ranks["straggler_score"].rank(method="first", ascending=False)
    ranks["straggler_rank"] = order.astype("Int64")
    out = ranks[RANK_COLUMNS].astype(object)
    return out.where(pd.notna(out), None)
