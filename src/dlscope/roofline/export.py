"""Write a roofline report in the formats ``dlscope report --reports roofline --formats`` asks for."""

from __future__ import annotations

import json
from pathlib import Path

from dlscope.errors import DlscopeError
from dlscope.roofline.analysis import roofline_tables
from dlscope.roofline.chart import write_roofline_chart

FORMATS = ("csv", "json", "md", "png", "svg")
DEFAULT_FORMATS = ("csv", "json", "png", "svg")  # Markdown only when asked for


def write_roofline(report: dict, output_dir: str | Path, formats: tuple[str, ...] | list[str] = DEFAULT_FORMATS,
                   stem: str = "roofline") -> list[Path]:
    """``roofline.json``, ``roofline_ops.csv`` + ``roofline_kernels.csv`` (or ``.md``, for reading),
    ``roofline.png`` / ``.svg``."""
    unknown = sorted(set(formats) - set(FORMATS))
    if unknown:
        raise DlscopeError(f"roofline report formats are {', '.join(FORMATS)}; not {', '.join(unknown)}")
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    if "json" in formats:
        path = out / f"{stem}.json"
        path.write_text(json.dumps(report, indent=1, allow_nan=False))
        written.append(path)
    for fmt in ("csv", "md"):
        if fmt not in formats:
            continue
        for name, frame in roofline_tables(report).items():
            path = out / f"{name}.{fmt}"
            if fmt == "csv":
                from dlscope.format import write_csv

                write_csv(frame, path)
            else:
                from dlscope.format import markdown_table, readable

                path.write_text(markdown_table(readable(frame)))
            written.append(path)
    charts = tuple(f for f in ("png", "svg") if f in formats)
    if charts:
        written += write_roofline_chart(report, out / stem, charts)
    return written
