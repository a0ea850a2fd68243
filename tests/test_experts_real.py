"""Expert-system rules on real profiles (../shared/data): each rule fires on a file that shows its problem
and stays silent on one that does not; savings are re-computed here from the raw tables with numpy."""

from __future__ import annotations

import gzip
import json
import sqlite3

import numpy as np
import pytest
from conftest import data_file
from experts_helpers import findings

W0 = ("kineto", "tbplugin_resnet50_v100_workers0.pt.trace.json.gz")     # 0 DataLoader workers, FP32, SGD
W4 = ("kineto", "tbplugin_resnet50_v100_workers4.pt.trace.json.gz")     # 4 workers
DLPROF = ("nsys_sqlite", "dlprof_pytorch_emit_nvtx_rtx2070s_nsys2022.1.sqlite")
BERT = ("kineto", "tracelens_h100_bert_small_infer.json.gz")
QWEN = ("kineto", "tracelens_h100_qwen1.5_0.5b_infer.json.gz")
VIT = ("kineto", "tracelens_h100_vit_nsfw_infer.json.gz")
NS = ("kineto", "hta_v100_ns_resolution_5steps.pt.trace.json.gz")      # 97% GPU busy, foreach SGD
NCCL = ("kineto", "hta_a100_nccl_rank0of2_3steps.json.gz")
ALEXNET = ("kineto", "hta_alexnet_a100_critical_path.json.gz")
V100R1 = ("kineto", "hta_v100_rank1of2_5steps.json.gz")
A100_16 = ("kineto", "hta_a100_80gb_rank0of16_5steps.json.gz")
DIFF_A100 = ("kineto", "hta_trace_diff_control_a100_rank3of8.json.gz")
MI300X = ("kineto", "tracelens_mi300x_xdit_sd35_infer.json.gz")
DEEPSEEK = ("kineto", "deepseek_h800_train_ep64_rank0.json.gz")          # FP8/BF16 training, no dtypes


@pytest.fixture(scope="module")
def rules(import_db):
    cache = {}

    def get(parts):
        if parts not in cache:
            cache[parts] = findings(import_db(data_file(*parts)))
        return cache[parts]
    return get


def _raw(import_db, parts):
    conn = sqlite3.connect(import_db(data_file(*parts)))
    agg = dict(zip([d[0] for d in conn.execute("SELECT * FROM aggregations").description],
                   conn.execute("SELECT * FROM aggregations ORDER BY agg_id DESC").fetchone()))
    return conn, agg


def _union(s, e):
    """Length of a union of intervals, by sweeping sorted starts (independent of dlscope's interval code)."""
    total, cur_s, cur_e = 0, None, None
    for a, b in sorted(zip(s, e)):
        if cur_e is None or a > cur_e:
            total += (cur_e - cur_s) if cur_e is not None else 0
            cur_s, cur_e = a, b
        else:
            cur_e = max(cur_e, b)
    return total + ((cur_e - cur_s) if cur_e is not None else 0)


def _minus(a, b, lo, hi):
    """|union(a) minus union(b)| inside [lo, hi), on a 1-µs grid (traces here have µs timestamps)."""
    grid = np.arange(lo, hi, 1000)
    def cover(spans):
        m = np.zeros(len(grid), dtype=bool)
        for s, e in spans:
            m[(grid >= s) & (grid < e)] = True
        return m
    return int((cover(a) & ~cover(b)).sum()) * 1000


def test_dataloader_fires_with_zero_workers_and_saving_is_loader_time_with_gpu_idle(rules, import_db):
    got = rules(W0)["dataloader_bottleneck"]
    conn, agg = _raw(import_db, W0)
    lo, hi = agg["window_start"], agg["window_end"]
    loader = conn.execute("SELECT start, \"end\" FROM ops WHERE name LIKE '%DataLoader%' OR name LIKE '%__next__%' "
                          "UNION ALL SELECT start, \"end\" FROM ranges WHERE category = 'dataloader'").fetchall()
    gpu = conn.execute("SELECT start, \"end\" FROM kernels UNION ALL SELECT start, \"end\" FROM memops").fetchall()
    expected = _minus(loader, gpu, lo, hi)
    assert got["est_saving_ns"] == pytest.approx(expected, rel=0.01)
    assert got["est_saving_pct"] > 30 and got["severity"] == "high"
    assert "dataloader_bottleneck" not in rules(W4)


def test_amp_fires_on_fp32_profiles_and_not_on_bf16_inference(rules):
    for parts in (W0, DLPROF):
        got = rules(parts)["amp_not_enabled"]
        assert got["est_saving_ns"] > 0 and got["evidence"]["node_ids"]
        assert "amp.html" in got["recommendation"]
    for parts in (BERT, QWEN, VIT):
        assert "amp_not_enabled" not in rules(parts)


def _raw_events(parts) -> list[dict]:
    with gzip.open(data_file(*parts), "rt") as f:
        return json.load(f)["traceEvents"]


@pytest.mark.parametrize("parts", [NS, NCCL, V100R1], ids=lambda p: p[1].split(".")[0])
def test_amp_fires_from_kernel_names_on_real_traces_without_dtypes(parts, rules):
    events = _raw_events(parts)
    assert not any("Input type" in (e.get("args") or {}) for e in events)     # recorded without record_shapes
    got = rules(parts)["amp_not_enabled"]
    ev = got["evidence"]
    assert got["est_saving_ns"] > 0
    assert ev["precision_from_kernel_names_ns"] == (ev["eligible_fp32_kernel_time_ns"]
                                                    + ev["eligible_tf32_kernel_time_ns"])
    gpu = _device_properties(parts)[0]["name"]
    if "A100" in gpu:                 # A100 convolutions and GEMMs run TF32 by default: said as TF32
        assert ev["eligible_tf32_kernel_time_ns"] > 0 and "TF32 on Tensor Cores already" in got["problem"]
    else:                             # V100 has no TF32: FP32 on CUDA cores
        assert ev["eligible_tf32_kernel_time_ns"] == 0 and "CUDA cores" in got["problem"]


def _device_properties(parts) -> list[dict]:
    with gzip.open(data_file(*parts), "rt") as f:
        return json.load(f)["deviceProperties"]


def test_amp_silent_on_half_precision_and_fp8_runs_without_dtypes(rules):
    events = _raw_events(DEEPSEEK)
    assert not any("Input type" in (e.get("args") or {}) for e in events)
    assert any("fp8" in e.get("name", "") for e in events if e.get("cat") == "kernel")
    assert "amp_not_enabled" not in rules(DEEPSEEK)


def test_amp_saving_is_eligible_fp32_kernel_time_times_v100_peak_ratio(rules, import_db):
    got = rules(W0)["amp_not_enabled"]
    conn, agg = _raw(import_db, W0)
    # kernels launched by a TC-eligible op or by an op nested in one (FP32 throughout in this profile)
    eligible = conn.execute(
        "WITH RECURSIVE under(op_id) AS (SELECT op_id FROM ops WHERE tc_eligible = 1 "
        "UNION SELECT o.op_id FROM ops o JOIN under u ON o.parent_id = u.op_id) "
        "SELECT k.start, k.\"end\" FROM kernels k WHERE k.op_id IN (SELECT op_id FROM under) "
        "AND k.iteration BETWEEN ? AND ?", (agg["iter_start"], agg["iter_stop"])).fetchall()
    total = sum(e - s for s, e in eligible)
    assert got["evidence"]["eligible_fp32_kernel_time_ns"] == total
    assert got["est_saving_ns"] == pytest.approx(min(total * (1 - 15.7 / 125), _union(*zip(*eligible))), rel=1e-3)


def test_tc_shape_alignment_reads_bert_sequence_length(import_db):
    from dlscope.experts.rules.shapes import tc_dims

    conn = sqlite3.connect(import_db(data_file(*BERT)))
    dims = [tc_dims(n, s)
            for n, s in conn.execute("SELECT DISTINCT name, input_shapes FROM ops WHERE name = 'aten::linear'")]
    assert any(d and d.get("M") == 141 for d in dims)                    # sequence length 141: not a multiple of 8


def test_tc_shape_alignment_needs_an_aligned_reference_to_price_a_finding(rules):
    got = rules(MI300X)["tc_shape_alignment"]
    assert got["est_saving_ns"] > 0
    assert all(any(v % 8 for v in s["dims"].values()) for s in got["evidence"]["shapes"])
    assert "tc_shape_alignment" not in rules(BERT)   # misaligned, but no aligned GEMM of its size to price against
    assert "tc_shape_alignment" not in rules(W0)     # FP32: no alignment rule
    assert "tc_shape_alignment" not in rules(QWEN)


def test_gpu_underutilized_names_dominant_category(rules, import_db):
    got = rules(DLPROF)["gpu_underutilized"]
    conn, agg = _raw(import_db, DLPROF)
    parts = {c: agg[f"{c}_ns"] for c in ("dataloader", "io", "cpu", "other")}
    top = max(parts, key=parts.get)
    assert got["evidence"]["dominant_category"] == top and got["est_saving_ns"] == parts[top]
    assert "gpu_underutilized" not in rules(W4)               # 70% busy


def test_pageable_memcpy_fires_without_pin_memory(rules, import_db):
    got = rules(W0)["pageable_memcpy"]
    conn, agg = _raw(import_db, W0)
    copies = conn.execute("SELECT start, \"end\" FROM memops WHERE copy_kind = 'HtoD' AND src_mem = 'pageable' "
                          "AND iteration BETWEEN ? AND ?", (agg["iter_start"], agg["iter_stop"])).fetchall()
    kernels = conn.execute("SELECT start, \"end\" FROM kernels").fetchall()
    assert got["est_saving_ns"] == _minus(copies, kernels, agg["window_start"], agg["window_end"])
    assert got["evidence"]["copies"] == 12


@pytest.mark.slow
def test_pageable_memcpy_silent_with_pinned_copies(rules):
    assert "pageable_memcpy" not in rules(DIFF_A100)


def test_sync_api_fires_on_item_in_inference_loop(rules):
    got = rules(QWEN)["sync_api"]
    assert "aten::_local_scalar_dense" in got["problem"]
    assert 0 < got["est_saving_ns"] <= got["evidence"]["blocked_cpu_ns"]
    assert "sync_api" not in rules(NS) and "sync_memcpy" not in rules(W0)


def test_gpu_gaps_located_and_silent_when_gpu_busy(rules):
    got = rules(W0)["gpu_gaps"]
    assert got["evidence"]["time_ranges"] and got["evidence"]["kernels"]
    assert all(e - s >= 1_000_000 for s, e in got["evidence"]["time_ranges"])
    assert "gpu_gaps" not in rules(NS)


def test_launch_bound_fires_on_short_kernels_and_not_on_busy_gpu(rules):
    got = rules(W0)["launch_bound"]           # short launches; the GPU's other waits are data loading
    assert got["evidence"]["short_kernels"] > 1000
    assert "launch_bound" not in rules(NS)


def test_host_bound_subsumes_launch_bound_and_is_silent_on_a_busy_gpu(rules):
    got = rules(W4)["host_bound"]             # 4 workers: the step waits on the host, not on data loading
    assert got["evidence"]["launch_bound"] and got["evidence"]["short_kernels"] > 1000
    assert "Launch-bound:" in got["problem"] and "launch_bound" not in rules(W4)
    assert "host_bound" not in rules(W0) and "host_bound" not in rules(NS)


def test_unfused_optimizer_fires_on_per_parameter_sgd_only(rules):
    got = rules(W0)["unfused_optimizer"]
    assert got["evidence"]["kernels_per_step"] == 483       # ResNet-50: 161 params x (add, mul, add)
    assert "unfused_optimizer" not in rules(NS)              # foreach SGD


@pytest.mark.slow
def test_unfused_optimizer_silent_with_fused_adam(rules):
    assert "unfused_optimizer" not in rules(A100_16)


def test_fusion_candidates_on_llm_decode_and_not_on_busy_training(rules):
    got = rules(QWEN)["fusion_candidates"]
    assert got["evidence"]["patterns"] and len(got["evidence"]["kernels"]) >= 2
    assert sum(p["saving_ns"] for p in got["evidence"]["patterns"]) == got["est_saving_ns"]
    assert "fusion_candidates" not in rules(NS)


def test_layout_transposes_fire_on_nchw_convolutions(rules, import_db):
    got = rules(NCCL)["layout_transposes"]
    conn, agg = _raw(import_db, NCCL)
    t = conn.execute("SELECT start, \"end\" FROM kernels WHERE (name LIKE '%nchwToNhwc%' OR name LIKE '%nhwcToNchw%') "
                     "AND iteration BETWEEN ? AND ?", (agg["iter_start"], agg["iter_stop"])).fetchall()
    assert got["est_saving_ns"] == _union(*zip(*t))
    assert "layout_transposes" not in rules(W0)


def test_cudnn_benchmark_off_priced_against_similar_convolutions(rules):
    convs = [e for e in _raw_events(MI300X) if e.get("name") == "aten::_convolution"]
    assert convs and all(str(e["args"]["Concrete Inputs"][9]) == "False" for e in convs)   # benchmark=False
    got = rules(MI300X)["cudnn_benchmark_off"]
    assert 0 < got["est_saving_ns"] < got["evidence"]["conv_kernel_time_ns"]
    assert "cudnn_benchmark_off" not in rules(VIT)           # one convolution: no peer to price it against
    assert "cudnn_benchmark_off" not in rules(W0)            # no recorded arguments: cannot tell


def test_iteration_variance_says_warm_up_and_suggests_steady_range(rules, import_db):
    got = rules(W4)["iteration_variance"]
    conn, agg = _raw(import_db, W4)
    d = np.array([r[0] for r in conn.execute("SELECT duration_ns FROM agg_iterations WHERE profiled = 1 "
                                              "ORDER BY iteration")], dtype=float)
    rest = d[1:]
    med = np.median(rest)
    assert d[0] > 1.15 * med                                 # the first profiled step is a warm-up
    expected = (d[0] - med) + np.clip(rest[np.abs(rest - med) > 0.15 * med] - med, 0, None).sum()
    assert got["est_saving_ns"] == pytest.approx(expected, abs=2)
    assert got["evidence"]["warmup_iteration"] == 5 and "warm-up" in got["problem"]
    assert (got["evidence"]["steady_iter_start"], got["evidence"]["steady_iter_stop"]) == (6, 8)
    assert "--iter-start 6 --iter-stop 8" in got["recommendation"]
    assert "iteration_variance" not in rules(W0)


def test_gpu_memory_underutilized_silent_on_inference_and_without_totals(rules, import_db):
    conn, _ = _raw(import_db, QWEN)
    peak, cap = conn.execute("SELECT (SELECT MAX(MAX(total_allocated), MAX(total_reserved)) FROM memory "
                             "WHERE device >= 0), "
                             "(SELECT MAX(memory_bytes) FROM gpus)").fetchone()
    assert peak / cap < 0.3                                  # memory is underused, but the run is inference
    assert "gpu_memory_underutilized" not in rules(QWEN)
    assert "gpu_memory_underutilized" not in rules(W0)       # no memory totals recorded


@pytest.mark.slow
def test_exposed_communication_and_memory_on_multi_gpu_training(rules, import_db):
    got = rules(V100R1)["exposed_communication"]
    conn, agg = _raw(import_db, V100R1)
    it = (agg["iter_start"], agg["iter_stop"])
    comm = conn.execute("SELECT start, \"end\" FROM kernels WHERE name LIKE 'nccl%' AND iteration BETWEEN ? AND ?",
                        it).fetchall()
    comp = conn.execute("SELECT start, \"end\" FROM kernels WHERE name NOT LIKE 'nccl%' AND iteration BETWEEN ? "
                        "AND ?", it).fetchall()
    assert got["est_saving_ns"] == _minus(comm, comp, agg["window_start"], agg["window_end"])
    assert "gpu_memory_underutilized" not in rules(V100R1)   # 40% of 32 GB reserved
    assert "exposed_communication" not in rules(W0)


def test_stored_evidence_is_strict_json_where_an_op_has_no_precision(import_db):
    """The A100 16-rank job's rank 0: two of the roofline finding's ops have no precision, which was stored as the
    non-JSON token ``NaN``; every finding's evidence must parse as strict JSON, those ops' precision null."""
    conn, _ = _raw(import_db, A100_16)
    rows = conn.execute("SELECT rule, evidence_json FROM findings").fetchall()
    assert rows
    parsed = {rule: json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} in stored evidence"))
              for rule, text in rows}
    assert None in {op["precision"] for op in parsed["roofline_quadrant"]["ops"]}


@pytest.mark.parametrize("parts", [W4, NCCL, V100R1, DIFF_A100], ids=lambda p: p[1].split(".")[0])
def test_every_op_node_a_finding_names_is_an_op_node_of_its_aggregation(import_db, parts):
    """The viewer's drill-down lists a finding's op nodes from agg_ops, which holds the outermost ops (PRODUCT.md's
    op nodes). Rules that name the op launching a kernel (an ``nccl:all_reduce`` under ``record_param_comms``, a
    kernel's inner aten op) named nested ops' nodes that no aggregation table holds: "Ops concerned (2)" showed
    one row. Every named node must be one of the aggregation's op nodes, and a nested op counts as its outermost op,
    found here by following ``ops.parent_id`` in SQL."""
    conn, _ = _raw(import_db, parts)
    rows = conn.execute("SELECT agg_id, rule, evidence_json FROM findings").fetchall()
    named = 0
    for agg_id, rule, text in rows:
        ids = json.loads(text).get("node_ids") or []
        nodes = {r[0] for r in conn.execute("SELECT node_id FROM agg_ops WHERE agg_id = ?", (agg_id,))}
        assert set(ids) <= nodes, rule
        named += len(ids)
    assert named
    roots = dict(conn.execute(  # every op's outermost op's node, by the parent chain
        "WITH RECURSIVE up(op_id, at) AS (SELECT op_id, op_id FROM ops UNION ALL "
        "SELECT up.op_id, o.parent_id FROM up JOIN ops o ON o.op_id = up.at WHERE o.parent_id >= 0) "
        "SELECT up.op_id, o.node_id FROM up JOIN ops o ON o.op_id = up.at WHERE o.parent_id < 0"))
    outermost = set(roots.values())
    assert all(i in outermost for _, _, text in rows for i in json.loads(text).get("node_ids") or [])
