"""Readable numbers: one formatter for durations, shares and table cells, used by every presenter (summary,
reports, findings, diff, roofline). A leaf module: it imports nothing of dlscope, and numpy and pandas only
when a function needs them, so a command that formats a duration does not load them."""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd


def fmt_ns(ns: float | None) -> str:
    """A duration in readable units."""
    if ns is None:
        return "n/a"
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if abs(ns) >= scale:
            return f"{ns / scale:,.2f} {unit}"
    return f"{ns:,.0f} ns"


def fmt_shapes(input_shapes: str | None) -> str:
    """An op's recorded input shapes (``agg_ops.input_shapes``, JSON) as "888×2880, 640×2880, 640": the tensors
    only (scalars and empty lists left out); "" when none or unreadable."""
    import json

    try:
        shapes = json.loads(input_shapes) if input_shapes else []
    except ValueError:
        return ""
    if not isinstance(shapes, list):
        return ""
    return ", ".join("×".join(str(d) for d in s) for s in shapes
                     if isinstance(s, list) and s and all(isinstance(d, int) for d in s))


def shapes_where_repeated(names: list[str], input_shapes: list[str | None]) -> list[str]:
    """Per row (an op node): :func:`fmt_shapes` of its input shapes where its name repeats among the rows (op nodes
    of one name differ by their shapes), else "". The one rule for the summary, the HTML report and the dashboard."""
    from collections import Counter

    counts = Counter(names)
    return [fmt_shapes(shapes) if counts[name] > 1 else "" for name, shapes in zip(names, input_shapes)]


def fmt_pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "n/a"
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= scale:
            return f"{n / scale:,.2f} {unit}"
    return f"{n:,.0f} B"


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


def readable(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame as display text, each cell formatted by what its column holds (see :func:`readable_value`);
    a ``metric``/``value`` frame (the summary) formats each value by its metric's name."""
    import pandas as pd

    if list(frame.columns) == ["metric", "value"]:
        values = [readable_value(m, v) for m, v in zip(frame["metric"], frame["value"])]
        return pd.DataFrame({"metric": frame["metric"], "value": values})
    return pd.DataFrame({c: [readable_value(c, v) for v in frame[c].tolist()] for c in frame.columns})


def readable_value(name: str, value: Any) -> str:
    """A value of the column or metric ``name`` (dotted for nested summary figures) as display text."""
    import numpy as np

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
    import numpy as np
    import pandas as pd

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
    """A Markdown table; every cell goes through :func:`markdown_text`, so a name stays in its cell, reads as
    the trace wrote it, and never runs as HTML."""
    if not len(frame.columns):
        return "_No rows._\n"
    head = "| " + " | ".join(markdown_text(c) for c in frame.columns) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    body = ["| " + " | ".join(markdown_text(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([head, rule, *body]) + "\n"


# Names from traces in files meant for other programs: a cell must stay a cell, never become code.
#
# Trace names are whatever the profiled program called things, so a report must not let one act: in CSV
# (and Excel sheets) a cell that starts like a formula (``=``, ``+``, ``-``, ``@``, a tab or a carriage
# return) is run by spreadsheet programs (``=HYPERLINK(...)``), so it gets a leading ``'`` (OWASP's advice);
# control characters (terminal escape sequences) are written as visible ``\\xNN`` text. In Markdown, a
# renderer that allows HTML would run ``<script>`` or ``<img onerror>``: ``&``, ``<`` and ``>`` become
# entities, and the characters that start Markdown syntax are backslash-escaped, so any CommonMark renderer
# shows the name exactly as the trace wrote it.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")  # C0 controls but tab and newline, and DEL
_MARKDOWN = re.compile(r"([\\`*_\[\]|~])")
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\Z")


def _visible(match: re.Match) -> str:
    return f"\\x{ord(match.group(0)):02x}"


def spreadsheet_text(value: Any) -> Any:
    """A CSV / xlsx cell that no spreadsheet program runs: text that starts like a formula gets a leading
    ``'``, control characters become ``\\xNN``. Numbers (and text that is just a number) stay as they are."""
    if not isinstance(value, str):
        return value
    text = _CONTROL.sub(_visible, value)
    if text.startswith(_FORMULA_START) and not _NUMBER.match(text):
        text = "'" + text
    return text


def spreadsheet_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with every text cell made :func:`spreadsheet_text` (numeric columns untouched)."""
    import pandas as pd

    text_columns = [c for c in frame.columns if frame[c].dtype == object or pd.api.types.is_string_dtype(frame[c])]
    if not text_columns:
        return frame
    out = frame.copy()
    for column in text_columns:
        out[column] = [spreadsheet_text(v) for v in frame[column].tolist()]
    out.columns = [spreadsheet_text(str(c)) for c in frame.columns]
    return out


def write_csv(frame: pd.DataFrame, path: Any) -> None:
    """``frame.to_csv(path, index=False)`` with its text cells made safe for spreadsheets."""
    spreadsheet_frame(frame).to_csv(path, index=False)


def markdown_text(value: Any) -> str:
    """Text for a Markdown file that every CommonMark renderer shows verbatim and none runs: HTML's
    ``& < >`` as entities, Markdown's syntax characters backslash-escaped, newlines as spaces, control
    characters as ``\\xNN``."""
    text = _CONTROL.sub(_visible, str(value))
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MARKDOWN.sub(r"\\\1", text).replace("\n", " ")
