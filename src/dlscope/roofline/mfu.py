"""Model FLOPs utilization (MFU): the model's FLOPs per second of wall clock against the GPU's dense peak.

Model FLOPs are the matrix products of the ops the trace recorded with shapes (``flops.model_flops``:
GEMMs, convolutions and their gradients, attention; forward and backward), each counted once: an op with a
model counts, and the ops nested in it do not (``aten::linear`` counts, its ``aten::addmm`` not; a backward
node's ``aten::mm`` calls count, since the autograd wrapper has no model). The peak is the dense one (never a
datasheet's 2:4-sparse figure) at the precision the ops ran at: the precision carrying most of the model's
FLOPs, on Tensor Cores when those ops used them (FP32 on Tensor Cores is TF32; on AMD matrix cores it is FP32).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd

from .ceilings import find_ceilings
from .completion import completed_arguments
from .flops import model_flops, precision_of, ran_at
from .frames import distinct_rows, outermost
from .nested import COLUMNS as NESTED_COLUMNS
from .nested import nested_node_costs

#: the aggregation's figures (aggregations table, summary JSON ``aggregation.mfu``)
ROW_KEYS = ("model_flops", "model_flops_per_iteration", "achieved_flops_per_s", "peak_flops_per_s",
            "mfu_precision", "mfu")


def op_model_flops(ops: pd.DataFrame) -> pd.DataFrame:
    """Per op call: ``model_flops`` (int64; -1 when it has no model or an enclosing op counts instead) and
    ``precision`` (the precision its data type says it ran at, else its first floating input's; "tf32" for FP32
    on Tensor Cores, "" unknown). ``ops``: op calls with their arguments completed
    (``completion.completed_arguments``). Each distinct (name, shapes, dtypes, arguments, output, data type) is
    modelled once."""
    n = len(ops)
    ran_at = ["data_type"] if "data_type" in ops.columns else []
    codes, uniques = distinct_rows(ops, ["name", "input_shapes", "input_dtypes", "concrete_inputs", "output_shape",
                                         *ran_at])
    per_key = np.array([_flops(*k[:5]) for k in uniques], dtype=np.int64) if len(uniques) else np.zeros(0, np.int64)
    prec_key = (np.array([_precision(k[2], k[5] if ran_at else None) for k in uniques], dtype=object)
                if len(uniques) else np.zeros(0, object))
    flops = per_key[codes] if n else np.zeros(0, np.int64)
    counted = outermost(flops >= 0, ops)  # an op counts only when no enclosing op counts
    precision = prec_key[codes] if n else np.zeros(0, object)
    tensor = ops["using_tc"].fillna(0).astype(bool).to_numpy()
    precision = np.where(tensor & (precision == "fp32"), "tf32", precision)
    return pd.DataFrame({"model_flops": np.where(counted, flops, -1), "precision": precision,
                         "tensor": tensor}, index=ops.index)


#: the op-node columns that help the roofline place a node, made in the same pass as its FLOPs
EXTRA_COLUMNS = ("output_shape", *NESTED_COLUMNS)


def _no_extra(n: int) -> dict[str, Any]:
    """The :data:`EXTRA_COLUMNS` of ``n`` op nodes with nothing known."""
    return {c: (pd.array([pd.NA] * n, dtype="Int64") if c in ("roofline_flops", "roofline_bytes")
                else np.full(n, None, dtype=object)) for c in EXTRA_COLUMNS}


def _node_extra(ops: pd.DataFrame, node_ids: np.ndarray) -> dict[str, Any]:
    """Per op node of ``node_ids``: the output shape its backward told (``output_shape``) and the roofline's cost of
    the modelled ops beneath a node without a model (``nested.nested_node_costs``). ``ops``: completed calls."""
    extra = _no_extra(len(node_ids))
    extra["output_shape"] = node_output_shapes(ops).reindex(node_ids).to_numpy(dtype=object)
    nested = nested_node_costs(ops).reindex(node_ids)
    for column in NESTED_COLUMNS:
        values = nested[column]
        extra[column] = (pd.array(values, dtype="Int64") if column in ("roofline_flops", "roofline_bytes")
                         else values.astype(object).where(values.notna(), None).to_numpy(dtype=object))
    return extra


def node_output_shapes(ops: pd.DataFrame) -> pd.Series:
    """Per op node (``node_id``): the output shape its calls' backward told (the completed ``output_shape`` of the
    node's own calls), for the roofline to place the node; a node whose calls were told two shapes gets none."""
    own = ops["op_id"].to_numpy(np.int64) == ops["root_id"].to_numpy(np.int64)
    own &= ops["output_shape"].notna().to_numpy()
    told = pd.DataFrame({"node_id": ops["node_id"].to_numpy(np.int64)[own],
                         "shape": ops["output_shape"].astype(object).to_numpy()[own]}).drop_duplicates()
    return told[~told.duplicated("node_id", keep=False)].set_index("node_id")["shape"]


class JobMFU:
    """:func:`add_mfu` of every rank at once: the ops of all ranks modelled, summed per op node and per rank and
    their dominant precisions found in one pass (op node ids are unique across ranks), with the op-node columns
    the roofline places nodes by (:data:`EXTRA_COLUMNS`); :meth:`add` then only looks a rank's figures up, so
    each is what the rank alone gives.

    ``ops``: every rank's op calls; ``ranges``: rank -> (iter_start, iter_stop) of its aggregation (inclusive);
    ``gpus``: rank -> its GPUs table; ``nodes``: the op nodes of all ranks (``node_id``, ``gpu_time_ns``, and
    ``rank`` for :meth:`node_columns`)."""

    def __init__(self, ops: pd.DataFrame, ranges: dict[int, tuple[int, int]], gpus: dict[int, pd.DataFrame],
                 nodes: pd.DataFrame):
        self.ranks = list(ranges)
        self.nodes = nodes
        rank = ops["rank"].to_numpy(np.int64)
        lo = pd.Series({r: a for r, (a, _) in ranges.items()}, dtype=float).reindex(rank).to_numpy(float)
        hi = pd.Series({r: b for r, (_, b) in ranges.items()}, dtype=float).reindex(rank).to_numpy(float)
        it = ops["iteration"].to_numpy(np.int64)
        code = pd.Index(self.ranks).get_indexer(rank)
        in_range = (it >= lo) & (it <= hi)  # other ranks' rows: NaN bounds, never in range
        shaped = in_range & (ops["input_shapes"].fillna("") != "").to_numpy(bool)
        self.modelled = np.bincount(code[shaped], minlength=len(self.ranks)) > 0  # else: no figures at all
        if not self.modelled.any():
            return
        keep = in_range & self.modelled[np.maximum(code, 0)]  # a rank that recorded no shapes has nothing to model
        mine, code = completed_arguments(ops[keep]), code[keep]
        figures = op_model_flops(mine)
        self.node_extra = _node_extra(mine, nodes["node_id"].to_numpy(np.int64))
        hit = figures["model_flops"].to_numpy() >= 0
        ids = mine["op_id"].to_numpy(np.int64)
        root_pos = pd.Index(ids).get_indexer(mine["root_id"].to_numpy(np.int64)[hit])
        node_of_root = mine["node_id"].to_numpy(np.int64)[np.maximum(root_pos, 0)]
        # per rank: its GPU's peaks (ranks of one GPU model share them)
        peaks: dict[tuple, tuple] = {}
        self.peak_of = []
        matrix_fp32 = np.empty(len(self.ranks), dtype=object)
        for i, r in enumerate(self.ranks):
            key = _gpu_key(gpus[r])
            if key not in peaks:
                peaks[key] = _peaks(gpus[r])
            self.peak_of.append(peaks[key][0])
            matrix_fp32[i] = peaks[key][1]
        hit_rank = code[hit]
        precision = figures["precision"].to_numpy()[hit]
        precision = np.where(precision == "tf32", matrix_fp32[hit_rank], precision)  # "fp32" on AMD matrix cores
        counted = pd.DataFrame({"node_id": np.where(root_pos >= 0, node_of_root, -1),
                                "flops": figures["model_flops"].to_numpy()[hit], "precision": precision,
                                "rank": hit_rank})
        self.total = _sum_by(hit_rank, counted["flops"].to_numpy(np.int64), len(self.ranks))
        self.precision = _dominant(counted, "rank").reindex(np.arange(len(self.ranks))).to_numpy(dtype=object)
        per_node = counted.groupby("node_id")["flops"].sum()
        node_prec = _dominant(counted, "node_id")
        node_ids = nodes["node_id"].to_numpy(np.int64)
        self.node_index = pd.Index(node_ids)
        self.node_flops = per_node.reindex(node_ids).fillna(0).to_numpy(np.int64)
        # each node's peak: its rank's at its dominant precision
        node_rank = pd.Series(hit_rank, index=counted["node_id"].to_numpy()).groupby(level=0).first()
        prec = node_prec.reindex(node_ids).to_numpy(dtype=object)
        owner = node_rank.reindex(node_ids).fillna(-1).to_numpy(np.int64)
        node_peak = np.full(len(node_ids), np.nan)
        known = np.flatnonzero(pd.notna(prec))
        pair_codes, pairs = pd.MultiIndex.from_arrays([owner[known], prec[known]]).factorize()
        pair_peak = np.array([self.peak_of[o](p) for o, p in pairs], dtype=float)  # None: NaN
        node_peak[known] = pair_peak[pair_codes] if len(pairs) else np.zeros(0)
        seconds = nodes["gpu_time_ns"].to_numpy().astype(float) * 1e-9
        with np.errstate(divide="ignore", invalid="ignore"):
            self.node_mfu = np.where((seconds > 0) & (node_peak > 0) & (self.node_flops > 0),
                                     self.node_flops.astype(float) / seconds / node_peak, np.nan)

    def node_columns(self) -> dict[str, object]:
        """The op-node columns :meth:`add` gives (``model_flops``, ``mfu``) for every row of ``nodes`` at once,
        each rank's as :meth:`add` gives them (missing for a rank with nothing modelled): added to the job's op
        nodes once, so a rank's slice has them already (one ``assign`` per rank cost ~0.5 ms)."""
        n = len(self.nodes)
        flops = pd.array([pd.NA] * n, dtype="Int64")
        mfu = np.full(n, np.nan)
        extra = _no_extra(n)
        if n and self.modelled.any():
            at = pd.Index(self.ranks).get_indexer(self.nodes["rank"].to_numpy(np.int64))
            rows = np.flatnonzero((at >= 0) & self.modelled[np.maximum(at, 0)])
            flops[rows] = self.node_flops[rows]
            mfu[rows] = self.node_mfu[rows]
            for column, values in extra.items():
                values[rows] = self.node_extra[column][rows]
        return {"model_flops": flops, "mfu": mfu, **extra}

    def add(self, rank: int, row: dict, agg_ops: pd.DataFrame) -> tuple[dict, pd.DataFrame]:
        """:func:`add_mfu` of one rank's aggregation row and op nodes; op nodes that already have the columns
        (the job's, with :meth:`node_columns`) are returned as they are."""
        i = self.ranks.index(rank)
        out = dict.fromkeys(ROW_KEYS)
        if "model_flops" in agg_ops.columns and "mfu" in agg_ops.columns:
            nodes = agg_ops
        elif not self.modelled[i]:
            nodes = agg_ops.assign(model_flops=pd.array([pd.NA] * len(agg_ops), dtype="Int64"), mfu=np.nan,
                                   **_no_extra(len(agg_ops)))
        else:
            at = self.node_index.get_indexer(agg_ops["node_id"].to_numpy(np.int64))
            assert (at >= 0).all(), "the aggregation's op nodes are the job's"
            nodes = agg_ops.assign(model_flops=pd.array(self.node_flops[at], dtype="Int64"), mfu=self.node_mfu[at],
                                   **{column: values[at] for column, values in self.node_extra.items()})
        if not self.modelled[i]:
            return {**row, **out}, nodes
        total = int(self.total[i])
        precision = self.precision[i] if total and isinstance(self.precision[i], str) else None
        out.update(_mfu_figures(row, total, precision, self.peak_of[i]))
        return {**row, **out}, nodes


def _sum_by(inverse: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """Exact int64 sums per group."""
    out = np.zeros(n, dtype=np.int64)
    np.add.at(out, inverse, values)
    return out


def _gpu_key(gpus: pd.DataFrame) -> tuple:
    """What :func:`_peaks` reads of a rank's GPUs table."""
    if gpus.empty:
        return ()
    i = int(np.argmin(gpus["device"].to_numpy()))  # the lowest device (its first row), as _peaks reads it
    return (gpus["name"].iat[i], int(gpus["cc_major"].iat[i]), int(gpus["cc_minor"].iat[i]),
            int(gpus["sm_count"].iat[i]))


@lru_cache(maxsize=1 << 16)
def _flops(name, shapes, dtypes, concrete, output) -> int:
    """Memoized: the ranks of a job repeat the same ops (one model per distinct op, not per rank)."""
    got = model_flops(name, shapes, dtypes, concrete, None if pd.isna(output) else output)
    return -1 if got is None else got


@lru_cache(maxsize=1 << 16)
def _precision(dtypes, data_type=None) -> str:
    """The precision the op ran at: its data type's (the dtype of the ops that launched its kernels: under
    autocast an ``aten::linear`` on FP32 activations runs FP16), else its first floating-point input's, as the
    FLOP model's main operand usually is."""
    import json

    precision = ran_at(data_type)
    if precision:
        return precision
    try:
        types = json.loads(dtypes) if dtypes else []
    except ValueError:
        return ""
    return next((p for p in (precision_of(str(t)) for t in types) if p), "") if isinstance(types, list) else ""


def add_mfu(row: dict, agg_ops: pd.DataFrame, ops: pd.DataFrame, gpus: pd.DataFrame) -> tuple[dict, pd.DataFrame]:
    """The aggregation row with :data:`ROW_KEYS` and its op nodes with ``model_flops`` and ``mfu``: one rank's,
    the definition :class:`JobMFU` computes for every rank at once (the pipeline uses that; tests check both agree).

    ``ops``: the rank's op calls as the analysis made them; only the aggregation's iterations count.
    ``model_flops`` is None when no op of the aggregation recorded input shapes (nothing to model), the MFU
    figures None when the GPU's peak at that precision is unknown, the per-iteration figure when no iterations
    were found."""
    out = dict.fromkeys(ROW_KEYS)
    nodes = agg_ops.assign(model_flops=pd.array([pd.NA] * len(agg_ops), dtype="Int64"), mfu=np.nan,
                           **_no_extra(len(agg_ops)))
    mine = ops[ops["iteration"].between(int(row["iter_start"]), int(row["iter_stop"]))]
    if mine.empty or not (mine["input_shapes"].fillna("") != "").any():
        return {**row, **out}, nodes
    mine = completed_arguments(mine)
    figures = op_model_flops(mine)
    nodes = nodes.assign(**_node_extra(mine, nodes["node_id"].to_numpy(np.int64)))
    hit = figures["model_flops"].to_numpy() >= 0
    ids = mine["op_id"].to_numpy(np.int64)
    root_pos = pd.Index(ids).get_indexer(mine["root_id"].to_numpy(np.int64)[hit])
    node_of_root = mine["node_id"].to_numpy(np.int64)[np.maximum(root_pos, 0)]
    counted = pd.DataFrame({"node_id": np.where(root_pos >= 0, node_of_root, -1),
                            "flops": figures["model_flops"].to_numpy()[hit],
                            "precision": figures["precision"].to_numpy()[hit]})
    total = int(counted["flops"].sum())
    peak_of, matrix_fp32 = _peaks(gpus)
    counted.loc[counted["precision"] == "tf32", "precision"] = matrix_fp32  # "fp32" on AMD matrix cores
    per_node = counted.groupby("node_id")["flops"].sum()
    node_prec = _dominant(counted, "node_id")
    nodes["model_flops"] = pd.array(nodes["node_id"].map(per_node).fillna(0).astype(np.int64), dtype="Int64")
    node_peak = nodes["node_id"].map(node_prec).map(peak_of).astype(float)
    seconds = nodes["gpu_time_ns"].astype(float) * 1e-9
    nodes["mfu"] = np.where((seconds > 0) & (node_peak > 0) & (nodes["model_flops"].fillna(0) > 0),
                            nodes["model_flops"].astype(float) / seconds / node_peak, np.nan)

    precision = _dominant(counted.assign(all=0), "all").get(0) if total else None
    out.update(_mfu_figures(row, total, precision, peak_of))
    return {**row, **out}, nodes


def _mfu_figures(row: dict, total: int, precision: str | None, peak_of) -> dict:
    """The summary row's MFU figures from the window's model FLOPs and their dominant precision."""
    wall = row.get("wall_clock_ns") or 0
    whole = row.get("iteration_method") == "whole_profile"  # no iterations: the profile is one window
    iterations = 0 if whole else row.get("iterations_profiled") or 0
    peak = peak_of(precision) if precision else None
    achieved = total / (wall * 1e-9) if wall else None
    return dict(model_flops=total, model_flops_per_iteration=round(total / iterations) if iterations else None,
                achieved_flops_per_s=achieved, peak_flops_per_s=peak, mfu_precision=precision,
                mfu=achieved / peak if achieved is not None and peak else None)


def _dominant(counted: pd.DataFrame, key: str) -> pd.Series:
    """Per key, the precision carrying the most model FLOPs (unknown precisions left out)."""
    known = counted[counted["precision"] != ""]
    if known.empty:
        return pd.Series(dtype=object)
    sums = known.groupby([key, "precision"])["flops"].sum().reset_index()
    return sums.sort_values([key, "flops"], ascending=[True, False]).drop_duplicates(key).set_index(key)["precision"]


def _peaks(gpus: pd.DataFrame):
    """precision -> the rank's dense peak FLOP/s at it (None when the GPU or that peak is unknown), and what FP32
    on the matrix units runs as: "tf32" (NVIDIA Tensor Cores; also when the GPU is unknown) or "fp32" (AMD
    matrix cores, whose FP32 rate, MFMA F32, is the vector FP32 rate in every AMD entry of the table)."""
    ceilings = None
    if not gpus.empty:
        g = gpus.sort_values("device").iloc[0]
        cc = f"{g['cc_major']}.{g['cc_minor']}" if g["cc_major"] >= 0 else None
        ceilings, _ = find_ceilings(g["name"] or None, cc, int(g["sm_count"]) if g["sm_count"] > 0 else None)

    def peak(precision: str | None) -> float | None:
        if ceilings is None or not precision or not isinstance(precision, str):
            return None
        found = ceilings.peak(precision, precision not in ("fp32", "fp64"))  # TF32 and narrower: Tensor Cores
        return found[1] if found else None

    return peak, ceilings.matrix_precision("fp32") if ceilings is not None else "tf32"
