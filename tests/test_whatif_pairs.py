"""A/B pairs recorded on CPU with `dlscope profile` (examples/variants.py; tests/data/whatif/README.md says
how): predict B from A and hold the prediction to the error measured when they were recorded.

The machine they were recorded on was shared (2 cores, load average ~5-6): the same configuration run three
times took 6.3, 7.2 and 12.7 ms per step, so the iteration errors below are mostly that noise, and the
saving (A - B) is the steadier figure. docs/whatif.md has all runs.
"""

from __future__ import annotations

import sqlite3

import pytest
from conftest import REPO

from dlscope.whatif import whatif

PAIRS = REPO / "tests" / "data" / "whatif"


@pytest.fixture(scope="module")
def dbs(import_db):
    return {name: import_db(PAIRS / f"{name}.json.gz") for name in ("base", "sleep", "sync", "adamloop", "adamfused")}


def _measured(db) -> int:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT avg_iteration_ns FROM aggregations").fetchone()[0]


def _per_step(db, sql: str) -> float:
    """A figure per profiled step, straight from the stored events."""
    with sqlite3.connect(db) as conn:
        total = conn.execute(sql).fetchone()[0] or 0
        steps = conn.execute("SELECT iterations_profiled FROM aggregations").fetchone()[0]
    return total / steps


def _inside_window_per_step(db, sql: str) -> float:
    """The union of the intervals the query returns, inside the aggregation's window, per profiled step."""
    with sqlite3.connect(db) as conn:
        lo, hi, steps = conn.execute(
            "SELECT window_start, window_end, iterations_profiled FROM aggregations").fetchone()
        spans = sorted((max(s, lo), min(e, hi)) for s, e in conn.execute(sql) if min(e, hi) > max(s, lo))
    total, reach = 0, lo
    for s, e in spans:
        total += max(0, e - max(s, reach))
        reach = max(reach, e)
    return total / steps


OPTIMIZER = "SELECT SUM(\"end\" - start) FROM ranges WHERE name LIKE 'Optimizer.step%' AND iteration >= 0"
OPTIMIZER_SPANS = "SELECT start, \"end\" FROM ranges WHERE name LIKE 'Optimizer.step%'"
LOADING_SPANS = ("SELECT start, \"end\" FROM ranges WHERE category = 'dataloader' UNION ALL "
                 "SELECT start, \"end\" FROM ops WHERE name LIKE 'enumerate(DataLoader)%'")
#: each changed edge is rounded to the ns: a few hundred edges a step
ROUNDING_NS = 1000


def test_on_one_cpu_thread_removing_loading_saves_exactly_the_loading_time(dbs):
    """On a CPU-only, single-threaded step nothing overlaps: the prediction is the measured time less the time
    inside data loading in the aggregation's window (read from the stored ranges)."""
    r = whatif(dbs["sleep"], ["no-dataloader"])
    expected = _inside_window_per_step(dbs["sleep"], LOADING_SPANS)
    assert expected > 50e6  # 32 samples sleeping 2 ms each
    assert abs(r["scenarios"][0]["saving_ns"] - expected) <= ROUNDING_NS


def test_on_one_cpu_thread_a_faster_optimizer_saves_its_time_times_one_minus_the_factor(dbs):
    r = whatif(dbs["adamloop"], ["scale:^Optimizer\\.step=0.25"])
    expected = 0.75 * _inside_window_per_step(dbs["adamloop"], OPTIMIZER_SPANS)
    assert abs(r["scenarios"][0]["saving_ns"] - expected) <= ROUNDING_NS


def test_slow_dataset_predicts_the_fast_one(dbs):
    """A: each sample sleeps 2 ms (64 ms a step). B: no sleep. Measured: 83.48 -> 6.30 ms. Predicted from A:
    12.68 ms: the step's own work ran twice as slow in A (after each 64 ms sleep the core had gone to other
    processes and the caches were cold), which the model cannot know. The saving is closer: 70.80 ms predicted,
    77.17 ms measured (-8.3%)."""
    r = whatif(dbs["sleep"], ["no-dataloader"])
    a, b = r["baseline_iteration_ns"], _measured(dbs["base"])
    predicted = r["scenarios"][0]["predicted_iteration_ns"]
    assert (predicted - b) / b <= 1.02
    assert abs(r["scenarios"][0]["saving_ns"] - (a - b)) / (a - b) <= 0.09


def test_no_sync_finds_nothing_to_remove_on_a_cpu_run(dbs):
    """A: loss.item() every step; on a CPU that synchronizes nothing, so the model predicts no change. The
    runs differed by 3.59 ms (+57% over B's 6.30 ms): the noise of the machine, not a synchronization."""
    r = whatif(dbs["sync"], ["no-sync"])
    assert r["scenarios"][0]["saving_ns"] == 0
    b = _measured(dbs["base"])
    assert abs(r["scenarios"][0]["predicted_iteration_ns"] - b) / b <= 0.58


def test_fused_optimizer_from_the_unfused_one_given_its_speed_up(dbs):
    """A: Adam as a loop over parameters; B: fused Adam. Given the speed-up of the optimizer step measured in B
    (its time / A's), the model predicts B's step at 12.31 ms; measured 15.57 ms (-21%). What the factor does
    not carry: the rest of B's step ran 3.3 ms slower than A's (noise of the shared machine)."""
    factor = _per_step(dbs["adamfused"], OPTIMIZER) / _per_step(dbs["adamloop"], OPTIMIZER)
    r = whatif(dbs["adamloop"], [f"scale:^Optimizer\\.step={factor:.4f}"])
    b = _measured(dbs["adamfused"])
    assert abs(r["scenarios"][0]["predicted_iteration_ns"] - b) / b <= 0.22
