"""Memory figures of one aggregation, read from the database for the summary JSON (``memory``) and the viewer:
per device the peak allocated / reserved bytes over the profiled iterations, the iteration and op at each peak,
the allocations live at the allocated peak, each iteration's peak; and the samples over time for a chart."""

from __future__ import annotations

import io
import json
import sqlite3

import numpy as np
import pandas as pd
import pyarrow as pa

from ..analyze.memory import OpCalls, allocator_series, memory_peaks
from ..analyze.timeline import ARRAYS_FORMAT
from ..store import reader


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


#: The samples' columns memory_peaks reads of every sample, with the value a missing one reads as (as the
#: timeline reads them); pid and tid are read for the dozen samples it names (``_threads``).
SAMPLE_COLUMNS = (("device", -1), ("ts", None), ("bytes_delta", 0), ("total_allocated", -1), ("total_reserved", -1),
                  ("addr", -1), ("rowid", None))


def _int_arrays(conn: sqlite3.Connection, sql: str, params: tuple, defaults: tuple) -> list[np.ndarray]:
    """The int64 columns of a query as arrays (NULL read as each column's default), through Arrow."""
    table = reader.arrow_table(conn, sql, params, pa.schema([(str(i), pa.int64()) for i in range(len(defaults))]))
    return [(c.fill_null(d) if d is not None and c.null_count else c).to_numpy()
            for c, d in zip(table.columns, defaults)]


def _samples(conn: sqlite3.Connection, rank: int) -> pd.DataFrame:
    """All the rank's allocator samples, in the table's order (missing columns of older databases as -1)."""
    have = _columns(conn, "memory")
    cols = ", ".join(c if c in have or c == "rowid" else f"-1 AS {c}" for c, _ in SAMPLE_COLUMNS)
    arrays = _int_arrays(conn, f"SELECT {cols} FROM memory WHERE rank = ? ORDER BY rowid", (rank,),
                         tuple(d for _, d in SAMPLE_COLUMNS))
    frame = pd.DataFrame(dict(zip((c for c, _ in SAMPLE_COLUMNS), arrays)), copy=False)
    frame["rank"] = rank
    return frame


def _threads(conn: sqlite3.Connection, rowids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(pid, tid) of the samples of these rowids (-1 where the database did not record them)."""
    have = _columns(conn, "memory")
    cols = ", ".join(f"COALESCE({c}, -1)" if c in have else "-1" for c in ("pid", "tid"))
    wanted = sorted({int(r) for r in rowids})
    found = {r: (p, t) for r, p, t in conn.execute(
        f"SELECT rowid, {cols} FROM memory WHERE rowid IN ({', '.join('?' * len(wanted))})", wanted)}
    pairs = np.array([found[int(r)] for r in rowids], np.int64).reshape(-1, 2)
    return pairs[:, 0], pairs[:, 1]


def _op_calls(conn: sqlite3.Connection, rank: int, lo: int, hi: int) -> OpCalls:
    """The rank's op calls overlapping [lo, hi] as arrays: from the timeline the import stored (a few blobs),
    else from the rows. Calls of one thread and one interval break ties by op id (they share their op node's
    iteration, so the table's (rank, iteration, start) index reads them in that order too)."""
    stored = dict(conn.execute(
        "SELECT name, data FROM timeline_arrays WHERE rank = ? AND name IN ('format', 'lanes', 'op.ids', "
        "'op.start', 'op.end', 'op.lane')", (rank,)).fetchall()) if _has_table(conn, "timeline_arrays") else {}
    if stored.get("format") == ARRAYS_FORMAT.encode() and len(stored) == 6:
        lanes = json.loads(stored["lanes"])
        lane_pid = np.array([lane.get("pid", -1) for lane in lanes], np.int64)
        lane_tid = np.array([lane.get("tid", -1) for lane in lanes], np.int64)
        op_id, start, end, lane = (np.load(io.BytesIO(stored[f"op.{n}"]), allow_pickle=False)
                                   for n in ("ids", "start", "end", "lane"))
        pid, tid = lane_pid[lane], lane_tid[lane]
    else:
        op_id, pid, tid, start, end = _int_arrays(
            conn, 'SELECT op_id, COALESCE(pid, -1), COALESCE(tid, -1), start, "end" FROM op_instances '
                  "WHERE rank = ?", (rank,), (None, -1, -1, None, None))
    inside = (end >= lo) & (start <= hi)
    op_id = op_id.astype(np.int64)[inside]

    def names(ids: np.ndarray) -> np.ndarray:
        wanted = sorted({int(i) for i in ids if i >= 0})
        marks = ", ".join("?" * len(wanted))
        name_of = dict(conn.execute("SELECT i.op_id, n.name FROM op_instances i JOIN op_nodes n ON n.node_id = "
                                    f"i.node_id WHERE i.op_id IN ({marks})", wanted).fetchall()) if wanted else {}
        return np.array([name_of.get(int(i)) for i in ids], dtype=object)

    return OpCalls(op_id, np.full(len(op_id), rank, np.int64), pid.astype(np.int64)[inside],
                   tid.astype(np.int64)[inside], start.astype(np.int64)[inside], end.astype(np.int64)[inside],
                   order=op_id, names=names)


def memory_section(conn: sqlite3.Connection, agg_id: int) -> dict | None:
    """The summary's ``memory``: None when the profile recorded no allocator samples (profile_memory off).
    Reads the rank's samples as arrays and, of its ops, only the few around the samples it names."""
    rank, lo, hi = conn.execute("SELECT rank, window_start, window_end FROM aggregations WHERE agg_id = ?",
                                (agg_id,)).fetchone()
    if lo is None or hi is None:
        return None
    if not conn.execute("SELECT 1 FROM memory WHERE rank = ? AND ts >= ? AND ts <= ? LIMIT 1",
                        (rank, lo, hi)).fetchone():
        return None
    samples = _samples(conn, rank)  # all of them: a trace of deltas sums them from its start
    iterations = pd.read_sql_query('SELECT iteration, start, "end" FROM agg_iterations WHERE agg_id = ? AND profiled',
                                   conn, params=(agg_id,))
    gpus = pd.read_sql_query("SELECT device, memory_bytes FROM gpus WHERE rank = ?", conn, params=(rank,))
    rowids = samples["rowid"].to_numpy()
    return {"rank": int(rank), **memory_peaks(samples, iterations, _op_calls(conn, rank, lo, hi), gpus,
                                              threads=lambda rows: _threads(conn, rowids[rows]))}


def _has_table(conn: sqlite3.Connection, name: str) -> bool:
    return conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (name,)).fetchone() is not None


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
