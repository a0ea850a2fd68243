"""One self-contained HTML report of a profile database: opens offline, no request to any server.

Charts are SVG drawn here with matplotlib and inlined in the page (no JavaScript at all); the page is a
Jinja2 template with autoescaping on, so op and kernel names from traces stay text. Matplotlib writes SVG
text XML-escaped, and mathtext is off so a ``$`` in a name is not parsed.
"""

from __future__ import annotations

import io
import json
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import matplotlib
from jinja2 import Environment, PackageLoader
from markupsafe import Markup

from ..analyze.aggregation import CATEGORIES
from ..analyze.throughput import throughput_facts
from ..errors import DlscopeError
from ..format import fmt_bytes, fmt_ns, fmt_pct, shapes_where_repeated
from ..store import reader
from ..version import __version__
from .summary import (
    breakdown_labels,
    gpu_list_text,
    gpu_names_text,
    has_column,
    rank_title,
    summary_dict,
    summary_units,
    system_text,
)

matplotlib.use("Agg")
from matplotlib.figure import Figure  # noqa: E402  (backend chosen first)

#: colours of the breakdown categories (charts and legend agree)
CATEGORY_COLORS = {"tensor_core": "#2ca02c", "non_tensor_core": "#1f77b4", "memory": "#9467bd",
                   "dataloader": "#ff7f0e", "io": "#8c564b", "cpu": "#d62728", "other": "#7f7f7f"}
TOP_ROWS = 20
TOP_BARS = 10


def _short(name, width: int = 48) -> str:
    name = "" if name is None else str(name)
    return name if len(name) <= width else name[: width - 1] + "…"


def _svg(fig: Figure) -> Markup:
    """The figure as an inline <svg> element (prologue and DOCTYPE dropped)."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None, "Format": None, "Type": None},
                bbox_inches="tight")
    text = buf.getvalue()
    return Markup(text[text.index("<svg"):])  # noqa: S704 - matplotlib wrote it and XML-escaped every text


def _chart(draw, size: tuple[float, float]) -> Markup:
    # a literal here, not a module constant, so that its keys type-check against matplotlib's rc key names
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "dlscope", "text.parse_math": False,
                                "font.size": 9}):
        fig = Figure(figsize=size)
        ax = fig.add_subplot()
        draw(ax)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
        return _svg(fig)


def breakdown_chart(breakdown_ns: dict, wall_ns: int, labels: dict[str, str]) -> Markup:
    cats = list(CATEGORIES)[::-1]

    def draw(ax):
        shares = [100 * (breakdown_ns.get(c) or 0) / wall_ns for c in cats]
        bars = ax.barh([labels[c] for c in cats], shares, color=[CATEGORY_COLORS[c] for c in cats])
        ax.bar_label(bars, labels=[f"{s:.1f}% ({fmt_ns(breakdown_ns.get(c))})" for s, c in zip(shares, cats)],
                     padding=3)
        ax.set_xlim(0, max(shares + [1]) * 1.35)
        ax.set_xlabel("share of the wall clock time (%)")
    return _chart(draw, (7, 2.8))


def iterations_chart(iterations: list[dict], labels: dict[str, str]) -> Markup:
    def draw(ax):
        x = [str(it["iteration"]) for it in iterations]
        bottom = [0.0] * len(iterations)
        for c in CATEGORIES:
            ms = [(it[f"{c}_ns"] or 0) / 1e6 for it in iterations]
            ax.bar(x, ms, bottom=bottom, color=CATEGORY_COLORS[c], label=labels[c])
            bottom = [b + v for b, v in zip(bottom, ms)]
        ax.set_xlabel("iteration")
        ax.set_ylabel("time (ms)")
        ax.legend(fontsize=7, ncols=4, loc="upper center", bbox_to_anchor=(0.5, -0.18), frameon=False)
        if len(x) > 30:
            ax.set_xticks(x[:: max(1, len(x) // 20)])
    return _chart(draw, (7, 3.2))


def top_bars_chart(labels: list[str], values_ns: list[float], color: str, xlabel: str) -> Markup:
    def draw(ax):
        ms = [v / 1e6 for v in values_ns][::-1]
        ax.barh([f"{i}. {_short(lbl, 44)}" for i, lbl in reversed(list(enumerate(labels, 1)))], ms, color=color)
        ax.set_xlabel(xlabel)
    return _chart(draw, (7, 0.32 * len(labels) + 0.8))


def gpu_chart(gpus: list[dict]) -> Markup:
    def draw(ax):
        labels = [(f"{g['host']} " if g.get("host") else "") + f"GPU {g['device']}"
                  + (f"\nrank {g['rank']}" if g.get("rank") is not None else "") for g in gpus]
        ax.bar(labels, [100 * (g["utilization"] or 0) for g in gpus], color="#1f77b4")
        ax.set_ylim(0, 100)
        ax.set_ylabel("utilization (%)")
    return _chart(draw, (max(3.0, 0.7 * len(gpus) + 1.5), 2.4))


def _rows(conn: sqlite3.Connection, sql: str, params: tuple) -> list[dict]:
    cur = conn.execute(sql, params)
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, r)) for r in cur.fetchall()]


#: collective calls listed in the report (the largest arrival lags first); all of them are in the summary JSON
COLLECTIVES_SHOWN = 20


def report_context(db_path: Path, agg_id: int | None = None, rank: int | None = None) -> dict:
    """Everything the template shows: the job (of several ranks), the summary, top tables and the charts."""
    summary = summary_dict(db_path, agg_id, rank)
    agg = summary["aggregation"]
    if agg is None:
        raise DlscopeError(f"{db_path}: the database has no aggregation; run `dlscope aggregate` on it first")
    conn = reader.connect(db_path)
    try:
        a = agg["agg_id"]
        on_path = {t: "critical_path_ns" if has_column(conn, t, "critical_path_ns") else "NULL"
                   for t in ("agg_ops", "agg_kernels")}
        ops = _rows(conn, "SELECT op_name, op_type, direction, calls, gpu_time_ns, cpu_time_ns, cpu_overhead_ns, "
                          "gpu_idle_ns, kernel_count, tc_eligible, using_tc, input_shapes, "
                          f"{on_path['agg_ops']} AS critical_path_ns "
                          "FROM agg_ops WHERE agg_id = ? ORDER BY gpu_time_ns DESC, cpu_time_ns DESC LIMIT ?",
                    (a, TOP_ROWS))
        for o, shapes in zip(ops, shapes_where_repeated([o["op_name"] for o in ops],
                                                        [o.pop("input_shapes") for o in ops])):
            o["shapes"] = shapes  # what tells op nodes of one name apart
        kernels = _rows(conn, "SELECT kernel_name, uses_tc, calls, gpu_time_ns, avg_ns, min_ns, max_ns, "
                              f"{on_path['agg_kernels']} AS critical_path_ns FROM agg_kernels "
                              "WHERE agg_id = ? ORDER BY gpu_time_ns DESC LIMIT ?", (a, TOP_ROWS))
        op_types = _rows(conn, "SELECT op_type, ops, calls, gpu_time_total, cpu_time_total, kernel_count, tc_eligible, "
                               "using_tc FROM agg_op_types WHERE agg_id = ? ORDER BY gpu_time_total DESC, "
                               "cpu_time_total DESC LIMIT ?", (a, TOP_ROWS))
        iterations = _rows(conn, "SELECT * FROM agg_iterations WHERE agg_id = ? AND profiled = 1 ORDER BY iteration",
                           (a,)) if agg["iterations_profiled"] else []
        facts = throughput_facts(json.loads(reader.meta(conn).get("extra_json") or "{}"))
    finally:
        conn.close()
    per_step = facts["samples_per_step"] or facts["batch_size"]
    for it in iterations:  # seed 003 per step: ips = samples / batch_cost, reader_cost / batch_cost
        dur = it["duration_ns"]
        it["samples_per_s"] = per_step / (dur * 1e-9) if per_step and dur else None
        it["reader_cost_ratio"] = it["reader_cost_ns"] / dur if it["reader_cost_ns"] is not None and dur else None
    wall = agg["wall_clock_ns"] or 0
    units = summary_units(agg)
    labels = breakdown_labels(units)
    charts = {}
    if wall:
        charts["breakdown"] = ("Resource usage breakdown", breakdown_chart(agg["resource_breakdown_ns"], wall, labels))
    if iterations:
        charts["iterations"] = ("Iteration time by resource", iterations_chart(iterations, labels))
    gpu_ops = [o for o in ops if o["gpu_time_ns"]][:TOP_BARS]
    if gpu_ops:
        charts["top_ops"] = ("Top ops by GPU time", top_bars_chart([o["op_name"] for o in gpu_ops],
                                                                  [o["gpu_time_ns"] for o in gpu_ops], "#1f77b4",
                                                                  "GPU time (ms)"))
    if kernels:
        top = kernels[:TOP_BARS]
        charts["top_kernels"] = ("Top kernels by GPU time", top_bars_chart(
            [k["kernel_name"] for k in top], [k["gpu_time_ns"] for k in top], "#2ca02c", "GPU time (ms)"))
    job_title = rank_title(summary)
    if job_title and summary["job"]["gpus"] and summary["profile"]["kernel_count"]:
        charts["gpus"] = ("GPU utilization per GPU of the job", gpu_chart(summary["job"]["gpus"]))
    elif agg["gpus"] and summary["profile"]["kernel_count"]:
        charts["gpus"] = ("GPU utilization per GPU", gpu_chart(agg["gpus"]))
    calls = summary.get("collectives") or []
    return {"job_title": job_title, "job": summary.get("job"), "ranks": summary.get("ranks") or [],
            "collectives": calls,
            "collectives_shown": sorted(calls, key=lambda c: -(c.get("max_lag_ns") or 0))[:COLLECTIVES_SHOWN],
            "system_line": system_text(summary.get("system")),
            "gpu_list": gpu_list_text(summary["profile"]["gpus"]),
            "gpu_names": gpu_names_text(summary["profile"]["gpus"]),
            "summary": summary, "agg": agg, "profile": summary["profile"], "ops": ops, "kernels": kernels,
            "op_types": op_types, "iterations": iterations, "charts": charts, "findings": summary["findings"],
            "units": units,
            "categories": [(labels[c], CATEGORY_COLORS[c], agg["resource_breakdown_ns"][c],
                            (agg["resource_breakdown_ns"][c] or 0) / wall if wall else None) for c in CATEGORIES],
            "db_name": Path(db_path).name, "version": __version__,
            "generated": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")}


def _environment() -> Environment:
    env = Environment(loader=PackageLoader("dlscope.present", "templates"), autoescape=True,
                      trim_blocks=True, lstrip_blocks=True)
    env.filters.update(ns=fmt_ns, pct=fmt_pct, short=_short, bytes=fmt_bytes,
                       rate=lambda v: "n/a" if v is None else f"{v:,.1f}",
                       count=lambda v: "" if v is None else f"{v:,}", yesno=lambda v: "yes" if v else "no")
    return env


def render_html_report(db_path: str | Path, agg_id: int | None = None, rank: int | None = None) -> str:
    return _environment().get_template("report.html.j2").render(**report_context(Path(db_path), agg_id, rank))


def write_html_report(db_path: str | Path, out_dir: str | Path, agg_id: int | None = None,
                      rank: int | None = None) -> Path:
    """Write ``report.html`` (one self-contained file) into ``out_dir``; returns its path."""
    html = render_html_report(db_path, agg_id, rank)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "report.html"
    path.write_text(html, encoding="utf-8")
    return path
