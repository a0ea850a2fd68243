"""The roofline_quadrant rule (docs/experts.md): the run's quadrant with its advice, priced as the time the
modelled ops would save at 70 % of their roofs; hand-made A100 steps with numbers worked out here from the
datasheet roofs, and a real H100 trace."""

from __future__ import annotations

import pytest
from conftest import data_file
from experts_helpers import stored_findings
from trace_builder import KinetoTrace

from dlscope.pipeline import build_database
from dlscope.roofline.analysis import roofline_report

A100_FP16_TC, A100_DRAM = 312e12, 2.039e12          # A100 SXM4 80 GB datasheet: dense FP16 Tensor Core, HBM2e
GEMM_FLOPS = 2 * 4096**3                            # a 4096³ FP16 matrix product
GEMM_BYTES = 3 * 4096 * 4096 * 2                    # A, B and C once each, 2 bytes an element
ADD_BYTES = 3 * 4096 * 4096 * 2                     # two FP16 inputs and the output
TARGET = 0.70                                        # rules.json roofline_quadrant.target_pct_of_roof
GEMM_KERNEL = "ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_nn"


def _step(tmp_path, gemm_us: float, add_us: float | None = None, step_us: float = 5000.0):
    t = KinetoTrace()
    t.step(1, 0, step_us)
    t.op("aten::mm", 100, 200, **{"Input Dims": [[4096, 4096], [4096, 4096]],
                                  "Input type": ["c10::Half", "c10::Half"]})
    t.launch(110, 120, GEMM_KERNEL, 200, 200 + gemm_us)
    if add_us is not None:
        t.op("aten::add", 300, 400, **{"Input Dims": [[4096, 4096], [4096, 4096], []],
                                       "Input type": ["c10::Half", "c10::Half", "Scalar"]})
        t.launch(310, 320, "void at::native::vectorized_elementwise_kernel<4, add_half>", 300 + gemm_us,
                 300 + gemm_us + add_us)
    return build_database([t.write(tmp_path / "t.json")], tmp_path / "t.sqlite", progress=False)


def test_a_gemm_far_below_its_roof_is_both_low_and_saves_down_to_70_percent_of_it(tmp_path):
    """4 ms for a GEMM whose math roof is 2·4096³ / 312 TFLOP/s = 440.5 µs: 11 % compute, 1.2 % memory
    utilization (both low); saving 4 ms − 440.5 µs / 0.7."""
    got = stored_findings(_step(tmp_path, gemm_us=4000))["roofline_quadrant"]
    roof_s = max(GEMM_FLOPS / A100_FP16_TC, GEMM_BYTES / A100_DRAM)
    assert got["est_saving_ns"] == pytest.approx(4000e3 - roof_s * 1e9 / TARGET, abs=1)
    ev = got["evidence"]
    assert ev["quadrant"] == "both_low"
    assert ev["compute_utilization_pct"] == pytest.approx(100 * GEMM_FLOPS / A100_FP16_TC / 4000e-6, rel=1e-9)
    assert ev["memory_utilization_pct"] == pytest.approx(100 * GEMM_BYTES / 4000e-6 / A100_DRAM, rel=1e-9)
    assert "CUDA Graphs" in got["recommendation"] and "2:4" not in got["recommendation"]


def test_silent_when_the_work_runs_near_its_roof(tmp_path):
    """550 µs for the same GEMM: 80 % of its roof, compute bound, and already above the 70 % target."""
    assert "roofline_quadrant" not in stored_findings(_step(tmp_path, gemm_us=550))


def test_compute_bound_gemm_work_gets_the_2_4_sparsity_hint_on_an_a100(tmp_path):
    """A GEMM at 99 % of its roof (445 µs) and an FP16 add at 150 µs whose memory roof is 100.7 MB / 2.039 TB/s
    = 49.4 µs: compute utilization (440.5 + 0.2) / 595 µs = 74 % (compute bound, GEMM-dominated, CC 8.0), and
    only the add saves: 150 µs − 49.4 µs / 0.7."""
    got = stored_findings(_step(tmp_path, gemm_us=445, add_us=150, step_us=1000))["roofline_quadrant"]
    assert got["evidence"]["quadrant"] == "compute_bound"
    assert got["evidence"]["dominant_family"] == "gemm"
    assert got["est_saving_ns"] == pytest.approx(150e3 - ADD_BYTES / A100_DRAM * 1e9 / TARGET, abs=1)
    assert "2:4 structured sparsity" in got["recommendation"]
    assert [o["op_name"] for o in got["evidence"]["ops"]] == ["aten::add"]


def test_fires_on_the_real_h100_bert_inference_with_its_roofline_numbers(import_db):
    """BERT-small inference on an H100 (BF16): both low. The saving of the op furthest below its roof is its GPU
    time − max(FLOPs / 989.4 TFLOP/s, bytes / 3.35 TB/s) / 0.7 (H100 SXM5 datasheet, dense BF16 Tensor Cores),
    from the roofline report's FLOPs, bytes and time of that node."""
    import sqlite3

    db = import_db(data_file("kineto", "tracelens_h100_bert_small_infer.json.gz"))
    got = stored_findings(db)["roofline_quadrant"]
    assert got["evidence"]["quadrant"] == "both_low" and got["evidence"]["dominant_precision"] == "bf16"
    top = got["evidence"]["ops"][0]
    conn = sqlite3.connect(db)
    (agg_id,) = conn.execute("SELECT MAX(agg_id) FROM aggregations").fetchone()
    report = roofline_report(conn, agg_id)
    conn.close()
    op = next(o for o in report["ops"] if o["node_id"] == top["node_id"])
    assert (op["ceiling"], op["precision"]) == ("bf16_tensor", "bf16")
    roof_s = max(op["flops"] / 989.4e12, op["bytes"] / 3.35e12)
    assert top["saving_ns"] == pytest.approx(op["gpu_time_ns"] - roof_s * 1e9 / TARGET, abs=1)
    assert got["est_saving_ns"] >= top["saving_ns"] > 0


def test_silent_without_roofs_for_the_gpu(tmp_path):
    """The 4 ms GEMM that is both low on an A100, on an AMD GPU the table does not hold (an MI100, CDNA 1): no
    roof, so no quadrant to judge; the roofline report says why, naming the AMD entries the table has."""
    import sqlite3

    t = KinetoTrace()
    t.device_properties = [{"id": 0, "name": "AMD Instinct MI100", "totalGlobalMem": 34342961152,
                            "computeMajor": 9, "computeMinor": 0, "numSms": 120}]
    t.step(1, 0, 5000)
    t.op("aten::mm", 100, 200, **{"Input Dims": [[4096, 4096], [4096, 4096]],
                                  "Input type": ["c10::Half", "c10::Half"]})
    t.launch(110, 120, "Cijk_Ailk_Bljk_HHS_BH_MT128x128x32_MI32x32x8x1_SN_1LDSB0", 200, 4200)
    db = build_database([t.write(tmp_path / "t.json")], tmp_path / "t.sqlite", progress=False)
    assert "roofline_quadrant" not in stored_findings(db)
    conn = sqlite3.connect(db)
    (agg_id,) = conn.execute("SELECT MAX(agg_id) FROM aggregations").fetchone()
    report = roofline_report(conn, agg_id)
    conn.close()
    assert report["ceilings"] is None
    assert report["ceilings_error"].startswith("no ceilings for 'AMD Instinct MI100' (not in dlscope's GPU table; "
                                               "its AMD entries: AMD Instinct MI210, ")
    assert report["ops"] and report["ops"][0]["flops"] == GEMM_FLOPS
