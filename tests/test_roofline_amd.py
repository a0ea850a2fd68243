"""AMD Instinct GPUs in the GPU table (docs/roofline.md, "AMD Instinct"): the real MI300X trace gets its roofs,
its MFU against the data file's dense BF16 matrix peak and a roofline quadrant; entries match the names ROCm
reports; FP32 on AMD matrix cores is FP32, not TF32; no NVIDIA occupancy or CC-gated advice on AMD GPUs."""

from __future__ import annotations

import ast
import gzip
import json
import re
import sqlite3
import statistics
from functools import cache
from pathlib import Path

import pytest
from conftest import REPO, data_file
from experts_helpers import stored_findings
from raw_kineto import flops_at_op_level

from dlscope.analyze.occupancy import kernel_waves
from dlscope.present.summary import summary_dict
from dlscope.roofline.analysis import roofline_report
from dlscope.roofline.ceilings import find_ceilings
from dlscope.roofline.quadrants import run_utilization

SPECS = REPO / "src" / "dlscope" / "data" / "gpu_specs.json"
MI300X_TRACE = ("kineto", "tracelens_mi300x_xdit_sd35_infer.json.gz")


@cache
def _entry(name: str) -> dict:
    """The gpu_specs.json entry that lists ``name`` among its device names, read with json.load."""
    gpus = json.loads(SPECS.read_text())["gpus"]
    return next(g for g in gpus if name in g["name_strings"])


def _raw(path: Path) -> dict:
    with gzip.open(path) as f:
        return json.load(f)


def _prod(xs) -> int:
    out = 1
    for x in xs:
        out *= x
    return out


def _concrete(e: dict, i: int):
    text = (e["args"].get("Concrete Inputs") or [])[i] if len(e["args"].get("Concrete Inputs") or []) > i else ""
    return ast.literal_eval(text) if text not in ("", None) else None


def _conv_flops(e: dict, stride_at: int, padding_at: int, dilation_at: int, groups_at: int) -> int:
    (n, c, *spatial), (k, c_per_group, *kernel) = e["args"]["Input Dims"][:2]
    stride, padding, dilation = (_concrete(e, i) for i in (stride_at, padding_at, dilation_at))
    out = [(size + 2 * p - d * (ks - 1) - 1) // s + 1
           for size, ks, s, p, d in zip(spatial, kernel, stride, padding, dilation)]
    assert c_per_group * (_concrete(e, groups_at) or 1) == c
    return 2 * n * k * _prod(out) * c_per_group * _prod(kernel)


def _attention_flops(e: dict, causal_at: int) -> int:
    """2·B·H·Sq·Sk·(D + Dv); a causal mask over a square score matrix halves it (docs/roofline.md)."""
    (b, h, s, d), (_, _, sk, _), (_, _, _, dv) = e["args"]["Input Dims"][:3]
    full = 2 * b * h * s * sk * (d + dv)
    return full // 2 if _concrete(e, causal_at) is True and s == sk else full


def _model_flops(e: dict) -> int | None:
    """Forward FLOPs of the matrix products this trace records (no bias adds), from Input Dims and Concrete
    Inputs as PyTorch's signatures order them; None for any other op."""
    name, dims = e["name"], e["args"].get("Input Dims") or []
    if name == "aten::mm":
        return 2 * dims[0][0] * dims[0][1] * dims[1][1]
    if name == "aten::addmm":
        return 2 * dims[1][0] * dims[1][1] * dims[2][1]
    if name == "aten::linear":
        return 2 * _prod(dims[0][:-1]) * dims[1][0] * dims[1][1]
    if name == "aten::matmul":
        a, b = dims[0], dims[1]
        batch = a[:-2] if len(a) >= len(b) else b[:-2]
        return 2 * _prod(batch) * a[-2] * a[-1] * b[-1]
    if name == "aten::conv2d":            # input, weight, bias, stride, padding, dilation, groups
        return _conv_flops(e, 3, 4, 5, 6)
    if name == "aten::convolution":       # input, weight, bias, stride, padding, dilation, transposed, .., groups
        assert _concrete(e, 6) is False
        return _conv_flops(e, 3, 4, 5, 8)
    if name == "aten::scaled_dot_product_attention":     # q, k, v, attn_mask, dropout_p, is_causal, ...
        return _attention_flops(e, 5)
    if name == "aten::_scaled_dot_product_flash_attention":  # q, k, v, dropout_p, is_causal, ...
        return _attention_flops(e, 4)
    return None


def test_mi300x_trace_mfu_is_model_flops_over_the_step_over_the_data_files_dense_bf16_matrix_peak(import_db):
    """Model FLOPs = the outermost matrix products of the ProfilerStep window per thread (raw JSON, formulas
    above), over the step's wall clock, over the MI300X entry's bf16_tensor_flops_dense (ROCm's 1307.4 TFLOP/s:
    304 CUs x 2.1 GHz x 2048 FLOPs/clock/CU)."""
    path = data_file(*MI300X_TRACE)
    events = _raw(path)["traceEvents"]
    (step,) = [e for e in events if e.get("ph") == "X" and e.get("name", "").startswith("ProfilerStep#")]
    start, end = step["ts"], step["ts"] + step["dur"]
    counted = flops_at_op_level(events, start, end, _model_flops)
    flops, dtypes = sum(work for _, work in counted), {e["args"]["Input type"][0] for e, _ in counted}
    assert dtypes == {"c10::BFloat16"}
    peak = _entry("AMD Instinct MI300X")["bf16_tensor_flops_dense"]
    assert peak == 1307.4e12 == pytest.approx(304 * 2.1e9 * 2048, rel=1e-4)
    a = summary_dict(import_db(path))["aggregation"]
    mfu = a["mfu"]
    assert flops > 0 and mfu["model_flops_per_iteration"] == flops
    assert (mfu["precision"], mfu["peak_flops_per_s"]) == ("bf16", peak)
    assert a["wall_clock_ns"] == pytest.approx(step["dur"] * 1e3, abs=1e3)
    assert mfu["mfu"] == pytest.approx(flops / (step["dur"] * 1e-6) / peak, rel=1e-6)
    assert round(100 * flops / (step["dur"] * 1e-6) / peak, 1) == 16.9      # as docs/metrics.md states it


def test_mi300x_roofline_report_uses_the_mi300x_roofs_for_the_device_its_kernels_ran_on(import_db):
    """The trace describes GPU 0 (deviceProperties) but its kernels ran on device 2: the rank's only described
    GPU is the one the report uses, and every roof is the data file's."""
    path = data_file(*MI300X_TRACE)
    props = _raw(path)["deviceProperties"]
    assert [(p["name"], p["computeMajor"], p["computeMinor"], p["numSms"]) for p in props] == \
        [("AMD Instinct MI300X", 9, 4, 304)]
    conn = sqlite3.connect(import_db(path))
    try:
        report = roofline_report(conn, conn.execute("SELECT MAX(agg_id) FROM aggregations").fetchone()[0])
    finally:
        conn.close()
    entry = _entry("AMD Instinct MI300X")
    assert report["ceilings_error"] is None
    assert report["gpu"]["name"] == "AMD Instinct MI300X" and report["gpu"]["cc"] == "9.4"
    c = report["ceilings"]
    assert (c["name"], c["vendor"], c["matched_by"]) == ("AMD Instinct MI300X", "AMD", "name")
    assert c["flops_per_s"]["bf16_tensor"] == entry["bf16_tensor_flops_dense"]
    assert c["flops_per_s"]["fp8_tensor"] == entry["fp8_tensor_flops_dense"] == 2614.9e12
    assert c["flops_per_s"]["fp32_tensor"] == entry["fp32_tensor_flops"] == 163.4e12
    assert c["bytes_per_s"]["dram"] == entry["dram_bandwidth_bytes_per_s"] == 5.3e12
    assert c["bytes_per_s"]["l1"] == entry["l1_bandwidth_bytes_per_s"] == statistics.median(MI300X_GPU_CACHE_L1) * 1e9
    assert c["bytes_per_s"]["l2"] == entry["l2_bandwidth_bytes_per_s"] == statistics.median(MI300X_GPU_CACHE_L2) * 1e9
    for level in ("l1", "l2"):
        source = entry["field_sources"][f"{level}_bandwidth_bytes_per_s"]
        assert source.startswith("measured on an MI300X with gpu-benches' gpu-cache")
        assert "xxrjun/gpu-benches/blob/7d13a4a2601744cabfca3de1806390e29d53c994/gpu-cache/mi300x.txt" in source
    bf16 = [o for o in report["ops"] if o["tensor_cores"] and o["precision"] == "bf16"]
    assert bf16 and {o["ceiling"] for o in bf16} == {"bf16_tensor"}


def test_roofline_quadrant_fires_on_the_mi300x_trace_both_low(import_db):
    """Hand-checked from the report's own op points: 106 modelled op nodes, 79.9 ms of GPU time, compute 14.9 %
    and memory 14.8 % utilization, both under seed 002's 70 %: both low, priced at 4.5 % of the step. The
    finding speaks of AMD matrix cores and gives no NVIDIA-only hint (no 2:4 sparsity, no CUDA FP8 line)."""
    db = import_db(data_file(*MI300X_TRACE))
    got = stored_findings(db)["roofline_quadrant"]
    ev = got["evidence"]
    assert (ev["quadrant"], ev["gpu"], ev["dominant_precision"]) == ("both_low", "AMD Instinct MI300X", "bf16")
    assert ev["compute_utilization_pct"] < 70 and ev["memory_utilization_pct"] < 70
    conn = sqlite3.connect(db)
    try:
        report = roofline_report(conn, conn.execute("SELECT MAX(agg_id) FROM aggregations").fetchone()[0])
    finally:
        conn.close()
    placed = [o for o in report["ops"] if o["bound"] is not None or o["flops"] == 0]
    points = [o for o in report["ops"] if o["gpu_time_ns"] > 0 and o["flops"] is not None
              and (o["ceiling_flops_per_s"] or o["flops"] == 0)]
    seconds = sum(o["gpu_time_ns"] for o in points) * 1e-9
    compute = sum(o["flops"] / o["ceiling_flops_per_s"] for o in points if o["flops"]) / seconds
    memory = sum(o["bytes"] for o in points) / seconds / 5.3e12
    assert placed and ev["compute_utilization_pct"] == pytest.approx(100 * compute, rel=1e-9)
    assert ev["memory_utilization_pct"] == pytest.approx(100 * memory, rel=1e-9)
    assert "Matrix Cores (AMD MFMA)" in got["problem"] and "Tensor Cores" not in got["problem"]
    assert "2:4" not in got["recommendation"] and "Hopper" not in got["recommendation"]


def test_amd_gpus_get_no_cc_gated_nvidia_hints_but_an_fp8_hint_where_the_table_has_an_fp8_rate():
    """A BF16 matrix-core GEMM at 80 % of its roof: compute bound. On an NVIDIA CC 9.0 GPU the FP8 (Hopper) and
    2:4 hints apply; an MI250X GCD reports GFX 9.0 in the same field and gets neither (CDNA 2 has no FP8 and the
    table cites no AMD sparsity); an MI300X (9.4, FP8 matrix rate in the table) gets the AMD FP8 hint only."""
    point = {"time_ns": 1e6, "flops": 0.8 * 1e15 * 1e-3, "bytes": 1e6, "peak": 1e15, "precision": "bf16",
             "tensor_cores": True, "family": "gemm"}
    hopper = run_utilization([point], 3e12, "9.0", "ops", "NVIDIA", ["bf16_tensor", "fp8_tensor"])["advice"]
    assert any("Hopper" in a for a in hopper) and any("2:4" in a for a in hopper)
    mi250x, _ = find_ceilings("AMD Instinct MI250X / MI250", "9.0", 110)
    cdna2 = run_utilization([point], 3e12, "9.0", "ops", mi250x.vendor, list(mi250x.flops))["advice"]
    assert not any("FP8" in a or "2:4" in a for a in cdna2)
    mi300x, _ = find_ceilings("AMD Instinct MI300X", "9.4", 304)
    cdna3 = run_utilization([point], 3e12, "9.4", "ops", mi300x.vendor, list(mi300x.flops))["advice"]
    assert [a for a in cdna3 if "FP8" in a] == [next(a for a in cdna3 if "MI300" in a)]
    assert not any("2:4" in a or "Hopper" in a for a in cdna3)


@pytest.mark.parametrize(("name", "cc", "cus", "expected"), [
    ("AMD Instinct MI300X", "9.4", 304, "mi300x"),
    ("AMD Instinct MI300X VF", "9.4", 304, "mi300x"),        # SR-IOV function of the same board
    ("AMD Instinct MI325X", "9.4", 304, "mi325x"),
    ("AMD Instinct MI250X / MI250", "9.0", 110, "mi250x-gcd"),  # one name for both: 110 CUs a GCD is an MI250X
    ("AMD Instinct MI250X / MI250", "9.0", 104, "mi250-gcd"),   # ... and 104 an MI250
    ("AMD Instinct MI210", "9.0", 104, "mi210"),
])
def test_amd_names_as_rocm_reports_them_match_their_entry(name, cc, cus, expected):
    ceilings, reason = find_ceilings(name, cc, cus)
    assert reason == "" and ceilings is not None and ceilings.gpu_id == expected and ceilings.vendor == "AMD"


def test_an_unlisted_variant_of_a_listed_amd_model_is_approximate_and_says_cus():
    """'AMD Instinct MI300X HF' (amdgpu.ids 74A9) is not in the table: same model token, GFX 9.4 and 304 CUs, so
    the MI300X's roofs, flagged approximate in AMD's words."""
    ceilings, _ = find_ceilings("AMD Instinct MI300X HF", "9.4", 304)
    assert ceilings.gpu_id == "mi300x" and ceilings.matched_by == "model"
    assert "(same model MI300X, GFX 9.4, 304 CUs)" in ceilings.note
    assert find_ceilings("AMD Instinct MI300X HF", "9.4", 228)[0] is None       # an MI300A's CU count: not it


@pytest.mark.parametrize(("name", "cc", "cus"), [
    ("AMD Instinct MI100", "9.0", 120),       # CDNA 1: not in the table
    ("AMD Instinct MI308X", "9.4", 80),       # a cut-down CDNA 3 part: never the MI300X's roofs
    ("AMD Radeon RX 7900 XTX", "11.0", 96),
])
def test_an_amd_gpu_not_in_the_table_gets_a_reason_naming_the_amd_entries(name, cc, cus):
    ceilings, reason = find_ceilings(name, cc, cus)
    assert ceilings is None
    assert f"no ceilings for '{name}' (not in dlscope's GPU table; its AMD entries: " in reason
    assert "AMD Instinct MI300X" in reason and "--gpu-spec FILE" in reason


def test_a_shared_name_without_a_cu_count_is_ambiguous_not_guessed():
    ceilings, reason = find_ceilings("AMD Instinct MI250X / MI250", "9.0", None)
    assert ceilings is None and "names several GPUs" in reason and "MI250X (one GCD)" in reason


def test_fp32_on_amd_matrix_cores_is_fp32_not_tf32():
    """MFMA F32 runs FP32 itself (ROCm's 'Matrix FP32' row); NVIDIA Tensor Cores run FP32 as TF32."""
    mi300x, _ = find_ceilings("AMD Instinct MI300X", "9.4", 304)
    assert mi300x.peak("fp32", True) == ("fp32_tensor", _entry("AMD Instinct MI300X")["fp32_tensor_flops"])
    assert mi300x.matrix_precision("fp32") == "fp32" and mi300x.matrix_precision("bf16") == "bf16"
    assert mi300x.peak("tf32", True) == ("tf32_tensor", 653.7e12)   # XF32, only for kernels named so
    h100, _ = find_ceilings("NVIDIA H100 80GB HBM3", "9.0", 132)
    assert h100.matrix_precision("fp32") == "tf32" and h100.peak("fp32", True)[0] == "tf32_tensor"


def test_amd_entries_peaks_are_cus_times_clock_times_rocms_per_cu_rates():
    """ROCm's FLOPS/clock/CU tables: CDNA 3 (MI300X) matrix FP16/BF16 2048, FP8/INT8 4096, XF32 1024, matrix
    FP32/FP64 256, vector FP64 128; CDNA 2 (MI250) matrix FP16/BF16/INT8 1024, matrix FP32/FP64 and packed FP32
    256, vector FP64 128. Each entry's peak = CUs x clock x rate (the datasheet rounds to 0.1 TFLOP/s)."""
    rates = {"CDNA 3": {"fp16_tensor_flops_dense": 2048, "bf16_tensor_flops_dense": 2048,
                        "fp8_tensor_flops_dense": 4096, "int8_tensor_ops_dense": 4096,
                        "tf32_tensor_flops_dense": 1024, "fp32_tensor_flops": 256, "fp64_tensor_flops": 256,
                        "fp32_flops": 256, "fp64_flops": 128},
             "CDNA 2": {"fp16_tensor_flops_dense": 1024, "bf16_tensor_flops_dense": 1024,
                        "int8_tensor_ops_dense": 1024, "fp32_tensor_flops": 256, "fp64_tensor_flops": 256,
                        "fp32_flops": 256, "fp64_flops": 128}}
    amd = [g for g in json.loads(SPECS.read_text())["gpus"] if g.get("vendor") == "AMD"]
    assert {g["id"] for g in amd} == {"mi300x", "mi325x", "mi250x-gcd", "mi250-gcd", "mi210"}
    for g in amd:
        for field, per_cu in rates[g["architecture"]].items():
            assert g[field] == pytest.approx(g["sm_count"] * g["boost_clock_hz"] * per_cu, rel=1e-3), (g["id"], field)
        assert all(g[f] is None for f in g if f.endswith("_sparse"))     # no sparse figure read from a source
        assert g["source"] and g["verification"]
        if g["architecture"] == "CDNA 2":
            assert g["tf32_tensor_flops_dense"] is None and g["fp8_tensor_flops_dense"] is None
    # the MI250 OAM (two 104-CU GCDs) as ROCm prints it: FP16 362.1, vector FP64 45.3 TFLOP/s
    gcd = next(g for g in amd if g["id"] == "mi250-gcd")
    assert round(2 * gcd["fp16_tensor_flops_dense"] / 1e12, 1) == 362.1
    assert round(2 * gcd["fp64_flops"] / 1e12, 1) == 45.3


#: 'Eff. bw' (GB/s) of the cited result files, typed from them: xxrjun/gpu-benches @ 7d13a4a gpu-cache/mi300x.txt,
#: data sets 4-32 kB (inside a CU's 32 kB L1) and 96-3936 kB (inside an XCD's 4 MB L2); te42kyfo/gpu-benches @
#: 3088b33 gpu-l2-cache/mi210.txt, data sets 1536-7680 kB (inside the 8 MB L2)
MI300X_GPU_CACHE_L1 = [38806.5, 38390.2, 38174.6, 39333.4, 38824.5]
MI300X_GPU_CACHE_L2 = [
    28243.8, 27229.7, 27705.3, 27876.7, 27451.7, 28449.9, 28324.5, 28142.7, 28439.7, 28407.8, 28584.3, 27513.3,
    27538.9, 27587.4, 26954.4, 26788.6, 27649.9, 27578.7, 27541.7, 27302.8, 27566.3, 27574.4, 27539.7, 27582.2,
    27627.4, 27613.2, 27705.5, 27664.6, 27495.1, 27229.5, 26977.2, 26739.3, 27218.1, 27527.7, 26955.0, 26558.6,
    27089.1, 26844.8, 26931.2, 26542.9]
MI210_GPU_CACHE_L1 = [10227.6, 10555.5, 10518.7]   # xxrjun/gpu-benches @ 7d13a4a gpu-cache/mi210.txt, 4-16 kB
MI210_GPU_L2_CACHE = [4814.8, 4827.7, 4955.4, 5075.9, 5105.8, 5064.1, 5103.8, 4951.7, 4895.3, 4703.2, 4582.9,
                      4533.4, 4529.3]


def test_amd_cache_roofs_are_plateau_medians_of_files_at_a_commit_and_derived_ones_are_uncertain():
    """Each AMD cache roof cites a result file at a 40-hex commit and states its value; "measured on" names a
    product whose words are in the entry's name, every other source starts "derived" and is uncertain; the
    medians are the ones worked out by hand from the files; L1 > L2 > DRAM."""
    assert statistics.median(MI300X_GPU_CACHE_L1) == 38806.5
    assert statistics.median(MI300X_GPU_CACHE_L2) == pytest.approx(27540.7)
    assert statistics.median(MI210_GPU_L2_CACHE) == 4895.3
    assert statistics.median(MI210_GPU_CACHE_L1) == 10518.7
    assert 38806.5e9 / (304 * 2.1e9) == pytest.approx(60.8, abs=0.05)   # B/clock/CU: the README's 'up to 64B'
    assert 10518.7e9 / (104 * 1.7e9) == pytest.approx(59.5, abs=0.05)
    # the MI250X GCD's L1: the MI210's per-CU rate on 110 CUs instead of 104
    assert _entry("AMD Instinct MI250X")["l1_bandwidth_bytes_per_s"] == pytest.approx(10518.7e9 * 110 / 104, abs=1e8)
    checked = 0
    for g in json.loads(SPECS.read_text())["gpus"]:
        if g.get("vendor") != "AMD":
            continue
        for level in ("l1", "l2"):
            value = g.get(f"{level}_bandwidth_bytes_per_s")
            if not value:
                continue
            src = g["field_sources"][f"{level}_bandwidth_bytes_per_s"]
            assert re.search(r"https://github\.com/[\w-]+/gpu-benches/blob/[0-9a-f]{40}/", src), src
            assert f"{value / 1e9:.1f} GB/s" in src
            assert "not measured on" in src or src.startswith("measured on")
            if src.startswith("measured on an "):
                product = src.removeprefix("measured on an ").split(" with ")[0]
                assert product in g["name"], (g["id"], product)
            else:
                assert src.startswith("derived:") and f"{level}_bandwidth_bytes_per_s" in g["uncertain_fields"]
            checked += 1
        levels = [g.get("l1_bandwidth_bytes_per_s"), g.get("l2_bandwidth_bytes_per_s"), g["dram_bandwidth_bytes_per_s"]]
        known = [v for v in levels if v]
        assert known == sorted(known, reverse=True), g["id"]
    assert checked == 10                                   # both levels on every AMD entry
    mi210 = _entry("AMD Instinct MI210")
    assert (mi210["l1_bandwidth_bytes_per_s"], mi210["l2_bandwidth_bytes_per_s"]) == (10518.7e9, 4895.3e9)


def test_amd_kernels_get_no_nvidia_occupancy_even_where_the_gfx_version_reads_like_a_hopper_cc():
    """gfx90a reports 9.0, Hopper's compute capability: an MI250X GCD's launches get no waves or occupancy,
    while the same launch on an H100 does."""
    import pandas as pd

    launch = {"rank": [0], "device": [0], "grid_x": [1000], "grid_y": [1], "grid_z": [1], "block_x": [256],
              "block_y": [1], "block_z": [1], "registers": [32], "shared_mem": [0]}
    kernels = pd.DataFrame(launch)
    amd = pd.DataFrame({"rank": [0], "device": [0], "name": ["AMD Instinct MI250X / MI250"], "sm_count": [110],
                        "cc_major": [9], "cc_minor": [0]})
    nvidia = amd.assign(name="NVIDIA H100 80GB HBM3", sm_count=132)
    assert kernel_waves(kernels, amd)["waves"].isna().all()
    assert kernel_waves(kernels, amd)["active_blocks_per_sm"].tolist() == [-1]
    assert kernel_waves(kernels, nvidia)["waves"].notna().all()


def test_fp32_gemms_on_mi300x_matrix_cores_are_priced_from_fp32_mfma_to_bf16(tmp_path):
    """Two steps, each an FP32 aten::mm whose Tensile MFMA kernel (MI32x32x2: FP32 on the matrix cores) runs
    400 µs on an MI300X: amp_not_enabled says FP32 on Matrix Cores (not TF32) and prices each kernel at
    1 − 163.4 / 1307.4 of its time (ROCm: matrix FP32 vs matrix BF16/FP16, 8×)."""
    from trace_builder import KinetoTrace

    from dlscope.pipeline import build_database

    t = KinetoTrace()
    t.device_properties = [{"id": 0, "name": "AMD Instinct MI300X", "totalGlobalMem": 206141652992,
                            "computeMajor": 9, "computeMinor": 4, "numSms": 304}]
    kernel = "Cijk_Ailk_Bljk_SB_MT128x128x16_MI32x32x2x1_SN_1LDSB0_GRVW4"
    for i in range(2):
        b = 1000 * i
        t.step(i + 1, b, b + 1000)
        t.op("aten::mm", b + 100, b + 200, **{"Input Dims": [[64, 64], [64, 64]], "Input type": ["float", "float"]})
        t.launch(b + 110, b + 120, kernel, b + 200, b + 600)
        t.op("autograd::engine::evaluate_function: MmBackward0", b + 700, b + 750)
    db = build_database([t.write(tmp_path / "amd.json")], tmp_path / "amd.sqlite", progress=False)
    got = stored_findings(db)["amp_not_enabled"]
    fp32_mfma, bf16 = (_entry("AMD Instinct MI300X")[f] for f in ("fp32_tensor_flops", "bf16_tensor_flops_dense"))
    assert got["est_saving_ns"] == pytest.approx(2 * 400e3 * (1 - fp32_mfma / bf16), abs=1)
    assert got["evidence"]["eligible_tf32_kernel_time_ns"] == 2 * 400_000   # on the matrix units
    assert "as FP32 on Matrix Cores (AMD MFMA) already" in got["problem"]
    assert "8.0× the peak (163 → 1,307 TFLOP/s on AMD Instinct MI300X)" in got["problem"]
    assert "TF32" not in got["problem"] and "CUDA cores" not in got["problem"]
