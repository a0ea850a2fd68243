"""`dlscope aggregate` computes what an import computes (aggregation, findings, per-rank figures), with a
key node too, in one transaction."""

from __future__ import annotations

import gzip
import json
import shutil
import sqlite3
import subprocess
import sys

import pytest
from conftest import data_file, data_files

from dlscope.present.summary import summary_dict

OPT = "Optimizer.step#SGD.step"


def _run(*args):
    return subprocess.run([sys.executable, "-m", "dlscope", *map(str, args)], capture_output=True, text=True)


def test_aggregate_with_a_key_node_resplits_the_iterations(import_db, tmp_path):
    trace = data_file("kineto", "tbplugin_resnet50_v100_workers0.pt.trace.json.gz")
    db = tmp_path / "r.sqlite"
    shutil.copy(import_db(trace), db)
    with gzip.open(trace, "rt") as f:
        steps = sum(1 for e in json.load(f)["traceEvents"] if e.get("name") == OPT and e.get("ph") == "X")
    res = _run("aggregate", db, "--key-node", OPT)
    assert res.returncode == 0, res.stderr
    conn = sqlite3.connect(db)
    agg_id, method, key, n = conn.execute("SELECT agg_id, iteration_method, key_node, iterations_profiled FROM "
                                          "aggregations ORDER BY agg_id DESC LIMIT 1").fetchone()
    assert (method, key, n) == ("key_node", OPT, steps)
    assert conn.execute("SELECT COUNT(*) FROM iterations").fetchone()[0] == steps
    # the raw rows follow the new split: every kernel's iteration is one of the new ones
    assert conn.execute("SELECT COUNT(*) FROM kernels WHERE iteration NOT IN (SELECT iteration FROM iterations) "
                        "AND iteration >= 0").fetchone()[0] == 0
    assert conn.execute("SELECT COUNT(*) FROM findings WHERE agg_id = ?", (agg_id,)).fetchone()[0] > 0


@pytest.mark.slow
def test_aggregate_of_a_job_writes_the_per_rank_figures_of_its_aggregations(import_db, tmp_path):
    ranks = data_files("kineto/param_dlrm_8rank_v100", "*.json.gz")
    if not ranks:
        pytest.skip("../shared/data is absent")
    db = tmp_path / "job.sqlite"
    shutil.copy(import_db(*ranks), db)
    res = _run("aggregate", db)
    assert res.returncode == 0, res.stderr
    conn = sqlite3.connect(db)
    new = {r[0]: r[1] for r in conn.execute("SELECT rank, agg_id FROM aggregations WHERE agg_id > 8")}
    assert sorted(new) == list(range(8))
    figures = dict(conn.execute("SELECT rank, agg_id FROM agg_ranks WHERE agg_id > 8").fetchall())
    assert figures == new
    assert {r["rank"]: r["wall_clock_ns"] for r in summary_dict(db)["ranks"]} == dict(conn.execute(
        "SELECT rank, wall_clock_ns FROM aggregations WHERE agg_id > 8").fetchall())


@pytest.mark.slow
def test_the_summary_api_and_viewer_show_the_same_current_aggregation(import_db, tmp_path):
    """One rule (store.reader.CURRENT_AGGREGATION): the lowest rank of the newest aggregation run."""
    from starlette.testclient import TestClient

    from dlscope.api import ProfileDatabase
    from dlscope.viewer.app import create_app

    ranks = data_files("kineto/param_dlrm_8rank_v100", "*.json.gz")
    if not ranks:
        pytest.skip("../shared/data is absent")
    db = tmp_path / "job.sqlite"
    shutil.copy(import_db(*ranks), db)

    def shown() -> tuple:
        with TestClient(create_app([db]), base_url="http://127.0.0.1:8000") as client:
            viewer = client.get("/dashboard", params={"_format": "json"}).json()["dashboard"]["aggregation"]["agg_id"]
        return summary_dict(db)["aggregation"]["agg_id"], ProfileDatabase(db).agg_id, viewer

    conn = sqlite3.connect(db)
    first = conn.execute("SELECT agg_id FROM aggregations WHERE rank = 0").fetchone()[0]
    assert shown() == (first,) * 3
    assert _run("aggregate", db, "--rank", 3).returncode == 0
    newest = conn.execute("SELECT MAX(agg_id) FROM aggregations").fetchone()[0]
    assert conn.execute("SELECT rank FROM aggregations WHERE agg_id = ?", (newest,)).fetchone()[0] == 3
    assert shown() == (newest,) * 3


def test_aggregate_keeps_the_collective_sizes_the_trace_recorded(import_db, tmp_path):
    """The NCCL kernels' message sizes (Kineto's "In msg nelems") live in the imported comm_args table, so a
    re-aggregation from the database sees them as the import did: the collectives table holds each NCCL kernel
    once, with the size the raw trace gives it."""
    trace = data_file("kineto", "hta_a100_nccl_rank0of2_3steps.json.gz")
    with gzip.open(trace, "rt") as f:
        events = json.load(f)["traceEvents"]
    raw = sorted(e["args"]["In msg nelems"] for e in events
                 if e.get("cat") == "kernel" and "In msg nelems" in e.get("args", {}))
    assert raw  # the file's NCCL kernels carry their sizes
    db = tmp_path / "nccl.sqlite"
    shutil.copy(import_db(trace), db)

    def kernel_sizes():
        conn = sqlite3.connect(db)
        try:
            return sorted(r[0] for r in conn.execute(
                "SELECT in_nelems FROM collectives WHERE source = 'kernel' AND in_nelems >= 0"))
        finally:
            conn.close()

    assert kernel_sizes() == raw
    res = _run("aggregate", db)
    assert res.returncode == 0, res.stderr
    assert kernel_sizes() == raw


def test_a_key_node_resplit_moves_the_collectives_with_their_kernels(import_db, tmp_path):
    """After ``aggregate --key-node``, each NCCL kernel's collective row carries the kernel's new iteration, and
    the iteration numbers are the new split's (one per Optimizer.step in the raw trace)."""
    trace = data_file("kineto", "hta_a100_nccl_rank0of2_3steps.json.gz")
    db = tmp_path / "nccl.sqlite"
    shutil.copy(import_db(trace), db)
    res = _run("aggregate", db, "--key-node", OPT)
    assert res.returncode == 0, res.stderr
    conn = sqlite3.connect(db)
    pairs = conn.execute("SELECT c.iteration, k.iteration FROM collectives c JOIN kernels k ON k.rank = c.rank "
                         "AND k.device = c.device AND k.stream = c.stream AND k.start = c.start "
                         "WHERE c.source = 'kernel'").fetchall()
    assert len(pairs) == 21 and all(c == k for c, k in pairs)
    with gzip.open(trace, "rt") as f:
        steps = sum(1 for e in json.load(f)["traceEvents"] if e.get("name") == OPT and e.get("ph") == "X")
    assert conn.execute("SELECT COUNT(*) FROM iterations").fetchone()[0] == steps
