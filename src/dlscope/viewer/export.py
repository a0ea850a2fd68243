"""Export the whole filtered, sorted result of a table as CSV, JSON or Excel (xlsx).

Rows stream from their own read-only connection (the HTTP layer pulls them from worker threads), so an export
of millions of kernels never sits in memory; xlsx is written by xlsxwriter in constant-memory mode and capped
at Excel's sheet size. The profile name heads JSON and Excel exports, as DLProf's exports carry it.
"""

from __future__ import annotations

import csv
import io
import os
import tempfile
from typing import Iterator

import orjson
import xlsxwriter

from dlscope.present.cells import spreadsheet_text
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


def csv_chunks(db: ProfileDB, req: TableRequest, delimiter: str = ",") -> Iterator[bytes]:
    buf = io.StringIO()
    writer = csv.writer(buf, delimiter=delimiter)
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
    sheet.write_string(0, 0, f"{db.profile_name} — {req.spec.title}", bold)
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
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in db.profile_name)
    return f"{safe}-{req.spec.name}.{ext}"
