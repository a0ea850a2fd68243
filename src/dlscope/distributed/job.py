"""A job as one thing, read from the profile database: its physical GPUs, its wall clock and mean GPU
utilization over every GPU, and its collective calls across ranks. The CLI summary, the HTML report and the
viewer all take these figures from here, so they agree.

**A physical GPU is (host, device index).** Every rank's trace lists the devices its process could see (a
Kineto trace of one rank of an 8-GPU node lists all 8), so ``gpus`` holds one row per rank per visible
device; the same device seen by 8 ranks is one GPU. The host is the trace's host name. When the traces do
not name their host (Kineto's ``distributedInfo`` has none; torch's default file name does), ranks of
unknown host are taken to share one host, unless two of them ran GPU activity on the same device index: then
they cannot be told apart, each such rank's active devices are listed as its own and idle devices are not
listed (they cannot be placed). A GPU is *active* when a rank ran GPU activity on it (it has a row in
``agg_gpus``: kernels, memcpy or memset); the others are present but idle.

**Job figures** are those of one aggregation run (the per-rank aggregations one import or ``dlscope
aggregate`` wrote together; by default the current one). Its wall clock runs from the earliest rank's window
start to the latest rank's window end when every rank's window overlaps every other's (the ranks ran at the
same time on comparable clocks); otherwise (clocks of unrelated hosts) it is the longest rank's wall clock,
and ``wall_clock_method`` says which. GPU utilization is the mean over the run's active GPUs of each GPU's
busy time over its rank's wall clock (the per-GPU figures of ``agg_gpus``).
"""

from __future__ import annotations

import sqlite3
import statistics
from typing import Any

import numpy as np

from ..store import reader

GPU_PROPS = ("name", "sm_count", "memory_bytes", "cc_major", "cc_minor")


def _has(conn: sqlite3.Connection, table: str) -> bool:
    return conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (table,)).fetchone() is not None


def _rows(conn: sqlite3.Connection, sql: str, params: tuple = ()) -> list[dict]:
    cur = conn.execute(sql, params)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r)) for r in cur.fetchall()]


def _hosts(conn: sqlite3.Connection) -> dict[int, str]:
    if not _has(conn, "sources"):
        return {}
    return {int(r): str(h or "") for r, h in conn.execute("SELECT rank, hostname FROM sources ORDER BY source_id")}


def active_devices(conn: sqlite3.Connection) -> set[tuple[int, int]]:
    """(rank, device) pairs that ran GPU activity: every aggregation lists each such device of its rank."""
    if _has(conn, "agg_gpus") and conn.execute("SELECT 1 FROM agg_gpus LIMIT 1").fetchone():
        return {(int(r), int(d)) for r, d in conn.execute("SELECT DISTINCT rank, device FROM agg_gpus")}
    out: set[tuple[int, int]] = set()
    for table in ("kernels", "memops"):
        if _has(conn, table):
            out |= {(int(r), int(d)) for r, d in conn.execute(f"SELECT DISTINCT rank, device FROM {table}")
                    if d is not None and d >= 0}
    return out


def host_keys(conn: sqlite3.Connection, active: set[tuple[int, int]] | None = None) -> dict[int, tuple[str, bool]]:
    """rank -> (host key, whether the host is known); see the module docstring for unknown hosts."""
    hosts = _hosts(conn)
    if _has(conn, "gpus"):
        for (r,) in conn.execute("SELECT DISTINCT rank FROM gpus"):
            hosts.setdefault(int(r), "")
    active = active_devices(conn) if active is None else active
    for r, _ in active:
        hosts.setdefault(r, "")
    unknown = [r for r, h in hosts.items() if not h]
    devices = [d for r, d in active if r in unknown]
    collide = len(devices) != len(set(devices))
    return {r: ((h, True) if h else ((f"rank {r}", False) if collide else ("", False))) for r, h in hosts.items()}


def physical_gpus(conn: sqlite3.Connection) -> list[dict]:
    """Every physical GPU once: host (None when unknown), device, the ranks that ran GPU activity on it
    (``ranks``; ``rank`` is the first, None for an idle GPU), ``active`` and its properties."""
    if not _has(conn, "gpus"):
        return []
    active = active_devices(conn)
    keys = host_keys(conn, active)
    by_key: dict[tuple[str, int], dict] = {}
    rows = _rows(conn, "SELECT rank, device, name, sm_count, memory_bytes, cc_major, cc_minor FROM gpus "
                       "ORDER BY rank, device")
    listed = {(int(g["rank"]), int(g["device"])) for g in rows}
    rows += [{"rank": r, "device": d, **dict.fromkeys(GPU_PROPS)} for r, d in sorted(active - listed)]
    for g in rows:
        rank, device = int(g["rank"]), int(g["device"])
        host, known = keys.get(rank, ("", False))
        if host.startswith("rank ") and not known and (rank, device) not in active:
            continue  # an idle device of a rank whose host cannot be told: cannot be placed
        entry = by_key.setdefault((host, device), {"host": host if known else None, "device": device,
                                                   "ranks": [], "rank": None, "active": False,
                                                   **dict.fromkeys(GPU_PROPS)})
        for prop in GPU_PROPS:
            value = g.get(prop)
            if entry[prop] is None and value is not None and value != "" and not (isinstance(value, int) and value < 0):
                entry[prop] = value
        if (rank, device) in active and rank not in entry["ranks"]:
            entry["ranks"].append(rank)
    out = sorted(by_key.values(), key=lambda e: (e["host"] or "", e["device"]))
    for e in out:
        e["ranks"].sort()
        e["active"] = bool(e["ranks"])
        e["rank"] = e["ranks"][0] if e["ranks"] else None
    return out


def run_aggregations(conn: sqlite3.Connection, agg_id: int | None = None) -> list[dict]:
    """The aggregations of ``agg_id``'s run (default: the current run), one per rank, by rank."""
    if not _has(conn, "aggregations"):
        return []
    if agg_id is None:
        agg_id = reader.current_agg_id(conn)
        if agg_id is None:
            return []
    return _rows(conn, "SELECT * FROM aggregations WHERE COALESCE(run_id, agg_id) = (SELECT COALESCE(run_id, "
                       "agg_id) FROM aggregations WHERE agg_id = ?) ORDER BY rank, agg_id", (agg_id,))


def rank_agg_id(conn: sqlite3.Connection, rank: int, agg_id: int | None = None) -> int:
    """The aggregation of ``rank`` in the run of ``agg_id`` (default: the current run)."""
    from ..errors import DlscopeError

    aggs = run_aggregations(conn, agg_id)
    found = [a["agg_id"] for a in aggs if a["rank"] == rank]
    if not found:
        raise DlscopeError(f"no rank {rank} in this aggregation run (ranks: "
                           f"{', '.join(str(a['rank']) for a in aggs) or 'none'})")
    return int(found[0])


def job_wall_clock(aggs: list[dict]) -> tuple[int | None, str | None]:
    """(wall clock, method) of a run's aggregations: ``span`` when every window overlaps every other,
    else ``longest_rank``."""
    windows = [(a["window_start"], a["window_end"]) for a in aggs
               if a.get("window_start") is not None and a.get("window_end") is not None]
    if not aggs:
        return None, None
    if len(windows) == len(aggs) and max(s for s, _ in windows) < min(e for _, e in windows):
        return int(max(e for _, e in windows) - min(s for s, _ in windows)), "span"
    walls = [a["wall_clock_ns"] for a in aggs if a.get("wall_clock_ns") is not None]
    return (int(max(walls)), "longest_rank") if walls else (None, None)


def job_gpus(conn: sqlite3.Connection, aggs: list[dict]) -> list[dict]:
    """The run's active GPUs with their figures (one row per rank and device), by host, device and rank."""
    if not aggs or not _has(conn, "agg_gpus"):
        return []
    keys = host_keys(conn)
    ids = [a["agg_id"] for a in aggs]
    rows = _rows(conn, f"SELECT agg_id, rank, device, busy_ns, utilization, kernel_count, kernel_time_ns, "
                       f"tc_kernel_time_ns, memory_ns FROM agg_gpus WHERE agg_id IN ({','.join('?' * len(ids))})",
                 tuple(ids))
    for r in rows:
        host, known = keys.get(int(r["rank"]), ("", False))
        r["host"] = host if known else None
    return sorted(rows, key=lambda r: (r["host"] or "", r["device"], r["rank"]))


def job_section(conn: sqlite3.Connection, agg_id: int | None = None, call_count: int | None = None) -> dict | None:
    """The summary JSON's ``job``: the run's ranks, wall clock, mean GPU utilization over all its GPUs, each
    GPU, and how many collective calls it holds (``None`` without an aggregation; ``call_count``: that number
    when the caller already listed the calls)."""
    aggs = run_aggregations(conn, agg_id)
    if not aggs:
        return None
    wall, method = job_wall_clock(aggs)
    gpus = job_gpus(conn, aggs)
    utils = [g["utilization"] for g in gpus if g["utilization"] is not None]
    keys = host_keys(conn)
    hosts = {keys.get(int(a["rank"]), ("", False)) for a in aggs}
    return {
        "ranks": len({a["rank"] for a in aggs}),
        "hosts": len(hosts) if all(known for _, known in hosts) else None,
        "aggregations": [{"rank": a["rank"], "agg_id": a["agg_id"]} for a in aggs],
        "wall_clock_ns": wall, "wall_clock_method": method,
        "gpu_utilization": statistics.fmean(utils) if utils else None,
        "gpu_count": len(utils),
        "gpus": [{k: g[k] for k in ("host", "device", "rank", "agg_id", "busy_ns", "utilization", "kernel_count",
                                    "kernel_time_ns")} for g in gpus],
        "collective_calls": count_calls(conn, aggs) if call_count is None else call_count,
    }


#: The aggregations of the run of aggregation :agg (SQL, for queries that take the run as a parameter).
RUN_AGG_IDS = ("SELECT agg_id FROM aggregations WHERE COALESCE(run_id, agg_id) = "
               "(SELECT COALESCE(run_id, agg_id) FROM aggregations WHERE agg_id = :agg)")

#: The collective calls of a run, one row per call (collective and occurrence number, matched across ranks
#: like the arrival lags), each rank's kernel counted when it starts inside its rank's aggregation window.
#: ``{ids}``: the run's aggregation ids (a list, or RUN_AGG_IDS). The last rank to arrive is the one with the
#: shortest kernel (``pos = 1``), its bandwidths the call's. One pass (window function), whatever the job's size.
CALLS_SQL = """
WITH c AS (
  SELECT c.*, ROW_NUMBER() OVER (PARTITION BY c.source, c.collective, c.call_index ORDER BY c.dur_ns, c.rank) AS pos
    FROM collectives c JOIN aggregations a ON a.rank = c.rank AND a.agg_id IN ({ids})
     AND c.start >= a.window_start AND c.start < a.window_end)
SELECT source || '/' || collective || '/' || call_index AS call_id, source, collective, call_index,
       COUNT(*) AS ranks, MIN(start) AS first_start, MAX(start) AS last_start,
       NULLIF(MAX(msg_bytes), -1) AS max_msg_bytes, MIN(dur_ns) AS min_dur_ns, MAX(dur_ns) AS max_dur_ns,
       MAX(arrival_lag_ns) AS max_lag_ns, MAX(CASE WHEN pos = 1 THEN rank END) AS last_rank,
       MAX(CASE WHEN pos = 1 THEN algbw_gbps END) AS algbw_gbps,
       MAX(CASE WHEN pos = 1 THEN busbw_gbps END) AS busbw_gbps
  FROM c GROUP BY source, collective, call_index
"""


def count_calls(conn: sqlite3.Connection, aggs: list[dict]) -> int:
    """How many collective calls :func:`collective_calls` lists (without ranking each call's ranks)."""
    if not aggs or not _has(conn, "collectives"):
        return 0
    ids = ",".join(str(int(a["agg_id"])) for a in aggs)
    return int(conn.execute(
        "SELECT COUNT(*) FROM (SELECT 1 FROM collectives c JOIN aggregations a ON a.rank = c.rank AND a.agg_id IN "
        f"({ids}) AND c.start >= a.window_start AND c.start < a.window_end "
        "GROUP BY c.source, c.collective, c.call_index)").fetchone()[0])


#: Each rank's collective kernels of a run inside its aggregation window, as ``CALLS_SQL`` counts them.
CALL_ROWS_SQL = """
SELECT c.source, c.collective, c.call_index, c.rank, c.start, c.msg_bytes, c.dur_ns, c.arrival_lag_ns, c.algbw_gbps,
       c.busbw_gbps
  FROM collectives c JOIN aggregations a ON a.rank = c.rank AND a.agg_id IN ({ids})
   AND c.start >= a.window_start AND c.start < a.window_end
"""
_CALL_TYPES = {"source": "string", "collective": "string", "call_index": "int64", "rank": "int64", "start": "int64",
               "msg_bytes": "int64", "dur_ns": "int64", "arrival_lag_ns": "int64", "algbw_gbps": "float64",
               "busbw_gbps": "float64"}


def collective_calls(conn: sqlite3.Connection, aggs: list[dict]) -> list[dict]:
    """Per collective call of the run: ranks, largest message, shortest and longest kernel, the largest
    arrival lag, the last rank to arrive (shortest kernel) and its bandwidths, by first start.

    ``CALLS_SQL``'s figures (the viewer's table), computed with Arrow from the call rows: SQLite's window
    function and two sorts cost several times as much on a trace of 10,000 calls (NULLs sort first, as there)."""
    if not aggs or not _has(conn, "collectives"):
        return []
    import pyarrow as pa
    import pyarrow.compute as pc

    ids = ",".join(str(int(a["agg_id"])) for a in aggs)
    table = reader.arrow_table(conn, CALL_ROWS_SQL.format(ids=ids), (),
                               pa.schema([(name, getattr(pa, kind)()) for name, kind in _CALL_TYPES.items()]))
    if len(table) == 0:
        return []
    keys = ["source", "collective", "call_index"]
    ranked = table.take(pc.sort_indices(table, [(k, "ascending", "at_start") for k in (*keys, "dur_ns", "rank")]))
    # each call's rows together, its last rank to arrive (shortest kernel) first
    change = np.zeros(len(ranked), bool)
    change[0] = True
    for k in keys:
        a, b = ranked[k].slice(1), ranked[k].slice(0, len(ranked) - 1)
        same = pc.or_(pc.fill_null(pc.equal(a, b), False), pc.and_(pc.is_null(a), pc.is_null(b)))
        change[1:] |= ~same.to_numpy(zero_copy_only=False)
    firsts = np.flatnonzero(change)

    def extreme(col: str, largest: bool) -> pa.Array:
        """MAX/MIN of each call's non-NULL values (NULL when all are)."""
        values = ranked[col]
        known = pc.is_valid(values).to_numpy(zero_copy_only=False)
        filled = values.fill_null(0).to_numpy()
        reduce = np.maximum if largest else np.minimum
        none = np.iinfo(np.int64).min if largest else np.iinfo(np.int64).max
        out = reduce.reduceat(np.where(known, filled, none), firsts)
        return pa.array(out, mask=np.logical_or.reduceat(known, firsts) == 0)

    largest = extreme("msg_bytes", True)
    head = ranked.take(pa.array(firsts))
    calls = pa.table({
        **{k: head[k] for k in keys}, "ranks": pa.array(np.diff(np.append(firsts, len(ranked)))),
        "first_start": extreme("start", False), "last_start": extreme("start", True),
        "max_msg_bytes": pc.if_else(pc.equal(largest, -1), None, largest),
        "min_dur_ns": extreme("dur_ns", False), "max_dur_ns": extreme("dur_ns", True),
        "max_lag_ns": extreme("arrival_lag_ns", True), "last_rank": head["rank"], "algbw_gbps": head["algbw_gbps"],
        "busbw_gbps": head["busbw_gbps"]})
    order = pc.sort_indices(calls, [(k, "ascending", "at_start") for k in ("first_start", "collective", "call_index")])
    return calls.take(order).to_pylist()


def rank_labels(conn: sqlite3.Connection) -> dict[int, str]:
    """'rank 3' or 'rank 3 (host-a)' per rank, for titles."""
    keys = host_keys(conn)
    return {r: f"rank {r}" + (f" ({h})" if known else "") for r, (h, known) in keys.items()}


def describe_gpus(gpus: list[dict]) -> dict[str, Any]:
    """Counts for 'GPU Count' lines: active, idle, and the distinct names of the active ones."""
    active = [g for g in gpus if g["active"]]
    return {"active": len(active), "idle": len(gpus) - len(active),
            "names": sorted({g["name"] for g in (active or gpus) if g["name"]})}
