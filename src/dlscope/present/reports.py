"""DLProf's reports from a profile database, as CSV, JSON or Markdown files.

CSV and JSON keep machine values (times in integer ns, shares as fractions); Markdown is for reading:
durations in units (:func:`~.summary.fmt_ns`), shares as percentages, ``n/a`` where a figure is missing.
"""

from __future__ import annotations

import json
import math
import re
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..errors import DlscopeError
from ..nanoseconds import round_ns_column
from ..store import reader
from .cells import markdown_text, write_csv
from .summary import fmt_ns, fmt_pct, summary_dict

#: report name -> (table, ORDER BY) read for one aggregation.
TABLE_REPORTS = {
    "detail": ("agg_ops", "gpu_time_ns DESC, cpu_time_ns DESC"),
    "iteration": ("agg_iterations", "iteration"),
    "kernel": ("agg_kernels", "gpu_time_ns DESC"),
    "op_type": ("agg_op_types", "gpu_time_total DESC"),
    "group_node": ("agg_groups", "group_id"),
    "tensor_core": ("agg_ops", "tc_eligible DESC, gpu_time_ns DESC"),
}
#: reports written by their own stage, with the formats each one supports
SPECIAL_REPORTS = {"roofline": ("csv", "json", "md", "png", "svg"), "expert_systems": ("csv", "json", "md")}
REPORTS = ("summary", *TABLE_REPORTS, *SPECIAL_REPORTS)
FORMATS = ("csv", "json", "md")


#: columns of durations in ns: ``*_ns``, and the op type report's per-call statistics
_DURATION = re.compile(r"_ns$|^(cpu_time|gpu_time|cpu_overhead|gpu_idle)_(total|avg|min|max)$")
#: shares of 1, shown as percentages (``*_pct`` and ``pct_*`` columns are percentages already)
_SHARES = {"gpu_utilization", "utilization", "tc_kernel_efficiency", "comm_overlap", "straggler_score"}
_PERCENTS = re.compile(r"_pct$|^pct_")
#: 0/1 columns, shown as yes / no
_FLAGS = {"profiled", "uses_tc", "using_tc", "tc_eligible", "is_group", "tensor_cores"}
#: references to another row, where -1 means "none" (the database's missing integer)
_REFERENCES = {"parent_group_id", "node_id"}
_RATE = re.compile(r"(flops|bytes)_per_s$")


def report_frame(conn: sqlite3.Connection, name: str, agg_id: int) -> pd.DataFrame:
    """One table report; its ns figures are integers (the stored averages are rounded to the ns)."""
    table, order = TABLE_REPORTS[name]
    frame = pd.read_sql_query(f"SELECT * FROM {table} WHERE agg_id = ? ORDER BY {order}", conn, params=(agg_id,))
    if name == "tensor_core":
        frame = frame.loc[frame["tc_eligible"] == 1, ["op_name", "op_type", "direction", "data_type", "calls",
                                                       "gpu_time_ns", "tc_gpu_time_ns", "kernel_count",
                                                       "tc_kernel_count", "using_tc"]]
    for column in frame.columns:
        if _DURATION.search(column) and frame[column].dtype.kind not in "iu":
            frame[column] = round_ns_column(frame[column])
    return frame.drop(columns=["agg_id"], errors="ignore")


def _write_frame(frame: pd.DataFrame, path: Path, fmt: str) -> None:
    if fmt == "csv":
        write_csv(frame, path)
    elif fmt == "json":
        path.write_text(frame.to_json(orient="records", indent=1))
    else:
        path.write_text(markdown_table(readable(frame)))


def readable(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame as display text, each cell formatted by what its column holds (see :func:`readable_value`);
    a ``metric``/``value`` frame (the summary) formats each value by its metric's name."""
    if list(frame.columns) == ["metric", "value"]:
        values = [readable_value(m, v) for m, v in zip(frame["metric"], frame["value"])]
        return pd.DataFrame({"metric": frame["metric"], "value": values})
    return pd.DataFrame({c: [readable_value(c, v) for v in frame[c].tolist()] for c in frame.columns})


def readable_value(name: str, value: Any) -> str:
    """A value of the column or metric ``name`` (dotted for nested summary figures) as display text."""
    parts = name.split(".")
    leaf = parts[-1]
    if _missing(value) or (leaf in _REFERENCES and value == -1):
        return "n/a"
    if isinstance(value, str):
        return value
    if isinstance(value, dict):  # never printed as a Python repr
        return "; ".join(f"{k}: {readable_value(f'{name}.{k}', v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ", ".join(readable_value(name, v) for v in value)
    in_ns_group = len(parts) > 1 and parts[-2].endswith("_ns") and leaf != "slowest_iteration"
    if _DURATION.search(leaf) or in_ns_group:
        return fmt_ns(value)
    if leaf in _SHARES:
        return fmt_pct(value)
    if _PERCENTS.search(leaf):
        return f"{value:.1f}%"
    if leaf in _FLAGS or isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if isinstance(value, (float, np.floating)):
        rate = _RATE.search(leaf)
        return _si(float(value), "FLOP/s" if rate[1] == "flops" else "B/s") if rate else f"{value:,.3f}"
    return str(value)


def _missing(value: Any) -> bool:
    if value is None or value is pd.NA:
        return True
    return isinstance(value, (float, np.floating)) and math.isnan(value)


def _si(value: float, unit: str) -> str:
    """``value`` with a decimal prefix: 15.70 TFLOP/s, 900.00 GB/s."""
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:,.2f} {prefix}{unit}"
    return f"{value:,.2f} {unit}"


def markdown_table(frame: pd.DataFrame) -> str:
    """A Markdown table; every cell goes through :func:`~.cells.markdown_text`, so a name stays in its cell,
    reads as the trace wrote it, and never runs as HTML."""
    if not len(frame.columns):
        return "_No rows._\n"
    head = "| " + " | ".join(markdown_text(c) for c in frame.columns) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    body = ["| " + " | ".join(markdown_text(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([head, rule, *body]) + "\n"


def write_reports(db_path: Path, out_dir: Path, reports: list[str], formats: list[str],
                  agg_id: int | None = None, gpu_spec: Path | None = None) -> list[Path]:
    """Write each report in each format it supports to ``out_dir``; returns the files written."""
    known_formats = set(FORMATS).union(*SPECIAL_REPORTS.values())
    unknown = [r for r in reports if r not in REPORTS] + [f for f in formats if f not in known_formats]
    if unknown:
        raise DlscopeError(f"unknown report or format: {', '.join(unknown)} (reports: {', '.join(REPORTS)}; "
                           f"formats: {', '.join(sorted(known_formats))})")
    if gpu_spec is not None and "roofline" in reports:
        from ..roofline import load_spec_file

        load_spec_file(gpu_spec)  # a bad spec fails before any report folder or file is made
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    summary = summary_dict(db_path, agg_id) if "summary" in reports else None
    conn = reader.connect(db_path)
    try:
        agg = summary["aggregation"]["agg_id"] if summary else reader.resolve_agg_id(conn, agg_id)
        for name in reports:
            if name in SPECIAL_REPORTS:
                written += _write_special(conn, name, agg, out_dir, formats, gpu_spec)
                continue
            for fmt in (f for f in formats if f in FORMATS):
                path = out_dir / f"{name}.{fmt}"
                if name == "summary":
                    _write_summary(summary, path, fmt)
                else:
                    _write_frame(report_frame(conn, name, agg), path, fmt)
                written.append(path)
    finally:
        conn.close()
    return written


def _write_special(conn: sqlite3.Connection, name: str, agg_id: int, out_dir: Path, formats: list[str],
                   gpu_spec: Path | None) -> list[Path]:
    wanted = [f for f in formats if f in SPECIAL_REPORTS[name]]
    if not wanted:
        raise DlscopeError(f"the {name} report is written as {', '.join(SPECIAL_REPORTS[name])}; "
                           f"none of --formats {','.join(formats)} fits")
    if name == "expert_systems":
        from ..experts import write_expert_report

        return [Path(p) for p in write_expert_report(conn, agg_id, out_dir, wanted)]
    from ..roofline import roofline_report
    from ..roofline.export import write_roofline

    return [Path(p) for p in write_roofline(roofline_report(conn, agg_id, gpu_spec_path=gpu_spec), out_dir, wanted)]


def _write_summary(summary: dict, path: Path, fmt: str) -> None:
    if fmt == "json":
        path.write_text(json.dumps(summary, indent=1))
        return
    a = summary["aggregation"]
    rows = [("profile_name", summary["profile_name"])]
    rows += _flat("profile", {k: v for k, v in summary["profile"].items() if k != "gpus"})
    if a is not None:
        rows += _flat("aggregation", {k: v for k, v in a.items() if k not in ("top_gpu_ops", "gpus", "matrix_units")})
        rows += [("aggregation.matrix_units", a["matrix_units"]["plural"])]
    _write_frame(pd.DataFrame(rows, columns=["metric", "value"]), path, fmt)


def _flat(prefix: str, figures: dict) -> list[tuple[str, Any]]:
    """(dotted metric, value) rows; nested figures (iteration_ns, the breakdown) get a row each."""
    rows: list[tuple[str, Any]] = []
    for key, value in figures.items():
        if isinstance(value, dict):
            rows += _flat(f"{prefix}.{key}", value)
        elif isinstance(value, list):
            rows.append((f"{prefix}.{key}", ", ".join(map(str, value))))
        else:
            rows.append((f"{prefix}.{key}", value))
    return rows
