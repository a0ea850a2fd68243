"""A read-only view of one aggregation for the rules: tables load lazily, once, as DataFrames.

Every frame is restricted to the aggregation's rank; activity frames (ops, kernels, memops, API calls)
to its profiled iterations, which is how the aggregation itself counts them. GPU idleness is judged
against all GPU activity of the rank inside the window, as the aggregation's GPU busy time is.
"""

from __future__ import annotations

import re
import sqlite3
from functools import cache, cached_property

import numpy as np
import pandas as pd

from ..analyze.dtypes import precision
from ..analyze.tensor_core import MatrixUnits, classify_names, matrix_units
from ..store.schema import DDL
from .precision_names import kernel_precisions
from .spans import Span

HALF = ("fp16", "bf16")


@cache
def _db_columns(table: str) -> tuple[str, ...]:
    """A table's (or view's) columns in the profile database schema."""
    conn = sqlite3.connect(":memory:")
    try:
        conn.executescript(DDL)
        return tuple(r[1] for r in conn.execute(f'PRAGMA table_info("{table}")'))
    finally:
        conn.close()


class Context:
    """Data in for the rules: one aggregation of one rank, from frames only — ``tables`` (the rank's raw
    tables as the analysis made them: ops, kernels, memops, api_calls, ranges, gpus, memory) and
    ``aggregation`` (the computed summary tables) — plus ``config`` (all thresholds)."""

    def __init__(self, config: dict, tables: dict, aggregation):
        self.config, self.tables, self.aggregation = config, tables, aggregation
        self.agg = dict(aggregation.row)
        self.rank = int(self.agg["rank"])
        self.iter_start, self.iter_stop = int(self.agg["iter_start"]), int(self.agg["iter_stop"])
        self.window = (int(self.agg["window_start"]), int(self.agg["window_end"]))
        self.wall = int(self.agg["wall_clock_ns"] or 0)
        self.whole_profile = self.agg["iteration_method"] == "whole_profile"
        self._tables_made: dict[str, pd.DataFrame] = {}
        self._busy: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}

    # ------------------------------------------------------------------ loading

    def _table(self, table: str) -> pd.DataFrame:
        """The rank's rows of a raw table, in the database's columns (made once per table: several rules'
        frames start from the same table, and copy-on-write keeps this one unchanged)."""
        made = self._tables_made.get(table)
        if made is None:
            frame = self.tables[table]
            mine = frame["rank"].to_numpy() == self.rank
            if not mine.all():
                frame = frame[mine]
            made = self._tables_made[table] = frame[[c for c in _db_columns(table) if c in frame.columns]
                                                    ].reset_index(drop=True)
        return made

    def _in_iterations(self, table: str) -> pd.DataFrame:
        frame = self._table(table)
        return _by_start(_rows(frame, frame["iteration"].between(self.iter_start, self.iter_stop)))

    def _overlapping(self, table: str, columns: list[str], cpu_only: bool = False) -> pd.DataFrame:
        """Rows of the rank overlapping the window."""
        lo, hi = self.window
        frame = self._table(table)
        sel = (frame["end"] > lo) & (frame["start"] < hi)
        if cpu_only:
            sel &= frame["device"] < 0
        return _by_start(_rows(frame, sel)[columns])

    @cached_property
    def matrix_units(self) -> MatrixUnits:
        """The words for this rank's Tensor Cores (NVIDIA) or matrix cores (AMD MFMA) in finding texts."""
        return matrix_units(self.gpus["name"].tolist())

    @cached_property
    def kernels(self) -> pd.DataFrame:
        k = self._in_iterations("kernels")
        k["uses_tc"] = k["uses_tc"].fillna(0).astype(bool)
        return k

    @cached_property
    def memops(self) -> pd.DataFrame:
        return self._in_iterations("memops")

    @cached_property
    def api_calls(self) -> pd.DataFrame:
        return self._in_iterations("api_calls")

    @cached_property
    def ops(self) -> pd.DataFrame:
        """Op instances of the profiled iterations, with ``precision`` (own or nearest ancestor's input
        dtype) and ``eligible_root`` (the outermost TC-eligible op around it, -1 if none)."""
        return _rows(self.ops_all, self.ops_all["iteration"].between(self.iter_start, self.iter_stop))

    @cached_property
    def ops_all(self) -> pd.DataFrame:
        columns = ["op_id", "pid", "tid", "name", "op_type", "start", "end", "dur", "parent_id", "depth",
                   "input_shapes", "input_dtypes", "concrete_inputs", "data_type", "iteration", "node_id",
                   "tc_eligible", "using_tc", "kernel_count", "gpu_time", "api_time"]
        ops = self._table("ops")[columns]
        if not ops["op_id"].is_monotonic_increasing:
            ops = ops.sort_values("op_id")
        for col in ("tc_eligible", "using_tc"):
            ops[col] = ops[col].astype(np.int64)
        ops = ops.set_index("op_id", drop=False)
        _inherit(ops)
        return ops

    @cached_property
    def gpu_activity(self) -> pd.DataFrame:
        """All kernels and memops of the rank overlapping the window (device, start, end, kind)."""
        k = self._overlapping("kernels", ["device", "start", "end"]).assign(kind="kernel")
        m = self._overlapping("memops", ["device", "start", "end", "kind"])
        return pd.concat([k, m], ignore_index=True)

    @cached_property
    def iterations(self) -> pd.DataFrame:
        its = self.all_iterations
        return its[its["profiled"].astype(bool)].reset_index(drop=True)

    @cached_property
    def all_iterations(self) -> pd.DataFrame:
        its = self.aggregation.iterations.assign(profiled=self.aggregation.iterations["profiled"].astype(np.int64))
        return its.sort_values("iteration", kind="stable").reset_index(drop=True)

    @cached_property
    def ranges(self) -> pd.DataFrame:
        """CPU annotation ranges of the rank overlapping the window."""
        return self._overlapping("ranges", list(_db_columns("ranges")), cpu_only=True)

    @cached_property
    def gpus(self) -> pd.DataFrame:
        return self._table("gpus").sort_values("device", kind="stable").reset_index(drop=True)

    @cached_property
    def memory(self) -> pd.DataFrame:
        return self._table("memory").sort_values("ts", kind="stable").reset_index(drop=True)

    @cached_property
    def agg_ops(self) -> pd.DataFrame:
        ops = self.aggregation.ops
        return ops.assign(**{c: ops[c].astype(np.int64) for c in ("tc_eligible", "using_tc")})

    # ------------------------------------------------------------------ derived facts

    @cached_property
    def kernel_facts(self) -> pd.DataFrame:
        """The aggregation's kernels with their precision, eligible root and node.

        ``precision`` is the launching op's (own or inherited input dtype) when known, else the one the
        kernel's name tells (``precision_names``); ``precision_source`` says which ('op', 'name' or '').
        """
        k = self.kernels
        ops = self.ops_all
        pos = ops.index.get_indexer(k["op_id"])
        found = pos >= 0
        prec = np.full(len(k), "", dtype=object)
        root = np.full(len(k), -1, dtype=np.int64)
        prec[found] = ops["precision"].to_numpy(object)[pos[found]]
        root[found] = ops["eligible_root"].to_numpy(np.int64)[pos[found]]
        node = np.full(len(k), -1, dtype=np.int64)
        rpos = ops.index.get_indexer(root)
        node[rpos >= 0] = ops["node_id"].to_numpy(np.int64)[rpos[rpos >= 0]]
        by_name = kernel_precisions(k["name"]) if len(k) else np.zeros(0, dtype=object)
        from_op = prec != ""
        source = np.where(from_op, "op", np.where(by_name != "", "name", "")).astype(object)
        prec = np.where(from_op, prec, by_name).astype(object)
        return k.assign(precision=prec, precision_source=source, eligible_root=root, root_node=node)

    @cached_property
    def has_gpu(self) -> bool:
        """Whether the rank ran any GPU kernel. Without one, no GPU advice applies (registry ``gpu=True``)."""
        return bool((self.tables["kernels"]["rank"].to_numpy() == self.rank).any())

    @cached_property
    def training_evidence(self) -> list[str]:
        """Names that show a training step: backward ops or an optimizer step (framework ops or annotation
        ranges), or backward / weight-gradient / optimizer kernels (``run_kind`` in rules.json). At most
        three, for the findings' evidence; empty for an inference (forward-only) run."""
        cfg = self.config["run_kind"]
        found: list[str] = []
        for names, patterns in ((self.ops_all["name"], cfg["training_op_patterns"]),
                                (self.ranges["name"], cfg["training_op_patterns"]),
                                (self.kernels["name"], cfg["training_kernel_patterns"])):
            if len(names) == 0:
                continue
            hit = names_matching(names, compile_any(patterns))
            found += [str(n) for n in pd.unique(names[hit])[:3 - len(found)]]
            if len(found) >= 3:
                break
        return found

    @cached_property
    def is_training(self) -> bool:
        """True for a training run (see :attr:`training_evidence`), False for forward-only (inference)."""
        return bool(self.training_evidence)

    @cached_property
    def framework(self) -> str:
        """"torch", "tf", "jax" or "paddle": whose words the recommendations use (:mod:`.frameworks`)."""
        from .frameworks import detect

        return detect(self._table("ops"), self._table("ranges"), self._table("kernels"))

    def advice(self, rule: str, default: str) -> str:
        """``default`` (PyTorch words) or the framework's own recommendation for ``rule``."""
        from .frameworks import advice

        return advice(rule, self.framework, self.run_kind, default)

    @property
    def run_kind(self) -> str:
        return "training" if self.is_training else "inference"

    @cached_property
    def devices(self) -> list[int]:
        act = self.gpu_activity
        return sorted(int(d) for d in act.loc[act["device"] >= 0, "device"].unique())

    def busy(self, device: int | None = None, kinds: tuple = ("kernel", "memcpy", "memset")) -> tuple:
        """Intervals during which the device (or any device) runs GPU activity of the given kinds (selected
        once per device and kinds: most rules ask; each caller gets its own copy)."""
        key = (device, tuple(kinds))
        if key not in self._busy:
            act = self.gpu_activity
            sel = act["kind"].isin(kinds)
            if device is not None:
                sel &= act["device"] == device
            self._busy[key] = Span(act.loc[sel, "start"], act.loc[sel, "end"])
        starts, ends = self._busy[key]
        return starts.copy(), ends.copy()

    @cached_property
    def ceilings(self):
        """The rank's GPU ceilings from gpu_specs.json, or None when the GPU is unknown."""
        from ..roofline.ceilings import find_ceilings

        if self.gpus.empty:
            return None
        g = self.gpus.iloc[0]
        cc = f"{g['cc_major']}.{g['cc_minor']}" if g["cc_major"] is not None and g["cc_major"] >= 0 else None
        ceilings, _ = find_ceilings(g["name"] or None, cc, g["sm_count"])
        return ceilings

    @cached_property
    def compute_capability(self) -> float | None:
        if self.gpus.empty or self.gpus["cc_major"].iloc[0] is None or self.gpus["cc_major"].iloc[0] < 0:
            return None
        return float(self.gpus["cc_major"].iloc[0]) + float(max(self.gpus["cc_minor"].iloc[0], 0)) / 10

    def pct(self, ns: float) -> float:
        return 100.0 * ns / self.wall if self.wall else 0.0

    def link(self, rule_id: str) -> str:
        """The rule's reference; the framework's own page where ``data/framework_advice.json`` has one."""
        from .frameworks import table

        return table()["links"].get(rule_id, {}).get(self.framework) or self.config[rule_id]["link"]


def _rows(frame: pd.DataFrame, mask: pd.Series) -> pd.DataFrame:
    """``frame[mask]``, without the copy when every row is kept (the usual whole-profile aggregation)."""
    return frame if mask.all() else frame[mask]


def _by_start(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows in start order (stable), numbered from 0; no copy when they already are."""
    if not frame["start"].is_monotonic_increasing:
        frame = frame.sort_values("start", kind="stable")
    return frame.reset_index(drop=True)


def _inherit(ops: pd.DataFrame) -> None:
    """Add ``precision`` and ``eligible_root`` by walking parents level by level (depth ascending)."""
    n = len(ops)
    ids = ops["op_id"].to_numpy(np.int64)
    parent_pos = ops.index.get_indexer(ops["parent_id"].to_numpy(np.int64))
    own = classify_names(ops["data_type"].fillna(""), precision, dtype=object)
    eligible = ops["tc_eligible"].fillna(0).astype(bool).to_numpy()
    prec = own.copy()
    root = np.where(eligible, ids, -1)
    depth = ops["depth"].fillna(0).to_numpy(np.int64)
    for d in np.unique(depth):
        rows = np.flatnonzero((depth == d) & (parent_pos >= 0))
        if len(rows) == 0:
            continue
        par = parent_pos[rows]
        prec[rows] = np.where(prec[rows] == "", prec[par], prec[rows])
        root[rows] = np.where(root[par] >= 0, root[par], root[rows])
    ops["precision"] = prec if n else pd.Series([], dtype=object)
    ops["eligible_root"] = root


def compile_any(patterns: list[str], flags: int = 0) -> re.Pattern:
    """One regex matching any of the data file's patterns."""
    return re.compile("|".join(f"(?:{p})" for p in patterns), flags)


def names_matching(names: pd.Series, pattern: re.Pattern) -> np.ndarray:
    """Boolean mask of names matching a regex, evaluated once per distinct name."""
    return classify_names(names.fillna(""), lambda n: pattern.search(n) is not None,
                          memo=_MATCHED.setdefault(pattern, {}))


#: per compiled pattern, the names already matched (the rules compile the same few patterns for every rank)
_MATCHED: dict[re.Pattern, dict] = {}
