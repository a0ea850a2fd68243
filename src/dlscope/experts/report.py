"""The expert_systems report: the stored findings of one aggregation as CSV, JSON or Markdown."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pandas as pd

from ..errors import DlscopeError
from ..format import fmt_ns, write_csv

FORMATS = ("csv", "json", "md")
COLUMNS = ["rule", "severity", "problem", "recommendation", "est_saving_ns", "est_saving_pct", "evidence",
           "simulated_saving_ns", "not_priced"]


def findings_frame(conn: sqlite3.Connection, agg_id: int) -> pd.DataFrame:
    # simulated_saving_ns: priced by replay at import (whatif.stored); a database written before has none
    have = {r[1] for r in conn.execute('PRAGMA table_info("findings")')}
    stored = "simulated_saving_ns" in have
    not_priced = "not_priced" if "not_priced" in have else "NULL"  # why a risk finding has no saving
    frame = pd.read_sql_query("SELECT rule, severity, problem, recommendation, est_saving_ns, est_saving_pct, "
                              f"evidence_json AS evidence, {'simulated_saving_ns' if stored else 'NULL'} "
                              f"AS simulated_saving_ns, {not_priced} AS not_priced FROM findings WHERE agg_id = ? "
                              "ORDER BY finding_id",
                              conn, params=(agg_id,))
    return frame[COLUMNS]


def _markdown(frame: pd.DataFrame) -> str:
    """One section per finding; trace names are escaped so they cannot break the Markdown."""
    def esc(text) -> str:
        return str(text).replace("\\", "\\\\").replace("|", "\\|").replace("*", "\\*").replace("_", "\\_") \
            .replace("<", "&lt;").replace(">", "&gt;").replace("\n", " ")
    lines = [f"# Expert systems: {len(frame)} issue{'s' if len(frame) != 1 else ''} detected", ""]
    for i, f in enumerate(frame.itertuples(index=False), 1):
        saving = (f"none: {esc(f.not_priced)}" if pd.isna(f.est_saving_ns) and not pd.isna(f.not_priced) else
                  "n/a" if pd.isna(f.est_saving_ns) else fmt_ns(f.est_saving_ns) if pd.isna(f.est_saving_pct) else
                  f"{fmt_ns(f.est_saving_ns)} ({f.est_saving_pct:.1f}% of the aggregated time)")
        lines += [f"## {i}. [{f.severity}] {esc(f.rule)}", "", f"**Problem:** {esc(f.problem)}", "",
                  f"**Recommendation:** {esc(f.recommendation)}", "", f"**Estimated saving:** {saving}", ""]
        if not pd.isna(f.simulated_saving_ns):
            lines += [f"**Simulated saving** (replayed on the dependency graph): {fmt_ns(f.simulated_saving_ns)}", ""]
    return "\n".join(lines)


def write_expert_report(conn: sqlite3.Connection, agg_id: int, out_dir: str | Path,
                        formats: list[str] | tuple[str, ...] = ("csv",)) -> list[Path]:
    """Write ``expert_systems.<fmt>`` for each format; returns the files written."""
    bad = [f for f in formats if f not in FORMATS]
    if bad:
        raise DlscopeError(f"unknown format for expert_systems: {', '.join(bad)} (formats: {', '.join(FORMATS)})")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    frame = findings_frame(conn, agg_id)
    written = []
    for fmt in formats:
        path = out_dir / f"expert_systems.{fmt}"
        if fmt == "csv":
            write_csv(frame, path)
        elif fmt == "json":
            records = [{**r, "evidence": json.loads(r["evidence"] or "{}")}
                       for r in frame.astype(object).where(frame.notna(), None).to_dict("records")]
            path.write_text(json.dumps(records, indent=1))
        else:
            path.write_text(_markdown(frame))
        written.append(path)
    return written
