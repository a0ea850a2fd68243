"""The summary: one JSON object (a stable contract, documented in the README) and its terminal rendering."""

from __future__ import annotations

import json
import sqlite3
import statistics
from pathlib import Path

import numpy as np

from ..analyze.aggregation import CATEGORIES, CATEGORY_LABELS
from ..analyze.gpu_timing import packaged_tolerance, timed_on_gpu
from ..analyze.iterations import GUESSED
from ..analyze.tensor_core import MatrixUnits, matrix_units, rank_matrix_units
from ..analyze.throughput import throughput, throughput_facts
from ..distributed import summary_ranks
from ..distributed.job import collective_calls, describe_gpus, job_section, physical_gpus, rank_agg_id, run_aggregations
from ..format import fmt_bytes, fmt_ns, fmt_pct, shapes_where_repeated
from ..nanoseconds import round_ns
from ..roofline.quadrants import min_modelled_share
from ..store import reader
from ..system import stored_facts
from .graph_replay import figure_notes, mfu_note
from .memory import memory_section
from .python_stacks import python_lines, python_section


def _one(conn: sqlite3.Connection, sql: str, params: tuple = ()):
    return conn.execute(sql, params).fetchone()[0]


def _profile_section(conn: sqlite3.Connection, methods: dict) -> dict:
    kernels = conn.execute("SELECT COUNT(*), SUM(dur) FROM kernels").fetchone()
    memops = dict(conn.execute("SELECT kind, COUNT(*) FROM memops GROUP BY kind").fetchall())
    method = (methods.get(str(_one(conn, "SELECT MIN(rank) FROM aggregations") or 0))
              or next(iter(methods.values()), None))
    iterations = _one(conn, "SELECT COUNT(*) FROM iterations WHERE rank = (SELECT MIN(rank) FROM iterations)")
    gpus = physical_gpus(conn)
    counts = describe_gpus(gpus)
    return {
        "kernel_count": kernels[0], "kernel_time_ns": kernels[1] or 0,
        "memcpy_count": memops.get("memcpy", 0), "memset_count": memops.get("memset", 0),
        "op_count": _one(conn, "SELECT COUNT(*) FROM ops"),
        "iterations_total": None if method == "whole_profile" else iterations,
        "iteration_method": method,
        "ranks": _one(conn, "SELECT COUNT(DISTINCT rank) FROM sources") or 1,
        "gpu_count": counts["active"], "idle_gpu_count": counts["idle"],
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


def _aggregation_section(conn: sqlite3.Connection, agg_id: int, candidates: dict, facts: dict) -> dict:
    cur = conn.execute("SELECT * FROM aggregations WHERE agg_id = ?", (agg_id,))
    row = dict(zip([d[0] for d in cur.description], cur.fetchone()))
    whole = row["iteration_method"] == "whole_profile"
    guessed = row["iteration_method"] in GUESSED
    top = conn.execute(
        "SELECT op_name, op_type, direction, gpu_time_ns, calls, tc_eligible, using_tc, input_shapes FROM agg_ops "
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
                         "tc_eligible": bool(t[5]), "using_tc": bool(t[6]), "input_shapes": t[7] or ""}
                        for t in top],
        "matrix_units": units._asdict(),
        "throughput": throughput(row, None if whole else row["iterations_profiled"], facts),
        "mfu": {"model_flops": row.get("model_flops"),
                "model_flops_per_iteration": row.get("model_flops_per_iteration"),
                "achieved_flops_per_s": row.get("achieved_flops_per_s"),
                "peak_flops_per_s": row.get("peak_flops_per_s"), "precision": row.get("mfu_precision"),
                "mfu": row.get("mfu")},
        **critical_path_section(conn, agg_id, row),
        **({} if whole else iteration_on_gpu_section(conn, agg_id)),
        **_notes(conn, row, units),
    }


def _notes(conn: sqlite3.Connection, row: dict, units: MatrixUnits) -> dict:
    """``graph_replay`` (the kernels replayed from CUDA graphs, or None) and the ``*_note`` keys (why Tensor Core
    kernel efficiency and MFU are n/a or what they leave out, what the Model line's counts hold):
    ``present.graph_replay``'s words, which the HTML report, the viewer's dashboard and diff show too."""
    return figure_notes(conn, row, units.singular, units.plural)


#: per profiled iteration of an aggregation: its window and the end of the GPU activity its calls launched in a
#: table (kernels or memops). Exact and cheap: an activity starting more than the table's longest duration before
#: the iteration's last-starting one ends before that one does, so only the tail of the (rank, iteration, start)
#: index is read.
_GPU_ENDS_SQL = """
SELECT i.iteration, i.start, i."end", (
    SELECT MAX(a."end") FROM {table} a WHERE a.rank = i.rank AND a.iteration = i.iteration
    AND a.start >= (SELECT MAX(start) FROM {table} WHERE rank = i.rank AND iteration = i.iteration)
                   - (SELECT MAX(dur) FROM {table}))
FROM agg_iterations i WHERE i.agg_id = ? AND i.profiled = 1 ORDER BY i.iteration"""


def iteration_on_gpu_section(conn: sqlite3.Connection, agg_id: int) -> dict:
    """``{"iteration_on_gpu_ns": {"min", "median", "max", "slowest_iteration", "median_lag"}}`` where the GPU ran
    behind the CPU (``analyze.gpu_timing``, with the ``iteration_variance`` tolerance the aggregation was made with),
    else {}:
    the key is absent where the windows time the iterations."""
    rows = None
    for table in ("kernels", "memops"):
        if _has_table(conn, table):
            got = np.array([[-1 if v is None else v for v in r]
                            for r in conn.execute(_GPU_ENDS_SQL.format(table=table), (agg_id,))], np.int64)
            if rows is not None and len(got):
                got[:, 3] = np.maximum(got[:, 3], rows[:, 3])
            rows = got
    if rows is None or len(rows) < 2:
        return {}
    timed = timed_on_gpu(rows[:, 3], rows[:, 1], rows[:, 2], _gpu_timing_tolerance(conn, agg_id))
    if timed is None:
        return {}
    d = timed.durations
    slowest = int(np.argmax(d))   # the first of the longest, as the windows' slowest_iteration
    return {"iteration_on_gpu_ns": {
        "min": int(d.min()), "median": round_ns(statistics.median(d.tolist())), "max": int(d[slowest]),
        "slowest_iteration": int(rows[slowest, 0]), "median_lag": timed.lag_ns}}


def _gpu_timing_tolerance(conn: sqlite3.Connection, agg_id: int) -> float:
    """The tolerance the aggregation's rules ran with (``aggregations.gpu_timing_tolerance``); the packaged one
    for a database written before that column (its rules ran with it unless ``--rules-config`` said otherwise)."""
    if has_column(conn, "aggregations", "gpu_timing_tolerance"):
        row = conn.execute("SELECT gpu_timing_tolerance FROM aggregations WHERE agg_id = ?", (agg_id,)).fetchone()
        if row is not None and row[0] is not None:
            return float(row[0])
    return packaged_tolerance()


def critical_path_section(conn: sqlite3.Connection, agg_id: int, row: dict) -> dict:
    """The aggregation's critical path as stored by the import (``whatif.stored``): time per category and, in
    a job, per rank whose work it ran through (shares of the wall clock), the findings' combined simulated
    saving, and why there is no path when there is none."""
    wall = row.get("wall_clock_ns")
    note = row.get("critical_path_note")
    if not _has_table(conn, "agg_critical_path"):
        note = "not computed: the database was written before dlscope stored the critical path (import it again)"
    out = {"critical_path": None, "critical_path_ranks": None, "critical_path_note": note,
           "findings_combined_saving_ns": row.get("findings_combined_saving_ns")}
    if note is not None:
        return out

    def share(ns):
        return round(ns / wall, 4) if wall else None

    cats = conn.execute("SELECT category, SUM(time_ns) AS ns FROM agg_critical_path WHERE agg_id = ? "
                        "GROUP BY category ORDER BY ns DESC, category", (agg_id,)).fetchall()
    if not cats and wall:
        out["critical_path_note"] = ("not computed for this aggregation (written before dlscope stored the "
                                     "critical path)")
        return out
    out["critical_path"] = [{"category": c, "time_ns": ns, "share": share(ns)} for c, ns in cats]
    if _one(conn, "SELECT COUNT(DISTINCT rank) FROM aggregations") > 1:
        ranks = conn.execute("SELECT rank, SUM(time_ns) AS ns FROM agg_critical_path WHERE agg_id = ? AND rank >= 0 "
                             "GROUP BY rank ORDER BY ns DESC, rank", (agg_id,)).fetchall()
        out["critical_path_ranks"] = [{"rank": r, "time_ns": ns, "share": share(ns)} for r, ns in ranks]
    return out


def _has_table(conn: sqlite3.Connection, name: str) -> bool:
    return conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (name,)).fetchone() is not None


def has_column(conn: sqlite3.Connection, table: str, column: str) -> bool:
    return any(r[1] == column for r in conn.execute(f'PRAGMA table_info("{table}")'))


def summary_units(aggregation: dict | None) -> MatrixUnits:
    """The words for the rank's Tensor Cores / AMD matrix cores (older summaries: NVIDIA's)."""
    known = (aggregation or {}).get("matrix_units")
    return MatrixUnits(**known) if known else matrix_units([])


def breakdown_labels(units: MatrixUnits) -> dict[str, str]:
    """CATEGORY_LABELS with the rank's words for the Tensor Core categories."""
    return {**CATEGORY_LABELS, "tensor_core": f"Using {units.plural}", "non_tensor_core": f"Not Using {units.plural}"}


def _findings(conn: sqlite3.Connection, agg_id: int) -> list[dict]:
    simulated = "simulated_saving_ns" if has_column(conn, "findings", "simulated_saving_ns") else "NULL"
    not_priced = "not_priced" if has_column(conn, "findings", "not_priced") else "NULL"  # older databases lack it
    rows = conn.execute("SELECT rule, severity, problem, recommendation, est_saving_ns, est_saving_pct, "
                        f"evidence_json, {simulated}, {not_priced} FROM findings WHERE agg_id = ? ORDER BY finding_id",
                        (agg_id,)).fetchall()
    keys = ("rule", "severity", "problem", "recommendation", "est_saving_ns", "est_saving_pct", "evidence",
            "simulated_saving_ns", "not_priced")
    return [dict(zip(keys, (*r[:6], json.loads(r[6] or "{}"), *r[7:]))) for r in rows]


def _roofline(conn: sqlite3.Connection, agg_id: int | None) -> dict:
    """How much op GPU time is memory- vs math-bound, and the ops furthest below their ceiling."""
    from ..roofline import roofline_report

    report = roofline_report(conn, agg_id)
    return {"gpu": report["ceilings"]["name"] if report.get("ceilings") else None,
            "ceilings_error": report.get("ceilings_error") or None, **report["summary"]}


def summary_dict(db_path: str | Path, agg_id: int | None = None, rank: int | None = None) -> dict:
    """The summary JSON object of a profile database (see README, "The summary JSON"); ``rank`` picks that
    rank's aggregation in the run of ``agg_id`` (default: the current run)."""
    conn = reader.connect(db_path)
    try:
        if rank is not None:
            agg_id = rank_agg_id(conn, rank, agg_id)
        meta = reader.meta(conn)
        extra = json.loads(meta.get("extra_json") or "{}")
        methods = {str(k): v for k, v in (extra.get("iteration_methods") or {}).items()}
        candidates = {str(k): v for k, v in (extra.get("key_node_candidates") or {}).items()}
        if agg_id is None and reader.current_agg_id(conn) is None:
            profile = {**_profile_section(conn, methods), "iterations_total": None}
            return {"schema_version": int(meta["schema_version"]), "profile_name": meta.get("profile_name"),
                    "system": stored_facts(meta), "profile": profile, "job": None, "aggregation": None, "findings": [],
                    "roofline": _roofline(conn, None), "ranks": [], "collectives": [], "memory": None,
                    "python": python_section(conn)}
        agg_id = reader.resolve_agg_id(conn, agg_id)
        calls = collective_calls(conn, run_aggregations(conn, agg_id))
        out = {"schema_version": int(meta["schema_version"]), "profile_name": meta.get("profile_name"),
               "system": stored_facts(meta), "profile": _profile_section(conn, methods),
               "job": job_section(conn, agg_id, call_count=len(calls)),
               "aggregation": _aggregation_section(conn, agg_id, candidates, throughput_facts(extra)),
               "findings": _findings(conn, agg_id), "roofline": _roofline(conn, agg_id),
               "ranks": summary_ranks(conn, agg_id),
               "collectives": calls,
               "memory": memory_section(conn, agg_id), "python": python_section(conn)}
        if extra.get("capture"):
            out["capture"] = extra["capture"]
        return out
    finally:
        conn.close()


def on_gpu_text(on_gpu: dict) -> str:
    """The iterations timed on the GPU, said beside the windows' 'Iteration time'."""
    return (f"on the GPU: min {fmt_ns(on_gpu['min'])}, median {fmt_ns(on_gpu['median'])}, max {fmt_ns(on_gpu['max'])} "
            f"(iteration {on_gpu['slowest_iteration']}); the GPU ran {fmt_ns(on_gpu['median_lag'])} behind the CPU "
            "on the median, so the windows above time the CPU's pace")


def system_text(facts: dict | None) -> str:
    """The system facts in one line ('PyTorch 2.13.0, CUDA 12.1, cuDNN 9.1.0, GPU driver 535.104.05 · host node1 ·
    Intel(R) Xeon(R) …'; OS and Python are in the JSON); '' when none were recorded."""
    f = {k: v for k, v in (facts or {}).items() if v not in (None, "")}
    software = [" ".join(str(f[k]) for k in ("framework", "framework_version") if k in f)]
    software += [f"{name} {f[key]}" for name, key in (
        ("CUDA", "cuda_runtime_version"), ("CUDA driver", "cuda_driver_version"), ("cuDNN", "cudnn_version"),
        ("NCCL", "nccl_version"), ("GPU driver", "gpu_driver_version"), ("nsys", "nsys_version")) if key in f]
    parts = [", ".join(p for p in software if p), f"host {f['hostname']}" if "hostname" in f else "",
             f.get("cpu_model", "")]
    return " · ".join(p for p in parts if p)


def gpu_list_text(gpus: list[dict]) -> str:
    """Each physical GPU once: 'GPU 3 (rank 3): Tesla V100', idle ones summed up after the active ones."""
    def where(g):
        return (f"{g['host']} " if g.get("host") else "") + f"GPU {g['device']}"
    active = [f"{where(g)} ({', '.join(f'rank {r}' for r in g['ranks'])}): {g['name'] or '?'}"
              for g in gpus if g["active"]]
    idle = [where(g) for g in gpus if not g["active"]]
    text = ", ".join(active) or "none ran GPU activity"
    if idle:
        text += f"; {len(idle)} more present, idle: {', '.join(idle)}"
    return text


def gpu_names_text(gpus: list[dict]) -> str:
    """'8 × Tesla V100-SXM2-32GB' for the GPUs that ran GPU work, plus how many sat idle."""
    from collections import Counter

    names = Counter(g["name"] or "?" for g in gpus if g["active"])
    idle = sum(1 for g in gpus if not g["active"])
    text = ", ".join(f"{n} × {name}" for name, n in names.items()) or "none ran GPU work"
    return text + (f"; {idle} more present, idle" if idle else "")


def rank_title(summary: dict) -> str:
    """'job of 8 ranks' for a job; '' for one rank."""
    job = summary.get("job") or {}
    return f"job of {job['ranks']} ranks" if (job.get("ranks") or 0) > 1 else ""


def _render_job(console, summary: dict, escape) -> None:
    """The job as one thing: wall clock, mean GPU utilization over all GPUs, each GPU, the ranks, collectives."""
    from rich.table import Table

    job = summary["job"]
    key = Table(show_header=False, box=None)
    span = ("from the earliest rank's start to the latest rank's end" if job["wall_clock_method"] == "span"
            else "the longest rank's: the ranks' clocks do not line up")
    hosts = f" on {job['hosts']} host{'s' if job['hosts'] != 1 else ''}" if job.get("hosts") else ""
    for label, value in (
        ("Job", (f"{job['ranks']} ranks{hosts}, {job['gpu_count']} GPUs that ran GPU work, "
                 f"{job['collective_calls']:,} collective calls")),
        ("Wall clock", f"{fmt_ns(job['wall_clock_ns'])} ({span})"),
        ("GPU utilization", f"{fmt_pct(job['gpu_utilization'])} (mean of {job['gpu_count']} GPUs; each below)"),
        ("GPUs", escape(gpu_names_text(summary["profile"]["gpus"]))),
    ):
        key.add_row(f"[bold]{label}[/bold]", value)
    console.print(key)
    gpus = Table(title="GPUs of the job (each once, with its rank)", title_justify="left")
    for col in ("Host", "GPU", "Rank", "Utilization", "Busy", "Kernels"):
        gpus.add_column(col, justify="left" if col == "Host" else "right")
    for g in job["gpus"]:
        gpus.add_row(escape(g["host"] or "(not recorded)"), str(g["device"]), str(g["rank"]), fmt_pct(g["utilization"]),
                     fmt_ns(g["busy_ns"]), f"{g['kernel_count']:,}")
    console.print(gpus)
    _render_ranks(console, summary.get("ranks") or [])
    _render_collectives(console, summary.get("collectives") or [])


def _render_ranks(console, ranks: list[dict]) -> None:
    """Per-rank figures of a multi-rank job, by rank (the straggler score says who the others wait for)."""
    if len(ranks) < 2:
        return
    from rich.table import Table

    table = Table(title=f"Ranks ({len(ranks)})", title_justify="left")
    for col in ("Rank", "GPU util.", "Compute", "Exposed comm.", "Memcpy", "Idle", "Avg iteration",
                "Straggler score"):
        table.add_column(col, justify="right")
    for r in ranks[:64]:
        score = r.get("straggler_score")
        table.add_row(str(r["rank"]), fmt_pct(r.get("gpu_utilization")), fmt_ns(r.get("compute_ns")),
                      fmt_ns(r.get("exposed_communication_ns")), fmt_ns(r.get("memcpy_ns")), fmt_ns(r.get("idle_ns")),
                      fmt_ns(r.get("avg_iteration_ns")),
                      "n/a" if score is None
                      else f"{score:.2f}" + (" (most waited for)" if r.get("straggler_rank") == 1 else ""))
    console.print(table)
    if len(ranks) > 64:
        console.print(f"… and {len(ranks) - 64} more ranks (dlscope summary --json lists them all)")


def _render_collectives(console, calls: list[dict], top: int = 10) -> None:
    """The collective calls the ranks waited longest in."""
    if not calls:
        return
    from rich.table import Table

    shown = sorted(calls, key=lambda c: -(c.get("max_lag_ns") or 0))[:top]
    table = Table(title=f"Collectives ({len(calls):,} calls; the {len(shown)} with the largest arrival lag)",
                  title_justify="left")
    for col in ("Collective", "Call", "Ranks", "Largest message", "Longest", "Shortest", "Max lag", "Last rank",
                "Bus bandwidth"):
        table.add_column(col, justify="left" if col == "Collective" else "right")
    for c in shown:
        bw = c.get("busbw_gbps")
        table.add_row(c["collective"] or "?", str(c["call_index"]), str(c["ranks"]), fmt_bytes(c.get("max_msg_bytes")),
                      fmt_ns(c.get("max_dur_ns")), fmt_ns(c.get("min_dur_ns")), fmt_ns(c.get("max_lag_ns")),
                      "n/a" if c.get("last_rank") is None else str(c["last_rank"]),
                      "n/a" if bw is None else f"{bw:,.2f} GB/s")
    console.print(table)


def _render_roofline(console, roofline: dict | None, escape, counters_only: bool = False) -> None:
    """One line on memory- vs math-bound GPU time (nothing for a profile without GPU op time)."""
    if not roofline or not (roofline.get("op_gpu_time_ns") or counters_only):
        return
    if roofline.get("memory_bound_gpu_time_ns") is None:
        console.print(escape(f"Roofline: skipped ({roofline.get('ceilings_error')})"))
        return
    console.print(f"Roofline ({escape(str(roofline['gpu']))}): "
                  f"{fmt_ns(roofline['memory_bound_gpu_time_ns'])} of op GPU time memory-bound, "
                  f"{fmt_ns(roofline['math_bound_gpu_time_ns'])} math-bound")
    util = roofline.get("utilization")
    if util:
        modelled, total = roofline.get("modelled_gpu_time_ns"), roofline.get("op_gpu_time_ns")
        share = modelled / total if util.get("basis") == "ops" and modelled is not None and total else None
        figures = (f"{util['compute_utilization_pct']:.1f}% compute, {util['memory_utilization_pct']:.1f}% memory "
                   "bandwidth")
        if share is not None and share < min_modelled_share():
            console.print(escape(f"  Run (modelled op nodes, {fmt_pct(share)} of op GPU time): {figures}; too little "
                                 "of the GPU time is modelled to judge the run (the rest ran under op nodes without "
                                 "a cost model: autograd backward nodes, CUDA graph replays, custom kernels)"))
        else:
            where = f" (modelled op nodes, {fmt_pct(share)} of op GPU time)" if share is not None else ""
            console.print(escape(f"  Run{where}: {figures} ({util['quadrant_label']})"
                                 + (f"; {util['advice'][0]}" if util.get("advice") else "")))
    shown = roofline.get("furthest_below", [])[:3]
    for op, shapes in zip(shown, shapes_where_repeated([o["op_name"] for o in shown],
                                                       [o.get("input_shapes") for o in shown])):
        pct = op.get("pct_of_ceiling")
        console.print(escape(f"  {op['op_name']}{f' ({shapes})' if shapes else ''}: "
                             f"{fmt_pct(pct / 100 if pct is not None else None)} of its "
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


def _throughput_text(t: dict) -> str:
    """"1,234.5 images/s (batch 64); reader cost 1.20 ms a step (3.4% of the step time)" or what is missing."""
    batch = f" (batch {t['batch_size']:,})" if t.get("batch_size") else ""
    rate = (f"{t['samples_per_s']:,.1f} {t['unit']}/s{batch}"
            if t.get("samples_per_s") is not None else
            "n/a (batch size unknown: import with --batch-size or --samples-per-step)" if not t.get("batch_size")
            else "n/a (no iterations)")
    reader = ("reader cost n/a (no data loading in the trace)" if t.get("reader_cost_ratio") is None else
              f"reader cost {fmt_ns(t['reader_cost_ns'])} a step ({fmt_pct(t['reader_cost_ratio'])} of the step time)"
              if t.get("reader_cost_ns") is not None else
              f"reader cost {fmt_pct(t['reader_cost_ratio'])} of the wall clock")
    return f"{rate}; {reader}"


def _mfu_text(mfu: dict, note: str | None = None, lower_bound: bool = False) -> str:
    """"41.2% (1.29 PFLOP/s of model FLOPs against the dense BF16 peak of 3.12 PFLOP/s; …)" or why it is n/a
    (``note``: ``graph_replay.mfu_note``'s words; ``lower_bound``: "≥ " before a value that leaves matrix products
    out)."""
    if note is None and mfu.get("mfu") is None:
        note = mfu_note(mfu, None)
    per_it = mfu.get("model_flops_per_iteration")
    flops = f"{per_it / 1e9:,.2f} GFLOP of matrix products per iteration" if per_it is not None else ""
    if mfu.get("mfu") is None:
        return f"n/a ({'; '.join(t for t in (flops if per_it else '', note) if t)})"
    return (f"{'≥ ' if lower_bound else ''}{100 * mfu['mfu']:.1f}% ({mfu['achieved_flops_per_s'] / 1e12:,.2f} "
            "TFLOP/s achieved of the dense "
            f"{str(mfu['precision']).upper()} peak, {mfu['peak_flops_per_s'] / 1e12:,.1f} TFLOP/s"
            + "".join(f"; {t}" for t in (flops, note) if t) + ")")


def _render_memory(console, memory: dict | None, escape) -> None:
    """One line per device: the peaks over the profiled iterations, where they were and the GPU's capacity."""
    if not memory or not memory.get("devices"):
        return
    console.print("[bold]Memory peaks[/bold] (allocator samples, profiled iterations)")
    for d in memory["devices"]:
        where = "CPU" if d["device"] < 0 else f"GPU {d['device']}"
        of = f" of {fmt_bytes(d['capacity_bytes'])}" if d.get("capacity_bytes") else ""
        reserved = (f", reserved {fmt_bytes(d['peak_reserved_bytes'])} (iteration {d['peak_reserved_iteration']})"
                    if d.get("peak_reserved_bytes") is not None else "")
        since = " since the trace started (it records only deltas)" if d["basis"] == "deltas" else ""
        node = d.get("peak_allocated_op_node")
        inside = f" (in {escape(node)})" if node not in (None, d["peak_allocated_op"]) else ""
        console.print(f"  {where}: allocated {fmt_bytes(d['peak_allocated_bytes'])}{since}{of} in iteration "
                      f"{d['peak_allocated_iteration']} during "
                      f"{escape(str(d['peak_allocated_op'] or 'no recorded op'))}"
                      f"{inside} ({d['live_at_peak']['count']:,} allocations live){reserved}")


def critical_path_text(a: dict, top: int = 3) -> str:
    """One line: the categories longest on the critical path and the findings' combined simulated saving."""
    path = a.get("critical_path")
    if path is None:
        return f"Critical path: {a.get('critical_path_note') or 'not computed'}"
    shown = ", ".join(f"{c['category']} {fmt_ns(c['time_ns'])} ({fmt_pct(c['share'])})" for c in path[:top])
    text = f"Critical path: {shown or 'empty'}"
    ranks = a.get("critical_path_ranks") or []
    if len(ranks) > 1:
        text += "; through " + ", ".join(f"rank {r['rank']} {fmt_pct(r['share'])}" for r in ranks[:top])
    combined = a.get("findings_combined_saving_ns")
    if combined is not None:
        text += f"; expert findings together save {fmt_ns(combined)} (simulated, overlaps counted once)"
    return text


def render_summary(summary: dict) -> str:
    """The terminal summary: key metrics, GPUs, breakdown, top 10 GPU ops, findings."""
    from io import StringIO

    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    buf = StringIO()
    console = Console(file=buf, width=120, force_terminal=False, color_system=None)
    p, a = summary["profile"], summary["aggregation"]
    title = rank_title(summary)
    console.print(f"[bold]dlscope summary[/bold]: {escape(str(summary['profile_name']))}"
                  + (f" · {title}" if title else ""))
    system = system_text(summary.get("system"))
    if system:
        console.print(f"System: {system}", markup=False)
    units = summary_units(a)
    if a is None and summary.get("python"):
        for line in python_lines(summary["python"]):
            console.print(line, markup=False)
        return buf.getvalue()
    if a is None:
        console.print("No timeline in this database (counters only): see `dlscope report DB --reports roofline "
                      "[--gpu-spec FILE]` (a spec from the table, or one `dlscope characterize` measured).")
        _render_roofline(console, summary.get("roofline"), escape, counters_only=True)
        return buf.getvalue()
    if title:
        _render_job(console, summary, escape)
        console.print(f"[bold]Rank {a['rank']}[/bold] of the {title} (the figures below are this rank's; "
                      f"`dlscope summary --rank N` shows another)")
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
    if a.get("model_summary_note"):
        model += f"; {a['model_summary_note']}"
    eff = a["tc_kernel_efficiency"]
    eff_note = a.get("tc_kernel_efficiency_note") or (
        None if eff is not None else f"no kernels of {units.singular}-eligible ops")
    for label, value in (
        ("Iterations", its), ("Wall clock", fmt_ns(a["wall_clock_ns"])),
        ("Average iteration", fmt_ns(a["avg_iteration_ns"])),
        ("Iteration time", "n/a" if not a.get("iteration_ns") else
         f"min {fmt_ns(a['iteration_ns']['min'])}, median {fmt_ns(a['iteration_ns']['median'])}, "
         f"max {fmt_ns(a['iteration_ns']['max'])} (iteration {a['iteration_ns']['slowest_iteration']})"),
        *((("", on_gpu_text(a["iteration_on_gpu_ns"])),) if a.get("iteration_on_gpu_ns") else ()),
        ("GPU utilization", fmt_pct(a["gpu_utilization"]) if p["kernel_count"] else "n/a (no GPU kernels)"),
        (f"{units.singular} kernel efficiency", ("n/a" if eff is None else fmt_pct(eff))
         + (f" ({eff_note})" if eff_note else "")),
        ("Kernels", f"{p['kernel_count']:,} in the profile ({fmt_ns(p['kernel_time_ns'])}); "
                    f"{a['kernel_count']:,} in the aggregation ({fmt_ns(a['kernel_time_ns'])})"
         if p["kernel_count"] or not p["op_count"] else
         f"none: the profile has {p['op_count']:,} ops but no GPU kernels (a CPU run, or GPU tracing was "
         "off), so every GPU figure is n/a"),
        ("Model", model),
        ("Throughput", _throughput_text(a.get("throughput") or {})),
        ("MFU", _mfu_text(a.get("mfu") or {}, a.get("mfu_note"), bool(a.get("mfu_lower_bound")))),
        ("Ops", f"{p['op_count']:,} op calls (every level)"),
        *(() if title else (("GPUs", escape(gpu_list_text(p["gpus"]))),)),
    ):
        key.add_row(f"[bold]{label}[/bold]", value)
    console.print(key)
    _render_dropped(console, p.get("dropped_events") or [])
    for line in python_lines(summary.get("python")):
        console.print(line, markup=False)
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
        ops = a["top_gpu_ops"]
        for op, shapes in zip(ops, shapes_where_repeated([o["op_name"] for o in ops],
                                                         [o.get("input_shapes") for o in ops])):
            top.add_row(fmt_ns(op["gpu_time_ns"]), escape(op["op_name"][:60] + (f"\n{shapes[:60]}" if shapes else "")),
                        escape(op["op_type"][:30]),
                        f"{op['calls']:,}", "yes" if op["tc_eligible"] else "no", "yes" if op["using_tc"] else "no")
        console.print(top)
    _render_roofline(console, summary.get("roofline"), escape)
    console.print(critical_path_text(a), markup=False)
    _render_memory(console, summary.get("memory"), escape)
    if summary["findings"]:
        found = Table(title="Expert systems", title_justify="left", show_lines=True)
        for col in ("Severity", "Problem", "Recommendation", "Saving"):
            found.add_column(col, justify="right" if col == "Saving" else "left", overflow="fold")
        for f in summary["findings"]:
            saving = (f"{fmt_ns(f['est_saving_ns'])} ({f['est_saving_pct']:.1f}%)"
                      if f.get("est_saving_ns") is not None and f.get("est_saving_pct") is not None
                      else f"not priced: {escape(f['not_priced'])}" if f.get("not_priced") else "n/a")
            if f.get("simulated_saving_ns") is not None:
                saving += f"; simulated {fmt_ns(f['simulated_saving_ns'])}"
            found.add_row(f["severity"], escape(f["problem"]), escape(f["recommendation"]), saving)
        console.print(found)
    if summary.get("capture", {}).get("ended_early"):
        console.print("Note: the profiled program ended early; the profile covers the steps before it stopped.")
    return buf.getvalue()
