"""What the summary JSON and the reports print: integer nanoseconds in JSON, readable units in Markdown.

Oracles: the JSON text that ``dlscope summary --json`` prints, SQL over the raw tables of the database,
and a hand-made trace whose means are worked out by hand.
"""

from __future__ import annotations

import html
import json
import re
import sqlite3
import statistics
from fractions import Fraction
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import data_file
from trace_builder import KinetoTrace

from dlscope.cli import cli
from dlscope.format import fmt_ns

#: real imports: ns timestamps; 6 iterations (an even count: the median is a mean of two); an 8-rank
#: job (per-rank lags); an nsys export; a trace without iterations (one whole-profile window)
IMPORTS = {
    "ns_resolution": ("kineto", "hta_v100_ns_resolution_5steps.pt.trace.json.gz"),
    "six_steps": ("kineto", "hta_trace_diff_control_a100_rank3of8.json.gz"),
    "dlrm_8_ranks": ("kineto", "param_dlrm_8rank_v100"),
    "nsys": ("nsys_sqlite", "nvfuser_h200_nvtx_nsys2025.1.sqlite"),
    "whole_profile": ("kineto", "hta_alexnet_a100_critical_path.json.gz"),
}
#: figures that are shares of 1 or percentages: floats (or null), never rounded to integers
RATIOS = {"gpu_utilization", "utilization", "tc_kernel_efficiency", "comm_overlap", "straggler_score",
          "est_saving_pct", "pct_of_ceiling", "busbw_gbps", "overlap_share"}


def run_cli(*args) -> str:
    result = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def summary_json(db: Path) -> dict:
    return json.loads(run_cli("summary", db, "--json"))


def leaves(value, path=()):
    """(key path, value) of every scalar in a JSON document."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from leaves(item, (*path, key))
    elif isinstance(value, list):
        for item in value:
            yield from leaves(item, path)
    else:
        yield path, value


@pytest.mark.parametrize("name", list(IMPORTS))
def test_every_ns_figure_of_the_summary_json_is_an_integer(import_db, name):
    db = import_db(data_file(*IMPORTS[name]))
    doc = summary_json(db)
    checked = 0
    for path, value in leaves(doc):
        keys = [k for k in path if isinstance(k, str)]
        if keys[-1].endswith("_ns") or (len(keys) > 1 and keys[-2].endswith("_ns")):  # iteration_ns.median …
            assert value is None or type(value) is int, (path, value)
            checked += 1
        elif keys[-1] in RATIOS:
            assert value is None or type(value) is float, (path, value)
    assert checked > 20
    a = doc["aggregation"]
    if a["iterations_profiled"] and a["iteration_method"] != "whole_profile":
        assert a["avg_iteration_ns"] == round(Fraction(a["wall_clock_ns"], a["iterations_profiled"]))
        with sqlite3.connect(db) as conn:
            durations = [d for (d,) in conn.execute(
                "SELECT duration_ns FROM agg_iterations WHERE agg_id = ? AND profiled = 1", (a["agg_id"],))]
        assert a["iteration_ns"]["median"] == round(statistics.median(Fraction(d) for d in durations))


def test_rank_lags_are_the_rounded_means_of_the_stored_collective_lags(import_db):
    db = import_db(data_file(*IMPORTS["dlrm_8_ranks"]))
    ranks = summary_json(db)["ranks"]
    with sqlite3.connect(db) as conn:
        lags = {}
        for rank, lag in conn.execute("SELECT rank, arrival_lag_ns FROM collectives WHERE arrival_lag_ns IS NOT NULL"):
            assert type(lag) is int
            lags.setdefault(rank, []).append(lag)
    assert len(ranks) == 8 and all(type(r["collective_lag_ns"]) is int for r in ranks)
    for r in ranks:
        assert r["collective_lag_ns"] == round(Fraction(sum(lags[r["rank"]]), len(lags[r["rank"]])))
    fastest = min(r["avg_iteration_ns"] for r in ranks)
    assert [r["iteration_lag_ns"] for r in ranks] == [r["avg_iteration_ns"] - fastest for r in ranks]


def test_means_round_to_the_nearest_ns_ties_to_even(tmp_path):
    """Two iterations of 1500 and 1503 ns: the average (3003 / 2) and the median are both 1501.5 ns,
    which is 1502 ns (ties to even; truncating would give 1501)."""
    t = KinetoTrace()
    t.step(1, 0, 1.5)
    t.op("aten::mm", 0.1, 1.0)
    t.step(2, 1.5, 3.003)
    t.op("aten::mm", 1.6, 3.003)
    db = tmp_path / "ties.sqlite"
    run_cli("import", t.write(tmp_path / "t.json"), "-o", db, "-q")
    a = summary_json(db)["aggregation"]
    assert (a["wall_clock_ns"], a["iterations_profiled"]) == (3003, 2)
    assert a["avg_iteration_ns"] == a["iteration_ns"]["median"] == 1502
    with sqlite3.connect(db) as conn:
        stored = conn.execute("SELECT avg_iteration_ns, typeof(avg_iteration_ns) FROM aggregations").fetchone()
    assert stored == (1502, "integer")


# --------------------------------------------------------------------------- Markdown reports

MD_REPORTS = ("summary", "detail", "iteration", "kernel", "tensor_core", "op_type", "group_node", "roofline",
              "expert_systems")
#: columns that hold trace text verbatim (a kernel may be named "…{lambda(float)#1}…", an op "aten::isnan")
VERBATIM = {"op_name", "op_type", "kernel_name", "name", "path", "scope", "input_shapes", "direction", "data_type",
            "kernels", "op_names", "aggregation.key_node_candidates"}  # names from traces, shown as they are
LONG_DECIMALS = re.compile(r"\d\.\d{4,}")


def markdown_tables(text: str) -> list[tuple[list[str], list[list[str]]]]:
    """(header, rows) of each table in a Markdown text, cells unescaped."""
    tables, lines = [], [ln for ln in text.splitlines() if ln.startswith("|")]
    i = 0
    while i < len(lines):
        header = _cells(lines[i])
        rows = []
        i += 2  # header and rule
        while i < len(lines) and not re.fullmatch(r"\|(-+\|)+", lines[i]):
            rows.append(_cells(lines[i]))
            i += 1
        tables.append((header, rows[:-1] if i < len(lines) else rows))
        if i < len(lines):
            i -= 1
    return tables


def _cells(line: str) -> list[str]:
    """The cells as a CommonMark renderer shows them: backslash escapes and entities undone."""
    return [html.unescape(re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", c.strip()))
            for c in re.split(r"(?<!\\)\|", line)[1:-1]]


@pytest.fixture(scope="module")
def md_reports(tmp_path_factory, import_db):
    """The Markdown reports of two real imports: the whole-profile AlexNet trace and the 8-rank job."""
    out = {}
    for name in ("whole_profile", "dlrm_8_ranks"):
        db = import_db(data_file(*IMPORTS[name]))
        folder = tmp_path_factory.mktemp(name)
        run_cli("report", db, "--reports", ",".join(MD_REPORTS), "--formats", "md", "-o", folder)
        out[name] = (db, folder)
    return out


@pytest.mark.parametrize("name", ["whole_profile", "dlrm_8_ranks"])
def test_markdown_reports_show_readable_cells(md_reports, name):
    _, folder = md_reports[name]
    files = sorted(folder.glob("*.md"))
    assert {f.stem for f in files} >= {*MD_REPORTS, "roofline_ops", "roofline_kernels"} - {"roofline"}
    cells = 0
    for path in files:
        for header, rows in markdown_tables(path.read_text()):
            for row in rows:
                assert len(row) == len(header), (path.name, row)
                for column, cell in zip(header, row):
                    column = row[0] if header == ["metric", "value"] else column
                    assert cell not in ("None", "nan", "NaN", "<NA>", "inf"), (path.name, column, cell)
                    if column not in VERBATIM and column != "profile_name":
                        assert "{" not in cell and "None" not in cell and "nan" not in cell.lower(), \
                            (path.name, column, cell)
                        assert not LONG_DECIMALS.search(cell), (path.name, column, cell)
                    cells += 1
    assert cells > 1000


def test_markdown_durations_are_fmt_ns_of_figures_taken_from_the_raw_tables(md_reports):
    db, folder = md_reports["whole_profile"]
    with sqlite3.connect(db) as conn:
        first, last = conn.execute(
            'SELECT MIN(start), MAX("end") FROM (SELECT start, "end" FROM ops UNION ALL SELECT start, "end" FROM '
            'kernels UNION ALL SELECT start, "end" FROM memops UNION ALL SELECT start, "end" FROM api_calls UNION ALL '
            'SELECT start, "end" FROM ranges UNION ALL SELECT start, "end" FROM syncs)').fetchone()
        name, calls, total = conn.execute(
            'SELECT name, COUNT(*), SUM("end" - start) FROM kernels GROUP BY name ORDER BY 3 DESC LIMIT 1').fetchone()
    summary = dict(markdown_tables((folder / "summary.md").read_text())[0][1])
    assert summary["aggregation.wall_clock_ns"] == fmt_ns(last - first)
    assert summary["aggregation.iteration_method"] == "whole_profile"
    assert summary["aggregation.avg_iteration_ns"] == "n/a"
    header, rows = markdown_tables((folder / "kernel.md").read_text())[0]
    top = dict(zip(header, rows[0]))
    assert (top["kernel_name"], top["calls"]) == (name, str(calls))
    assert top["gpu_time_ns"] == fmt_ns(total)
    assert top["avg_ns"] == fmt_ns(round(Fraction(total, calls)))


def test_csv_and_json_reports_keep_integer_ns(md_reports, tmp_path):
    db, _ = md_reports["whole_profile"]
    run_cli("report", db, "--reports", "kernel,op_type", "--formats", "csv,json", "-o", tmp_path)
    for record in json.loads((tmp_path / "kernel.json").read_text()):
        assert all(type(record[c]) is int for c in ("gpu_time_ns", "avg_ns", "min_ns", "max_ns"))
    for record in json.loads((tmp_path / "op_type.json").read_text()):
        assert all(type(v) is int for k, v in record.items() if k.endswith(("_avg", "_total", "_min", "_max")))
    first_row = (tmp_path / "kernel.csv").read_text().splitlines()[1]
    assert not LONG_DECIMALS.search(first_row)
