"""The summary's Python section: where the Python call tree came from, what was kept of it, and the functions
with the most self time."""

from __future__ import annotations

import json
import sqlite3

from ..format import fmt_ns

TOP = 10


def python_section(conn: sqlite3.Connection) -> dict | None:
    """``{"source", "frames", "nodes", "root_total_ns", "top_self"}``; None when the profile has no Python
    call tree (no python_function frames were recorded and no cProfile output was imported)."""
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "python_tree" not in tables:
        return None
    frames: dict = {"recorded": 0, "kept": 0, "dropped": 0}
    reasons, source = [], "trace"
    for fmt, meta_json in conn.execute("SELECT format, meta_json FROM sources ORDER BY source_id"):
        meta = json.loads(meta_json or "{}")
        if fmt == "cprofile":
            source = "cprofile"
            frames = {**frames, **(meta.get("python_tree") or {})}
            continue
        kept = meta.get("python_frames") or {}
        for key in ("recorded", "kept", "dropped"):
            frames[key] += int(kept.get(key) or 0)
        if kept.get("dropped_reason"):
            reasons.append(kept["dropped_reason"])
    nodes = conn.execute("SELECT COUNT(*) FROM python_tree").fetchone()[0]
    if not nodes and not frames["recorded"]:
        return None
    if reasons:
        frames["dropped_reason"] = "; ".join(sorted(set(reasons)))
    total = conn.execute("SELECT COALESCE(SUM(total_ns), 0) FROM python_tree WHERE parent_node_id < 0").fetchone()[0]
    top = [{"name": n, "file": f, "line": ln, "self_ns": s, "calls": c} for n, f, ln, s, c in conn.execute(
        "SELECT name, file, line, SUM(self_ns), SUM(calls) FROM python_tree GROUP BY name, file, line "
        "ORDER BY SUM(self_ns) DESC, name LIMIT ?", (TOP,))]
    return {"source": source, "frames": frames, "nodes": nodes, "root_total_ns": total, "top_self": top}


def python_lines(section: dict | None) -> list[str]:
    """The summary's lines about the Python call tree (plain text; the caller escapes nothing)."""
    if not section:
        return []
    f = section["frames"]
    if section["source"] == "cprofile":
        head = (f"Python call tree from a cProfile output: {f.get('functions', 0):,} functions, "
                f"{section['nodes']:,} call-tree nodes, {fmt_ns(section['root_total_ns'])} in its roots "
                "(no timeline, ops or GPU work: only the Python view applies)")
        left = int(f.get("paths_below_min_share") or 0) + int(f.get("paths_over_max_nodes") or 0)
        if left:
            head += (f"; {left:,} call paths not expanded (under {f.get('min_share')} of their root's time, or "
                     f"past {f.get('max_nodes'):,} nodes)")
    else:
        head = (f"Python frames: {f['kept']:,} kept of {f['recorded']:,} recorded, {section['nodes']:,} call-tree "
                f"nodes")
        if f["dropped"]:
            head += f"; {f['dropped']:,} dropped ({f.get('dropped_reason', 'bounded at import')})"
    lines = [head]
    if section["top_self"]:
        lines.append("  Most self time: " + ", ".join(
            f"{t['name'][:80]} {fmt_ns(t['self_ns'])}" for t in section["top_self"][:3]))
    return lines
