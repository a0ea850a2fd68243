"""Advice must fit the run (issue 13, items 7 and 9): precision from kernel names when a trace has no dtypes,
TF32 told apart from FP32 on CUDA cores, no GPU advice on a CPU-only run, batch-size advice only for
training and bounded, warm-up told apart from variation, and no finding without a saving.

Hand-made traces carry numbers computed by hand; real profiles from ../shared/data are checked against
what their raw JSON says (device properties, op names), independently of dlscope.
"""

from __future__ import annotations

import gzip
import json
import math
import sqlite3

import pytest
from conftest import data_file, data_files
from experts_helpers import findings, stored_findings
from trace_builder import PID, TID, KinetoTrace

from dlscope.experts import Finding, load_config, registry
from dlscope.pipeline import aggregate, build_database

US = 1000
MS = 1000 * US
#: the rules whose advice is about a GPU (the oracle for CPU-only runs; written out here on purpose)
GPU_FAMILY = {"amp_not_enabled", "tc_eligible_not_using_tc", "tc_shape_alignment", "gpu_underutilized",
              "pageable_memcpy", "sync_memcpy", "sync_api", "gpu_gaps", "launch_bound", "host_bound",
              "unfused_optimizer", "fusion_candidates", "layout_transposes", "cudnn_benchmark_off",
              "gpu_memory_underutilized", "exposed_communication"}
SGEMM = "ampere_sgemm_128x64_nn"                                   # FP32 on CUDA cores (cuBLAS naming)
TF32_GEMM = ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_tn_align1>"
             "(cutlass_80_tensorop_s1688gemm_256x64_16x4_tn_align1::Params)")
FP16_GEMM = "ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_nn"
BACKWARD = "autograd::engine::evaluate_function: MmBackward0"
# A100 SXM4 80GB datasheet (dense): FP32 19.5, TF32 156, FP16 Tensor Core 312 TFLOP/s
A100_FP32, A100_TF32, A100_FP16 = 19.5, 156.0, 312.0


def _db(tmp_path, trace: KinetoTrace, name: str):
    return build_database([trace.write(tmp_path / name)], tmp_path / (name + ".sqlite"), progress=False)


def _gemm_trace(kernel: str, steps: int = 2, training: bool = True, **op_args) -> KinetoTrace:
    """Steps of 1000 µs: aten::mm [100, 200) launches ``kernel`` on [200, 600); a backward op marks training."""
    t = KinetoTrace()
    for i in range(steps):
        b = 1000 * i
        t.step(i + 1, b, b + 1000)
        t.op("aten::mm", b + 100, b + 200, **op_args)
        t.launch(b + 110, b + 120, kernel, b + 200, b + 600)
        if training:
            t.op(BACKWARD, b + 700, b + 750)
    return t


# --- item 7: precision from kernel names -------------------------------------------------------------------------

def test_amp_from_kernel_names_when_the_trace_has_no_dtypes(tmp_path):
    """No record_shapes: no Input type anywhere. The sgemm name says FP32 on CUDA cores."""
    got = findings(_db(tmp_path, _gemm_trace(SGEMM), "nodtype.json"))["amp_not_enabled"]
    assert got["est_saving_ns"] == pytest.approx(2 * 400 * US * (1 - A100_FP32 / A100_FP16), rel=1e-3)
    assert got["evidence"]["precision_from_kernel_names_ns"] == 2 * 400 * US
    assert got["evidence"]["eligible_fp32_kernel_time_ns"] == 2 * 400 * US
    assert "CUDA cores" in got["problem"] and "kernel names" in got["problem"]
    assert "GradScaler" in got["recommendation"]                       # training advice


def test_tf32_kernels_are_said_as_tf32_not_as_missing_tensor_cores(tmp_path):
    got = findings(_db(tmp_path, _gemm_trace(TF32_GEMM), "tf32.json"))["amp_not_enabled"]
    assert got["est_saving_ns"] == pytest.approx(2 * 400 * US * (1 - A100_TF32 / A100_FP16), rel=1e-3)
    assert got["evidence"]["eligible_tf32_kernel_time_ns"] == 2 * 400 * US
    assert got["evidence"]["eligible_fp32_kernel_time_ns"] == 0
    assert "TF32 on Tensor Cores already" in got["problem"] and "2.0× the peak" in got["problem"]
    assert "not using Tensor Cores" not in got["problem"]


def test_tf32_with_recorded_float_inputs_is_tf32_too(tmp_path):
    t = _gemm_trace(TF32_GEMM, **{"Input Dims": [[64, 64], [64, 64]], "Input type": ["float", "float"]})
    got = findings(_db(tmp_path, t, "tf32_dtype.json"))["amp_not_enabled"]
    assert got["evidence"]["precision_from_kernel_names_ns"] == 0      # the op's dtype said FP32
    assert got["evidence"]["eligible_tf32_kernel_time_ns"] == 2 * 400 * US
    assert "TF32 on Tensor Cores already" in got["problem"]


def test_the_ops_dtype_wins_over_the_kernel_name(tmp_path):
    t = _gemm_trace(SGEMM, **{"Input Dims": [[64, 64], [64, 64]], "Input type": ["c10::Half", "c10::Half"]})
    assert "amp_not_enabled" not in findings(_db(tmp_path, t, "half_dtype.json"))


def test_half_precision_kernels_without_dtypes_get_no_amp_advice(tmp_path):
    f = findings(_db(tmp_path, _gemm_trace(FP16_GEMM), "fp16.json"))
    assert "amp_not_enabled" not in f and "tc_eligible_not_using_tc" not in f


def test_inference_gets_inference_precision_advice(tmp_path):
    got = findings(_db(tmp_path, _gemm_trace(SGEMM, training=False), "infer.json"))["amp_not_enabled"]
    assert got["evidence"]["run_kind"] == "inference"
    assert "GradScaler" not in got["recommendation"] and "bfloat16" in got["recommendation"]


# --- item 9: a finding with no saving is not a finding ---------------------------------------------------------------

def _constant_rule(rule_id: str, saving):
    return lambda ctx, cfg: Finding(rule_id, "problem", "recommendation", saving)


def test_no_rule_can_emit_a_finding_without_a_saving(tmp_path, monkeypatch):
    """Rules returning a saving of None, 0, NaN and 5 ns: only the priced one is a finding."""
    t = KinetoTrace()
    t.step(1, 0, 1000)
    t.op("aten::relu", 100, 200)
    t.launch(110, 120, "void at::native::vectorized_elementwise_kernel<4>", 200, 300)
    db = _db(tmp_path, t, "tiny.json")
    rules = dict(registry.load_rules())
    for rule_id, saving in (("_test_none", None), ("_test_zero", 0), ("_test_nan", math.nan), ("_test_five", 5)):
        rules[rule_id] = _constant_rule(rule_id, saving)
    monkeypatch.setattr(registry, "RULES", rules)
    (agg_id,) = aggregate(db)  # the rules run in this process, as `dlscope aggregate` runs them
    got = stored_findings(db, agg_id)
    assert "_test_five" in got and got["_test_five"]["est_saving_ns"] == 5
    assert not {"_test_none", "_test_zero", "_test_nan"} & set(got)


@pytest.mark.slow
@pytest.mark.parametrize("path", data_files("kineto", "**/*.json.gz"),
                         ids=lambda p: p.name.split(".")[0])
def test_every_finding_of_every_real_kineto_profile_has_a_saving(path, import_db):
    from dlscope.present.summary import summary_dict

    doc = json.loads(json.dumps(summary_dict(import_db(path)), default=str))
    bad = [(f["rule"], f["est_saving_ns"]) for f in doc["findings"] if not f["est_saving_ns"]]
    assert not bad


# --- item 9: CPU-only runs get no GPU advice --------------------------------------------------------------------------

def _cpu_trace() -> KinetoTrace:
    """A CPU-only step: data loading, then a convolution recorded with benchmark=False (the argument cuDNN
    would read on a GPU)."""
    t = KinetoTrace()
    t.device_properties = []
    concrete = ["", "", "", "[1, 1]", "[0, 0]", "[1, 1]", "False", "[0, 0]", "1", "False", "False", "True", "True"]
    for i, b in enumerate((0, 1000)):
        t.step(i + 1, b, b + 1000)
        t.annotation("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", b + 10, b + 400)
        t.op("aten::conv2d", b + 450, b + 900, **{"Input Dims": [[8, 3, 32, 32], [16, 3, 3, 3], [16]]})
        t.op("aten::convolution", b + 460, b + 890)
        t.op("aten::_convolution", b + 470, b + 880, **{"Concrete Inputs": concrete})
    return t


def test_cpu_only_run_gets_no_gpu_advice(tmp_path):
    f = findings(_db(tmp_path, _cpu_trace(), "cpu.json"))
    assert not GPU_FAMILY & set(f)
    loader = f["dataloader_bottleneck"]                                # the CPU-side finding stays
    assert loader["est_saving_ns"] == 2 * 390 * US
    text = " ".join(x["problem"] + " " + x["recommendation"] for x in f.values())
    for gpu_word in ("pin_memory", "cudnn", "Tensor Core", "CUDA", "GPU utilization", "DALI"):
        assert gpu_word not in text


def test_real_cpu_only_trace_gets_no_gpu_advice(import_db):
    path = data_file("kineto", "hta_cpu_only_no_gpu.pt.trace.json.gz")
    with gzip.open(path, "rt") as fh:
        raw = json.load(fh)
    assert not any(e.get("cat") == "kernel" for e in raw["traceEvents"])   # the oracle: no GPU event at all
    assert not GPU_FAMILY & set(findings(import_db(path)))


# --- item 9: batch-size advice: training only, bounded ---------------------------------------------------------------

def _memory_trace(training: bool) -> KinetoTrace:
    """Two steps on an 80 GB A100; the allocator peaks at 2 GiB reserved (2.5% of capacity)."""
    t = _gemm_trace(SGEMM, training=training)
    for ts, alloc, reserved in ((50, 2**30, 2**31), (1050, 2**30, 2**31)):
        t.events.append({"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": PID, "tid": TID,
                         "ts": ts, "args": {"Total Allocated": alloc, "Total Reserved": reserved, "Bytes": 512,
                                            "Device Id": 0, "Device Type": 1}})
    return t


def test_batch_size_advice_is_bounded_and_only_for_training(tmp_path):
    db = _db(tmp_path, _memory_trace(training=True), "mem_train.json")
    got = findings(db)["gpu_memory_underutilized"]
    cap = load_config()["gpu_memory_underutilized"]["max_batch_factor"]
    # memory alone would allow 2^floor(log2(0.8 × 80 GiB / 2 GiB)) = 32×; the advice never goes past the cap
    assert got["evidence"]["batch_factor_memory_allows"] == 32
    assert got["evidence"]["batch_factor"] == cap < 32
    assert f"up to about {cap}×" in got["recommendation"] and "32" not in got["recommendation"]
    conn = sqlite3.connect(db)
    cpu, other = conn.execute("SELECT cpu_ns, other_ns FROM aggregations ORDER BY agg_id DESC").fetchone()
    conn.close()
    assert got["est_saving_ns"] == int((cpu + other) * (1 - 1 / cap))
    inference = findings(_db(tmp_path, _memory_trace(training=False), "mem_infer.json"))
    assert "gpu_memory_underutilized" not in inference
    assert not any("batch size" in f["recommendation"] for f in inference.values())


@pytest.mark.parametrize("name", ["tracelens_h100_bert_small_infer.json.gz", "tracelens_h100_vit_nsfw_infer.json.gz",
                                  "tracelens_h100_qwen1.5_0.5b_infer.json.gz"])
def test_inference_traces_get_no_batch_size_advice(name, import_db):
    path = data_file("kineto", name)
    with gzip.open(path, "rt") as fh:
        names = {e.get("name", "") for e in json.load(fh)["traceEvents"] if e.get("cat") == "cpu_op"}
    assert not any("backward" in n.lower() or n.startswith("Optimizer.") for n in names)   # the oracle: forward only
    f = findings(import_db(path))
    assert "gpu_memory_underutilized" not in f
    assert not any("batch size" in x["recommendation"] for x in f.values())


# --- item 9: warm-up versus variation ---------------------------------------------------------------------------

def _steps_trace(durations_ms: list[float]) -> KinetoTrace:
    """Consecutive ProfilerSteps of the given lengths, each with one op and a kernel inside."""
    t = KinetoTrace()
    b = 0.0
    for i, d in enumerate(durations_ms):
        end = b + d * 1000
        t.step(i + 1, b, end)
        t.op("aten::relu", b + 10, b + 20)
        t.launch(b + 12, b + 15, "void at::native::vectorized_elementwise_kernel<4>", b + 30, b + 60)
        b = end
    return t


def test_a_slow_first_step_is_said_as_warm_up_even_with_two_steps(tmp_path):
    got = findings(_db(tmp_path, _steps_trace([48.7, 0.82]), "warm2.json"))["iteration_variance"]
    assert got["evidence"]["warmup_iteration"] == 1
    assert got["est_saving_ns"] == pytest.approx((48.7 - 0.82) * MS, abs=2)
    assert "warm-up" in got["problem"] and "--iter-start 2" in got["recommendation"]


def test_warm_up_is_excluded_and_steady_steps_are_not_called_variation(tmp_path):
    got = findings(_db(tmp_path, _steps_trace([48.7, 0.82, 0.85, 0.80, 0.84]), "warm5.json"))["iteration_variance"]
    assert got["evidence"]["warmup_iteration"] == 1 and got["evidence"]["iterations"] == [1]
    assert got["est_saving_ns"] == pytest.approx((48.7 - 0.83) * MS, abs=2)      # median of 0.80..0.85 = 0.83
    assert "vary" not in got["problem"]
    assert (got["evidence"]["steady_iter_start"], got["evidence"]["steady_iter_stop"]) == (2, 5)


def test_real_variation_after_steady_steps_is_flagged_without_warm_up(tmp_path):
    got = findings(_db(tmp_path, _steps_trace([1.0, 1.0, 1.6, 1.0, 1.0]), "var.json"))["iteration_variance"]
    assert "warmup_iteration" not in got["evidence"] and got["evidence"]["iterations"] == [3]
    assert got["est_saving_ns"] == pytest.approx(0.6 * MS, abs=2)
    assert (got["evidence"]["steady_iter_start"], got["evidence"]["steady_iter_stop"]) in {(1, 2), (4, 5)}


def test_outliers_recurring_on_both_sides_of_a_short_steady_run_suggest_no_range(tmp_path):
    """Slow steps at 3, 7 and 10 of 12: the longest steady run (4-6) holds a quarter of them, with outliers
    before and after it; aggregating it would keep a sliver, so no --iter-start is suggested."""
    steps = [1.0, 1.0, 1.5, 1.0, 1.0, 1.0, 1.5, 1.0, 1.0, 1.5, 1.0, 1.0]
    got = findings(_db(tmp_path, _steps_trace(steps), "recur.json"))["iteration_variance"]
    assert got["evidence"]["iterations"] == [3, 7, 10]
    assert got["est_saving_ns"] == pytest.approx(3 * 0.5 * MS, abs=3)
    assert got["evidence"]["steady_iter_start"] is None and "--iter-start" not in got["recommendation"]
    assert "recur throughout the range (3 of 12 iterations" in got["problem"] and "4 to 6, holds 3" in got["problem"]
    assert "Uneven steps recur" in got["recommendation"]


def test_a_steady_run_holding_most_iterations_is_suggested_despite_outliers_on_both_sides(tmp_path):
    steps = [1.0, 1.5, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.5, 1.0]           # 3-9: 7 of 11 iterations
    got = findings(_db(tmp_path, _steps_trace(steps), "most.json"))["iteration_variance"]
    assert got["evidence"]["iterations"] == [2, 10]
    assert (got["evidence"]["steady_iter_start"], got["evidence"]["steady_iter_stop"]) == (3, 9)
    assert "--iter-start 3 --iter-stop 9" in got["recommendation"] and "recur" not in got["problem"]


def test_a_short_step_alone_saves_nothing_and_is_no_finding(tmp_path):
    assert "iteration_variance" not in findings(_db(tmp_path, _steps_trace([1.0, 1.0, 0.1, 1.0, 1.0]), "fast.json"))


def test_warm_up_then_jittery_steps_is_said_not_silenced(tmp_path):
    """48.7 ms, then sub-ms steps that never stay within 15% of their median twice in a row: no steady range
    exists, which used to silence the rule; now the warm-up is said and no range is suggested."""
    got = findings(_db(tmp_path, _steps_trace([48.7, 0.82, 1.2, 0.82, 1.3]), "jitter.json"))["iteration_variance"]
    med = (0.82 + 1.2) / 2                                                    # median of the four after the warm-up
    assert got["evidence"]["warmup_iteration"] == 1
    assert got["evidence"]["steady_iter_start"] is None and "--iter-start" not in got["recommendation"]
    assert got["est_saving_ns"] == pytest.approx(((48.7 - med) + (1.2 - med) + (1.3 - med)) * MS, abs=3)
    assert "warm-up" in got["problem"] and "No two consecutive iterations are steady" in got["recommendation"]
