"""Export the whole filtered, sorted result of a table as CSV, JSON, Excel (xlsx) or PDF.

Rows stream from their own read-only connection (the HTTP layer pulls them from worker threads), so an export
of millions of kernels never sits in memory; xlsx is written by xlsxwriter in constant-memory mode and capped
at Excel's sheet size. PDF (fpdf2, for reading and sharing) shows the table's visible columns in readable units,
up to ``PDF_MAX_ROWS`` rows. The profile name heads every export, as DLProf's exports carry it: JSON, Excel and
PDF always, CSV/TSV (and so the clipboard) as a first line when ``title=1`` (the viewer's buttons ask for it; a
plain CSV stays one header row for tools).
"""

from __future__ import annotations

import csv
import io
import os
import tempfile
from collections.abc import Iterator

import orjson
import xlsxwriter

from dlscope.format import spreadsheet_text
from dlscope.viewer.params import TableRequest
from dlscope.viewer.profile_db import ProfileDB
from dlscope.viewer.query import select_sql
from dlscope.viewer.tree import load_tree, visible_rows

EXCEL_MAX_ROWS = 1_048_576 - 3
BATCH = 5000


def iter_rows(db: ProfileDB, req: TableRequest) -> Iterator[tuple]:
    """Every row of the filtered result in display order, as tuples in column order."""
    names = [c.name for c in req.spec.columns]
    if req.spec.name == "groups":
        for row in visible_rows(load_tree(db, req.scope["agg"]), req, "all"):
            yield tuple(row[n] for n in names)
        return
    sql, params = select_sql(req, db=db)
    conn = db.open_readonly()
    try:
        cur = conn.execute(sql, params)
        while True:
            batch = cur.fetchmany(BATCH)
            if not batch:
                break
            yield from batch
    finally:
        conn.close()


def export_title(db: ProfileDB, req: TableRequest) -> str:
    """'<profile> — <table>' and the rank when the table is one rank's."""
    return f"{db.profile_name} — {req.spec.title}"


def csv_chunks(db: ProfileDB, req: TableRequest, delimiter: str = ",", title: str | None = None) -> Iterator[bytes]:
    buf = io.StringIO()
    writer = csv.writer(buf, delimiter=delimiter)
    if title:
        writer.writerow([title])
    writer.writerow([c.label + (" (ns)" if c.kind == "ns" else "") for c in req.spec.columns])
    for i, row in enumerate(iter_rows(db, req), 1):
        writer.writerow([spreadsheet_text(v) for v in row])  # names cannot run as formulas
        if i % BATCH == 0:
            yield buf.getvalue().encode()
            buf.seek(0)
            buf.truncate()
    yield buf.getvalue().encode()


def json_chunks(db: ProfileDB, req: TableRequest) -> Iterator[bytes]:
    names = [c.name for c in req.spec.columns]
    head = {"profile_name": db.profile_name, "table": req.spec.name, "sort": req.sort,
            "order": "desc" if req.desc else "asc", "filters": {k: v[1] for k, v in req.filters.items()},
            "q": req.q, "scope": req.scope}
    yield orjson.dumps(head)[:-1] + b', "rows": ['
    first = True
    for row in iter_rows(db, req):
        yield (b"" if first else b",\n") + orjson.dumps(dict(zip(names, row)))
        first = False
    yield b"]}\n"


def write_xlsx(db: ProfileDB, req: TableRequest) -> str:
    """Write the result to a temporary .xlsx file and return its path (the caller deletes it)."""
    fd, path = tempfile.mkstemp(suffix=".xlsx", prefix="dlscope-export-")
    os.close(fd)
    book = xlsxwriter.Workbook(path, {"constant_memory": True, "strings_to_urls": False,
                                      "strings_to_formulas": False})
    sheet = book.add_worksheet(req.spec.title[:31])
    bold = book.add_format({"bold": True})
    sheet.write_string(0, 0, export_title(db, req), bold)
    for j, c in enumerate(req.spec.columns):
        sheet.write_string(1, j, c.label + (" (ns)" if c.kind == "ns" else ""), bold)
    r = 2
    for r, row in enumerate(iter_rows(db, req), 2):
        if r > EXCEL_MAX_ROWS:
            sheet.write_string(r, 0, f"(truncated at Excel's limit of {EXCEL_MAX_ROWS:,} rows; export CSV for all)")
            break
        for j, v in enumerate(row):
            if v is None:
                continue
            if isinstance(v, (int, float)):
                sheet.write_number(r, j, v)
            else:
                sheet.write_string(r, j, spreadsheet_text(str(v)))
    book.close()
    return path


def export_filename(db: ProfileDB, req: TableRequest, ext: str) -> str:
    """'<profile>-<table>.<ext>': the profile name in every exported file's name too."""
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in db.profile_name)
    return f"{safe}-{req.spec.name}.{ext}"


PDF_MAX_ROWS = 1000


def _pdf_text(kind: str, value) -> str:
    """A cell as the viewer shows it (readable units), for reading on paper."""
    from dlscope.format import fmt_bytes, fmt_ns, fmt_pct

    if value is None:
        return "n/a"
    if kind == "ns":
        return fmt_ns(value)
    if kind == "pct":
        return fmt_pct(value)
    if kind == "bytes":
        return fmt_bytes(value)
    if kind == "bool":
        return "yes" if value else "no"
    if kind in ("int", "ts"):
        return f"{int(value):,}" if isinstance(value, (int, float)) else str(value)
    if kind == "float":
        return f"{value:,.3f}" if isinstance(value, (int, float)) else str(value)
    text = str(value)
    return text if len(text) <= 160 else text[:159] + "…"


def write_pdf(db: ProfileDB, req: TableRequest, subtitle: str = "") -> bytes:
    """The table's visible columns as a landscape PDF (first ``PDF_MAX_ROWS`` rows), titled with the profile."""
    import matplotlib
    from fpdf import FPDF

    fonts = os.path.join(matplotlib.get_data_path(), "fonts", "ttf")  # DejaVu: every name from a trace prints
    columns = [(i, c) for i, c in enumerate(req.spec.columns) if not c.hidden]
    pdf = FPDF(orientation="L", unit="mm", format="A4")
    pdf.set_title(export_title(db, req))
    pdf.set_creator("dlscope")
    pdf.add_font("DejaVu", "", os.path.join(fonts, "DejaVuSans.ttf"))
    pdf.add_font("DejaVu", "B", os.path.join(fonts, "DejaVuSans-Bold.ttf"))
    pdf.set_auto_page_break(True, margin=10)
    pdf.add_page()
    pdf.set_font("DejaVu", "B", 12)
    pdf.multi_cell(0, 6, export_title(db, req), new_x="LMARGIN", new_y="NEXT")
    pdf.set_font("DejaVu", "", 8)
    rows = []
    for n, row in enumerate(iter_rows(db, req)):
        if n == PDF_MAX_ROWS:
            break
        rows.append(row)
    total = len(rows)
    def label(name: str) -> str:
        column = req.spec.column(name)
        return column.label if column is not None else name

    note = f"sorted by {label(req.sort)} ({'descending' if req.desc else 'ascending'})"
    if req.filters or req.q:
        note += "; filtered: " + ", ".join([*(f"{label(k)} {op} {v}" for k, (op, v) in req.filters.items()),
                                            *([f"search {req.q!r}"] if req.q else [])])
    if total == PDF_MAX_ROWS:
        note += f"; the first {PDF_MAX_ROWS:,} rows (export CSV or Excel for all)"
    pdf.multi_cell(0, 4.5, " · ".join(x for x in (subtitle, note) if x), new_x="LMARGIN", new_y="NEXT")
    pdf.ln(2)
    size = 7 if len(columns) <= 10 else 6
    weights = [{"text": 3.0, "ts": 1.9}.get(c.kind, 1.0) for _, c in columns]
    widths = [pdf.epw * w / sum(weights) for w in weights]
    height = size * 0.55

    def fit(text: str, width: float) -> str:
        """The text cut with '…' to one line of the cell (a table row is one line: fast, and it lines up)."""
        if pdf.get_string_width(text) <= width - 1.2:
            return text
        lo, hi = 0, len(text)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if pdf.get_string_width(text[:mid] + "…") <= width - 1.2:
                lo = mid
            else:
                hi = mid - 1
        return text[:lo] + "…"

    def line(values, bold: bool = False, fill: bool = False) -> None:
        if pdf.will_page_break(height):
            pdf.add_page()
            line([c.label for _, c in columns], True, True)
        pdf.set_font("DejaVu", "B" if bold else "", size)
        for (_, c), w, v in zip(columns, widths, values):
            pdf.cell(w, height, fit(v, w), border="B", align="L" if bold or c.kind in ("text", "bool") else "R",
                     fill=fill)
        pdf.ln(height)

    pdf.set_fill_color(238, 241, 244)
    line([c.label for _, c in columns], True, True)
    for row in rows:
        line([_pdf_text(c.kind, row[i]) for i, c in columns])
    return bytes(pdf.output())
