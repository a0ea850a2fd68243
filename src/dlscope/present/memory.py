"""Memory figures of one aggregation, read from the database for the summary JSON (``memory``) and the viewer:
per device the peak allocated / reserved bytes over the profiled iterations, the iteration and op at each peak,
the allocations live at the allocated peak, each iteration's peak; and the samples over time for a chart."""

from __future__ import annotations

import sqlite3

import numpy as np
import pandas as pd

from ..analyze.memory import allocator_series, memory_peaks


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')}


def memory_samples(conn: sqlite3.Connection, rank: int, start: int | None = None, end: int | None = None
                   ) -> pd.DataFrame:
    """A rank's allocator samples (inside [start, end] when given); pid, tid and addr are -1 in databases
    written before they were recorded."""
    have = _columns(conn, "memory")
    extra = ", ".join(c if c in have else f"-1 AS {c}" for c in ("pid", "tid", "addr"))
    where, params = "rank = ?", [rank]
    if start is not None and end is not None:
        where += " AND ts >= ? AND ts <= ?"
        params += [start, end]
    return pd.read_sql_query(f"SELECT rank, device, ts, bytes_delta, total_allocated, total_reserved, {extra} "
                             f"FROM memory WHERE {where} ORDER BY device, ts", conn, params=params)


def memory_section(conn: sqlite3.Connection, agg_id: int) -> dict | None:
    """The summary's ``memory``: None when the profile recorded no allocator samples (profile_memory off)."""
    rank, lo, hi = conn.execute("SELECT rank, window_start, window_end FROM aggregations WHERE agg_id = ?",
                                (agg_id,)).fetchone()
    if lo is None or hi is None:
        return None
    samples = memory_samples(conn, rank)  # all of them: a trace of deltas sums them from its start
    if not ((samples["ts"] >= lo) & (samples["ts"] <= hi)).any():
        return None
    iterations = pd.read_sql_query('SELECT iteration, start, "end" FROM agg_iterations WHERE agg_id = ? AND profiled',
                                   conn, params=(agg_id,))
    ops = pd.read_sql_query('SELECT i.op_id, n.name, i.rank, i.pid, i.tid, i.start, i."end" FROM op_instances i '
                            'JOIN op_nodes n ON n.node_id = i.node_id '
                            'WHERE i.rank = ? AND i."end" >= ? AND i.start <= ?',
                            conn, params=(rank, lo, hi))
    gpus = pd.read_sql_query("SELECT device, memory_bytes FROM gpus WHERE rank = ?", conn, params=(rank,))
    return {"rank": int(rank), **memory_peaks(samples, iterations, ops, gpus)}


def memory_timeline(conn: sqlite3.Connection, rank: int, start: int | None = None, end: int | None = None,
                    max_points: int = 4000) -> list[dict]:
    """Per device, allocated and reserved bytes (None: unknown) after each sample, at ``offset_ns`` from
    ``start`` (else the first sample; offsets stay exact in a browser's doubles), for a chart: at most
    ``max_points`` per device, keeping of each run of samples the one with the most allocated and the one with
    the most reserved, so no peak is lost to the thinning."""
    series = allocator_series(memory_samples(conn, rank))  # from the start: a trace of deltas sums them
    if start is not None and end is not None:
        series = series[(series["ts"] >= start) & (series["ts"] <= end)]
    origin = start if start is not None else (int(series["ts"].min()) if len(series) else 0)
    out = []
    for device, s in series.groupby("device", sort=True):
        s = s.reset_index(drop=True)
        if len(s) > max_points:
            bucket = np.arange(len(s)) * (max_points // 2) // len(s)
            keep = np.union1d(s.groupby(bucket)["allocated"].idxmax().to_numpy(),
                              s.groupby(bucket)["reserved"].idxmax().to_numpy())
            s = s.iloc[keep]
        known = s["reserved"].to_numpy() >= 0
        out.append({"device": int(device), "label": "CPU" if device < 0 else f"GPU {device}",
                    "basis": str(s["basis"].iloc[0]), "start_ns": int(origin),
                    "offset_ns": (s["ts"] - origin).astype(int).tolist(),
                    "allocated": s["allocated"].astype(int).tolist(),
                    "reserved": [int(v) if k else None for v, k in zip(s["reserved"], known)]})
    return out
