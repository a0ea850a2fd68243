"""Throughput and reader cost (seed 003; docs/metrics.md, "Throughput and reader cost"), computed by hand."""

from __future__ import annotations

import json
import sqlite3

from click.testing import CliRunner
from trace_builder import KinetoTrace

from dlscope.cli import cli
from dlscope.compare.runs import load_run, metric_value
from dlscope.present.html_report import render_html_report
from dlscope.present.summary import render_summary, summary_dict
from dlscope.viewer.dashboard import dashboard_data
from dlscope.viewer.profile_db import ProfileDB
from dlscope.viewer.views import table_page

US = 1000
NEXT = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def _trace(tmp_path, loader: bool = True):
    """Two steps of 1,000 µs. Step 1 waits 200 µs in __next__ [10, 210) while the previous step's kernel runs
    [100, 300) (the breakdown's Dataloader part is only [10, 100): reader cost counts all 200 µs); step 2 waits
    50 µs [1010, 1060). The last op ends at 2,000 µs, so the wall clock is 2,000 µs."""
    t = KinetoTrace()
    t.step(1, 0, 1000)
    t.step(2, 1000, 2000)
    if loader:
        t.op(NEXT, 10, 210)
        t.op(NEXT, 1010, 1060)
    t.op("aten::add", 50, 60)
    t.launch(51, 52, "elementwise_kernel", 100, 300)
    t.op("aten::add", 1900, 2000)
    return t.write(tmp_path / "t.json")


def _import(tmp_path, *options, loader: bool = True):
    db = tmp_path / "t.sqlite"
    result = CliRunner().invoke(cli, ["import", str(_trace(tmp_path, loader)), "-o", str(db), "-q", *options])
    assert result.exit_code == 0, result.output
    return db


def test_reader_cost_and_samples_per_second_by_hand(tmp_path):
    db = _import(tmp_path, "--batch-size", "32", "--sample-unit", "images")
    conn = sqlite3.connect(db)
    per_iteration = conn.execute("SELECT iteration, reader_cost_ns, duration_ns, dataloader_ns FROM agg_iterations "
                                 "ORDER BY iteration").fetchall()
    conn.close()
    assert per_iteration == [(1, 200 * US, 1000 * US, 90 * US), (2, 50 * US, 1000 * US, 50 * US)]
    a = summary_dict(db)["aggregation"]
    assert a["wall_clock_ns"] == 2000 * US
    # 32 images a step x 2 steps / 2 ms; reader cost (200 + 50) / 2 a step, 250 of 2,000 µs
    assert a["throughput"] == {"samples_per_s": 32000.0, "unit": "images", "batch_size": 32,
                               "reader_cost_ns": 125 * US, "reader_cost_ratio": 0.125}
    text = render_summary(summary_dict(db))
    assert "32,000.0 images/s (batch 32)" in text and "12.5% of the step time" in text
    run = load_run(db)
    assert metric_value(run, "throughput", False) == (32000.0, None)
    assert metric_value(run, "reader_cost", True)[0] == 125 * US
    html = render_html_report(db)  # the cards, and per iteration: 200 / 1,000 µs = 20.0%, 32 / 1 ms = 32,000/s
    assert "32,000.0 images/s" in html and "20.0%" in html and "5.0%" in html
    assert dashboard_data(ProfileDB(db), None)["throughput"] == summary_dict(db)["aggregation"]["throughput"]
    rows = table_page(ProfileDB(db), "iterations", {}, {"agg": 1})["rows"]  # the viewer's Iterations view
    assert [(r["reader_cost_ns"], r["reader_cost_ratio"], r["samples_per_s"]) for r in rows] == \
        [(200 * US, 0.2, 32000.0), (50 * US, 0.05, 32000.0)]  # 32 images in each 1 ms step


def test_samples_per_step_wins_over_batch_size(tmp_path):
    # gradient accumulation or tokens: 4 batches of 8 sequences of 128 tokens = 4,096 tokens a step
    db = _import(tmp_path, "--batch-size", "8", "--samples-per-step", "4096", "--sample-unit", "tokens")
    t = summary_dict(db)["aggregation"]["throughput"]
    assert (t["samples_per_s"], t["unit"], t["batch_size"]) == (4096 * 2 / 0.002, "tokens", 8)


def test_unknown_batch_size_and_no_data_loading_are_null(tmp_path):
    db = _import(tmp_path, loader=False)
    t = summary_dict(db)["aggregation"]["throughput"]
    assert t == {"samples_per_s": None, "unit": "samples", "batch_size": None, "reader_cost_ns": None,
                 "reader_cost_ratio": None}
    assert metric_value(load_run(db), "throughput", False)[0] is None


def test_capture_batch_size_is_used_without_import_options(tmp_path):
    db = _import(tmp_path)
    conn = sqlite3.connect(db)  # what `dlscope profile` records: the first batch's size in the capture facts
    extra = json.loads(conn.execute("SELECT value FROM dlscope_meta WHERE key = 'extra_json'").fetchone()[0])
    extra["capture"] = {"batch_size": 16, "batch_size_source": "first batch"}
    conn.execute("UPDATE dlscope_meta SET value = ? WHERE key = 'extra_json'", (json.dumps(extra),))
    conn.commit()
    conn.close()
    assert summary_dict(db)["aggregation"]["throughput"]["samples_per_s"] == 16 * 2 / 0.002
