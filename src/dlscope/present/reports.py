"""DLProf's reports from a profile database, as CSV, JSON or Markdown files.

CSV and JSON keep machine values (times in integer ns, shares as fractions); Markdown is for reading:
durations in units (:func:`dlscope.format.fmt_ns`), shares as percentages, ``n/a`` where a figure is missing.
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import pandas as pd

from ..errors import DlscopeError
from ..format import markdown_table, readable, write_csv
from ..nanoseconds import round_ns_column
from ..store import reader
from .summary import summary_dict

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
    conn = reader.connect(db_path)
    try:
        reader.check_timed(conn, db_path, "report")  # before any report folder or file is made
    finally:
        conn.close()
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    summary = summary_dict(db_path, agg_id) if "summary" in reports else None
    conn = reader.connect(db_path)
    try:
        if summary and summary["aggregation"] is not None:
            agg = summary["aggregation"]["agg_id"]
        elif agg_id is None and set(reports) <= {"roofline"} and reader.current_agg_id(conn) is None:
            agg = None  # a counters-only database (ncu CSVs): the roofline of its kernels needs no aggregation
        else:
            agg = reader.resolve_agg_id(conn, agg_id)
        for name in reports:
            if name in SPECIAL_REPORTS:
                written += _write_special(conn, name, agg, out_dir, formats, gpu_spec)
                continue
            for fmt in (f for f in formats if f in FORMATS):
                path = out_dir / f"{name}.{fmt}"
                if name == "summary":
                    assert summary is not None  # read above whenever "summary" is among the reports
                    _write_summary(summary, path, fmt)
                else:
                    _write_frame(report_frame(conn, name, agg), path, fmt)
                written.append(path)
    finally:
        conn.close()
    return written


def _write_special(conn: sqlite3.Connection, name: str, agg_id: int | None, out_dir: Path, formats: list[str],
                   gpu_spec: Path | None) -> list[Path]:
    wanted = [f for f in formats if f in SPECIAL_REPORTS[name]]
    if not wanted:
        raise DlscopeError(f"the {name} report is written as {', '.join(SPECIAL_REPORTS[name])}; "
                           f"none of --formats {','.join(formats)} fits")
    if name == "expert_systems":
        from ..experts import write_expert_report

        assert agg_id is not None  # only a roofline-only request may go without an aggregation
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
    if summary.get("job"):
        rows += _flat("job", {k: v for k, v in summary["job"].items() if k not in ("gpus", "aggregations")})
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
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            for i, item in enumerate(value):  # a list of records (the critical path): a row per field, numbered
                rows += _flat(f"{prefix}.{key}.{i}", item)
        elif isinstance(value, list):
            rows.append((f"{prefix}.{key}", ", ".join(map(str, value))))
        else:
            rows.append((f"{prefix}.{key}", value))
    return rows
