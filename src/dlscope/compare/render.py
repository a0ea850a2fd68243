"""The diff for people and tools: Rich tables on the terminal, Markdown, CSV and JSON files.

All of them render the dict ``compare()`` returns; names from traces are escaped for Rich markup and for
Markdown cells.
"""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from ..errors import DlscopeError
from ..format import fmt_ns, fmt_pct, markdown_table, write_csv

if TYPE_CHECKING:
    from rich.console import JustifyMethod

FORMATS = ("md", "csv", "json")
#: rows per table on the terminal and in Markdown
TOP = 10
MD_TOP = 25
#: (table key, name column, CSV file stem)
ROW_TABLES = (("op_types", "op_type", "diff_op_types"), ("ops", "op_name", "diff_ops"),
              ("kernels", "kernel_name", "diff_kernels"))


def shown_value(m: dict, side: str) -> str:
    """A metric's ``side`` ("base"/"new") as shown: "≥ " before a value that is a lower bound (MFU that leaves
    matrix products out, as the summary shows it)."""
    return ("≥ " if (m.get("lower_bound") or {}).get(side) and m[side] is not None else "") + \
        fmt_value(m[side], m["unit"])


def fmt_value(v, unit: str) -> str:
    if v is None:
        return "n/a"
    return fmt_ns(v) if unit == "ns" else fmt_pct(v) if unit == "ratio" else f"{v:,.1f}".removesuffix(".0")


def fmt_delta(m: dict) -> str:
    d = m["delta"]
    if d is None:
        return "n/a"
    if m["unit"] == "ratio":
        return f"{100 * d:+.1f} pt"
    sign = "+" if d > 0 else "−" if d < 0 else "±"
    return sign + fmt_value(abs(d), m["unit"])


def fmt_ratio(r) -> str:
    return "n/a" if r is None else f"{r:.2f}×"


def _short(text, width: int = 60) -> str:
    text = "" if text is None else str(text)
    return text if len(text) <= width else text[: width - 1] + "…"


def _signed_ns(v) -> str:
    if v is None:
        return "n/a"
    return ("+" if v > 0 else "−" if v < 0 else "±") + fmt_ns(abs(v))


def _count(v) -> str:
    return "" if v is None else f"{v:,.2f}".rstrip("0").rstrip(".")


def _what(r: dict) -> str:
    if r["status"] != "both":
        return r["status"]
    m = r.get("match")
    if not m or m == "same":
        return "same"
    text = m.replace("_", " ").replace(",", ", ")
    if r.get("base_batch") is not None:
        text = text.replace("batch size changed", f"batch size {r['base_batch']}→{r['new_batch']}")
    if "renamed" in m:
        text += f" (was {r['base_op_name']})"
    return text


def render_diff(d: dict, width: int = 120) -> str:
    """The terminal diff: verdict and the key changes first, then metrics, breakdown and the top rows."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    buf = StringIO()
    con = Console(file=buf, width=width, force_terminal=False, color_system=None)
    b, n = d["base"], d["new"]
    per = "per iteration" if d["values"] == "per_iteration" else "totals of the aggregation window"
    con.print(f"[bold]dlscope diff[/bold]: {escape(str(b['profile_name']))} (base, {b['iterations_profiled'] or 'no'} "
              f"iterations) → {escape(str(n['profile_name']))} (new, {n['iterations_profiled'] or 'no'} iterations); "
              f"times are {per}")
    for w in d.get("warnings", []):
        con.print(f"[bold]Warning:[/bold] {escape(w['text'])}")
    con.print(f"[bold]{escape(d['verdict'])}[/bold]")
    for r in d.get("regressions", []):
        con.print(f"[bold]Regression:[/bold] {escape(r['text'])}")
    for i, c in enumerate(d["key_changes"], 1):
        con.print(f"  {i}. {escape(c['text'])}")
    if d["batch_size"]:
        bs = d["batch_size"]
        con.print(f"  Batch size changed: {bs['base']} → {bs['new']} (in {bs['ops']} ops' input shapes)")

    mt = Table(title="Metrics", title_justify="left")
    columns: tuple[tuple[str, JustifyMethod], ...] = (("Metric", "left"), ("Base", "right"), ("New", "right"),
                                                       ("Δ", "right"), ("Ratio", "right"), ("", "left"))
    for col, just in columns:
        mt.add_column(col, justify=just)
    for m in d["metrics"]:
        if m["share"]:
            continue
        label = m["label"] + (" time" if m["category"] else "")
        mt.add_row(escape(label), shown_value(m, "base"), shown_value(m, "new"), fmt_delta(m),
                   fmt_ratio(m["ratio"]), escape(m["verdict"] or (m["unavailable"] or "")))
    con.print(mt)

    bt = Table(title="Resource usage breakdown", title_justify="left")
    for col in ("Category", "Base", "New", "Δ", "Ratio", "Share base → new"):
        bt.add_column(col, justify="left" if col == "Category" else "right")
    for c in d["breakdown"]:
        bt.add_row(escape(c["label"]), fmt_ns(c["base_ns"]), fmt_ns(c["new_ns"]), _signed_ns(c["delta_ns"]),
                   fmt_ratio(c["ratio"]), f"{fmt_pct(c['base_share'])} → {fmt_pct(c['new_share'])}")
    con.print(bt)

    for key, name_col, title in (("op_types", "op_type", "Op types"), ("ops", "op_name", "Ops"),
                                 ("kernels", "kernel_name", "Kernels")):
        rows = d[key][:TOP]
        if not rows:
            continue
        counts = d["counts"][key]
        t = Table(title=f"{title} by impact (top {len(rows)} of {len(d[key])}; "
                        + ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in counts.items()) + ")",
                  title_justify="left")
        has_cpu = "delta_cpu_time_ns" in rows[0]
        t.add_column("Name", no_wrap=True, overflow="ellipsis", max_width=40)
        t.add_column("Change", overflow="fold", min_width=10, max_width=24)
        for col in ("GPU base", "GPU new", "GPU Δ", *(("CPU Δ",) if has_cpu else ()), "Calls"):
            t.add_column(col, justify="right", no_wrap=True)
        for r in rows:
            cpu = (_signed_ns(r["delta_cpu_time_ns"]),) if has_cpu else ()
            t.add_row(escape(_short(r[name_col])), escape(_what(r)), fmt_ns(r["base_gpu_time_ns"]),
                      fmt_ns(r["new_gpu_time_ns"]), _signed_ns(r["delta_gpu_time_ns"]), *cpu,
                      f"{_count(r['base_calls'])} → {_count(r['new_calls'])}")
        con.print(t)

    names = d["op_names"]
    for side, label in (("only_in_base", "Ops only in the base run"), ("only_in_new", "Ops only in the new run")):
        if names[side]:
            shown = names[side][:TOP]
            more = f" … and {len(names[side]) - len(shown)} more" if len(names[side]) > len(shown) else ""
            con.print(f"[bold]{label}[/bold] ({len(names[side])}): {escape(', '.join(shown))}{escape(more)}")
    return buf.getvalue()


def _metrics_frame(d: dict) -> pd.DataFrame:
    """The metrics as rows (CSV/XLSX), a lower bound flagged per side (``base_lower_bound``: the value leaves work
    out, shown "≥" in the terminal and markdown)."""
    return pd.DataFrame([{**{k: m[k] for k in ("metric", "label", "unit", "better", "base", "new", "delta", "ratio",
                                               "change_pct", "verdict", "unavailable")},
                          **{f"{side}_lower_bound": bool((m.get("lower_bound") or {}).get(side))
                             for side in ("base", "new")}} for m in d["metrics"]])


def render_markdown(d: dict) -> str:
    b, n = d["base"], d["new"]
    out = [f"# dlscope diff: {_md_text(b['profile_name'])} → {_md_text(n['profile_name'])}", "",
           f"Base: `{_md_code(b['path'])}` ({b['iterations_profiled'] or 'no'} iterations); "
           f"new: `{_md_code(n['path'])}` ({n['iterations_profiled'] or 'no'} iterations). "
           f"Times are {'per iteration' if d['values'] == 'per_iteration' else 'totals of the aggregation window'}.",
           ""]
    out += [f"> **Warning:** {_md_text(w['text'])}\n" for w in d.get("warnings", [])]
    out += [f"**{_md_text(d['verdict'])}**", ""]
    out += [f"**Regression:** {_md_text(r['text'])}\n" for r in d.get("regressions", [])]
    out += [f"{i}. {_md_text(c['text'])}" for i, c in enumerate(d["key_changes"], 1)]
    if d["batch_size"]:
        out.append(f"\nBatch size changed: {d['batch_size']['base']} → {d['batch_size']['new']}.")
    out += ["", "## Metrics", "", markdown_table(pd.DataFrame(
        [{"metric": m["label"] + (" time" if m["category"] else ""), "base": shown_value(m, "base"),
          "new": shown_value(m, "new"), "delta": fmt_delta(m), "ratio": fmt_ratio(m["ratio"]),
          "verdict": m["verdict"] or m["unavailable"] or ""} for m in d["metrics"]]))]
    for key, name_col, _ in ROW_TABLES:
        rows = d[key][:MD_TOP]
        if rows:
            out += [f"## {key.replace('_', ' ').capitalize()} by impact (top {len(rows)} of {len(d[key])})", "",
                    markdown_table(pd.DataFrame([{
                        "name": _md_cell(r[name_col]), "change": _md_cell(_what(r)),
                        "gpu base": fmt_ns(r["base_gpu_time_ns"]), "gpu new": fmt_ns(r["new_gpu_time_ns"]),
                        "gpu delta": _signed_ns(r["delta_gpu_time_ns"]),
                        "cpu delta": _signed_ns(r.get("delta_cpu_time_ns")),
                        "calls": f"{_count(r['base_calls'])} → {_count(r['new_calls'])}"} for r in rows]))]
    for side, label in (("only_in_base", "Ops only in the base run"), ("only_in_new", "Ops only in the new run")):
        names = d["op_names"][side]
        out += [f"## {label} ({len(names)})", ""] + [f"- `{_md_code(x)}`" for x in names] + [""]
    return "\n".join(out) + "\n"


def _md_text(text) -> str:
    """Plain text for Markdown: characters that would start markup or HTML are backslash-escaped."""
    out = str(text)
    for ch in "\\`*_[]<>|#":
        out = out.replace(ch, "\\" + ch)
    return out


def _md_cell(text) -> str:
    """A table cell's text (``markdown_table`` escapes it, so a name like <script> shows as text)."""
    return "" if text is None else str(text)


def _md_code(text) -> str:
    return str(text).replace("`", "'").replace("\n", " ")


def write_diff(d: dict, out_dir: Path, formats: list[str]) -> list[Path]:
    """Write the diff in each format; returns the files written."""
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        raise DlscopeError(f"unknown diff format: {', '.join(unknown)} (formats: {', '.join(FORMATS)})")
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for fmt in formats:
        if fmt == "json":
            path = out_dir / "diff.json"
            path.write_text(json.dumps(d, indent=1, allow_nan=False))
            written.append(path)
        elif fmt == "md":
            path = out_dir / "diff.md"
            path.write_text(render_markdown(d))
            written.append(path)
        else:
            frames = {"diff_metrics": _metrics_frame(d), "diff_breakdown": pd.DataFrame(d["breakdown"]),
                      "diff_op_names": pd.DataFrame(
                          [{"op_name": x, "only_in": "base"} for x in d["op_names"]["only_in_base"]]
                          + [{"op_name": x, "only_in": "new"} for x in d["op_names"]["only_in_new"]],
                          columns=["op_name", "only_in"])}
            frames.update({stem: pd.DataFrame(d[key]) for key, _, stem in ROW_TABLES})
            for stem, frame in frames.items():
                path = out_dir / f"{stem}.csv"
                write_csv(frame, path)
                written.append(path)
    return written
