"""Run-level utilization and the quadrants of seed 002, checked against sums done by hand."""

from __future__ import annotations

import json
from importlib import resources

import pytest
from test_roofline_analysis import make_db

from dlscope.roofline import roofline_report
from dlscope.roofline.quadrants import quadrant, run_utilization


def _v100() -> dict:
    specs = json.loads(resources.files("dlscope.data").joinpath("gpu_specs.json").read_text())
    return next(g for g in specs["gpus"] if g["id"] == "v100-sxm2")


def test_quadrants_split_at_seventy_percent():
    assert quadrant(0.7, 0.1) == "compute_bound" and quadrant(0.1, 0.7) == "memory_bound"
    assert quadrant(0.9, 0.8) == "both_high" and quadrant(0.69, 0.69) == "both_low"
    assert quadrant(None, 0.5) is None


def test_run_utilization_of_the_hand_made_profile():
    """aten::mm 4096³ FP16 on Tensor Cores in 2 ms and two seed-002 convs (FP32) in 20 µs, on a V100:
    compute = (2·4096³ / FP16-TC peak + 2 · 44,728,320 / FP32 peak) / 2.02 ms; memory = (3·4096²·2 bytes +
    2 · 5,592,832 bytes) / 2.02 ms / DRAM bandwidth."""
    import tempfile
    from pathlib import Path

    v100 = _v100()
    seconds = 2.02e-3
    compute = (2 * 4096**3 / v100["fp16_tensor_flops_dense"] + 2 * 44_728_320 / v100["fp32_flops"]) / seconds
    memory = (3 * 4096**2 * 2 + 2 * 5_592_832) / seconds / v100["dram_bandwidth_bytes_per_s"]
    with tempfile.TemporaryDirectory() as d:
        util = roofline_report(make_db(Path(d) / "p.sqlite"), 1)["summary"]["utilization"]
    assert util["compute_utilization_pct"] == pytest.approx(100 * compute, rel=1e-9)
    assert util["memory_utilization_pct"] == pytest.approx(100 * memory, rel=1e-9)
    assert util["gpu_time_ns"] == 2_020_000 and util["basis"] == "ops"
    assert util["quadrant"] == "both_low" and any("CUDA Graphs" in a for a in util["advice"])
    assert util["dominant_precision"] == "fp16" and util["dominant_tensor_cores"] is True


def test_advice_follows_precision_tensor_cores_and_architecture():
    """An FP32 CUDA-core GEMM at 80 % of its roof, 10 % of DRAM: compute bound; TF32/AMP advice; 2:4 sparsity
    only from Ampere (CC 8.0)."""
    point = {"time_ns": 1e6, "flops": 0.8 * 19.5e12 * 1e-3, "bytes": 0.1 * 1.555e12 * 1e-3, "peak": 19.5e12,
             "precision": "fp32", "tensor_cores": False, "family": "gemm"}
    ampere = run_utilization([point], 1.555e12, "8.0", "ops")
    assert ampere["compute_utilization_pct"] == pytest.approx(80.0)
    assert ampere["memory_utilization_pct"] == pytest.approx(10.0)
    assert ampere["quadrant"] == "compute_bound"
    assert any("TF32" in a for a in ampere["advice"]) and any("2:4" in a for a in ampere["advice"])
    volta = run_utilization([point], 1.555e12, "7.0", "ops")
    assert not any("2:4" in a for a in volta["advice"])
    memory = run_utilization([{**point, "flops": 0.05 * 19.5e12 * 1e-3, "bytes": 0.9 * 1.555e12 * 1e-3}],
                             1.555e12, "8.0", "ops")
    assert memory["quadrant"] == "memory_bound" and any("Fuse" in a for a in memory["advice"])
    assert any("smaller number format" in a for a in memory["advice"])
    assert run_utilization([point], None, "8.0", "ops") is None


def test_counters_only_run_is_placed_from_its_kernels(tmp_path):
    """No ops: the ncu kernels give the run's utilization (cutlass s884 GEMM ≈ 95 TFLOP/s of the V100's 125)."""
    import sqlite3

    from conftest import data_file

    from dlscope.roofline import read_ncu_csv, write_ncu_kernels

    spec = tmp_path / "v100.json"
    spec.write_text(json.dumps(_v100()))
    conn = sqlite3.connect(tmp_path / "n.sqlite")
    frame = read_ncu_csv(data_file("ncu_csv", "wangzy_gemm_roofline_metrics_v100.csv"))
    write_ncu_kernels(conn, frame)
    report = roofline_report(conn, None, gpu_spec_path=spec)
    util = report["summary"]["utilization"]
    assert util["basis"] == "ncu kernels"
    row = frame.set_index("kernel_id").loc[10]                   # cutlass_70_tensorop_s884gemm
    seconds = row["time_ns"] * 1e-9
    compute = (2 * 20480**3 + row["flops_fp32"]) / seconds / _v100()["fp16_tensor_flops_dense"]
    memory = row["bytes_dram"] / seconds / _v100()["dram_bandwidth_bytes_per_s"]
    gemm = report["kernels"][10]
    assert gemm["compute_utilization_pct"] == pytest.approx(100 * compute, rel=1e-9)
    assert gemm["memory_utilization_pct"] == pytest.approx(100 * memory, rel=1e-9)
    assert compute > 0.7 > memory and gemm["quadrant"] == "compute_bound"
    init = report["kernels"][0]                                  # 0 FLOPs: counted for time and bytes
    assert init["compute_utilization_pct"] == 0 and init["quadrant"] in ("both_low", "memory_bound")
    assert util["gpu_time_ns"] == pytest.approx(frame["time_ns"].sum(), abs=1)


@pytest.mark.parametrize(("name", "precision"), [
    ("ampere_tf32_s1688gemm_tf32_128x128_16x32_nn", "tf32"),
    ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_tn_align1>(T1::Params)", "tf32"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_kernel", "bf16"),
    ("sm90_xmma_gemm_e4m3e4m3_e4m3f32_f32_tn_n_kernel", "fp8"),
    ("ampere_s16816gemm_fp16_256x128_ldg8_stages_64x3_nn", "fp16"),
    # CUTLASS half_t inputs with a float accumulator: no explicit token, so the FP16 default, never FP32/TF32
    ("void cutlass::Kernel<cutlass::gemm::kernel::Gemm<... cutlass::half_t, float, layout::RowMajor>>", "fp16"),
])
def test_tensor_core_kernels_take_the_roof_of_the_precision_their_name_states(name, precision):
    from dlscope.roofline.analysis import tensor_kernel_precision

    assert tensor_kernel_precision(name)[0] == precision


def test_run_of_copies_alone_has_memory_utilization_and_no_dominant_precision():
    """A CUDA-graph run can leave only copies and fills among the modelled ops (0 FLOPs, a roof known): 1 GB
    moved in 1 ms on a 2 TB/s GPU is 50 % memory utilization, 0 % compute, and no precision dominates."""
    copy = {"time_ns": 1e6, "flops": 0, "bytes": 1e9, "peak": 19.5e12, "precision": "fp32", "tensor_cores": False,
            "family": "copy"}
    util = run_utilization([copy], 2e12, "9.0", "ops")
    assert util["memory_utilization_pct"] == pytest.approx(50.0)
    assert util["compute_utilization_pct"] == 0.0
    assert util["dominant_precision"] is None and util["dominant_tensor_cores"] is False


def test_a_sliver_of_math_beside_copies_names_no_dominant_precision():
    """A 1 ms scalar FP64 op with FLOPs beside 19 ms of FP32 casts without any: math is 5 % of the placed time,
    under ``min_math_share`` (10 %), so no precision dominates and no precision hint follows; at 2 ms of 20 it
    is 10 % and FP64 dominates."""
    cast = {"time_ns": 19e6, "flops": 0, "bytes": 1e9, "peak": 50e12, "precision": "fp32", "tensor_cores": False,
            "family": "data_movement"}
    scalar = {"time_ns": 1e6, "flops": 1.0, "bytes": 8.0, "peak": 25e12, "precision": "fp64", "tensor_cores": False,
              "family": "elementwise"}
    util = run_utilization([cast, scalar], 4e12, "9.0", "ops")
    assert util["math_time_pct"] == pytest.approx(5.0)
    assert util["dominant_precision"] is None and util["dominant_tensor_cores"] is False
    more = run_utilization([{**cast, "time_ns": 18e6}, {**scalar, "time_ns": 2e6}], 4e12, "9.0", "ops")
    assert more["math_time_pct"] == pytest.approx(10.0) and more["dominant_precision"] == "fp64"


def test_a_run_that_replays_graphs_is_not_told_to_use_them():
    point = {"time_ns": 1e6, "flops": 0.05 * 19.5e12 * 1e-3, "bytes": 0.05 * 1.555e12 * 1e-3, "peak": 19.5e12,
             "precision": "fp32", "tensor_cores": False, "family": "gemm"}
    eager = run_utilization([point], 1.555e12, "8.0", "ops")
    graphed = run_utilization([point], 1.555e12, "8.0", "ops", graphs=True)
    assert eager["quadrant"] == graphed["quadrant"] == "both_low"
    assert any("CUDA Graphs" in a for a in eager["advice"])
    assert not any("CUDA Graphs" in a for a in graphed["advice"]) and len(graphed["advice"]) == len(eager["advice"]) - 1
