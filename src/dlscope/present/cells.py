"""Names from traces in files meant for other programs: a cell must stay a cell, never become code.

Trace names are whatever the profiled program called things, so a report must not let one act: in CSV
(and Excel sheets) a cell that starts like a formula (``=``, ``+``, ``-``, ``@``, a tab or a carriage
return) is run by spreadsheet programs (``=HYPERLINK(...)``), so it gets a leading ``'`` (OWASP's advice);
control characters (terminal escape sequences) are written as visible ``\\xNN`` text. In Markdown, a
renderer that allows HTML would run ``<script>`` or ``<img onerror>``: ``&``, ``<`` and ``>`` become
entities, and the characters that start Markdown syntax are backslash-escaped, so any CommonMark renderer
shows the name exactly as the trace wrote it.
"""

from __future__ import annotations

import re
from typing import Any

import pandas as pd

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
