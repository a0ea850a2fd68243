"""What the profile database keeps of the replay: each aggregation's critical path and its findings priced.

The import and `dlscope aggregate` call :func:`annotate` on the aggregations they are about to write, so the
ops and kernels tables, the summary, the dashboard and the report show the critical path without replaying.
The graph is built and replayed unchanged once per database (a job's collectives link its ranks); each
aggregation then walks its own windows on that replay. A profile that cannot be replayed still imports: its
figures stay missing and ``critical_path_note`` says why.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from .graph import CATEGORIES, Graph, build, positions
from .job import Job
from .predict import IterationRows, path_arrays, price_findings, windows
from .replay import Binding, Result, binding, unchanged
from .scenarios import for_rule

#: the rows of ``agg_critical_path``: time on the critical path per rank (-1: before the first event the
#: path reaches) and category
PATH_COLUMNS = ["rank", "category", "time_ns"]


def annotate(job_of: Callable[[], Job], aggs: list, findings: list[list[dict]]) -> None:
    """Add the replay's figures to aggregations before they are written (in place).

    ``agg.ops`` and ``agg.kernels`` get ``critical_path_ns`` (0: never on it), ``agg.critical_path`` the time
    per rank and category, each finding ``simulated_saving_ns`` (None: no scenario models its advice, or it
    cannot be priced) and ``agg.row`` ``findings_combined_saving_ns`` (all priced findings at once, overlaps
    counted once) and ``critical_path_note`` (why there is no critical path, else None).
    """
    g, base, note = None, None, None
    try:
        job = job_of()
        if not len(job.ops) and not len(job.kernels) and not len(job.api_calls):
            note = "no CPU or GPU events to replay"
        else:
            g = build(job)
            base = unchanged(g)  # the measured times, checked
    except Exception as e:  # noqa: BLE001 - a profile the replay cannot read still imports, saying why
        note = f"the dependency graph could not be built ({_one_line(e)})"
    replays: dict = {}  # a scenario changes the whole job: replayed once for every rank's window
    shared = None  # what every rank's walk reads: binding edges of the unchanged replay, rows by iteration, op rows
    for agg, found in zip(aggs, findings):
        if note is None:
            try:
                assert g is not None and base is not None  # built above whenever there is no note
                shared = _Shared(g, base) if shared is None else shared
                _annotate_one(g, base, shared, agg, found, replays)
                continue
            except Exception as e:  # noqa: BLE001 - one aggregation's failure leaves the others' figures
                why = f"the critical path could not be walked ({_one_line(e)})"
        else:
            why = note
        _not_replayed(agg, found, why)


class _Shared:
    """Found once for all aggregations of a replay, not once per rank."""

    def __init__(self, g: Graph, base: Result):
        self.bound: Binding = binding(g, base)
        self.rows = IterationRows(g)
        self.op_pos = positions(g.job.ops["op_id"].to_numpy(np.int64))
        acts = g.activities
        self.is_kernel = (acts["table"].to_numpy(object) == "kernel") if len(acts) else np.zeros(0, bool)
        # kernel names as codes: a rank's path is summed by code, its kernels table looked up by name once
        code, names = g.name_codes()
        self.name_code = code
        self.names = pd.Index(names)


def _annotate_one(g: Graph, base: Result, shared: _Shared, agg, found: list[dict], replays: dict) -> None:
    row = agg.row
    win = windows(g, int(row["rank"]), int(row["iter_start"]), int(row["iter_stop"]), shared.rows)
    path = path_arrays(g, win, base, shared.bound)
    ns = path["ns"].astype(np.int64) if path else np.zeros(0, np.int64)
    op_id = path["op_id"].astype(np.int64) if path else np.zeros(0, np.int64)
    act = path["act"].astype(np.int64) if path else np.zeros(0, np.int64)
    owned = op_id >= 0
    nodes, node_ns = _sums(op_nodes(g, op_id[owned], shared.op_pos), ns[owned])
    kernel = act >= 0
    kernel[kernel] = shared.is_kernel[act[kernel]]
    code = shared.name_code[act[kernel]]
    named = code >= 0  # a kernel without a name is in no kernels row
    codes, code_ns = _sums(code[named], ns[kernel][named])
    agg.ops = agg.ops.assign(critical_path_ns=_lookup(agg.ops["node_id"].to_numpy(np.int64), nodes, node_ns)
                             if not agg.ops.empty else np.zeros(0, np.int64))
    agg.kernels = agg.kernels.assign(
        critical_path_ns=_lookup(np.asarray(shared.names.get_indexer(agg.kernels["kernel_name"]), np.int64), codes,
                                 code_ns) if not agg.kernels.empty else np.zeros(0, np.int64))
    rank = path["rank"].astype(np.int64) if path else np.zeros(0, np.int64)
    category = path["category"].astype(np.int64) if path else np.zeros(0, np.int64)
    cells, cell_ns = _sums(rank * len(CATEGORIES) + category, ns)  # rank >= -1: the cells in (rank, category) order
    agg.critical_path = pd.DataFrame({"rank": np.floor_divide(cells, len(CATEGORIES)),
                                      "category": np.asarray(CATEGORIES, object)[np.mod(cells, len(CATEGORIES))],
                                      "time_ns": cell_ns})
    priced = price_findings(g, win, [(f["rule"], f.get("est_saving_ns")) for f in found], base, replays)
    rows = iter(priced["findings"])
    for f in found:  # price_findings lists the findings a scenario models, in their order
        f["simulated_saving_ns"] = next(rows)["simulated_saving_ns"] if for_rule(f["rule"]) else None
    row["findings_combined_saving_ns"] = priced["combined_saving_ns"]
    row["critical_path_note"] = None


def op_nodes(g: Graph, op_id: np.ndarray, pos: np.ndarray | None = None) -> np.ndarray:
    """The op node (of the outermost op) each op belongs to: the nodes the ops table lists (-1: none).
    ``pos``: ``positions`` of the op ids of ``g.job.ops``, when the caller has it."""
    ops = g.job.ops
    pos = positions(ops["op_id"].to_numpy(np.int64)) if pos is None else pos

    def row_of(ids: np.ndarray) -> np.ndarray:
        inside = (ids >= 0) & (ids < len(pos) - 1)
        return np.where(inside, pos[np.where(inside, ids, -1)], -1)

    row = row_of(op_id)
    root = np.where(row >= 0, ops["root_id"].to_numpy(np.int64)[np.maximum(row, 0)], -1) if len(ops) else row
    root = np.where(root >= 0, root, op_id)
    root_row = row_of(root)
    return np.where(root_row >= 0, ops["node_id"].to_numpy(np.int64)[np.maximum(root_row, 0)], -1) if len(ops) \
        else root_row


def _sums(keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct keys in order, the sum of ``values`` of each): a group-by sum on integers, exact."""
    if len(keys) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    lo, hi = int(keys.min()), int(keys.max())
    if hi - lo < 4 * len(keys) + 1024:  # few distinct keys (categories, op nodes, kernel names): no sort
        at = keys - lo
        total = np.zeros(hi - lo + 1, np.int64)
        np.add.at(total, at, np.asarray(values, np.int64))
        seen = np.bincount(at, minlength=hi - lo + 1) > 0
        return np.flatnonzero(seen) + lo, total[seen]
    order = np.argsort(keys, kind="stable")
    k = keys[order]
    starts = np.flatnonzero(np.r_[True, k[1:] != k[:-1]])
    return k[starts], np.add.reduceat(values[order], starts)


def _lookup(keys: np.ndarray, distinct: np.ndarray, sums: np.ndarray) -> np.ndarray:
    """The sum of each key (0: not on the path)."""
    if len(distinct) == 0:
        return np.zeros(len(keys), np.int64)
    at = np.minimum(np.searchsorted(distinct, keys), len(distinct) - 1)
    return np.where(distinct[at] == keys, sums[at], 0).astype(np.int64)


def skip(aggs: list, findings: list[list[dict]], why: str) -> None:
    """The aggregations without the replay's figures (NULL, with ``why`` as their note)."""
    for agg, found in zip(aggs, findings):
        _not_replayed(agg, found, why)


def _not_replayed(agg, found: list[dict], why: str) -> None:
    agg.ops = agg.ops.assign(critical_path_ns=None) if not agg.ops.empty else agg.ops
    agg.kernels = agg.kernels.assign(critical_path_ns=None) if not agg.kernels.empty else agg.kernels
    agg.critical_path = pd.DataFrame(columns=PATH_COLUMNS)
    for f in found:
        f["simulated_saving_ns"] = None
    agg.row["findings_combined_saving_ns"] = None
    agg.row["critical_path_note"] = why


def _one_line(error: BaseException) -> str:
    return " ".join(f"{type(error).__name__}: {error}".split())
