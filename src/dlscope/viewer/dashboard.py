"""The Dashboard's panels from one aggregation: the figures come from ``aggregations`` as stored, never recomputed.

NULL stays None (the browser shows "n/a"): a number that could not be measured is never shown as 0.
"""

from __future__ import annotations

import json
from typing import Any

from dlscope.analyze.aggregation import CATEGORIES, CATEGORY_LABELS
from dlscope.analyze.throughput import throughput, throughput_facts
from dlscope.distributed.job import describe_gpus, physical_gpus
from dlscope.format import shapes_where_repeated
from dlscope.system import panel_rows
from dlscope.viewer.profile_db import ProfileDB

#: Resource usage breakdown categories, in DLProf's priority order (aggregations / agg_iterations columns).
BREAKDOWN = tuple((f"{c}_ns", CATEGORY_LABELS[c]) for c in CATEGORIES)

#: The rows after the system facts (dlscope.system.PANEL_ROWS): (label, dlscope_meta key).
DLSCOPE_FIELDS = (("dlscope Version", "dlscope_version"), ("dlscope DB Version", "schema_version"),
                  ("Created", "created_at"))

#: Keys of findings.evidence_json the `>>` drill-down understands.
EVIDENCE_KEYS = {"nodes": ("node_ids", "op_node_ids", "nodes", "ops"),
                 "kernel_names": ("kernel_names", "kernels"),
                 "iterations": ("iterations",)}


def resolve_agg(db: ProfileDB, agg: int | None) -> dict | None:
    aggs = db.aggregations()
    if not aggs:
        return None
    if agg is None:
        agg = db.current_agg_id()
    return next((a for a in aggs if a["agg_id"] == agg), None)


def evidence_links(evidence_json: str | None) -> dict:
    """The drill-down lists of a finding: {"nodes": [...], "kernel_names": [...], "iterations": [...],
    "time_ranges": [["start", "end"], ...]}; times as strings (epoch ns do not fit a JavaScript number)."""
    try:
        evidence = json.loads(evidence_json) if evidence_json else {}
    except ValueError:
        return {}
    if not isinstance(evidence, dict):
        return {}
    out = {}
    for name, keys in EVIDENCE_KEYS.items():
        for k in keys:
            value = evidence.get(k)
            if isinstance(value, list) and value and all(isinstance(v, (int, str)) for v in value):
                out[name] = value
                break
    ranges = evidence.get("time_ranges")
    if isinstance(ranges, list):
        kept = [[str(r[0]), str(r[1])] for r in ranges if isinstance(r, list) and len(r) == 2
                and all(isinstance(v, int) and not isinstance(v, bool) for v in r) and r[1] > r[0]]
        if kept:
            out["time_ranges"] = kept
    return out


def referred_rules(evidence_json: str | None) -> list[str]:
    """The rules whose findings say what to change for this finding's cause (``see_findings``, set by
    ``experts.referred``): the dashboard links them; [] when none or unreadable."""
    try:
        see = (json.loads(evidence_json) if evidence_json else {}).get("see_findings")
    except (ValueError, AttributeError):
        return []
    return see if isinstance(see, list) and all(isinstance(v, str) for v in see) else []


def _rows(db: ProfileDB, sql: str, params=()) -> list[dict]:
    conn = db.connection()
    cur = conn.execute(sql, params)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r)) for r in cur.fetchall()]


def system_config(db: ProfileDB) -> list[list]:
    """DLProf's System Configuration, in its order; GPU Count counts each physical GPU once, those that ran GPU
    work. Facts the input did not record are left out, never guessed."""
    gpus = physical_gpus(db.connection()) if db.has("gpus") else []
    counts = describe_gpus(gpus)
    rows: list[list] = [["Profile Name", db.meta["profile_name"]]] if db.meta.get("profile_name") else []
    rows += [["GPU Count", counts["active"] if db.has("gpus") else None],
             ["GPU Name(s)", ", ".join(counts["names"]) or None]]
    if counts["idle"]:
        idle = [f"GPU {g['device']}" + (f" of {g['host']}" if g["host"] else "") for g in gpus if not g["active"]]
        rows.append(["Idle GPUs (present, no GPU activity)", f"{counts['idle']}: {', '.join(idle)}"])
    if db.has("sources"):
        ranks = db.execute_one("SELECT COUNT(DISTINCT rank) FROM sources")[0]
        rows.append(["Ranks", ranks])
    rows += panel_rows(db.meta)
    if db.has("sources"):
        formats = [r[0] for r in db.execute("SELECT DISTINCT format FROM sources ORDER BY format") if r[0]]
        if formats:
            rows.append(["Trace Format", ", ".join(formats)])
    rows += [[label, db.meta[key]] for label, key in DLSCOPE_FIELDS if db.meta.get(key)]
    return rows


def kernel_details(db: ProfileDB, agg: dict) -> dict:
    """The Kernel Details pane: GPU time and count of all / TC / memory / other kernels."""
    a = agg["agg_id"]
    tc = db.execute_one("SELECT SUM(calls), SUM(gpu_time_ns) FROM agg_kernels WHERE agg_id = ? AND uses_tc = 1",
                        (a,)) if db.has("agg_kernels") else (None, None)
    mem = (None, None)
    if db.has("memops"):
        mem = db.execute_one(
            "SELECT COUNT(*), SUM(m.dur) FROM memops m JOIN agg_iterations i ON i.agg_id = ? AND i.profiled = 1 "
            "AND i.rank = m.rank AND i.iteration = m.iteration", (a,))
    total_n, total_t = agg.get("kernel_count"), agg.get("kernel_time_ns")
    tc_n, tc_t = (tc[0] or 0, tc[1] or 0) if total_n is not None else (None, None)
    tc_t = agg.get("tc_kernel_time_ns", tc_t) if agg.get("tc_kernel_time_ns") is not None else tc_t
    other_n = None if total_n is None or tc_n is None else total_n - tc_n
    other_t = None if total_t is None or tc_t is None else total_t - tc_t
    return {"all": [total_t, total_n], "tc": [tc_t, tc_n], "memory": [mem[1] or 0, mem[0] or 0] if mem[0] is not None
            else [None, None], "other": [other_t, other_n]}


#: Aggregation figures that do not exist when no iterations were found (the whole profile is one window): the
#: summary JSON has null there, and so does the dashboard (never the stored placeholder 0..0, 1 iteration).
ITERATION_FIGURES = ("iter_start", "iter_stop", "iterations_profiled", "avg_iteration_ns")


def dashboard_data(db: ProfileDB, agg_id: int | None) -> dict:
    agg = resolve_agg(db, agg_id)
    if agg is not None and agg.get("iteration_method") == "whole_profile":
        agg = {**agg, **dict.fromkeys(ITERATION_FIGURES)}
    out: dict[str, Any] = {"profile_name": db.profile_name, "notice": db.notice, "aggregation": agg,
                           "system": system_config(db)}
    if agg is None:
        return out
    a = agg["agg_id"]
    out["breakdown"] = [[label, agg.get(key)] for key, label in BREAKDOWN]
    out["throughput"] = throughput(agg, agg["iterations_profiled"],
                                   throughput_facts(json.loads(db.meta.get("extra_json") or "{}")))
    gpus = _rows(db, "SELECT a.rank, a.device, g.name, a.utilization, a.busy_ns FROM agg_gpus a LEFT JOIN gpus g "
                     "ON g.rank = a.rank AND g.device = a.device WHERE a.agg_id = ? ORDER BY a.rank, a.device", (a,)) \
        if db.has("agg_gpus", "gpus") else []
    out["gpus"] = gpus
    out["kernels"] = kernel_details(db, agg)
    out["total_iterations"] = db.execute_one(
        "SELECT COUNT(DISTINCT iteration) FROM agg_iterations WHERE agg_id = ?", (a,))[0] \
        if db.has("agg_iterations") and agg["iterations_profiled"] is not None else None
    out["top_ops"] = _rows(db, "SELECT gpu_time_ns, node_id, op_name, direction, op_type, calls, tc_eligible, "
                               "using_tc, input_shapes FROM agg_ops WHERE agg_id = ? AND gpu_time_ns > 0 "
                               "ORDER BY gpu_time_ns DESC LIMIT 10", (a,)) \
        if db.has("agg_ops") else []
    for op, shapes in zip(out["top_ops"], shapes_where_repeated([o["op_name"] for o in out["top_ops"]],
                                                                [o.pop("input_shapes") for o in out["top_ops"]])):
        op["shapes"] = shapes  # shown under a name that repeats: what tells its op nodes apart
    out["notes"] = figure_notes_of(db, agg)
    out["iterations"] = iteration_series(db, a)
    out["iteration_on_gpu"] = iteration_on_gpu(db, agg)
    simulated = "simulated_saving_ns" if db.has("findings") and any(
        r[1] == "simulated_saving_ns" for r in db.execute('PRAGMA table_info("findings")')) else "NULL"
    not_priced = "not_priced" if db.has("findings") and any(
        r[1] == "not_priced" for r in db.execute('PRAGMA table_info("findings")')) else "NULL"
    findings = _rows(db, "SELECT finding_id, rule, severity, problem, recommendation, est_saving_ns, "
                         f"est_saving_pct, evidence_json, {simulated} AS simulated_saving_ns, "
                         f"{not_priced} AS not_priced FROM findings "
                         "WHERE agg_id = ? ORDER BY finding_id", (a,)) \
        if db.has("findings") else []
    for f in findings:
        evidence = f.pop("evidence_json")
        f["links"], f["see_findings"] = evidence_links(evidence), referred_rules(evidence)
    out["findings"] = findings
    # all findings a scenario models, priced together by replay (whatif.stored): overlaps counted once
    out["findings_combined_saving_ns"] = agg.get("findings_combined_saving_ns")
    return out


def figure_notes_of(db: ProfileDB, agg: dict) -> dict:
    """Why Tensor Core kernel efficiency and MFU are n/a or what they leave out, and what the Model Summary's
    counts hold (``present.graph_replay.figure_notes``, the summary's and the HTML report's words)."""
    from dlscope.analyze.tensor_core import rank_matrix_units
    from dlscope.present.graph_replay import figure_notes

    conn = db.connection()
    units = rank_matrix_units(conn, agg.get("rank")) if db.has("gpus") else None
    notes = figure_notes(conn, agg, *((units.singular, units.plural) if units else ()))
    notes.pop("graph_replay")
    return notes


def iteration_on_gpu(db: ProfileDB, agg: dict) -> dict | None:
    """The summary's iterations timed on the GPU (``iteration_on_gpu_ns``) where the GPU ran behind the CPU,
    else None."""
    from dlscope.present.summary import iteration_on_gpu_section

    if agg.get("iteration_method") == "whole_profile" or not db.has("agg_iterations"):
        return None
    return iteration_on_gpu_section(db.connection(), agg["agg_id"]).get("iteration_on_gpu_ns")


def memory_chart(db: ProfileDB, agg_id: int, rank: int | None = None) -> dict | None:
    """Allocated / reserved bytes over the aggregation's window per device and the peaks (the summary's
    ``memory``), for the rank shown; None when the profile recorded no allocator samples."""
    from dlscope.distributed.job import rank_agg_id
    from dlscope.present.memory import memory_section, memory_timeline

    if not db.has("memory", "aggregations") or db.execute_one("SELECT 1 FROM memory LIMIT 1") is None:
        return None
    conn = db.connection()
    if rank is not None:
        agg_id = rank_agg_id(conn, rank, agg_id)
    peaks = memory_section(conn, agg_id)
    if peaks is None:
        return None
    rank, lo, hi = conn.execute("SELECT rank, window_start, window_end FROM aggregations WHERE agg_id = ?",
                                (agg_id,)).fetchone()
    return {"rank": rank, "series": memory_timeline(conn, rank, lo, hi), "peaks": peaks["devices"]}


def iteration_series(db: ProfileDB, agg_id: int, rank: int | None = None) -> dict:
    """Per-iteration stacked categories for the Iterations chart (one rank: the first unless given)."""
    if not db.has("agg_iterations"):
        return {"ranks": [], "rows": []}
    ranks = [r[0] for r in db.execute("SELECT DISTINCT rank FROM agg_iterations WHERE agg_id = ? ORDER BY rank",
                                      (agg_id,))]
    if rank is None and ranks:
        rank = ranks[0]
    cols = "iteration, profiled, start, duration_ns, kernel_count, tc_kernel_count, " + \
           ", ".join(k for k, _ in BREAKDOWN)
    rows = db.execute(f"SELECT {cols} FROM agg_iterations WHERE agg_id = ? AND rank IS ? ORDER BY iteration",
                      (agg_id, rank))
    return {"ranks": ranks, "rank": rank, "columns": [c.strip() for c in cols.split(",")], "rows": rows,
            "categories": [[k, label] for k, label in BREAKDOWN]}
