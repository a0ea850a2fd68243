"""``--max-memory`` as a bound: an import the budget estimate lets through stays under it (the operating
system's own count of the process's peak), and the one-stage-at-a-time import under a budget (the raw writer
ended before the rules, the replay's columns copied out and the analysed tables let go before its graph) stores
the same critical path as the import without one.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys

import pytest
from conftest import data_file, requires_shared

from dlscope.pipeline import build as pipeline
from dlscope.pipeline.budget import analysis_memory
from dlscope.pipeline.executors import import_file

TRACE = ("kineto", "hta_v100_rank1of2_5steps.json.gz")


@requires_shared
@pytest.mark.slow
def test_an_import_under_the_budget_its_estimate_lets_through_stays_under_it(tmp_path):
    path = data_file(*TRACE)
    budget = analysis_memory(import_file(str(path))) + 1
    out = tmp_path / "bounded.sqlite"
    measure = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
               "print(r.returncode); print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); "
               "sys.stderr.write(r.stderr)")
    result = subprocess.run([sys.executable, "-c", measure, sys.executable, "-m", "dlscope", "import", str(path),
                             "-o", str(out), "-q", "--max-memory", str(budget)], capture_output=True, text=True,
                            timeout=600, check=False)
    code, peak_kib = (int(x) for x in result.stdout.split())
    assert code == 0, result.stderr
    assert 0 < peak_kib * 1024 <= budget, f"peak {peak_kib / 1024:.0f} MiB over the budget {budget / 2**20:.0f} MiB"
    assert out.exists()


def _critical_path(db) -> tuple[list, list, list, list]:
    conn = sqlite3.connect(db)
    try:
        return (conn.execute("SELECT agg_id, rank, category, time_ns FROM agg_critical_path "
                             "ORDER BY agg_id, rank, category").fetchall(),
                conn.execute("SELECT agg_id, wall_clock_ns, findings_combined_saving_ns FROM aggregations "
                             "ORDER BY agg_id").fetchall(),
                conn.execute("SELECT rule, simulated_saving_ns FROM findings ORDER BY finding_id").fetchall(),
                conn.execute("SELECT node_id, critical_path_ns FROM agg_ops ORDER BY node_id").fetchall())
    finally:
        conn.close()


@requires_shared
@pytest.mark.slow
def test_the_critical_path_under_a_budget_is_the_one_without_and_adds_up_to_the_wall_clock(tmp_path):
    path = data_file(*TRACE)
    whole = tmp_path / "whole.sqlite"
    bounded = tmp_path / "bounded.sqlite"
    pipeline.build_database([path], whole, progress=False)
    pipeline.build_database([path], bounded, progress=False, max_memory="8GB")
    cells, aggs, findings, ops = _critical_path(bounded)
    assert (cells, aggs, findings, ops) == _critical_path(whole)
    # the path's time by category adds up to the aggregation's wall clock (measured from the tables)
    (agg_id, wall, _), = aggs
    assert wall > 0 and sum(t for a, _, _, t in cells if a == agg_id) == wall
    assert any(ns for _, ns in ops) and any(s is not None for _, s in findings)
