"""The summary: one JSON object (a stable contract, documented in the README) and its terminal rendering."""

from __future__ import annotations

import json
import statistics
import sqlite3
from pathlib import Path

from ..analyze.aggregation import CATEGORIES, CATEGORY_LABELS
from ..analyze.iterations import GUESSED
from ..analyze.tensor_core import MatrixUnits, matrix_units, rank_matrix_units
from ..distributed import summary_ranks
from ..nanoseconds import round_ns
from ..store import reader


def _one(conn: sqlite3.Connection, sql: str, params: tuple = ()):
    return conn.execute(sql, params).fetchone()[0]


def _profile_section(conn: sqlite3.Connection, methods: dict) -> dict:
    kernels = conn.execute("SELECT COUNT(*), SUM(dur) FROM kernels").fetchone()
    memops = dict(conn.execute("SELECT kind, COUNT(*) FROM memops GROUP BY kind").fetchall())
    method = methods.get(str(_one(conn, "SELECT MIN(rank) FROM aggregations") or 0)) or next(iter(methods.values()), None)
    iterations = _one(conn, "SELECT COUNT(*) FROM iterations WHERE rank = (SELECT MIN(rank) FROM iterations)")
    gpus = [dict(zip(("rank", "device", "name", "sm_count", "memory_bytes", "cc_major", "cc_minor"), r))
            for r in conn.execute("SELECT rank, device, name, sm_count, memory_bytes, cc_major, cc_minor FROM gpus "
                                  "ORDER BY rank, device")]
    for g in gpus:
        for key in ("sm_count", "memory_bytes", "cc_major", "cc_minor"):
            if g[key] is not None and g[key] < 0:
                g[key] = None
    return {
        "kernel_count": kernels[0], "kernel_time_ns": kernels[1] or 0,
        "memcpy_count": memops.get("memcpy", 0), "memset_count": memops.get("memset", 0),
        "op_count": _one(conn, "SELECT COUNT(*) FROM ops"),
        "iterations_total": None if method == "whole_profile" else iterations,
        "iteration_method": method,
        "ranks": _one(conn, "SELECT COUNT(DISTINCT rank) FROM sources") or 1,
        "gpus": gpus,
        "dropped_events": dropped_events(conn),
    }


def dropped_events(conn: sqlite3.Connection) -> list[dict]:
    """The events the importers dropped because they cannot be true (``importers.validate``), per rank, table
    and reason: ``[{"rank", "table", "reason", "count"}]``, empty when none were."""
    out = []
    for rank, meta_json in conn.execute("SELECT rank, meta_json FROM sources ORDER BY rank, source_id"):
        dropped = json.loads(meta_json or "{}").get("dropped_events") or {}
        out += [{"rank": rank, "table": table, "reason": reason, "count": int(n)}
                for table, reasons in dropped.items() for reason, n in reasons.items()]
    return out


def _aggregation_section(conn: sqlite3.Connection, agg_id: int, candidates: dict) -> dict:
    cur = conn.execute("SELECT * FROM aggregations WHERE agg_id = ?", (agg_id,))
    row = dict(zip([d[0] for d in cur.description], cur.fetchone()))
    whole = row["iteration_method"] == "whole_profile"
    guessed = row["iteration_method"] in GUESSED
    top = conn.execute(
        "SELECT op_name, op_type, direction, gpu_time_ns, calls, tc_eligible, using_tc FROM agg_ops "
        "WHERE agg_id = ? AND gpu_time_ns > 0 ORDER BY gpu_time_ns DESC LIMIT 10", (agg_id,)).fetchall()
    durations = sorted(r[0] for r in conn.execute(
        "SELECT duration_ns FROM agg_iterations WHERE agg_id = ? AND profiled = 1", (agg_id,)))
    slowest = conn.execute("SELECT iteration FROM agg_iterations WHERE agg_id = ? AND profiled = 1 "
                           "ORDER BY duration_ns DESC, iteration LIMIT 1", (agg_id,)).fetchone()
    gpus = conn.execute("SELECT rank, device, busy_ns, utilization, kernel_count, kernel_time_ns FROM agg_gpus "
                        "WHERE agg_id = ? ORDER BY device", (agg_id,)).fetchall()
    units = rank_matrix_units(conn, row["rank"])
    return {
        "agg_id": agg_id, "rank": row["rank"],
        "iter_start": None if whole else row["iter_start"], "iter_stop": None if whole else row["iter_stop"],
        "iterations_profiled": None if whole else row["iterations_profiled"],
        "key_node": row["key_node"] or None, "iteration_method": row["iteration_method"],
        "iterations_guessed": guessed,
        "key_node_candidates": candidates.get(str(row["rank"]), []) if guessed or whole else [],
        "wall_clock_ns": row["wall_clock_ns"],
        "iteration_ns": None if whole or not durations else {
            "min": durations[0], "median": round_ns(statistics.median(durations)), "max": durations[-1],
            "slowest_iteration": slowest[0]},
        "avg_iteration_ns": None if whole else round_ns(row["avg_iteration_ns"]),  # REAL in older databases
        "gpu_busy_ns": row["gpu_busy_ns"], "gpu_utilization": row["gpu_utilization"],
        "kernel_count": row["kernel_count"], "kernel_time_ns": row["kernel_time_ns"],
        "tc_kernel_time_ns": row["tc_kernel_time_ns"], "tc_kernel_efficiency": row["tc_kernel_efficiency"],
        "resource_breakdown_ns": {c: row[f"{c}_ns"] for c in CATEGORIES},
        "model_summary": {"op_nodes": row["op_nodes"], "tc_eligible_op_nodes": row["tc_eligible_op_nodes"],
                          "op_nodes_using_tc": row["op_nodes_using_tc"],
                          "tc_eligible_gpu_time_pct": row["tc_eligible_gpu_time_pct"]},
        "gpus": [dict(zip(("rank", "device", "busy_ns", "utilization", "kernel_count", "kernel_time_ns"), g))
                 for g in gpus],
        "top_gpu_ops": [{"op_name": t[0], "op_type": t[1], "direction": t[2], "gpu_time_ns": t[3], "calls": t[4],
                         "tc_eligible": bool(t[5]), "using_tc": bool(t[6])} for t in top],
        "matrix_units": units._asdict(),
    }


def summary_units(aggregation: dict | None) -> MatrixUnits:
    """The words for the rank's Tensor Cores / AMD matrix cores (older summaries: NVIDIA's)."""
    known = (aggregation or {}).get("matrix_units")
    return MatrixUnits(**known) if known else matrix_units([])


def breakdown_labels(units: MatrixUnits) -> dict[str, str]:
    """CATEGORY_LABELS with the rank's words for the Tensor Core categories."""
    return {**CATEGORY_LABELS, "tensor_core": f"Using {units.plural}", "non_tensor_core": f"Not Using {units.plural}"}


def _findings(conn: sqlite3.Connection, agg_id: int) -> list[dict]:
    rows = conn.execute("SELECT rule, severity, problem, recommendation, est_saving_ns, est_saving_pct, "
                        "evidence_json FROM findings WHERE agg_id = ? ORDER BY finding_id", (agg_id,)).fetchall()
    keys = ("rule", "severity", "problem", "recommendation", "est_saving_ns", "est_saving_pct", "evidence")
    return [dict(zip(keys, (*r[:6], json.loads(r[6] or "{}")))) for r in rows]


def _roofline(conn: sqlite3.Connection, agg_id: int | None) -> dict:
    """How much op GPU time is memory- vs math-bound, and the ops furthest below their ceiling."""
    from ..roofline import roofline_report

    report = roofline_report(conn, agg_id)
    return {"gpu": report["ceilings"]["name"] if report.get("ceilings") else None,
            "ceilings_error": report.get("ceilings_error") or None, **report["summary"]}


def summary_dict(db_path: str | Path, agg_id: int | None = None) -> dict:
    """The summary JSON object of a profile database (see README, "The summary JSON")."""
    conn = reader.connect(db_path)
    try:
        meta = reader.meta(conn)
        extra = json.loads(meta.get("extra_json") or "{}")
        methods = {str(k): v for k, v in (extra.get("iteration_methods") or {}).items()}
        candidates = {str(k): v for k, v in (extra.get("key_node_candidates") or {}).items()}
        if agg_id is None and reader.current_agg_id(conn) is None:
            profile = {**_profile_section(conn, methods), "iterations_total": None}
            return {"schema_version": int(meta["schema_version"]), "profile_name": meta.get("profile_name"),
                    "profile": profile, "aggregation": None, "findings": [],
                    "roofline": _roofline(conn, None), "ranks": summary_ranks(conn)}
        agg_id = reader.resolve_agg_id(conn, agg_id)
        out = {"schema_version": int(meta["schema_version"]), "profile_name": meta.get("profile_name"),
               "profile": _profile_section(conn, methods), "aggregation": _aggregation_section(conn, agg_id, candidates),
               "findings": _findings(conn, agg_id), "roofline": _roofline(conn, agg_id),
               "ranks": summary_ranks(conn)}
        if extra.get("capture"):
            out["capture"] = extra["capture"]
        return out
    finally:
        conn.close()


def fmt_ns(ns: float | None) -> str:
    """A duration in readable units."""
    if ns is None:
        return "n/a"
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if abs(ns) >= scale:
            return f"{ns / scale:,.2f} {unit}"
    return f"{ns:,.0f} ns"


def fmt_pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _render_ranks(console, ranks: list[dict]) -> None:
    """Per-rank figures of a multi-rank job, the likeliest stragglers first."""
    if len(ranks) < 2:
        return
    from rich.table import Table

    table = Table(title=f"Ranks ({len(ranks)}; likeliest stragglers first)", title_justify="left")
    for col in ("Rank", "Avg iteration", "GPU util.", "Compute", "Exposed comm.", "Idle", "Straggler score"):
        table.add_column(col, justify="right")
    ordered = sorted(ranks, key=lambda r: -(r.get("straggler_score") or 0))
    for r in ordered[:16]:
        score = r.get("straggler_score")
        table.add_row(str(r["rank"]), fmt_ns(r.get("avg_iteration_ns")), fmt_pct(r.get("gpu_utilization")),
                      fmt_ns(r.get("compute_ns")), fmt_ns(r.get("exposed_communication_ns")), fmt_ns(r.get("idle_ns")),
                      "n/a" if score is None else f"{score:.2f}")
    console.print(table)
    if len(ordered) > 16:
        console.print(f"… and {len(ordered) - 16} more ranks (dlscope summary --json lists them all)")


def _render_roofline(console, roofline: dict | None, escape, counters_only: bool = False) -> None:
    """One line on memory- vs math-bound GPU time (nothing for a profile without GPU op time)."""
    if not roofline or not (roofline.get("op_gpu_time_ns") or counters_only):
        return
    if roofline.get("memory_bound_gpu_time_ns") is None:
        console.print(escape(f"Roofline: skipped ({roofline.get('ceilings_error')})"))
        return
    console.print(f"Roofline ({escape(str(roofline['gpu']))}): {fmt_ns(roofline['memory_bound_gpu_time_ns'])} of op GPU "
                  f"time memory-bound, {fmt_ns(roofline['math_bound_gpu_time_ns'])} math-bound")
    for op in roofline.get("furthest_below", [])[:3]:
        pct = op.get("pct_of_ceiling")
        console.print(escape(f"  {op['op_name']}: {fmt_pct(pct / 100 if pct is not None else None)} of its "
                             f"{op.get('bound')} ceiling, {fmt_ns(op.get('gpu_time_ns'))} GPU time"))


def _render_dropped(console, dropped: list[dict]) -> None:
    """One line saying how many events of the input were dropped, and why (never silently)."""
    if not dropped:
        return
    from ..importers.validate import REASONS

    total: dict[tuple[str, str], int] = {}
    for d in dropped:
        total[(d["table"], d["reason"])] = total.get((d["table"], d["reason"]), 0) + d["count"]
    said = "; ".join(f"{n:,} {table} {REASONS.get(reason, reason)}" for (table, reason), n in total.items())
    console.print(f"Dropped {sum(total.values()):,} events the input got wrong ({said}); the figures leave them out.",
                  markup=False)


def render_summary(summary: dict) -> str:
    """The terminal summary: key metrics, GPUs, breakdown, top 10 GPU ops, findings."""
    from io import StringIO

    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    buf = StringIO()
    console = Console(file=buf, width=120, force_terminal=False, color_system=None)
    p, a = summary["profile"], summary["aggregation"]
    console.print(f"[bold]dlscope summary[/bold]: {escape(str(summary['profile_name']))}")
    units = summary_units(a)
    if a is None:
        console.print("No timeline in this database (counters only): see `dlscope report --reports roofline`.")
        _render_roofline(console, summary.get("roofline"), escape, counters_only=True)
        return buf.getvalue()
    key = Table(show_header=False, box=None)
    seen = a.get("key_node_candidates") or []
    hint = f"; key node candidates seen: {', '.join(seen[:3])}" if seen else ""
    its = (f"{a['iter_start']}..{a['iter_stop']} ({a['iterations_profiled']} of {p['iterations_total']}, "
           f"found by {p['iteration_method']})" if a["iterations_profiled"] else
           "none found: the whole profile is one window (mark steps with ProfilerStep, dlscope.step() or --key-node"
           f"{hint})")
    if a.get("iterations_guessed"):
        its += (" — a guess from a repeating op sequence: mark steps with ProfilerStep, dlscope.step() or "
                f"--key-node{hint}")
    m = a.get("model_summary") or {}
    model = (f"{m.get('op_nodes', 0):,} op nodes, {m.get('tc_eligible_op_nodes', 0):,} eligible for {units.plural}, "
             f"{m.get('op_nodes_using_tc', 0):,} using them"
             + (f"; {m['tc_eligible_gpu_time_pct']:.1f}% of op GPU time in eligible op nodes"
                if m.get("tc_eligible_gpu_time_pct") is not None else ""))
    for label, value in (
        ("Iterations", its), ("Wall clock", fmt_ns(a["wall_clock_ns"])),
        ("Average iteration", fmt_ns(a["avg_iteration_ns"])),
        ("Iteration time", "n/a" if not a.get("iteration_ns") else
         f"min {fmt_ns(a['iteration_ns']['min'])}, median {fmt_ns(a['iteration_ns']['median'])}, "
         f"max {fmt_ns(a['iteration_ns']['max'])} (iteration {a['iteration_ns']['slowest_iteration']})"),
        ("GPU utilization", fmt_pct(a["gpu_utilization"]) if p["kernel_count"] else "n/a (no GPU kernels)"),
        (f"{units.singular} kernel efficiency", fmt_pct(a["tc_kernel_efficiency"])
         if a["tc_kernel_efficiency"] is not None else f"n/a (no kernels of {units.singular}-eligible ops)"),
        ("Kernels", f"{p['kernel_count']:,} in the profile ({fmt_ns(p['kernel_time_ns'])}); "
                    f"{a['kernel_count']:,} in the aggregation ({fmt_ns(a['kernel_time_ns'])})"),
        ("Model", model),
        ("Ops", f"{p['op_count']:,} op calls (every level)"),
        ("GPUs", escape(", ".join(f"{g['device']}: {g['name'] or '?'}" for g in p["gpus"]) or "none")),
    ):
        key.add_row(f"[bold]{label}[/bold]", value)
    console.print(key)
    _render_dropped(console, p.get("dropped_events") or [])
    wall = a["wall_clock_ns"] or 0
    bd = Table(title="Resource usage breakdown", title_justify="left")
    bd.add_column("Category")
    bd.add_column("Time", justify="right")
    bd.add_column("Share", justify="right")
    labels = breakdown_labels(units)
    for cat, ns in a["resource_breakdown_ns"].items():
        bd.add_row(escape(labels.get(cat, cat.replace("_", " "))), fmt_ns(ns), fmt_pct(ns / wall if wall else None))
    console.print(bd)
    if a["top_gpu_ops"]:
        top = Table(title="Top 10 GPU ops", title_justify="left")
        for col in ("GPU time", "Op", "Type", "Calls", f"{units.short} eligible", f"Using {units.short}"):
            top.add_column(escape(col), justify="right" if col in ("GPU time", "Calls") else "left")
        for op in a["top_gpu_ops"]:
            top.add_row(fmt_ns(op["gpu_time_ns"]), escape(op["op_name"][:60]), escape(op["op_type"][:30]), f"{op['calls']:,}",
                        "yes" if op["tc_eligible"] else "no", "yes" if op["using_tc"] else "no")
        console.print(top)
    _render_ranks(console, summary.get("ranks") or [])
    _render_roofline(console, summary.get("roofline"), escape)
    if summary["findings"]:
        found = Table(title="Expert systems", title_justify="left", show_lines=True)
        for col in ("Severity", "Problem", "Recommendation", "Saving"):
            found.add_column(col, justify="right" if col == "Saving" else "left", overflow="fold")
        for f in summary["findings"]:
            saving = (f"{fmt_ns(f['est_saving_ns'])} ({f['est_saving_pct']:.1f}%)"
                      if f.get("est_saving_ns") is not None and f.get("est_saving_pct") is not None else "n/a")
            found.add_row(f["severity"], escape(f["problem"]), escape(f["recommendation"]), saving)
        console.print(found)
    if summary.get("capture", {}).get("ended_early"):
        console.print("Note: the profiled program ended early; the profile covers the steps before it stopped.")
    return buf.getvalue()
