"""The GPU running behind the CPU (issue 21's GPU session, an H200 on 2026-11-27): where the GPU is the bottleneck
the CPU queues iterations ahead, so the iteration windows (CPU start to CPU start, PRODUCT.md) time the CPU's pace
and the last window holds the backlog. The iteration-variance advice must time those iterations on the GPU
instead, and the `amp` what-if must see the GEMMs a CUDA graph replays (launched by cudaGraphLaunch, under a
`Graphed` op, not a GEMM op). Oracles: hand-made traces with hand-computed times, and the raw JSON of a real
FP32 CUDA-graph capture of a transformer LM on the H200 (tests/data/h200/lm_fp32_graphs_w0_r1.pt.trace.json.gz)."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest
from conftest import data_file
from experts_helpers import findings
from raw_kineto import KERNEL_CATS, LAUNCH_CATS, MEMOP_CATS, events
from trace_builder import KinetoTrace

from dlscope.pipeline import build_database
from dlscope.whatif import whatif

US = 1000
MS = 1000 * US
LM_GRAPHS = Path(__file__).parent / "data" / "h200" / "lm_fp32_graphs_w0_r1.pt.trace.json.gz"


def _queued_trace(kernel_ms: list[float]) -> KinetoTrace:
    """Steps of 1 ms on the CPU, each launching one kernel of the given length at 30 µs into the step; the
    kernels queue on one stream, so kernel i starts when kernel i-1 ends (the GPU falls further behind)."""
    t = KinetoTrace()
    gpu_free = 0.0
    for i, length in enumerate(kernel_ms):
        b = 1000.0 * i
        t.step(i + 1, b, b + 1000)
        t.op("aten::relu", b + 10, b + 20)
        start = max(b + 30, gpu_free)
        gpu_free = start + length * 1000
        t.launch(b + 12, b + 15, "void at::native::vectorized_elementwise_kernel<4>", start, gpu_free)
    return t


def _db(tmp_path, trace: KinetoTrace, name: str) -> Path:
    return build_database([trace.write(tmp_path / name)], tmp_path / (name + ".sqlite"), progress=False)


def test_a_steady_gpu_behind_the_cpu_is_not_called_variation(tmp_path):
    """Windows of 1 ms, 1 ms, 1 ms, 1 ms, then 21.03 ms (the last holds the queue: 30 µs + 5 × 5 ms − 4 ms): the
    windows say "iteration 5 is +2003%"; on the GPU every iteration took 5 ms (the first 5.03 ms)."""
    assert "iteration_variance" not in findings(_db(tmp_path, _queued_trace([5, 5, 5, 5, 5]), "queued.json"))


def test_a_slow_iteration_on_a_gpu_behind_the_cpu_is_timed_on_the_gpu(tmp_path):
    """Iteration 3's kernel takes 10 ms: on the GPU its iteration is 5 ms over the median of 5.03, 5, 10, 5, 5 (5 ms),
    from the end of iteration 2's kernel (10.03 ms) to the end of its own (20.03 ms)."""
    got = findings(_db(tmp_path, _queued_trace([5, 5, 10, 5, 5]), "slow3.json"))["iteration_variance"]
    assert got["evidence"]["timed_on_gpu"] is True
    assert got["evidence"]["iterations"] == [3]
    assert got["est_saving_ns"] == 5 * MS
    assert got["evidence"]["time_ranges"] == [[10_030 * US, 20_030 * US]]
    # median lag behind the CPU step of iterations 1-4: kernels end at 5.03, 10.03, 20.03, 25.03 ms, steps at 1-4 ms
    assert got["evidence"]["median_gpu_lag_ns"] == int(statistics.median([4030, 8030, 17030, 21030]) * US)
    assert "the GPU ran behind the CPU" in got["problem"]


def test_a_cpu_bound_run_is_still_judged_by_its_windows(tmp_path):
    """Kernels of 0.03 ms finish inside their 1 ms steps: the windows are the iterations."""
    trace = KinetoTrace()
    for i, d in enumerate([1.0, 1.0, 1.6, 1.0, 1.0]):
        b = sum([1.0, 1.0, 1.6, 1.0, 1.0][:i]) * 1000
        trace.step(i + 1, b, b + d * 1000)
        trace.op("aten::relu", b + 10, b + 20)
        trace.launch(b + 12, b + 15, "void at::native::vectorized_elementwise_kernel<4>", b + 30, b + 60)
    got = findings(_db(tmp_path, trace, "cpu.json"))["iteration_variance"]
    assert "timed_on_gpu" not in got["evidence"] and got["evidence"]["iterations"] == [3]
    assert got["est_saving_ns"] == pytest.approx(0.6 * MS, abs=2)


def _raw_steps(path: Path):
    """(step number, CPU start, CPU end, end of the GPU work launched inside it) of each ProfilerStep."""
    evs = events(path)
    steps = sorted((e.start, e.end, int(e.name.split("#")[1])) for e in evs
                   if e.cat == "user_annotation" and e.name.startswith("ProfilerStep#"))   # not the GPU's copy
    launch_at = {e.args.get("correlation"): e.start for e in evs if e.cat in LAUNCH_CATS}
    gpu_end = {n: -1 for _, _, n in steps}
    for e in evs:
        if e.cat in KERNEL_CATS | MEMOP_CATS and e.args.get("correlation") in launch_at:
            t = launch_at[e.args["correlation"]]
            for s, end, n in steps:
                if s <= t < end:
                    gpu_end[n] = max(gpu_end[n], e.end)
    return [(n, s, end, gpu_end[n]) for s, end, n in steps]


@pytest.mark.slow
def test_the_h200_cuda_graph_capture_is_steady_on_the_gpu(tmp_path):
    steps = _raw_steps(LM_GRAPHS)
    cpu = [end - s for _, s, end, _ in steps[:-1]]
    gpu = [b[3] - a[3] for a, b in zip(steps, steps[1:])]          # the end of one's GPU work to the next's
    # the raw JSON: the CPU steps take ~8 ms, the GPU ~44 ms per iteration and steadily (within 2%)
    assert statistics.median(cpu) * 4 < statistics.median(gpu)
    assert max(gpu) < 1.02 * min(gpu)
    db = build_database([LM_GRAPHS], tmp_path / "lm.sqlite", progress=False)
    assert "iteration_variance" not in findings(db)


def _replayed_gemms():
    """The FP32 GEMM and attention kernels of the capture, by their names in the raw JSON (sm80_xmma_gemm_f32…,
    cutlass_80_simt_sgemm…, fmha_cutlass…_f32…), each checked to be run by a cudaGraphLaunch (the model's forward
    and backward are graphed)."""
    evs = events(LM_GRAPHS)
    api = {e.args.get("correlation"): e.name for e in evs if e.cat in LAUNCH_CATS}
    gemms = [k for k in evs if k.cat in KERNEL_CATS and ("gemm_f32" in k.name or "simt_sgemm" in k.name
                                                         or ("fmha_cutlass" in k.name and "_f32" in k.name))]
    assert gemms and all(api[k.args["correlation"]] == "cudaGraphLaunch" for k in gemms)
    return gemms


@pytest.mark.slow
def test_amp_what_if_and_advice_see_the_gemms_a_cuda_graph_replays(tmp_path):
    gemms = _replayed_gemms()
    db = build_database([LM_GRAPHS], tmp_path / "lm.sqlite", progress=False)
    got = next(s for s in whatif(db, ["amp"])["scenarios"] if s["name"] == "amp")
    assert got["changed"].startswith(f"{len(gemms)} kernels ")
    assert got["saving_ns"] > 0
    advice = findings(db)["amp_not_enabled"]
    ev = advice["evidence"]
    assert ev["eligible_fp32_kernel_time_ns"] + ev["eligible_tf32_kernel_time_ns"] == sum(k.end - k.start
                                                                                           for k in gemms)
    assert ev["replayed_from_cuda_graphs_ns"] == sum(k.end - k.start for k in gemms)
    assert "replayed from CUDA graphs" in advice["problem"]


@pytest.mark.slow
def test_a_v100_training_run_behind_its_cpu_is_steady_on_the_gpu(tmp_path):
    """HTA's V100 trace (../shared/data): CPU steps of 35 to 96 ms and a last window of 185 ms, read alone as "105
    is slow, 101 and 102 are short"; the raw JSON's GPU work ends ~95.6 ms apart, each within 15 % of the median."""
    path = data_file("kineto", "hta_v100_ns_resolution_5steps.pt.trace.json.gz")
    steps = _raw_steps(path)
    windows = [end - s for _, s, end, _ in steps]
    gpu = [steps[0][3] - steps[0][1]] + [b[3] - a[3] for a, b in zip(steps, steps[1:])]
    assert min(windows) < 0.85 * statistics.median(windows)                         # the CPU steps vary
    assert all(abs(d - statistics.median(gpu)) <= 0.15 * statistics.median(gpu) for d in gpu)
    assert "iteration_variance" not in findings(build_database([path], tmp_path / "v100.sqlite", progress=False))
