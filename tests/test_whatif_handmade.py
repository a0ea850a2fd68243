"""Critical path and what-if on hand-made traces whose replays and critical paths are computed by hand.

Times in the traces are microseconds; every expected figure below is worked out in the comments from the
trace alone (the dependency rules of docs/whatif.md), never copied from dlscope's output.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from trace_builder import PID, TID, KinetoTrace

from dlscope.cli import cli
from dlscope.pipeline import build_database
from dlscope.whatif import whatif

US = 1000
DL = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def _runtime(trace: KinetoTrace, name: str, ts: float, end: float, tid: int = TID) -> None:
    """A CUDA runtime call that launches nothing (a synchronization)."""
    trace._corr += 1
    trace.events.append({"ph": "X", "cat": "cuda_runtime", "name": name, "pid": PID, "tid": tid, "ts": ts,
                         "dur": end - ts, "args": {"correlation": trace._corr}})


def _db(tmp_path, trace: KinetoTrace, name: str = "t.json"):
    return build_database([trace.write(tmp_path / name)], tmp_path / (name + ".sqlite"), progress=False)


def _cp(result: dict, kind: str) -> dict:
    return {x["name"]: x["time_ns"] for x in result["critical_path"] if x["kind"] == kind}


def _sync_trace() -> KinetoTrace:
    """Two GPU-bound steps of 100 µs, each ending in a device synchronize.

    step s (offset o = 100 s): ProfilerStep [o, o+100); aten::mm [o, o+10) launches K1 (call [o+2, o+7)),
    which runs [o+10, o+60); aten::relu [o+12, o+20) launches K2 (call [o+14, o+18)), queued behind K1:
    [o+60, o+80); cudaDeviceSynchronize [o+22, o+81); aten::add [o+85, o+95), CPU only.
    """
    t = KinetoTrace()
    for s in range(2):
        o = 100 * s
        t.step(s + 1, o, o + 100)
        t.op("aten::mm", o, o + 10)
        t.launch(o + 2, o + 7, "volta_sgemm_128x64_nn", o + 10, o + 60)
        t.op("aten::relu", o + 12, o + 20)
        t.launch(o + 14, o + 18, "relu_kernel", o + 60, o + 80)
        _runtime(t, "cudaDeviceSynchronize", o + 22, o + 81)
        t.op("aten::add", o + 85, o + 95)
    return t


def test_replay_and_critical_path_of_a_synchronized_step(tmp_path):
    r = whatif(_db(tmp_path, _sync_trace()), [])
    # each window is 100 µs: step 1 [0, 100) to the next step's start, step 2 [100, 200) to its CPU end
    assert [(x["measured_ns"], x["replayed_ns"]) for x in r["replay"]["iterations"]] == [(100 * US, 100 * US)] * 2
    assert r["baseline_iteration_ns"] == r["replay_iteration_ns"] == 100 * US
    # the path of a step, walked back from its end: 5 µs after aten::add (outside ops), add's 10 µs, 4 µs
    # between the synchronize's return and add, 1 µs from K2's end to the return, K2 (20 µs, queued right
    # behind K1: no gap), K1 (50 µs), the launch latency from K1's call start (10 - 2 = 8 µs) and the 2 µs of
    # aten::mm before that call; twice
    assert _cp(r, "category") == {"kernel": 140 * US, "cpu_op": 24 * US, "cpu_other": 18 * US, "launch": 16 * US,
                                  "sync": 2 * US}
    assert sum(_cp(r, "category").values()) == 200 * US
    assert _cp(r, "kernel") == {"volta_sgemm_128x64_nn": 100 * US, "relu_kernel": 40 * US}
    # by op node: aten::mm owns its 2 µs of CPU, the 8 µs launch and its kernel; aten::add its 10 µs;
    # aten::relu its kernel; the synchronize's 1 µs belongs to no op
    assert _cp(r, "op") == {"aten::mm": 120 * US, "aten::relu": 40 * US, "aten::add": 20 * US}


def test_no_sync_lets_the_cpu_run_ahead(tmp_path):
    r = whatif(_db(tmp_path, _sync_trace()), ["no-sync"])
    # The synchronize returns after one launch call's time: the median launch call lasts 4.5 µs, stored as
    # 4 µs (int). Step 1: sync [22, 26), add [30, 40), step 2 starts at 45 (5 µs later, as measured).
    # Step 2: K1 launched at 47 can start at 47 + 8 (the measured launch latency) but its stream is busy
    # with K2 until 80 (queue gap 0): [80, 130); K2 [130, 150); the CPU ends at 45 + 45 = 90.
    # Windows: 45 and 150 - 45 = 105: mean 75 µs.
    (s,) = r["scenarios"]
    assert s["predicted_iteration_ns"] == 75 * US
    assert s["saving_ns"] == 25 * US
    assert r["combined"] == {"predicted_iteration_ns": 75 * US, "saving_ns": 25 * US}


def test_amp_with_a_given_factor_scales_only_eligible_fp32_gemms(tmp_path):
    t = _sync_trace()
    for e in t.events:  # the GEMM's op records an FP32 input: eligible for Tensor Cores
        if e.get("name") == "aten::mm":
            e["args"] = {"Input Dims": [[64, 64], [64, 64]], "Input type": ["float", "float"]}
    r = whatif(_db(tmp_path, t), ["amp=0.5"])
    # K1 (sgemm of aten::mm) takes 25 µs instead of 50: each step's GPU work ends 25 µs earlier, and so do
    # the synchronize and everything after it: 75 µs per step. relu_kernel is not a GEMM: unchanged.
    assert r["scenarios"][0]["predicted_iteration_ns"] == 75 * US


def _loader_trace() -> KinetoTrace:
    """Three steps of 100 µs: data loading [o, o+60), aten::conv2d [o+60, o+70) launching a kernel (call
    [o+62, o+66)) that runs [o+70, o+150) and spills into the next step."""
    t = KinetoTrace()
    for s in range(3):
        o = 100 * s
        t.step(s + 1, o, o + 100)
        t.op(DL, o, o + 60)
        t.op("aten::conv2d", o + 60, o + 70)
        t.launch(o + 62, o + 66, "implicit_convolve_sgemm", o + 70, o + 150)
    return t


def test_no_dataloader_reveals_the_gpu_bound(tmp_path):
    r = whatif(_db(tmp_path, _loader_trace()), ["no-dataloader"])
    # measured windows 100, 100 and 150 (the last ends with its kernel at 350): mean 350/3 -> 116667 ns
    assert r["baseline_iteration_ns"] == r["replay_iteration_ns"] == 116_667
    # Without loading each step's CPU takes 40 µs (conv 10 + 30 µs to the next step). Launch latency is
    # 70 - 62 = 8 µs on an idle stream. Kernels: [10, 90), then queued [90, 170), [170, 250).
    # Windows 40, 40 and 250 - 80 = 170: mean 250/3 -> 83333 ns.
    assert r["scenarios"][0]["predicted_iteration_ns"] == 83_333
    # the measured path of the first two steps: loading 60, conv's own CPU 2 + 4 around its call, the call 4,
    # 30 µs after conv; the last step ends with its kernel (80 µs), launched 8 µs after its call started,
    # which started after loading (60) and 2 µs of conv
    cats = _cp(r, "category")
    assert cats == {"dataloader": 180 * US, "cpu_op": 2 * 6 * US + 2 * US, "cuda_api": 2 * 4 * US,
                    "cpu_other": 2 * 30 * US, "kernel": 80 * US, "launch": 8 * US}
    assert sum(cats.values()) == 350 * US


def _handoff_trace() -> KinetoTrace:
    """The main thread runs forward (A, 40 µs), the autograd thread backward (B, 100 µs, 5 µs after A), then
    the main thread runs C (10 µs, 5 µs after B). Two steps of 200 µs."""
    t = KinetoTrace()
    for s in range(2):
        o = 200 * s
        t.step(s + 1, o, o + 200)
        t.op("A", o, o + 40)
        t.op("B", o + 45, o + 145, tid=TID + 1)
        t.op("C", o + 150, o + 160)
    return t


def test_a_faster_backward_thread_lets_the_main_thread_resume_earlier(tmp_path):
    r = whatif(_db(tmp_path, _handoff_trace()), ["scale:^B$=0.5"])
    # B takes 50 µs: A [0, 40), B [45, 95) (handed over 5 µs after A), C [100, 110), then 40 µs to the next
    # step as measured: each step takes 150 µs
    assert r["baseline_iteration_ns"] == 200 * US
    assert r["scenarios"][0]["predicted_iteration_ns"] == 150 * US
    assert _cp(r, "category")["thread_wait"] == 4 * 5 * US  # two handoffs per step


def test_a_wait_on_another_stream_moves_with_what_it_waited_for(tmp_path):
    """A1 [10, 20) and A2 [40, 60) on stream 7, each launched 10 µs before (stream idle); B on stream 8 is
    launched at 36 but starts at 62, right after A2 ends: an event wait. The step's CPU ends at 45."""
    t = KinetoTrace()
    t.step(1, 0, 45)
    t.op("x", 0, 45)
    t.launch(0, 5, "A1", 10, 20)
    t.launch(30, 35, "A2", 40, 60)
    t.launch(36, 39, "B", 62, 80, stream=8)
    r = whatif(_db(tmp_path, t), ["scale:^A2$=0.5"])
    assert r["baseline_iteration_ns"] == 80 * US  # the step ends with B
    # A2 [40, 50); B waits 2 µs after it as measured: [52, 70). (Had B kept its launch wait, 80.)
    assert r["scenarios"][0]["predicted_iteration_ns"] == 70 * US
    assert _cp(r, "category")["stream_wait"] == 2 * US


def test_overlapped_communication_no_longer_holds_back_compute(tmp_path):
    """K1 [10, 60), an NCCL all-reduce [60, 90) and K2 [90, 100), all queued on stream 7 (launched at 0..9);
    with perfect overlap K2 starts when its stream order allows without the all-reduce: right after K1."""
    t = KinetoTrace()
    t.step(1, 0, 20)
    t.op("x", 0, 20)
    t.launch(0, 2, "K1", 10, 60)
    t.launch(3, 5, "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", 60, 90)
    t.launch(6, 9, "K2", 90, 100)
    r = whatif(_db(tmp_path, t), ["overlap-comm"])
    assert r["baseline_iteration_ns"] == 100 * US
    # K2: launched at 6 + 10 µs latency (K1's, on an idle stream) = 16, after K1 (60, gap 0): [60, 70);
    # the all-reduce still ends at 90, which ends the step
    assert r["scenarios"][0]["predicted_iteration_ns"] == 90 * US


def _rank_trace(rank: int, compute_end: float) -> KinetoTrace:
    """One step: compute [10, compute_end) then an all-reduce queued behind it that ends at 90 on both ranks
    (the collective ends when the last rank arrived plus its 30 µs transfer)."""
    t = KinetoTrace()
    t.step(1, 0, 20)
    t.op("x", 0, 20)
    t.launch(0, 2, "compute_kernel", 10, compute_end)
    t.launch(3, 5, "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", compute_end, 90)
    return t


def test_a_straggler_holds_back_every_rank_and_bringing_it_to_the_median_helps_all(tmp_path):
    paths = []
    for rank, end in ((0, 60), (1, 30)):
        t = _rank_trace(rank, end)
        path = tmp_path / f"rank{rank}.json"
        t.write(path)
        doc = json.loads(path.read_text())
        doc["distributedInfo"] = {"rank": rank, "world_size": 2}
        path.write_text(json.dumps(doc))
        paths.append(path)
    db = build_database(paths, tmp_path / "job.sqlite", progress=False)
    for agg_id in (1, 2):
        r = whatif(db, ["no-straggler"], agg_id=agg_id)
        assert r["baseline_iteration_ns"] == r["replay_iteration_ns"] == 90 * US
        # rank 0 arrives last (60 vs 30). Its compute (50 µs) goes to the ranks' median (35): it arrives at
        # 45 and both ranks end at 45 + 30 = 75
        assert r["scenarios"][0]["predicted_iteration_ns"] == 75 * US, r["rank"]
        # the cross-rank critical path: on both ranks the step ends with the collective's 30 µs transfer on
        # the rank itself, after rank 0 arrived at 60 µs (its launch latency 10 + compute 50)
        by_rank = _cp(r, "rank")
        assert by_rank == ({"rank 0": 90 * US} if r["rank"] == 0 else {"rank 0": 60 * US, "rank 1": 30 * US})


def test_the_command_prints_json_with_integer_times(tmp_path):
    db = _db(tmp_path, _sync_trace())
    res = CliRunner().invoke(cli, ["whatif", str(db), "no-sync", "cuda-graphs", "--json"])
    assert res.exit_code == 0, res.output
    r = json.loads(res.output)
    for key in ("baseline_iteration_ns", "replay_iteration_ns"):
        assert isinstance(r[key], int)
    assert [s["name"] for s in r["scenarios"]] == ["no-sync", "cuda-graphs"]
    assert all(isinstance(s[k], int) for s in r["scenarios"] for k in ("predicted_iteration_ns", "saving_ns"))
    assert set(r["combined"]) == {"predicted_iteration_ns", "saving_ns"}
    assert isinstance(r["critical_path"], list) and r["assumptions"]


@pytest.mark.parametrize("bad", ["faster", "scale:conv", "scale:conv=x", "scale:(=0.5", "amp=-1"])
def test_a_bad_scenario_is_one_line_and_exit_code_2(tmp_path, bad):
    from dlscope.cli import main

    db = _db(tmp_path, _sync_trace())
    assert main(["whatif", str(db), bad]) == 2


def test_expert_findings_are_priced_by_the_replay(tmp_path):
    r = whatif(_db(tmp_path, _loader_trace()), [])
    priced = {f["rule"]: f for f in r["expert_findings"]["findings"]}
    # data loading: the replay without it ends at 250 µs instead of 350 (see the no-dataloader test)
    assert priced["dataloader_bottleneck"]["scenario"] == "no-dataloader"
    assert priced["dataloader_bottleneck"]["simulated_saving_ns"] == 100 * US
    assert r["expert_findings"]["combined_saving_ns"] >= 100 * US
    r = whatif(_db(tmp_path, _sync_trace(), "s.json"), [])
    priced = {f["rule"]: f for f in r["expert_findings"]["findings"]}
    # the synchronizes: 200 µs of replay become 150 (see the no-sync test)
    assert priced["sync_api"]["simulated_saving_ns"] == 50 * US
