"""The critical path and the findings' simulated savings as the import stores them (whatif.stored), checked
against independent oracles: hand-computed paths of hand-made traces, the iteration windows read from the raw
JSON, the `dlscope whatif` command (which rebuilds everything from the database), and `dlscope aggregate`.
"""

from __future__ import annotations

import json
import sqlite3

import pytest
from click.testing import CliRunner
from conftest import data_file, requires_shared
from test_whatif_handmade import _loader_trace, _sync_trace
from test_whatif_real import raw_windows

from dlscope.cli import cli
from dlscope.pipeline import aggregate, build_database
from dlscope.present.summary import render_summary, summary_dict

US = 1000


def _db(tmp_path, trace, name="t.json"):
    return build_database([trace.write(tmp_path / name)], tmp_path / (name + ".sqlite"), progress=False)


def _q(db, sql, params=()):
    conn = sqlite3.connect(db)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def _stored(db, agg_id):
    """What an aggregation stores of its critical path and priced findings."""
    return {
        "ops": dict(_q(db, "SELECT op_name, critical_path_ns FROM agg_ops WHERE agg_id = ?", (agg_id,))),
        "kernels": dict(_q(db, "SELECT kernel_name, critical_path_ns FROM agg_kernels WHERE agg_id = ?", (agg_id,))),
        "path": sorted(_q(db, "SELECT rank, category, time_ns FROM agg_critical_path WHERE agg_id = ?", (agg_id,))),
        "findings": _q(db, "SELECT rule, simulated_saving_ns FROM findings WHERE agg_id = ? ORDER BY finding_id",
                       (agg_id,)),
        "row": _q(db, "SELECT findings_combined_saving_ns, critical_path_note FROM aggregations WHERE agg_id = ?",
                  (agg_id,))[0],
    }


# ------------------------------------------------------------------------------- hand-computed paths


def test_a_synchronized_step_stores_its_hand_computed_path(tmp_path):
    db = _db(tmp_path, _sync_trace())
    s = _stored(db, 1)
    # tests/test_whatif_handmade.py works the path out: per step aten::mm's 2 µs of CPU, the 8 µs launch latency
    # and its 50 µs kernel; relu's 20 µs kernel; add's 10 µs; twice. The synchronize's 1 µs and the time outside
    # ops belong to no op node.
    assert s["ops"] == {"aten::mm": 120 * US, "aten::relu": 40 * US, "aten::add": 20 * US}
    assert s["kernels"] == {"volta_sgemm_128x64_nn": 100 * US, "relu_kernel": 40 * US}
    assert {c: ns for _, c, ns in s["path"]} == {"kernel": 140 * US, "cpu_op": 24 * US, "cpu_other": 18 * US,
                                                 "launch": 16 * US, "sync": 2 * US}
    assert {r for r, _, _ in s["path"]} == {0}
    assert s["row"][1] is None


def test_data_loading_and_a_spilling_kernel_store_their_hand_computed_path(tmp_path):
    db = _db(tmp_path, _loader_trace())
    s = _stored(db, 1)
    # steps 1 and 2: loading 60 µs, conv's own CPU 6 µs and its launch call 4 µs, 30 µs outside ops; step 3:
    # loading 60, 2 µs of conv, the 8 µs launch latency and the 80 µs kernel (it ends the profile)
    dl = next(name for name in s["ops"] if "DataLoader" in name)
    assert s["ops"] == {dl: 3 * 60 * US, "aten::conv2d": 2 * (6 + 4) * US + (2 + 8 + 80) * US}
    assert s["kernels"] == {"implicit_convolve_sgemm": 80 * US}
    assert sum(ns for *_, ns in s["path"]) == 350 * US


def test_the_summary_shows_the_stored_path_and_savings(tmp_path):
    db = _db(tmp_path, _sync_trace())
    summary = summary_dict(db)
    a = summary["aggregation"]
    assert a["critical_path"][0] == {"category": "kernel", "time_ns": 140 * US, "share": 0.7}
    assert sum(c["time_ns"] for c in a["critical_path"]) == a["wall_clock_ns"] == 200 * US
    stored = _stored(db, 1)
    assert [(f["rule"], f["simulated_saving_ns"]) for f in summary["findings"]] == stored["findings"]
    assert a["findings_combined_saving_ns"] == stored["row"][0] is not None
    text = render_summary(summary)
    assert "Critical path: kernel 140.00 µs (70.0%)" in text
    assert "(simulated, overlaps counted once)" in text


def test_the_html_report_shows_the_path_and_the_savings(tmp_path):
    import re

    from dlscope.format import fmt_ns
    from dlscope.present.html_report import render_html_report

    db = _db(tmp_path, _sync_trace())
    html = render_html_report(db)
    a = summary_dict(db)["aggregation"]
    combined = re.search(r'id="combined-saving">[^<]*<strong>([^<]*)</strong>', html).group(1)
    assert combined == fmt_ns(a["findings_combined_saving_ns"])
    section = html[html.index('id="critical-path-categories"'):]
    assert re.findall(r"<tr><td>(\w+)</td><td class=\"num\">([^<]*)</td>", section)[:2] == [
        ("kernel", "140.00 µs"), ("cpu_op", "24.00 µs")]
    for f in summary_dict(db)["findings"]:
        if f["simulated_saving_ns"] is not None:
            assert f"simulated {fmt_ns(f['simulated_saving_ns'])}" in html


def test_a_profile_that_cannot_be_replayed_still_imports_and_says_why(tmp_path, monkeypatch, capfd):
    import dlscope.whatif.stored as stored

    def broken(job):
        raise ValueError("a graph that cannot be built")

    monkeypatch.setattr(stored, "build", broken)
    db = _db(tmp_path, _sync_trace())
    s = _stored(db, 1)
    assert set(s["ops"].values()) == {None} and set(s["kernels"].values()) == {None}
    assert s["path"] == [] and s["row"][0] is None
    assert {ns for _, ns in s["findings"]} == {None}
    assert s["row"][1] == "the dependency graph could not be built (ValueError: a graph that cannot be built)"
    a = summary_dict(db)["aggregation"]
    assert a["critical_path"] is None and a["critical_path_note"] == s["row"][1]
    assert "Critical path: the dependency graph could not be built" in render_summary(summary_dict(db))
    assert capfd.readouterr().err == ""


# ------------------------------------------------------------------------------------------- real files

SINGLE = ["tbplugin_resnet50_v100_workers0.pt.trace.json.gz", "hta_a100_nccl_rank0of2_3steps.json.gz",
          "hta_v100_rank1of2_5steps.json.gz"]


def _owned_on_path(db, agg_id):
    """The critical path walked again from the database (`dlscope whatif`'s entry), independently of the
    import's analysed profile: time owned by each rank's op nodes and by kernels, and its wall clock."""
    from dlscope.store import reader
    from dlscope.whatif.graph import build
    from dlscope.whatif.job import from_database
    from dlscope.whatif.predict import path_of, windows
    from dlscope.whatif.replay import Weights, solve
    from dlscope.whatif.stored import op_nodes

    conn = reader.connect(db)
    try:
        rank, lo, hi = conn.execute("SELECT rank, iter_start, iter_stop FROM aggregations WHERE agg_id = ?",
                                    (agg_id,)).fetchone()
        job = from_database(conn)
    finally:
        conn.close()
    g = build(job)
    path = path_of(g, windows(g, rank, lo, hi), solve(g, Weights.measured(g)))
    owned = path[path["op_id"] >= 0]
    node_rank = job.ops.drop_duplicates("node_id").set_index("node_id")["rank"]
    nodes = op_nodes(g, owned["op_id"].to_numpy())
    mine = node_rank.reindex(nodes).to_numpy() == rank
    runs = path[path["act"] >= 0]
    kernels = g.activities["table"].to_numpy(object)[runs["act"].to_numpy()] == "kernel"
    return int(owned["ns"].to_numpy()[mine].sum()), int(runs["ns"].to_numpy()[kernels].sum())


def _check_real(db, agg_id, path_file):
    windows = raw_windows(path_file)
    cells = _q(db, "SELECT rank, category, time_ns FROM agg_critical_path WHERE agg_id = ?", (agg_id,))
    # the categories add up to the measured wall clock, read from the raw JSON's ProfilerSteps (to the ns of
    # rounding per window, as tests/test_whatif_real.py allows)
    assert abs(sum(ns for *_, ns in cells) - sum(windows)) <= len(windows)
    (wall,), = _q(db, "SELECT wall_clock_ns FROM aggregations WHERE agg_id = ?", (agg_id,))
    assert sum(ns for *_, ns in cells) == wall
    ops_ns = _q(db, "SELECT SUM(critical_path_ns), MIN(critical_path_ns) FROM agg_ops WHERE agg_id = ?", (agg_id,))[0]
    kernels_ns = _q(db, "SELECT SUM(critical_path_ns) FROM agg_kernels WHERE agg_id = ?", (agg_id,))[0][0]
    owned, on_kernels = _owned_on_path(db, agg_id)
    assert ops_ns[1] >= 0 and ops_ns[0] == owned
    assert (kernels_ns or 0) == on_kernels
    return cells


@requires_shared
@pytest.mark.parametrize("name", SINGLE)
def test_real_profiles_store_a_path_that_covers_the_measured_iterations(name, import_db):
    path = data_file("kineto", name)
    db = import_db(path)
    (agg_id,), = _q(db, "SELECT agg_id FROM aggregations")
    _check_real(db, agg_id, path)


@requires_shared
def test_a_job_stores_each_ranks_path_and_the_ranks_it_runs_through(import_db):
    folder = data_file("kineto", "param_dlrm_8rank_v100")
    db = import_db(folder)
    files = sorted(folder.glob("*.json.gz"))
    aggs = _q(db, "SELECT agg_id, rank FROM aggregations ORDER BY rank")
    assert len(aggs) == len(files) == 8
    crossed = set()
    for (agg_id, rank), path in zip(aggs, files):
        cells = _check_real(db, agg_id, path)
        crossed |= {r for r, _, ns in cells if r >= 0 and r != rank and ns}
    assert crossed, "collectives link the ranks: some rank's path runs through another rank's work"
    summary = summary_dict(db)
    ranks = summary["aggregation"]["critical_path_ranks"]
    assert ranks and sum(r["time_ns"] for r in ranks) <= summary["aggregation"]["wall_clock_ns"]


def _whatif_json(db, agg_id):
    out = CliRunner().invoke(cli, ["whatif", str(db), "--agg-id", str(agg_id), "--json"])
    assert out.exit_code == 0, out.output
    return json.loads(out.output)


@requires_shared
@pytest.mark.parametrize("where", [("kineto", "tbplugin_resnet50_v100_workers0.pt.trace.json.gz"),
                                   ("kineto", "param_dlrm_8rank_v100")])
def test_stored_simulated_savings_equal_what_dlscope_whatif_prints(where, import_db):
    db = import_db(data_file(*where))
    priced_any = False
    for (agg_id,) in _q(db, "SELECT agg_id FROM aggregations ORDER BY rank LIMIT 3"):
        printed = _whatif_json(db, agg_id)["expert_findings"]
        stored = [(rule, ns) for rule, ns in _stored(db, agg_id)["findings"] if ns is not None]
        assert stored == [(f["rule"], f["simulated_saving_ns"]) for f in printed["findings"]
                          if f["simulated_saving_ns"] is not None]
        assert _stored(db, agg_id)["row"][0] == printed["combined_saving_ns"]
        priced_any |= bool(stored)
    if where[1].startswith("tbplugin"):  # ResNet-50 workers0: docs/whatif.md's figures
        assert priced_any
        assert dict(stored)["dataloader_bottleneck"] == 353_903_000


@requires_shared
def test_dlscope_aggregate_stores_what_the_import_stored(tmp_path):
    trace = data_file("kineto", "hta_a100_nccl_rank0of2_3steps.json.gz")
    db = build_database([trace], tmp_path / "a.sqlite", progress=False)
    (lo, hi), = _q(db, "SELECT iter_start, iter_stop FROM aggregations WHERE agg_id = 1")
    new, = aggregate(db, lo, hi)
    assert _stored(db, new) == _stored(db, 1)
    # another window: its own path, as the import of that window stores it
    narrow, = aggregate(db, lo, lo)
    imported = build_database([trace], tmp_path / "b.sqlite", progress=False, iter_start=lo, iter_stop=lo)
    assert _stored(db, narrow) == _stored(imported, 1)
    assert _stored(db, narrow)["path"] != _stored(db, 1)["path"]


def test_dlscope_aggregate_adds_the_columns_to_an_older_database(tmp_path):
    db = _db(tmp_path, _sync_trace())
    conn = sqlite3.connect(db)
    conn.executescript("DROP TABLE agg_critical_path; DROP INDEX agg_ops_critical_path; "
                       "DROP INDEX agg_kernels_critical_path; ALTER TABLE agg_ops DROP COLUMN critical_path_ns; "
                       "ALTER TABLE findings DROP COLUMN simulated_saving_ns;")
    conn.close()
    a = summary_dict(db)["aggregation"]
    assert a["critical_path"] is None and "before dlscope stored the critical path" in a["critical_path_note"]
    new, = aggregate(db)
    assert _stored(db, new)["ops"] == {"aten::mm": 120 * US, "aten::relu": 40 * US, "aten::add": 20 * US}


def test_the_viewer_reads_an_older_database_without_the_columns(tmp_path):
    from starlette.testclient import TestClient
    from test_viewer_fixtures import make_profile_db

    from dlscope.viewer.app import create_app

    db = make_profile_db(tmp_path / "old.sqlite")
    conn = sqlite3.connect(db)
    conn.executescript("DROP INDEX agg_ops_critical_path; DROP INDEX agg_kernels_critical_path; "
                       "ALTER TABLE agg_ops DROP COLUMN critical_path_ns; "
                       "ALTER TABLE agg_kernels DROP COLUMN critical_path_ns;")
    conn.close()
    with TestClient(create_app([db]), base_url="http://127.0.0.1:8000") as client:
        page = client.get("/api/table/ops", params={"agg": 1}).json()
        assert page["rows"] and {r["critical_path_ns"] for r in page["rows"]} == {None}  # n/a, never 0
        kernels = client.get("/api/table/kernel_summary", params={"agg": 1}).json()
        assert kernels["rows"] and {r["critical_path_ns"] for r in kernels["rows"]} == {None}
        refused = client.get("/api/table/ops", params={"agg": 1, "sort": "critical_path_ns"})
        assert refused.status_code == 400
        assert client.get("/api/table/ops/export.csv", params={"agg": 1}).status_code == 200


def test_no_critical_path_leaves_the_replay_figures_empty_and_says_why(tmp_path):
    """``import --no-critical-path`` stores every aggregation without the replay's figures: NULL columns, no
    rows in agg_critical_path, the note naming the option; the rest of the import is the same."""
    import sqlite3
    import subprocess
    import sys

    from conftest import data_file

    trace = data_file("kineto", "hta_event_sync_a100.json.gz")
    db = tmp_path / "skip.sqlite"
    res = subprocess.run([sys.executable, "-m", "dlscope", "import", str(trace), "-o", str(db), "-q",
                          "--no-critical-path"], capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT critical_path_note FROM aggregations").fetchall() == [
        ("not computed (--no-critical-path)",)]
    assert conn.execute("SELECT COUNT(*) FROM agg_critical_path").fetchone()[0] == 0
    assert conn.execute("SELECT COUNT(*) FROM agg_ops WHERE critical_path_ns IS NOT NULL").fetchone()[0] == 0
    assert conn.execute("SELECT COUNT(*) FROM agg_ops").fetchone()[0] > 0


@pytest.mark.parametrize("span", [20, 10**12])
def test_the_path_is_summed_by_key_exactly_with_few_or_many_distinct_keys(span):
    """The per-key sums behind the stored columns (a dense key range is summed without a sort, a sparse one
    by sorting): distinct keys in order and exact integer sums, against a plain dictionary."""
    import numpy as np

    from dlscope.whatif.stored import _sums

    rng = np.random.default_rng(3)
    keys = rng.integers(-1, span, 5000)
    values = rng.integers(0, 2**40, 5000)
    want: dict[int, int] = {}
    for k, v in zip(keys.tolist(), values.tolist()):
        want[k] = want.get(k, 0) + v
    got_keys, got_sums = _sums(keys, values)
    assert got_keys.tolist() == sorted(want)
    assert got_sums.tolist() == [want[k] for k in sorted(want)]
