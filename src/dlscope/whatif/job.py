"""The tables a replay reads, from an analysed profile or from a profile database (same columns).

The replay needs the analysis' attribution columns (launch call, launching op, iteration) that the database
already stores, so reading a database never re-runs the analysis.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..model import filled_text
from ..store import reader

COLUMNS = {
    "ops": ["op_id", "rank", "pid", "tid", "name", "start", "end", "parent_id", "root_id", "depth", "node_id",
            "iteration", "kernel_count", "tc_eligible", "data_type"],
    "api_calls": ["api_id", "rank", "pid", "tid", "name", "start", "end", "correlation", "op_id", "iteration"],
    "kernels": ["kernel_id", "rank", "device", "stream", "name", "start", "end", "api_id", "launch_ts", "op_id",
                "root_op_id", "iteration", "uses_tc"],
    "memops": ["memop_id", "rank", "device", "stream", "kind", "name", "copy_kind", "src_mem", "dst_mem", "start",
               "end", "api_id", "launch_ts", "op_id", "root_op_id", "iteration"],
    "syncs": ["sync_id", "rank", "device", "stream", "kind", "start", "end", "correlation", "api_id"],
    "ranges": ["range_id", "rank", "pid", "tid", "device", "name", "start", "end", "category"],
    "iterations": ["rank", "iteration", "name", "start", "cpu_end", "end"],
    "gpus": ["rank", "device", "name", "sm_count", "memory_bytes", "cc_major", "cc_minor"],
}
_TEXT = {"name", "kind", "copy_kind", "src_mem", "dst_mem", "category", "data_type"}


@dataclass
class Job:
    """Every rank's events with their attribution, and the facts about the job the replay needs."""

    ops: pd.DataFrame
    api_calls: pd.DataFrame
    kernels: pd.DataFrame
    memops: pd.DataFrame
    syncs: pd.DataFrame
    ranges: pd.DataFrame
    iterations: pd.DataFrame
    gpus: pd.DataFrame
    #: rank -> world size the trace declared (1 when unknown)
    world_sizes: dict[int, int] = field(default_factory=dict)
    #: rank -> how its iterations were found (``whole_profile`` when none)
    iteration_methods: dict[int, str] = field(default_factory=dict)

    @property
    def ranks(self) -> list[int]:
        found: set[int] = set()
        for frame in (self.ops, self.api_calls, self.kernels, self.memops):
            found.update(int(r) for r in pd.unique(frame["rank"]))
        return sorted(found) or [0]


def _clean(frame: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """The columns the replay reads, missing integers as -1 and missing text as ''."""
    out = {}
    for col in columns:
        if col not in frame.columns:
            out[col] = "" if col in _TEXT else np.full(len(frame), -1, np.int64)
        elif col in _TEXT:
            out[col] = filled_text(frame[col])
        elif frame[col].dtype in (np.int64, np.int32):  # the analysed tables' own column (int32: a reference
            # the analysis narrowed, model.narrow_ints), read in place: a write would raise
            view = frame[col].to_numpy().view()
            view.flags.writeable = False
            out[col] = view
        else:
            out[col] = pd.to_numeric(frame[col], errors="coerce").fillna(-1).to_numpy(np.int64)
    return pd.DataFrame(out, index=pd.RangeIndex(len(frame)), copy=False)


def from_analysed(an, copy: bool = False) -> Job:
    """The job of an :class:`~dlscope.analyze.analysis.Analysed` profile (as the import has it). ``copy``: its
    columns copied out, so that the analysed tables can be let go before the replay (a view of a column keeps
    the table's whole block of columns alive)."""
    p = an.profile
    sources = p.meta.get("sources", [p.meta])
    frames = {name: _clean(getattr(p, name) if name != "iterations" else an.iterations, cols)
              for name, cols in COLUMNS.items()}
    if copy:
        frames = {name: frame.copy(deep=True) for name, frame in frames.items()}
    return Job(**frames, world_sizes=world_sizes_of(sources), iteration_methods=dict(an.iteration_methods))


def from_database(conn: sqlite3.Connection) -> Job:
    """The job stored in a profile database (the raw tables with their attribution columns)."""
    tables = {"ops": "ops", "api_calls": "api_calls", "kernels": "kernels", "memops": "memops", "syncs": "syncs",
              "ranges": "ranges", "iterations": "iterations", "gpus": "gpus"}
    frames = {}
    for name, table in tables.items():
        cols = ", ".join(f'"{c}"' for c in COLUMNS[name])
        frames[name] = _clean(pd.read_sql_query(f'SELECT {cols} FROM "{table}"', conn), COLUMNS[name])
    sources = [json.loads(r[0] or "{}") for r in conn.execute("SELECT meta_json FROM sources ORDER BY source_id")]
    extra = json.loads(reader.meta(conn).get("extra_json") or "{}")
    methods = {int(k): str(v) for k, v in (extra.get("iteration_methods") or {}).items()}
    return Job(**frames, world_sizes=world_sizes_of(sources), iteration_methods=methods)


def world_sizes_of(sources: list[dict]) -> dict[int, int]:
    return {int(s.get("rank", 0) or 0): int(s.get("world_size") or 1) for s in sources}
