"""Expert-system rules on hand-made traces: savings checked against numbers computed by hand.

Every rule that no real profile in ../shared/data shows gets its constructed trace here; the real-profile
tests are in test_experts_real.py.
"""

from __future__ import annotations

import json
import sqlite3

import pytest
from experts_helpers import blocking_call, findings, stored_findings
from trace_builder import KinetoTrace

from dlscope.errors import InputError
from dlscope.experts import load_config, write_expert_report, write_findings
from dlscope.experts.registry import load_rules
from dlscope.pipeline import build_database

US = 1000
RULE_IDS = {"amp_not_enabled", "tc_eligible_not_using_tc", "tc_shape_alignment", "gpu_underutilized",
            "dataloader_bottleneck", "pageable_memcpy", "sync_memcpy", "sync_api", "gpu_gaps", "launch_bound",
            "host_bound", "unfused_optimizer", "fusion_candidates", "layout_transposes", "cudnn_benchmark_off",
            "iteration_variance", "gpu_memory_underutilized", "gpu_memory_near_capacity", "exposed_communication",
            "tail_effect", "roofline_quadrant"}
HALF = {"Input type": ["c10::Half", "c10::Half"]}


def _db(tmp_path, trace: KinetoTrace, name="t.json"):
    return build_database([trace.write(tmp_path / name)], tmp_path / (name + ".sqlite"), progress=False)


def test_registry_holds_every_rule_of_the_contract():
    assert set(load_rules()) == RULE_IDS
    config = load_config()
    assert RULE_IDS <= set(config)


def test_half_precision_gemm_without_tensor_cores(tmp_path):
    """Two FP16 steps: aten::mm [100, 200) runs a CUDA-core hgemm [200, 600) (400 µs, no TC pattern)."""
    t = KinetoTrace()
    for i, base in enumerate((0, 1000)):
        t.step(i + 1, base, base + 1000)
        t.op("aten::mm", base + 100, base + 200, **{"Input Dims": [[64, 64], [64, 64]], **HALF})
        t.launch(base + 110, base + 120, "gemmSN_NN_kernel<__half, 128, 2, 4, 8, 3, 4>", base + 200, base + 600)
    f = findings(_db(tmp_path, t))
    assert "amp_not_enabled" not in f                       # FP16 inputs: AMP is on
    got = f["tc_eligible_not_using_tc"]
    # A100: FP16 Tensor Core 312 TFLOP/s vs FP16 on CUDA cores 78 TFLOP/s (Ampere whitepaper, non-Tensor)
    # -> the kernels could lose 1 - 78/312 of their time
    assert got["est_saving_ns"] == pytest.approx(2 * 400 * US * (1 - 78 / 312), rel=1e-3)
    assert got["evidence"]["iterations"] == [1, 2]
    assert got["evidence"]["kernels"] == ["gemmSN_NN_kernel<__half, 128, 2, 4, 8, 3, 4>"]
    assert got["evidence"]["time_ranges"][0] == [200 * US, 600 * US]


def test_half_precision_gemm_on_tensor_cores_is_silent(tmp_path):
    t = KinetoTrace()
    t.step(1, 0, 1000)
    t.op("aten::mm", 100, 200, **{"Input Dims": [[64, 64], [64, 64]], **HALF})
    t.launch(110, 120, "ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_nn", 200, 600)
    f = findings(_db(tmp_path, t))
    assert "tc_eligible_not_using_tc" not in f and "amp_not_enabled" not in f and "tc_shape_alignment" not in f


def test_misaligned_gemm_saving_compares_with_aligned_gemm_rate(tmp_path):
    """aligned mm 64x64x64 takes 100 µs; misaligned 63x64x64 (FLOPs 63/64 of it) takes 300 µs.
    Expected saving: 300 - 100 * 63/64 µs."""
    t = KinetoTrace()
    t.step(1, 0, 2000)
    t.op("aten::mm", 100, 150, **{"Input Dims": [[64, 64], [64, 64]], **HALF})
    t.launch(110, 120, "ampere_fp16_s16816gemm_fp16_64x64_nn", 200, 300)
    t.op("aten::mm", 400, 450, **{"Input Dims": [[63, 64], [64, 64]], **HALF})
    t.launch(410, 420, "ampere_fp16_s16816gemm_fp16_64x64_nn", 500, 800)
    got = findings(_db(tmp_path, t))["tc_shape_alignment"]
    assert got["est_saving_ns"] == pytest.approx((300 - 100 * 63 / 64) * US, abs=2)
    assert got["evidence"]["shapes"][0]["dims"] == {"M": 63, "N": 64, "K": 64}


def test_synchronous_memcpy_saving_is_blocked_time_capped_by_refill_gap(tmp_path):
    """cudaMemcpy [300, 500) blocks 200 µs; the GPU then idles from 500 until the next kernel at 620."""
    t = KinetoTrace()
    t.step(1, 0, 1000)
    t.op("aten::relu", 100, 200)
    t.launch(110, 120, "void at::native::vectorized_elementwise_kernel<4>", 150, 450)
    t.op("aten::copy_", 290, 510)
    t.launch(300, 500, "Memcpy DtoH (Device -> Pageable)", 450, 500, kind="gpu_memcpy", bytes=1024)
    t.events[-2]["name"] = "cudaMemcpy"
    t.op("aten::relu", 600, 700)
    t.launch(605, 615, "void at::native::vectorized_elementwise_kernel<4>", 620, 900)
    blocking_call(t, "cudaDeviceSynchronize", 910, 920)
    f = findings(_db(tmp_path, t))
    got = f["sync_memcpy"]
    assert got["est_saving_ns"] == 120 * US                 # min(200 blocked, 120 refill)
    assert got["evidence"]["idle_after_ns"] == 120 * US
    assert "sync_api" in f and f["sync_api"]["est_saving_ns"] == 10 * US   # blocked 10, GPU idle to the end


def test_dataloader_on_cpu_only_run_counts_share_of_step(tmp_path):
    t = KinetoTrace()
    t.device_properties = []
    for i, base in enumerate((0, 1000)):
        t.step(i + 1, base, base + 1000)
        t.annotation("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", base + 50, base + 450)
        t.op("aten::mm", base + 500, base + 900)
    got = findings(_db(tmp_path, t))["dataloader_bottleneck"]
    assert got["est_saving_ns"] == 800 * US
    assert got["est_saving_pct"] == pytest.approx(40.0)
    assert "CPU-only" in got["problem"]
    assert got["evidence"]["per_iteration_ns"] == {"1": 400 * US, "2": 400 * US} or \
        got["evidence"]["per_iteration_ns"] == {1: 400 * US, 2: 400 * US}


def test_rules_config_overrides_and_rejects_unknown_keys(tmp_path):
    t = KinetoTrace()
    t.device_properties = []
    t.step(1, 0, 1000)
    t.annotation("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 30)
    t.op("aten::mm", 100, 900)
    db = _db(tmp_path, t)
    assert "dataloader_bottleneck" not in findings(db)       # 3% < 5%
    cfg = tmp_path / "rules.json"
    cfg.write_text(json.dumps({"dataloader_bottleneck": {"min_share": 0.01}}))
    assert findings(db, cfg)["dataloader_bottleneck"]["est_saving_ns"] == 30 * US
    cfg.write_text(json.dumps({"dataloader_bottleneck": {"enabled": False}, "iteration_variance": {}}))
    assert "dataloader_bottleneck" not in findings(db, cfg)
    cfg.write_text(json.dumps({"dataloader_bottleneck": {"min_shar": 0.01}}))
    with pytest.raises(InputError, match="min_shar"):
        findings(db, cfg)
    cfg.write_text("[1]")
    with pytest.raises(InputError):
        load_config(cfg)


def test_write_findings_replaces_and_reports_escape_names(tmp_path):
    t = KinetoTrace()
    t.device_properties = []
    t.step(1, 0, 1000)
    t.annotation("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 500)
    t.op("aten::mm|<b>", 600, 900)
    db = _db(tmp_path, t)
    conn = sqlite3.connect(db)
    agg = conn.execute("SELECT MAX(agg_id) FROM aggregations").fetchone()[0]
    result = list(stored_findings(db, agg).values())  # what the import's rules found
    assert result
    with conn:
        write_findings(conn, agg, result)
        write_findings(conn, agg, result)
    rows = conn.execute("SELECT rule, evidence_json FROM findings WHERE agg_id = ?", (agg,)).fetchall()
    assert [r[0] for r in rows] == [f["rule"] for f in result]  # replaced, not appended
    assert all(set(json.loads(r[1])) >= {"node_ids", "kernels", "iterations", "time_ranges"} for r in rows)
    paths = write_expert_report(conn, agg, tmp_path / "out", ["csv", "json", "md"])
    conn.close()
    assert [p.name for p in paths] == ["expert_systems.csv", "expert_systems.json", "expert_systems.md"]
    records = json.loads(paths[1].read_text())
    assert records[0]["rule"] == result[0]["rule"] and isinstance(records[0]["evidence"], dict)
    assert "# Expert systems" in paths[2].read_text()


def test_gpu_gaps_counts_idle_stretches_per_device_and_iteration(tmp_path):
    """Two GPUs, two steps of 1000 µs; gaps of at least 150 µs: 300 and 200 µs on GPU 0 in step 1 (its
    overlapping kernels merge), 500 µs on GPU 1 in step 2; 100 µs stretches do not count."""
    t = KinetoTrace(devices=2)
    t.step(1, 0, 1000)
    t.step(2, 1000, 2000)
    for op_start, kernel, device, k_start, k_end in ((5, "k_a", 0, 100, 300), (15, "k_b", 0, 250, 400),
                                                    (25, "k_c", 0, 600, 700), (35, "k_d", 1, 50, 950),
                                                    (1005, "k_e", 0, 1100, 1900), (1015, "k_f", 1, 1000, 1400),
                                                    (1025, "k_g", 1, 1900, 2000)):
        t.op(f"op_{kernel}", op_start, op_start + 8)
        t.launch(op_start + 1, op_start + 5, kernel, k_start, k_end, device=device)
    cfg = tmp_path / "rules.json"
    cfg.write_text(json.dumps({"gpu_gaps": {"min_gap_us": 150}}))
    got = findings(_db(tmp_path, t), cfg)["gpu_gaps"]
    assert got["est_saving_ns"] == (300 + 200 + 500) * US // 2      # averaged over the two GPUs
    assert got["est_saving_pct"] == pytest.approx(25.0)             # of the 2000 µs aggregated
    ev = got["evidence"]
    assert ev["gap_count"] == 3 and ev["devices"] == [0, 1] and ev["iterations"] == [1, 2]
    assert ev["time_ranges"] == [[1400 * US, 1900 * US], [700 * US, 1000 * US], [400 * US, 600 * US]]
    assert "3 idle gaps" in got["problem"] and "on GPU 1 in iteration 2" in got["problem"]
    assert "between k_f (op op_k_f) and k_g (op op_k_g)" in got["problem"]


def test_gaps_in_windows_equals_gaps_window_by_window():
    import numpy as np

    from dlscope.experts.spans import gaps, gaps_in_windows

    rng = np.random.default_rng(7)
    for _ in range(300):
        n, m = int(rng.integers(0, 30)), int(rng.integers(0, 6))
        starts = rng.integers(0, 200, n)
        ends = starts + rng.integers(0, 30, n)  # some empty intervals, which must not split a gap
        lo = rng.integers(-20, 220, m)
        hi = lo + rng.integers(-5, 80, m)       # some empty or inverted windows
        gs, ge, window = gaps_in_windows((starts, ends), lo, hi)
        expected = [(int(s), int(e), i) for i in range(m)
                    for s, e in zip(*gaps((starts, ends), int(lo[i]), int(hi[i])))]
        assert list(zip(gs.tolist(), ge.tolist(), window.tolist())) == expected


def test_covered_lengths_equal_interval_differences_window_by_window():
    import numpy as np

    from dlscope.experts.spans import covered_lengths, length, minus

    rng = np.random.default_rng(11)
    for _ in range(300):
        n, m = int(rng.integers(0, 30)), int(rng.integers(0, 8))
        starts = rng.integers(0, 200, n)
        ends = starts + rng.integers(0, 30, n)
        lo = rng.integers(-20, 220, m)
        hi = lo + rng.integers(-5, 80, m)
        got = covered_lengths((starts, ends), lo, hi)
        expected = [max(int(h - w), 0) - length(minus((np.array([w]), np.array([h])), (starts, ends))) if h > w else 0
                    for w, h in zip(lo, hi)]
        assert got.tolist() == expected


def test_launch_bound_kernels_evidence_sums_the_wait_per_name_on_the_job_name_codes():
    """The kernels named in launch_bound's evidence: per kernel name (the job's name codes of the rank's
    kernels), the summed wait, largest first; a kernel without a name is left out however long its wait,
    rows not selected do not count."""
    from types import SimpleNamespace

    import numpy as np

    from dlscope.experts.rules.launch import top_names

    names = np.array(["a", "b", "c", "d", "e", "f", "unused"], dtype=object)
    codes = np.array([1, 0, -1, 1, 2, 0, 3, 3], dtype=np.int64)       # b a ? b c a d d
    wait = np.array([3, 4, 100, 3, 1, 1, 50, 9], dtype=np.int64)
    rows = np.array([True, True, True, True, True, True, False, True])  # the first d is not a short kernel
    frames = SimpleNamespace(name_codes=lambda key, rank: (codes, names))
    ctx = SimpleNamespace(frames=frames, rank=0)
    # b: 3 + 3 = 6, a: 4 + 1 = 5, d: 9, c: 1; the unnamed 100 left out
    assert top_names(ctx, rows, wait[rows], 3) == ["d", "b", "a"]
    assert top_names(ctx, rows, wait[rows], 10) == ["d", "b", "a", "c"]
    assert top_names(ctx, np.zeros(8, dtype=bool), wait[:0], 3) == []
