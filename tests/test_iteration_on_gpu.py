"""Iterations timed on the GPU where the GPU runs behind the CPU (docs/metrics.md, "Iteration time on the GPU"):
``analyze.gpu_timing`` on hand-computed arrays, and the summary's ``iteration_on_gpu_ns`` (JSON, text, HTML report)
against hand-made traces and the raw JSON of real H200 captures (tests/raw_kineto.py): an FP32 CUDA-graph capture
whose CPU queues iterations ahead, and an eager AMP capture where it does not."""

from __future__ import annotations

import sqlite3
import statistics
from pathlib import Path

import numpy as np
import pytest
from conftest import data_file, requires_shared
from experts_helpers import findings
from test_gpu_behind_cpu import LM_GRAPHS, MS, US, _queued_trace, _raw_steps

from dlscope.analyze.gpu_timing import gpu_timed, iteration_gpu_ends, packaged_tolerance, timed_on_gpu
from dlscope.format import fmt_ns
from dlscope.pipeline import aggregate, build_database
from dlscope.present.html_report import render_html_report
from dlscope.present.summary import render_summary, summary_dict

AMP_EAGER = Path(__file__).parent / "data" / "h200" / "amp_eager_w0.pt.trace.json.gz"
TOLERANCE = 0.15   # iteration_variance's tolerance in data/rules.json


def test_the_summary_reads_the_rules_packaged_tolerance():
    from dlscope.experts.config import default_config

    assert packaged_tolerance() == default_config()["iteration_variance"]["tolerance"] == TOLERANCE


def test_gpu_ends_take_each_iterations_last_activity_and_ignore_other_iterations():
    ends = iteration_gpu_ends([3, 2, 3, 9, 2], [40, 70, 55, 999, 20], np.array([2, 3, 4]))
    assert ends.tolist() == [70, 55, -1]


def test_iterations_are_timed_from_the_previous_iterations_gpu_end():
    """Windows [0,10) [10,20) [20,30); GPU work ends at 25, 45, 60: lags 15 and 25 (median 20 > 0.15 × 10)."""
    got = gpu_timed([1, 2, 3], [25, 45, 60], [1, 2, 3], [0, 10, 20], [10, 20, 30], TOLERANCE)
    assert got is not None
    assert got.durations.tolist() == [25, 20, 15] and got.starts.tolist() == [0, 25, 45] and got.lag_ns == 20


def test_gpu_work_inside_its_windows_keeps_the_windows():
    """GPU work ending 1 after windows of 10: a lag of 1 is within 0.15 × 10."""
    assert timed_on_gpu([11, 21, 31], [0, 10, 20], [10, 20, 30], TOLERANCE) is None


@pytest.mark.parametrize("ends", [[25, -1, 60], [25, 25, 60], [25]])
def test_no_gpu_pace_to_read_gives_none(ends):
    """An iteration without GPU work, GPU work that ends no later than the previous one's, or one iteration."""
    n = len(ends)
    assert timed_on_gpu(ends, [10 * i for i in range(n)], [10 * i + 10 for i in range(n)], TOLERANCE) is None


def _summary(tmp_path, trace, name):
    db = build_database([trace.write(tmp_path / name)], tmp_path / (name + ".sqlite"), progress=False)
    return db, summary_dict(db)


def test_a_queued_gpu_gets_its_iterations_timed_on_the_gpu_in_the_summary(tmp_path):
    """Steps of 1 ms; kernels of 5, 5, 10, 5, 5 ms queued from 30 µs into step 1: they end at 5.03, 10.03, 20.03,
    25.03 and 30.03 ms, so on the GPU the iterations take 5.03, 5, 10, 5, 5 ms; the steps end at 1, 2, 3, 4 ms,
    so the median lag of iterations 1-4 is median(4.03, 8.03, 17.03, 21.03) = 12.53 ms."""
    db, s = _summary(tmp_path, _queued_trace([5, 5, 10, 5, 5]), "queued.json")
    a = s["aggregation"]
    assert (a["iter_start"], a["iter_stop"]) == (1, 5)
    assert a["iteration_on_gpu_ns"] == {"min": 5 * MS, "median": 5 * MS, "max": 10 * MS, "slowest_iteration": 3,
                                        "median_lag": 12_530 * US}
    assert a["iteration_ns"]["slowest_iteration"] == 5        # the windows' figures stay: the last holds the queue
    text = " ".join(render_summary(s).split())      # one line, however the terminal table wraps it
    assert "on the GPU: min 5.00 ms, median 5.00 ms, max 10.00 ms (iteration 3); the GPU ran 12.53 ms behind" in text
    html = render_html_report(db)
    assert 'id="iteration-on-gpu"' in html and "min 5.00 ms, max 10.00 ms (iteration 3)" in html


def test_a_long_kernel_launched_early_ends_the_iterations_gpu_work(tmp_path):
    """Iteration 2 launches a 20 ms kernel on stream 8 at 1.1 ms, then its 5 ms kernel on stream 7 (queued to
    10.03 ms): its GPU work ends with the long kernel at 21.1 ms although the short one started last."""
    trace = _queued_trace([5, 5, 5, 5, 5])
    trace.launch(1000 + 40, 1000 + 45, "void long_kernel<1>", 1100, 21_100, stream=8)
    db, s = _summary(tmp_path, trace, "long.json")
    # on the GPU: 5.03; 21.1 - 5.03; 21.1 is after 15.03 (iteration 3's end), so iteration 3 ends before 2: no pace
    assert "iteration_on_gpu_ns" not in s["aggregation"]
    trace = _queued_trace([5, 5, 5, 5, 5])
    trace.launch(1000 + 40, 1000 + 45, "void long_kernel<1>", 1100, 12_100, stream=8)
    db, s = _summary(tmp_path, trace, "long12.json")
    # iteration 2's GPU work ends at 12.1 ms (not its kernel's 10.03): 5.03, 7.07, 2.93, 5, 5 ms
    got = s["aggregation"]["iteration_on_gpu_ns"]
    assert (got["min"], got["max"], got["slowest_iteration"]) == (2_930 * US, 7_070 * US, 2)


def test_a_cpu_bound_run_has_no_figures_on_the_gpu(tmp_path):
    trace = _queued_trace([0.03] * 5)
    db, s = _summary(tmp_path, trace, "cpu.json")
    assert "iteration_on_gpu_ns" not in s["aggregation"] and "on the GPU:" not in render_summary(s)
    assert 'id="iteration-on-gpu"' not in render_html_report(db)


def raw_on_gpu(path: Path) -> tuple[list[int], list[int], int]:
    """From the raw JSON: the step numbers, the iterations timed on the GPU (the first from its ProfilerStep's
    start, then from one step's GPU end to the next's) and the median lag of each step's GPU end after its window
    (to the next step's start), all steps but the last."""
    steps = _raw_steps(path)
    durations = [steps[0][3] - steps[0][1]] + [b[3] - a[3] for a, b in zip(steps, steps[1:])]
    lags = [a[3] - b[1] for a, b in zip(steps, steps[1:])]
    return [n for n, *_ in steps], durations, int(statistics.median(lags))


@pytest.fixture(scope="module")
def lm_db(tmp_path_factory):
    return build_database([LM_GRAPHS], tmp_path_factory.mktemp("lm") / "lm.sqlite", progress=False)


@pytest.mark.slow
def test_the_h200_cuda_graph_capture_is_timed_on_the_gpu_as_its_raw_json_says(lm_db):
    numbers, gpu, lag = raw_on_gpu(LM_GRAPHS)
    s = summary_dict(lm_db)
    a = s["aggregation"]
    assert (a["iter_start"], a["iter_stop"]) == (numbers[0], numbers[-1])
    slowest = numbers[gpu.index(max(gpu))]
    assert a["iteration_on_gpu_ns"] == {"min": min(gpu), "median": round(statistics.median(gpu)), "max": max(gpu),
                                        "slowest_iteration": slowest, "median_lag": lag}
    assert 40 * MS < min(gpu) and max(gpu) < 50 * MS                       # ~44 ms each on the GPU
    assert a["iteration_ns"]["max"] > 7 * max(gpu)                         # the last window holds the backlog
    text = render_summary(s)
    assert (f"on the GPU: min {fmt_ns(min(gpu))}, median {fmt_ns(statistics.median(gpu))}, max {fmt_ns(max(gpu))} "
            f"(iteration {slowest}); the GPU ran {fmt_ns(lag)} behind the CPU") in " ".join(text.split())


@pytest.mark.slow
def test_an_eager_capture_keeps_its_windows(tmp_path):
    """The eager AMP capture's GPU work ends inside its windows (the raw JSON's median lag is within 15 % of the
    median window): no figures on the GPU."""
    steps = _raw_steps(AMP_EAGER)
    _, _, lag = raw_on_gpu(AMP_EAGER)
    windows = [b[1] - a[1] for a, b in zip(steps, steps[1:])]
    assert lag <= TOLERANCE * statistics.median(windows)
    db = build_database([AMP_EAGER], tmp_path / "eager.sqlite", progress=False)
    s = summary_dict(db)
    assert s["aggregation"]["iteration_ns"] is not None and "iteration_on_gpu_ns" not in s["aggregation"]
    assert "on the GPU:" not in render_summary(s)


@pytest.mark.slow
@requires_shared
def test_a_v100_run_behind_its_cpu_is_timed_on_the_gpu_as_its_raw_json_says(tmp_path):
    """HTA's V100 trace (../shared/data): CPU windows of 35 to 185 ms, ~95.6 ms each on the GPU."""
    path = data_file("kineto", "hta_v100_ns_resolution_5steps.pt.trace.json.gz")
    numbers, gpu, lag = raw_on_gpu(path)
    a = summary_dict(build_database([path], tmp_path / "v100.sqlite", progress=False))["aggregation"]
    assert (a["iter_start"], a["iter_stop"]) == (numbers[0], numbers[-1])
    assert a["iteration_on_gpu_ns"] == {"min": min(gpu), "median": round(statistics.median(gpu)), "max": max(gpu),
                                        "slowest_iteration": numbers[gpu.index(max(gpu))], "median_lag": lag}


def test_the_summary_times_iterations_with_the_tolerance_the_rules_ran_with(tmp_path):
    """The queued trace's GPU runs 12.53 ms behind windows of 1 ms (above): timed on the GPU with the packaged
    tolerance (0.15 × 1 ms); with ``--rules-config`` setting it to 20 (20 ms > 12.53 ms), neither the rule (which
    then flags the 21 ms last window, over 20 × the 1 ms median) nor the summary times it on the GPU; a
    re-aggregation with the packaged rules does again; each aggregation row keeps the tolerance it used."""
    config = tmp_path / "rules.json"
    config.write_text('{"iteration_variance": {"tolerance": 20}}')
    trace = _queued_trace([5, 5, 10, 5, 5]).write(tmp_path / "queued.json")
    db = build_database([trace], tmp_path / "loose.sqlite", progress=False, rules_config=config)
    s = summary_dict(db)
    assert "iteration_on_gpu_ns" not in s["aggregation"] and "on the GPU:" not in render_summary(s)
    assert "timed_on_gpu" not in findings(db)["iteration_variance"]["evidence"]   # the rule read the windows too
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT gpu_timing_tolerance FROM aggregations").fetchall() == [(20.0,)]
    (agg_id,) = aggregate(db, 1, 5, None)[:1]                 # re-aggregated with the packaged rules
    s = summary_dict(db, agg_id)
    assert s["aggregation"]["iteration_on_gpu_ns"]["median_lag"] == 12_530 * US
    assert findings(db)["iteration_variance"]["evidence"]["timed_on_gpu"] is True  # iteration 3: 10 of 5 ms
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT gpu_timing_tolerance FROM aggregations WHERE agg_id = ?",
                            (agg_id,)).fetchone() == (TOLERANCE,)
