"""Metrics on a hand-made trace, checked against numbers computed by hand from PRODUCT.md's definitions.

The trace (µs): two ProfilerSteps on one thread.
  step 1 [0, 1000): aten::conv2d [100, 300) launches a Tensor Core kernel [200, 400);
                    aten::relu [300, 350) launches [400, 450) and, after add, [460, 470);
                    aten::add [320, 340) (nested in relu) launches [420, 500) on another stream
                    (relu is the op node: the op the user wrote; add is drill-down beneath it);
                    data loading [600, 800); aten::copy_ [840, 860) launches a memcpy [850, 900).
  step 2 [1000, 2000): aten::mm [1100, 1200) launches an FP32 sgemm [1900, 2300) that outlives the step.
"""

from __future__ import annotations

import sqlite3

import pytest
from trace_builder import KinetoTrace

from dlscope.pipeline import aggregate, build_database
from dlscope.present.summary import summary_dict

US = 1000  # ns per µs
TC_KERNEL = "volta_h884gemm_64x64_ldg8_nn"


def handmade(path):
    t = KinetoTrace()
    t.step(1, 0, 1000)
    t.step(2, 1000, 2000)
    t.op("aten::conv2d", 100, 300, **{"Input Dims": [[8, 3, 32, 32], [16, 3, 3, 3]],
                                      "Input type": ["c10::Half", "c10::Half"]})
    t.launch(150, 160, TC_KERNEL, 200, 400)
    t.op("aten::relu", 300, 350)
    t.launch(310, 320, "void at::native::vectorized_elementwise_kernel<4>", 400, 450)
    t.op("aten::add", 320, 340)
    t.launch(325, 330, "void at::native::elementwise_kernel<128>", 420, 500, stream=8)
    t.launch(345, 350, "void at::native::vectorized_elementwise_kernel<4>", 460, 470)
    t.annotation("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 600, 800)
    t.op("aten::copy_", 840, 860)
    t.launch(845, 848, "Memcpy HtoD (Pageable -> Device)", 850, 900, kind="gpu_memcpy", bytes=4096)
    t.op("aten::mm", 1100, 1200)
    t.launch(1150, 1160, "volta_sgemm_128x64_tn", 1900, 2300)
    return t.write(path)


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    base = tmp_path_factory.mktemp("handmade")
    return build_database([handmade(base / "trace.json")], base / "run.sqlite", progress=False)


def test_wall_clock_runs_from_first_step_to_last_gpu_activity_of_last_step(db):
    a = summary_dict(db)["aggregation"]
    assert a["wall_clock_ns"] == 2300 * US
    assert a["avg_iteration_ns"] == 1150 * US
    assert (a["iter_start"], a["iter_stop"], a["iterations_profiled"]) == (1, 2, 2)
    assert a["iteration_ns"] == {"min": 1000 * US, "median": 1150 * US, "max": 1300 * US, "slowest_iteration": 2}


def test_gpu_busy_counts_overlapping_streams_once(db):
    a = summary_dict(db)["aggregation"]
    assert a["gpu_busy_ns"] == 700 * US
    assert a["gpu_utilization"] == pytest.approx(700 / 2300)


def test_tensor_core_efficiency_is_tc_time_over_kernels_of_eligible_ops(db):
    a = summary_dict(db)["aggregation"]
    assert a["tc_kernel_efficiency"] == pytest.approx(200 / 600)  # conv2d's TC kernel / (conv2d + mm kernels)


def test_resource_breakdown_follows_priority_and_adds_up(db):
    parts = summary_dict(db)["aggregation"]["resource_breakdown_ns"]
    assert parts == {"tensor_core": 200 * US, "non_tensor_core": 500 * US, "memory": 50 * US,
                     "dataloader": 200 * US, "io": 0, "cpu": 210 * US, "other": 1140 * US}
    assert sum(parts.values()) == 2300 * US


def test_iteration_breakdowns_add_up_and_late_kernels_stay_in_their_step(db):
    conn = sqlite3.connect(db)
    rows = conn.execute("SELECT iteration, duration_ns, tensor_core_ns, non_tensor_core_ns, memory_ns, dataloader_ns, "
                        "io_ns, cpu_ns, other_ns, kernel_count FROM agg_iterations ORDER BY iteration").fetchall()
    assert rows == [(1, 1000 * US, 200 * US, 100 * US, 50 * US, 200 * US, 0, 110 * US, 340 * US, 4),
                    (2, 1300 * US, 0, 400 * US, 0, 0, 0, 100 * US, 800 * US, 1)]


def test_op_metrics_follow_dlprof_definitions(db):
    conn = sqlite3.connect(db)
    ops = {r[0]: r[1:] for r in conn.execute(
        "SELECT op_name, calls, gpu_time_ns, cpu_time_ns, api_time_ns, cpu_overhead_ns, gpu_idle_ns, kernel_count, "
        "tc_eligible, using_tc, data_type FROM agg_ops")}
    assert ops["aten::conv2d"] == (1, 200 * US, 200 * US, 10 * US, 190 * US, 0, 1, 1, 1, "float16")
    # relu with add beneath it: kernels 50 + 80 + 10 µs; API calls 10 + 5 (add's) + 5 µs; its GPU activity
    # [400, 450) ∪ [420, 500) ∪ [460, 470) leaves no gap between 400 and 500
    assert ops["aten::relu"] == (1, 140 * US, 50 * US, 20 * US, 30 * US, 0, 3, 0, 0, "")
    assert "aten::add" not in ops  # nested: never an op node, never counted twice
    assert ops["aten::copy_"][1] == 50 * US  # a memcpy is op GPU time (DLProf's database counts it)
    assert ops["aten::mm"][1] == 400 * US and ops["aten::mm"][7:9] == (1, 0)


def test_top_gpu_ops_are_sorted_by_gpu_time(db):
    top = summary_dict(db)["aggregation"]["top_gpu_ops"]
    assert [(o["op_name"], o["gpu_time_ns"]) for o in top] == [
        ("aten::mm", 400 * US), ("aten::conv2d", 200 * US), ("aten::relu", 140 * US), ("aten::copy_", 50 * US)]


def test_model_summary_counts_op_nodes_as_dlprof_does(db):
    """Op nodes conv2d, relu, copy_, mm; eligible conv2d and mm; conv2d uses TC; eligible GPU time 600 of 790 µs."""
    m = summary_dict(db)["aggregation"]["model_summary"]
    assert m == {"op_nodes": 4, "tc_eligible_op_nodes": 2, "op_nodes_using_tc": 1,
                 "tc_eligible_gpu_time_pct": pytest.approx(100 * 600 / 790)}


def test_aggregate_adds_a_narrower_aggregation_without_reimport(db, tmp_path):
    copy = tmp_path / "copy.sqlite"
    copy.write_bytes(db.read_bytes())
    (agg_id,) = aggregate(copy, iter_start=2, iter_stop=2)
    a = summary_dict(copy, agg_id)["aggregation"]
    assert a["wall_clock_ns"] == 1300 * US and a["iterations_profiled"] == 1
    assert summary_dict(copy, 1)["aggregation"]["wall_clock_ns"] == 2300 * US


def test_key_node_splits_iterations_at_each_occurrence(tmp_path):
    t = KinetoTrace()
    for i in range(3):
        t.op("train_step_marker", i * 100, i * 100 + 10)
        t.op("aten::mm", i * 100 + 20, i * 100 + 90)
        t.launch(i * 100 + 30, i * 100 + 31, "volta_sgemm_128x64_tn", i * 100 + 40, i * 100 + 80)
    db = build_database([t.write(tmp_path / "t.json")], tmp_path / "k.sqlite", key_node="train_step_marker",
                        progress=False)
    s = summary_dict(db)
    assert s["profile"]["iteration_method"] == "key_node"
    assert s["profile"]["iterations_total"] == 3
    assert s["aggregation"]["wall_clock_ns"] == 290 * US


def test_profile_without_iterations_says_so_instead_of_inventing_them(tmp_path):
    t = KinetoTrace()
    t.op("aten::mm", 0, 50)
    t.launch(10, 11, "volta_sgemm_128x64_tn", 20, 60)
    s = summary_dict(build_database([t.write(tmp_path / "t.json")], tmp_path / "n.sqlite", progress=False))
    assert s["profile"]["iterations_total"] is None
    assert s["aggregation"]["avg_iteration_ns"] is None
    assert s["aggregation"]["iteration_method"] == "whole_profile"
    assert s["aggregation"]["wall_clock_ns"] == 60 * US


def test_cpu_only_profile_reports_null_gpu_metrics(tmp_path):
    t = KinetoTrace(devices=0)
    t.step(1, 0, 100)
    t.op("aten::add", 10, 20)
    s = summary_dict(build_database([t.write(tmp_path / "t.json")], tmp_path / "c.sqlite", progress=False))
    assert s["aggregation"]["gpu_utilization"] is None
    assert s["aggregation"]["tc_kernel_efficiency"] is None
    assert s["aggregation"]["resource_breakdown_ns"]["cpu"] == 10 * US
