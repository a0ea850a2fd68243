"""The job in the viewer: the Ranks and Collectives tables (stored figures, scoped to the page's aggregation run)
and the GPUs table (each physical GPU once, ``distributed.job.physical_gpus``, with the run's figures).

Every figure comes from the database as ``dlscope summary --json`` reads it (``distributed.job``), so the two
always agree.
"""

from __future__ import annotations

from collections.abc import Mapping

from dlscope.distributed.job import (
    CALLS_SQL,
    RUN_AGG_IDS,
    describe_gpus,
    job_gpus,
    job_section,
    physical_gpus,
    run_aggregations,
)
from dlscope.viewer.derived import DerivedDB
from dlscope.viewer.params import BadParameter, parse_int
from dlscope.viewer.profile_db import ProfileDB
from dlscope.viewer.tables import Column, Scope, TableSpec

RUN = Scope("agg", f"r.agg_id IN ({RUN_AGG_IDS})", required=True)

RANKS = TableSpec(
    "ranks", "Ranks", "agg_ranks r",
    (Column("rank", "Rank", "r.rank", desc_first=False),
     Column("host", "Host", "r.host", "text"),
     Column("gpu_utilization", "GPU Utilization", "r.gpu_utilization", "pct"),
     Column("compute_ns", "Compute", "r.compute_ns", "ns"),
     Column("exposed_communication_ns", "Exposed Communication", "r.exposed_communication_ns", "ns"),
     Column("memcpy_ns", "Memcpy", "r.memcpy_ns", "ns"),
     Column("idle_ns", "Idle", "r.idle_ns", "ns"),
     Column("wall_clock_ns", "Wall Clock", "r.wall_clock_ns", "ns"),
     Column("avg_iteration_ns", "Avg Iteration", "r.avg_iteration_ns", "ns"),
     Column("straggler_score", "Straggler Score", "r.straggler_score", "float"),
     Column("straggler_rank", "Straggler Rank", "r.straggler_rank", desc_first=False),
     Column("communication_ns", "All Communication", "r.communication_ns", "ns", hidden=True),
     Column("comm_overlap", "Communication Hidden", "r.comm_overlap", "pct", hidden=True),
     Column("collective_count", "Collectives", "r.collective_count", hidden=True),
     Column("collective_bytes", "Collective Bytes", "r.collective_bytes", "bytes", hidden=True),
     Column("busbw_gbps", "Bus Bandwidth (GB/s)", "r.busbw_gbps", "float", hidden=True),
     Column("collective_lag_ns", "Mean Arrival Lag", "r.collective_lag_ns", "ns", hidden=True),
     Column("iteration_lag_ns", "Iteration Lag", "r.iteration_lag_ns", "ns", hidden=True),
     Column("iterations_profiled", "Iterations", "r.iterations_profiled", hidden=True),
     Column("agg_id", "Aggregation", "r.agg_id", hidden=True)),
    "rank", default_desc=False, key="r.rank", scopes=(RUN,), requires=("agg_ranks", "aggregations"))

COLLECTIVE_CALLS = TableSpec(
    "collective_calls", "Collective Calls", f"({CALLS_SQL.format(ids=RUN_AGG_IDS)}) t",
    (Column("first_start", "First Arrival (ns)", "first_start", "ts", desc_first=False),
     Column("collective", "Collective", "collective", "text"),
     Column("call_index", "Call", "call_index", desc_first=False),
     Column("ranks", "Ranks", "ranks"),
     Column("max_msg_bytes", "Largest Message", "max_msg_bytes", "bytes"),
     Column("max_dur_ns", "Longest (first to arrive)", "max_dur_ns", "ns"),
     Column("min_dur_ns", "Shortest (last to arrive)", "min_dur_ns", "ns"),
     Column("max_lag_ns", "Max Arrival Lag", "max_lag_ns", "ns"),
     Column("last_rank", "Last Rank", "last_rank"),
     Column("algbw_gbps", "Alg. Bandwidth (GB/s)", "algbw_gbps", "float"),
     Column("busbw_gbps", "Bus Bandwidth (GB/s)", "busbw_gbps", "float"),
     Column("last_start", "Last Arrival (ns)", "last_start", "ts", hidden=True),
     Column("source", "Source", "source", "text", hidden=True),
     Column("call_id", "Call ID", "call_id", "text", hidden=True)),
    "first_start", default_desc=False, key="call_id",
    scopes=(Scope("agg", "1", required=True),), requires=("collectives", "aggregations"))

COLLECTIVE_RANKS = TableSpec(
    "collective_ranks", "Ranks in the Selected Call",
    f"""(SELECT c.*, c.start - MIN(c.start) OVER () AS after_first
           FROM collectives c JOIN aggregations a ON a.rank = c.rank AND a.agg_id IN ({RUN_AGG_IDS})
            AND c.start >= a.window_start AND c.start < a.window_end
          WHERE c.collective = :call_collective AND c.call_index = :call_index AND c.source = :call_source) t""",
    (Column("rank", "Rank", "rank", desc_first=False),
     Column("start", "Arrival (ns)", "start", "ts", desc_first=False),
     Column("after_first", "After the First Rank", "after_first", "ns"),
     Column("arrival_lag_ns", "Arrival Lag", "arrival_lag_ns", "ns"),
     Column("dur_ns", "Duration", "dur_ns", "ns"),
     Column("msg_bytes", "Message", "NULLIF(msg_bytes, -1)", "bytes"),
     Column("algbw_gbps", "Alg. Bandwidth (GB/s)", "algbw_gbps", "float"),
     Column("busbw_gbps", "Bus Bandwidth (GB/s)", "busbw_gbps", "float"),
     Column("dtype", "Data Type", "dtype", "text"),
     Column("iteration", "Iteration", "iteration"),
     Column("stream", "Stream", "stream", hidden=True),
     Column("name", "Kernel", "name", "text", hidden=True),
     Column("collective_id", "Row", "collective_id", hidden=True)),
    "rank", default_desc=False, key="collective_id",
    # ``call`` (source/collective/index) is the URL's; page_scope splits it into the three the SQL uses
    scopes=(Scope("agg", "1", required=True), Scope("call", "1", "text", required=True),
            Scope("call_source", "1", "text"), Scope("call_collective", "1", "text"), Scope("call_index", "1")),
    requires=("collectives", "aggregations"))

GPUS = TableSpec(
    "gpus", "GPUs", "gpus",
    (Column("host", "Host", "host", "text"),
     Column("device", "Device", "device", desc_first=False),
     Column("ranks", "Rank", "ranks", "text"),
     Column("state", "State", "state", "text"),
     Column("name", "Name", "name", "text"),
     Column("utilization", "GPU Utilization", "utilization", "pct"),
     Column("busy_ns", "Busy Time", "busy_ns", "ns"),
     Column("kernel_count", "Kernels", "kernel_count"),
     Column("kernel_time_ns", "Kernel GPU Time", "kernel_time_ns", "ns"),
     Column("tc_kernel_time_ns", "TC Kernel GPU Time", "tc_kernel_time_ns", "ns"),
     Column("memory_ns", "Memory Time", "memory_ns", "ns"),
     Column("compute_capability", "Compute Capability", "compute_capability", "text"),
     Column("sm_count", "SM Count", "sm_count"),
     Column("memory_bytes", "Memory", "memory_bytes", "bytes"),
     Column("agg_id", "Aggregation", "agg_id", hidden=True),
     Column("row", "Row", "row", hidden=True)),
    "row", default_desc=False, key="row")

SPECS = {GPUS.name: GPUS}
TABLES = {t.name: t for t in (RANKS, COLLECTIVE_CALLS, COLLECTIVE_RANKS)}
PAGE_PARAMS = ("call",)


def gpu_rows(db: ProfileDB, agg: int | None) -> list[dict]:
    """One row per physical GPU (idle ones last of their host), with the figures of the rank that used it
    in the run of ``agg``; a GPU two ranks used gets a row per rank."""
    conn = db.connection()
    gpus = physical_gpus(conn)
    figures = {(g["host"], g["device"], g["rank"]): g for g in job_gpus(conn, run_aggregations(conn, agg))}
    rows = []
    for g in gpus:
        cc = f"{g['cc_major']}.{g['cc_minor']}" if g["cc_major"] is not None else None
        base = {"host": g["host"] or "", "device": g["device"], "name": g["name"], "sm_count": g["sm_count"],
                "memory_bytes": g["memory_bytes"], "compute_capability": cc}
        if not g["active"]:
            rows.append({**base, "ranks": "", "state": "idle (no GPU activity)"})
        for rank in g["ranks"]:
            f = figures.get((g["host"], g["device"], rank), {})
            rows.append({**base, "ranks": str(rank), "state": "active", "agg_id": f.get("agg_id"),
                         **{k: f.get(k) for k in ("utilization", "busy_ns", "kernel_count", "kernel_time_ns",
                                                   "tc_kernel_time_ns", "memory_ns")}})
    order = sorted(range(len(rows)), key=lambda i: (rows[i]["host"], rows[i]["state"] != "active", rows[i]["device"]))
    return [{**rows[i], "row": n} for n, i in enumerate(order)]


def gpus_source(viewer, db: ProfileDB, scope: dict, params: Mapping[str, str]) -> DerivedDB:
    agg = scope.get("agg")
    return viewer.derived.get(("gpus", str(db.path), db._generation, agg),
                              lambda: DerivedDB(f"{db.profile_name}", [(GPUS, gpu_rows(db, agg))]))


def job_data(db: ProfileDB, agg: int | None) -> dict | None:
    """The dashboard's job panel: ``distributed.job.job_section`` (what the summary JSON's ``job`` holds)."""
    if not db.has("aggregations"):
        return None
    conn = db.connection()
    job = job_section(conn, agg)
    if job is not None:
        job["gpu_counts"] = describe_gpus(physical_gpus(conn))
    return job


def check_call(params: Mapping[str, str]) -> dict | None:
    """The selected collective call (``source/collective/index``), validated and split for the SQL."""
    raw = params.get("call")
    if raw in (None, ""):
        return None
    parts = raw.split("/")
    if len(parts) != 3 or not parts[0] or not parts[1]:
        raise BadParameter("call", f"{raw[:60]!r} is not a collective call (source/collective/index)")
    return {"call": raw, "call_source": parts[0], "call_collective": parts[1],
            "call_index": parse_int("call", parts[2], 0)}
