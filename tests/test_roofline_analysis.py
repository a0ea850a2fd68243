"""roofline_report on a hand-made profile database and on a real trace; the chart files."""

from __future__ import annotations

import json
import sqlite3

import pytest
from conftest import data_file

from dlscope.roofline import read_ncu_csv, roofline_report, write_ncu_kernels
from dlscope.roofline.chart import write_roofline_chart
from dlscope.roofline.export import write_roofline
from dlscope.store.schema import DDL

CONV = ("aten::conv2d", json.dumps([[1, 3, 416, 480], [16, 3, 3, 3], [16], [], [], [], []]),
        json.dumps(["float"] * 3 + ["ScalarList"] * 3 + ["Scalar"]),
        json.dumps(["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "1"]))
GEMM = ("aten::mm", json.dumps([[4096, 4096], [4096, 4096]]), json.dumps(["c10::Half"] * 2), json.dumps(["", ""]))


def make_db(path, gpu_name="Tesla V100-SXM2-32GB"):
    conn = sqlite3.connect(path)
    conn.executescript(DDL)
    conn.execute("INSERT INTO gpus VALUES (0, 0, ?, 80, 34089730048, 7, 0)", (gpu_name,))
    conn.execute("INSERT INTO aggregations (agg_id, rank, iter_start, iter_stop) VALUES (1, 0, 1, 2)")
    ops = [  # op_id, node_id, (name, shapes, dtypes, concrete)
        (1, 10, CONV), (2, 10, CONV), (3, 20, GEMM), (4, 30, ("MyFusedOp", "[[8]]", '["float"]', '[""]')),
    ]
    for op_id, node, (name, shapes, dtypes, concrete) in ops:
        conn.execute("INSERT OR IGNORE INTO op_nodes (node_id, rank, name, op_type, input_shapes, input_dtypes, "
                     "concrete_inputs) VALUES (?, 0, ?, ?, ?, ?, ?)", (node, name, name, shapes, dtypes, concrete))
        conn.execute("INSERT INTO op_instances (op_id, node_id, rank) VALUES (?, ?, 0)", (op_id, node))
    # node, name, calls, gpu_time_ns, using_tc
    for node, name, calls, gpu_ns, tc in ((10, "aten::conv2d", 2, 20_000, 0), (20, "aten::mm", 1, 2_000_000, 1),
                                          (30, "MyFusedOp", 1, 5_000, 0), (40, "aten::linear", 1, 0, 0)):
        conn.execute("INSERT INTO agg_ops (agg_id, node_id, rank, op_name, op_type, calls, gpu_time_ns, using_tc, "
                     "tc_eligible) VALUES (1, ?, 0, ?, ?, ?, ?, ?, ?)", (node, name, name, calls, gpu_ns, tc, tc))
    conn.commit()
    return conn


def test_ops_are_placed_against_v100_ceilings(tmp_path):
    conn = make_db(tmp_path / "p.sqlite")
    report = roofline_report(conn, 1)
    assert report["ceilings"]["gpu_id"] == "v100-sxm2" and report["ceilings_error"] is None
    ops = {o["node_id"]: o for o in report["ops"]}
    assert set(ops) == {10, 20}                                  # unmodelled and kernel-less nodes left out
    conv = ops[10]
    assert conv["flops"] == 2 * 44_728_320 and conv["bytes"] == 2 * 5_592_832
    assert conv["arithmetic_intensity"] == pytest.approx(44_728_320 / 5_592_832)
    assert conv["achieved_flops_per_s"] == pytest.approx(2 * 44_728_320 / 20e-6)
    # FP32 ridge on V100 = 15.7e12 / 900e9 = 17.4 FLOP/B > 8.0 -> memory bound, % of DRAM bandwidth
    assert conv["bound"] == "memory" and conv["ceiling"] == "fp32" and conv["precision"] == "fp32"
    assert conv["pct_of_ceiling"] == pytest.approx(100 * (2 * 5_592_832 / 20e-6) / 900e9)
    gemm = ops[20]
    n = 4096
    assert gemm["flops"] == 2 * n**3 and gemm["bytes"] == 2 * 3 * n * n
    assert gemm["tensor_cores"] and gemm["ceiling"] == "fp16_tensor" and gemm["bound"] == "math"
    assert gemm["pct_of_ceiling"] == pytest.approx(100 * (2 * n**3 / 2e-3) / 125e12)
    s = report["summary"]
    assert s["memory_bound_gpu_time_ns"] == 20_000 and s["math_bound_gpu_time_ns"] == 2_000_000
    assert s["unmodelled_gpu_time_ns"] == 5_000 and s["op_gpu_time_ns"] == 2_025_000
    top = s["furthest_below"][0]
    assert top["node_id"] == 20 and top["est_saving_ns"] == int(2_000_000 * (1 - gemm["pct_of_ceiling"] / 100))
    json.dumps(report, allow_nan=False)                          # JSON-clean: no NaN / inf


def test_unknown_gpu_keeps_numbers_and_explains(tmp_path):
    conn = make_db(tmp_path / "p.sqlite", gpu_name="NVIDIA GeForce RTX 2070 SUPER")
    report = roofline_report(conn, 1)
    assert report["ceilings"] is None and "--gpu-spec" in report["ceilings_error"]
    conv = next(o for o in report["ops"] if o["node_id"] == 10)
    assert conv["flops"] == 2 * 44_728_320 and conv["bound"] is None and conv["pct_of_ceiling"] is None
    assert report["summary"]["memory_bound_gpu_time_ns"] is None
    spec = tmp_path / "gpu.json"
    spec.write_text(json.dumps({"name": "RTX 2070 SUPER", "fp32_flops": 9.06e12, "fp16_tensor_flops_dense": 57.4e12,
                                "dram_bandwidth_bytes_per_s": 448e9}))
    with_spec = roofline_report(conn, 1, gpu_spec_path=spec)
    assert with_spec["ceilings"]["matched_by"] == "spec file"
    assert {o["node_id"]: o["bound"] for o in with_spec["ops"]} == {10: "memory", 20: "math"}


def test_missing_aggregation_is_an_error(tmp_path):
    from dlscope.errors import DlscopeError
    conn = make_db(tmp_path / "p.sqlite")
    with pytest.raises(DlscopeError, match="aggregation 7"):
        roofline_report(conn, 7)


def test_ncu_kernels_get_a_hierarchical_roofline(tmp_path):
    conn = make_db(tmp_path / "p.sqlite")
    frame = read_ncu_csv(data_file("ncu_csv", "wangzy_gemm_roofline_metrics_v100.csv"))
    assert write_ncu_kernels(conn, frame, source="v100.csv") == 11
    report = roofline_report(conn, 1)
    kernels = report["kernels"]
    assert len(kernels) == 11
    tc = kernels[10]                                             # cutlass_70_tensorop_s884gemm
    flops = 2 * 20480**3 + tc["flops_fp32"]
    assert tc["flops"] == pytest.approx(flops) and tc["tensor_cores"] and tc["ceiling"] == "fp16_tensor"
    for level in ("l1", "l2", "dram"):
        assert tc[f"ai_{level}"] == pytest.approx(flops / tc[f"bytes_{level}"])
    assert tc["achieved_flops_per_s"] == pytest.approx(flops / (tc["time_ns"] * 1e-9))
    assert tc["bound_dram"] == "math"                           # AI_dram ≈ 682 FLOP/B > ridge 139
    assert 50 < tc["pct_of_ceiling"] < 100                       # 94.7 TFLOP/s of 125
    init = kernels[0]
    assert init["flops"] == 0 and init["pct_of_ceiling"] is None
    json.dumps(report, allow_nan=False)


def test_ncu_only_database_without_aggregation(tmp_path):
    conn = sqlite3.connect(tmp_path / "n.sqlite")
    write_ncu_kernels(conn, read_ncu_csv(data_file("ncu_csv", "wangzy_gemm_roofline_metrics_v100.csv")))
    report = roofline_report(conn, None)
    assert report["ops"] == [] and len(report["kernels"]) == 11
    assert report["gpu"]["cc"] == "7.0" and report["ceilings"] is None   # no device name in this CSV
    assert "--gpu-spec" in report["ceilings_error"]


def test_real_trace_end_to_end(tmp_path):
    from dlscope.pipeline import build_database
    db = build_database([data_file("kineto", "tracelens_h100_vit_nsfw_infer.json.gz")], tmp_path / "vit.sqlite",
                        progress=False)
    conn = sqlite3.connect(db)
    report = roofline_report(conn, 1)
    assert report["ceilings"]["gpu_id"] == "h100-sxm5"
    s = report["summary"]
    total = conn.execute("SELECT SUM(gpu_time_ns) FROM agg_ops WHERE agg_id = 1").fetchone()[0]
    assert s["op_gpu_time_ns"] == total == s["modelled_gpu_time_ns"] + s["unmodelled_gpu_time_ns"]
    assert s["memory_bound_gpu_time_ns"] + s["math_bound_gpu_time_ns"] == s["modelled_gpu_time_ns"]
    conv = next(o for o in report["ops"] if o["family"] == "conv")
    # patch embedding: 4x3x224x224 * 768x3x16x16, stride 16 -> 14x14; the op node aten::conv2d has a bias,
    # one more multiply-add per output element (seed 002)
    assert conv["op_name"] == "aten::conv2d"
    assert conv["flops"] == 2 * 4 * 768 * 14 * 14 * (3 * 16 * 16 + 1) * conv["calls"]
    assert conv["precision"] == "bf16" and conv["tensor_cores"]
    written = write_roofline(report, tmp_path / "out")
    assert {p.name for p in written} == {"roofline.json", "roofline_ops.csv", "roofline_kernels.csv",
                                         "roofline.png", "roofline.svg"}


def test_chart_writes_png_and_svg(tmp_path):
    conn = make_db(tmp_path / "p.sqlite")
    write_ncu_kernels(conn, read_ncu_csv(data_file("ncu_csv", "wangzy_gemm_roofline_metrics_v100.csv")))
    paths = write_roofline_chart(roofline_report(conn, 1), tmp_path / "chart" / "roofline")
    png, svg = paths
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert b"<svg" in svg.read_bytes()[:2000] and b"fp16_tensor" in svg.read_bytes()
    empty = write_roofline_chart({"ops": [], "kernels": [], "ceilings": None, "gpu": None}, tmp_path / "empty")
    assert all(p.stat().st_size > 0 for p in empty)


def test_counters_only_database_gets_a_roofline_report_from_the_cli(tmp_path):
    """`import` of an ncu CSV then `report --reports roofline --gpu-spec`: no aggregation needed. The cuBLAS
    GEMM's achieved FLOP/s is 2·20480³ over the time its raw cycle counters give, read here with csv."""
    import csv

    from click.testing import CliRunner

    from dlscope.cli import cli

    path = data_file("ncu_csv", "wangzy_gemm_roofline_metrics_a100.csv")
    lines = path.read_text().splitlines()
    rows = list(csv.DictReader(lines[next(i for i, x in enumerate(lines) if x.startswith('"ID"')):]))
    raw = {r["Metric Name"]: float(r["Metric Value"].replace(",", "")) for r in rows if r["ID"] == "10"}
    seconds = raw["sm__cycles_elapsed.avg"] / raw["sm__cycles_elapsed.avg.per_second"]
    spec = tmp_path / "a100.json"
    spec.write_text(json.dumps({"name": "A100 PCIe", "fp32_flops": 19.5e12, "fp16_tensor_flops_dense": 312e12,
                                "dram_bandwidth_bytes_per_s": 1555e9}))
    runner = CliRunner()
    db = tmp_path / "c.sqlite"
    assert runner.invoke(cli, ["import", str(path), "-o", str(db)]).exit_code == 0
    result = runner.invoke(cli, ["report", str(db), "--reports", "roofline", "--formats", "json",
                                  "-o", str(tmp_path / "out"), "--gpu-spec", str(spec)])
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "out" / "roofline.json").read_text())
    gemm = next(k for k in report["kernels"] if "s16816gemm" in k["kernel_name"])
    assert gemm["flops"] == 2 * 20480**3 and gemm["ceiling"] == "fp16_tensor"
    assert gemm["achieved_flops_per_s"] == pytest.approx(2 * 20480**3 / seconds, rel=1e-9)
    assert gemm["pct_of_ceiling"] == pytest.approx(100 * 2 * 20480**3 / seconds / 312e12, rel=1e-9)


def test_ncu_kernels_link_to_the_trace_launches_they_profiled(tmp_path):
    """The k-th ncu launch of a name is the k-th trace launch of it; geometry checked; counters per op node.
    Trace launches are written here by hand, in a different start order across names than ncu's IDs."""
    conn = make_db(tmp_path / "p.sqlite")
    frame = read_ncu_csv(data_file("ncu_csv", "wangzy_gemm_roofline_metrics_a100.csv"))
    write_ncu_kernels(conn, frame)
    # trace: (kernel_id, ncu ID it is, start, op_id); ncu names say "void ...", the trace may not
    plan = [(100 + i, i, 1000 * (11 - i) if i < 4 else 1000 * i, 1 if i < 4 else 3) for i in range(11)]
    for kid, ncu_id, start, op in plan:
        row = frame.loc[frame["kernel_id"] == ncu_id].iloc[0]
        grid = [int(row["grid_x"]), int(row["grid_y"]), int(row["grid_z"])]
        if ncu_id == 6:
            grid[0] += 1                                          # a launch whose grid disagrees
        name = row["kernel_name"].removeprefix("void ") if ncu_id % 2 else row["kernel_name"]
        conn.execute("INSERT INTO kernels (kernel_id, rank, name, start, dur, grid_x, grid_y, grid_z, block_x, "
                     "block_y, block_z, op_id, iteration, launch_ts) "
                     "VALUES (?, 0, ?, ?, 10, ?, ?, ?, ?, ?, ?, ?, 1, ?)",
                     (kid, name, start, *grid, int(row["block_x"]), int(row["block_y"]), int(row["block_z"]), op,
                      start - 5))
    # NVTX ranges: "gemms" open while ncu IDs 4..7 launched (starts 4000..7000), "all" around every launch
    conn.execute("INSERT INTO ranges (range_id, rank, pid, name, start, \"end\", category) VALUES "
                 "(1, 0, 7, 'gemms', 3990, 7000, ''), (2, 0, 7, 'all', 0, 20000, ''), "
                 "(3, 0, 7, 'ProfilerStep#1', 0, 20000, 'step')")
    conn.commit()
    report = roofline_report(conn, 1)
    by_id = {k["kernel_id"]: k for k in report["kernels"]}
    # init kernels were started in reverse: ncu ID 0 and 1 share a name, so ID 0 pairs with the earlier (ID 1's)
    assert by_id[0]["trace_kernel_id"] == 101 and by_id[1]["trace_kernel_id"] == 100
    assert all(by_id[i]["trace_kernel_id"] == 100 + i for i in range(4, 11))
    assert by_id[6]["geometry_match"] == 0 and by_id[5]["geometry_match"] == 1
    links = report["counters_linked"]
    assert links["matched_kernels"] == 11 and links["geometry_mismatches"] == 1
    gemm = next(o for o in links["by_op"] if o["node_id"] == 20)
    assert gemm["kernels"] == 7 and gemm["tc_kernels"] == 7
    assert gemm["flops_tensor"] == 7 * 2 * 20480**3
    init = next(o for o in links["by_op"] if o["node_id"] == 10)
    assert init["kernels"] == 4 and init["flops_tensor"] == 0
    assert links["by_iteration"][0]["kernels"] == 11
    ranges = {r["range_name"]: r for r in links["by_range"]}
    assert set(ranges) == {"gemms", "all"}                       # the profiler step is by_iteration's
    assert ranges["gemms"]["kernels"] == 4 and ranges["gemms"]["flops_tensor"] == 4 * 2 * 20480**3
    assert ranges["all"]["kernels"] == 11
    json.dumps(report, allow_nan=False)
