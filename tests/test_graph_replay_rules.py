"""Rules on CUDA-graph captures (the H200 sessions of 2026-11-27, docs/gpu-sessions.md): kernels replayed from a
graph are not launched one by one, so `launch_bound` (and `host_bound`, which subsumes it) leaves them out (it
told a graphed capture to use CUDA graphs, its "median launch" being the cudaGraphLaunch), and findings' evidence
is strict JSON (an op without a precision wrote ``NaN`` into it). Oracles: the raw JSON of real H200 captures
read by the standard library."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from experts_helpers import findings
from raw_kineto import KERNEL_CATS, LAUNCH_CATS, events, is_step_marker
from trace_builder import KinetoTrace

from dlscope.experts import evidence_json
from dlscope.pipeline import build_database

H200 = Path(__file__).parent / "data" / "h200"
GRAPH_LAUNCH = re.compile(r"^(?:cuda|cu|hip)GraphLaunch")


def _launches(path: Path) -> dict:
    """Per kernel launched inside the profiled steps (by its launch call's start): whether a graph launch ran
    it, and whether it is short (under 10 µs) and no longer than its launch call."""
    evs = events(path)
    steps = [e for e in evs if is_step_marker(e.name) and e.name.startswith("ProfilerStep#")]
    lo, hi = min(e.start for e in steps), max(e.end for e in steps)
    calls = {e.args.get("correlation"): e for e in evs if e.cat in LAUNCH_CATS}
    replayed, short = [], []
    for k in (e for e in evs if e.cat in KERNEL_CATS):
        call = calls.get(k.args.get("correlation"))
        if call is None or not lo <= call.start < hi:
            continue
        replayed.append(bool(GRAPH_LAUNCH.match(call.name)))
        short.append(k.end - k.start < 10_000 and call.end - call.start >= k.end - k.start)
    return {"replayed": np.array(replayed), "short": np.array(short)}


def _db(tmp_path, trace: Path) -> Path:
    return build_database([trace], tmp_path / (trace.name + ".sqlite"), progress=False)


def test_kernels_replayed_from_a_graph_are_not_judged_as_launched_one_by_one(tmp_path):
    """AMP CNN with forward and backward graphed: all kernels together would be launch bound (most are short
    and their "launch" is the long graph launch); launched one by one are the optimizer's and the loss
    scaler's, fewer than the rule's ``min_kernels`` (100)."""
    raw = _launches(H200 / "amp_graphs_w0.pt.trace.json.gz")
    replayed, short = raw["replayed"], raw["short"]
    assert replayed.sum() > 0 and len(short) >= 100
    assert short.mean() >= 0.5                                   # counted as before: a launch-bound finding
    assert (~replayed).sum() < 100                               # judged one by one: too few to judge
    assert "launch_bound" not in findings(_db(tmp_path, H200 / "amp_graphs_w0.pt.trace.json.gz"))


def _without_host_bound(tmp_path, db: Path) -> dict:
    """The findings with host_bound disabled: launch_bound is a case of it, and gives way where it fires."""
    config = tmp_path / "no_host_bound.json"
    config.write_text(json.dumps({"host_bound": {"enabled": False}}))
    return findings(db, config)


def test_an_eager_capture_is_judged_on_all_its_kernels(tmp_path):
    raw = _launches(H200 / "amp_eager_w0.pt.trace.json.gz")
    assert raw["replayed"].sum() == 0
    db = _db(tmp_path, H200 / "amp_eager_w0.pt.trace.json.gz")
    host = findings(db)["host_bound"]                      # the broader finding, saying what launch_bound would
    assert host["evidence"]["launch_bound"] and host["evidence"]["short_kernels"] == int(raw["short"].sum())
    got = _without_host_bound(tmp_path, db)["launch_bound"]
    assert got["evidence"]["kernels_total"] == len(raw["short"])
    assert got["evidence"]["short_kernels"] == int(raw["short"].sum())
    assert got["evidence"]["graph_replayed_kernels"] == 0
    assert f"of {len(raw['short']):,})" in got["problem"]
    assert "capture the step with CUDA graphs" in got["recommendation"]


def test_kernels_still_launched_one_by_one_beside_a_graph_are_advised_into_it(tmp_path):
    """12 steps of 500 µs: 15 kernels of 2 µs each launched one by one (15 µs launch calls, the GPU idle 18 µs
    before each), then 10 of 2 µs run by graph launches: judged are the 180 launched one by one, all short."""
    t = KinetoTrace()
    for step in range(12):
        b = 500.0 * step
        t.step(step + 1, b, b + 500)
        t.op("aten::add", b + 5, b + 400)
        for j in range(15):
            at = b + 10 + 20 * j
            t.launch(at, at + 15, "void at::native::vectorized_elementwise_kernel<4>", at + 16, at + 18)
        for j in range(10):
            at = b + 320 + 5 * j
            t.launch(at, at + 15, "void gemv_kernel", at + 40 + 3 * j, at + 42 + 3 * j, graph=True)
    db = build_database([t.write(tmp_path / "graph_beside.json")], tmp_path / "graph_beside.sqlite", progress=False)
    host = findings(db)["host_bound"]
    # host_bound (which subsumes launch_bound here) counts the same waits, uncapped, plus the first step's first
    # kernel, idle from the window's start (26 µs); not the 52 µs before each graph's first kernel (from the last
    # kernel launched one by one, b + 308, to b + 360): a graph launch runs those
    assert host["est_saving_ns"] == 12 * 14 * 18_000 + 11 * 92_000 + 26_000
    assert host["evidence"]["graph_replayed_kernels"] == 120 and host["evidence"]["kernels_judged"] == 180
    assert "bring them into the graph" in host["recommendation"]
    got = _without_host_bound(tmp_path, db)["launch_bound"]
    assert got["evidence"]["short_kernels"] == 180 and got["evidence"]["graph_replayed_kernels"] == 120
    assert "180 kernels (100% of 180 launched one by one; 120 kernels replayed from CUDA graphs" in got["problem"]
    assert "bring the kernels still launched one by one into the CUDA graph" in got["recommendation"]
    # 14 kernels a step wait 18 µs each; a step's first waits from the last graph kernel's end (b + 360 + 8·9 + 2)
    # to b + 500 + 26: 92 µs, except in the first step (no GPU activity before it)
    assert got["est_saving_ns"] == 12 * 14 * 18_000 + 11 * 92_000


def test_evidence_with_a_missing_value_is_stored_as_strict_json():
    evidence = {"ops": [{"precision": float("nan"), "time": np.float64("nan"), "n": np.int64(3)}],
                "share": np.float64(0.5), "inf": float("inf")}
    text = evidence_json(evidence)
    strict = json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} is not JSON"))
    assert strict == {"ops": [{"precision": None, "time": None, "n": 3}], "share": 0.5, "inf": None}
    assert evidence_json({"a": 1.5, "b": [1, 2]}) == json.dumps({"a": 1.5, "b": [1, 2]})


def test_a_graph_capture_s_roofline_evidence_is_strict_json(tmp_path):
    db = _db(tmp_path, H200 / "lm_fp32_graphs_w0_r1.pt.trace.json.gz")
    with sqlite3.connect(db) as conn:
        rows = [r[0] for r in conn.execute("SELECT evidence_json FROM findings")]
    assert rows
    for text in rows:
        json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} in stored evidence"))


def test_a_graph_capture_s_roofline_finding_names_no_precision_and_no_graph_advice(tmp_path):
    """The first H200 session's AMP CNN with 4 workers, graphed: its modelled math is a GradScaler scalar FP64
    reciprocal beside FP32 casts. The finding named "fp64" as its math and advised CUDA graphs."""
    trace = H200 / "amp_graphs_w4.pt.trace.json.gz"
    assert _launches(trace)["replayed"].sum() > 0                  # the raw JSON: kernels run by graph launches
    got = findings(_db(tmp_path, trace))["roofline_quadrant"]
    assert "so no precision dominates" in got["problem"] and "fp64" not in got["problem"]
    assert got["evidence"]["dominant_precision"] is None
    assert "CUDA Graphs" not in got["recommendation"]


ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>, std::array<char*, 3ul> >"
MUL = "void at::native::vectorized_elementwise_kernel<4, at::native::MulFunctor<float>, std::array<char*, 3ul> >"


def _chains(tmp_path, graphed) -> dict:
    """12 steps of 400 µs, each with 6 chains add (8 µs) + 3 µs gap + mul (6 µs), 23 µs apart, under an op that
    is not Tensor Core-eligible; ``graphed(j)``: whether chain j of a step is replayed from a CUDA graph (its two
    launch calls are cudaGraphLaunch)."""
    t = KinetoTrace()
    for step in range(12):
        b = 400.0 * step
        t.step(step + 1, b, b + 400)
        t.op("Graphed", b + 1, b + 390)
        for j in range(6):
            at = b + 50 + 40 * j
            t.launch(b + 5 + 10 * j, b + 6 + 10 * j, ADD, at, at + 8, graph=graphed(j))
            t.launch(b + 7 + 10 * j, b + 8 + 10 * j, MUL, at + 11, at + 17, graph=graphed(j))
    name = f"chains_{sum(map(graphed, range(6)))}"
    return findings(build_database([t.write(tmp_path / f"{name}.json")], tmp_path / f"{name}.sqlite",
                                   progress=False))["fusion_candidates"]


def test_fusion_of_chains_launched_one_by_one_is_priced_with_their_gaps(tmp_path):
    """Each of the 72 chains: its kernels' time minus the longest (6 µs) plus its gap (3 µs)."""
    got = _chains(tmp_path, lambda j: False)
    assert got["est_saving_ns"] == 72 * 9_000
    assert got["evidence"]["graph_replayed_occurrences"] == 0 and got["evidence"]["occurrences"] == 72
    assert got["problem"].startswith("1 short kernel sequence repeats on the same stream; the most costly, ")
    assert got["problem"].endswith("Fusing the sequence would save about 648.00 µs of launches, gaps and repeated "
                                   "memory passes.")


def test_fusion_of_chains_replayed_from_a_graph_is_not_priced_by_launches_the_graph_removed(tmp_path):
    """All 72 chains replayed: priced by their repeated memory pass only (6 µs each); the 3 µs between their
    kernels inside the graph is said, not counted."""
    got = _chains(tmp_path, lambda j: True)
    assert got["est_saving_ns"] == 72 * 6_000
    ev = got["evidence"]
    assert (ev["occurrences"], ev["graph_replayed_occurrences"]) == (72, 72)
    assert (ev["graph_replayed_saving_ns"], ev["graph_replayed_gaps_not_counted_ns"]) == (72 * 6_000, 72 * 3_000)
    assert ev["patterns"][0]["graph_replayed_occurrences"] == 72
    assert "repeats on the same stream, all replayed from CUDA graphs; " in got["problem"]
    assert got["problem"].endswith("would save about 432.00 µs of repeated memory passes (the graph already removed "
                                   "their launches; the 216.00 µs between their kernels inside the graph is not "
                                   "counted).")
    assert "launches, gaps" not in got["problem"]


def test_fusion_beside_a_graph_prices_each_chain_by_how_it_ran(tmp_path):
    """Chains 0-2 of a step launched one by one (9 µs each), 3-5 replayed (6 µs each)."""
    got = _chains(tmp_path, lambda j: j >= 3)
    assert got["est_saving_ns"] == 36 * 9_000 + 36 * 6_000
    ev = got["evidence"]
    assert (ev["graph_replayed_occurrences"], ev["graph_replayed_saving_ns"]) == (36, 36 * 6_000)
    assert got["problem"].endswith("would save about 540.00 µs of launches, gaps and repeated memory passes "
                                   "(216.00 µs of it in the 36 occurrences replayed from CUDA graphs, priced by "
                                   "their memory passes only: the graph already removed their launches).")


def test_amp_on_a_graph_capture_names_the_replays_not_eligible_ops(tmp_path):
    """The FP32 LM captured with its forward and backward graphed (H200, fourth session): the AMP finding said
    "2 ops were eligible for FP16/BF16 Tensor Cores" while the summary's Model line says 0 eligible op nodes (a
    replay is no eligible op type). It now names them as the raw JSON has them: the ops under which a
    cudaGraphLaunch ran kernels, here `Graphed` and the autograd node around `GraphedBackward`."""
    trace = H200 / "lm_fp32_graphs_b16.pt.trace.json.gz"
    evs = events(trace)
    launches = [e for e in evs if e.cat in LAUNCH_CATS and GRAPH_LAUNCH.match(e.name)]
    ops = [e for e in evs if e.cat == "cpu_op"]
    outer = set()
    for call in launches:  # the outermost op open on the call's thread at its start
        around = [o for o in ops if o.tid == call.tid and o.start <= call.start < o.end]
        outer.add(min(around, key=lambda o: (o.start, -o.end)).name)
    db = build_database([trace], tmp_path / "graphed.sqlite", progress=False)
    problem = findings(db)["amp_not_enabled"]["problem"]
    assert problem.startswith(f"{len(outer)} CUDA graph replays ran matrix products eligible for FP16/BF16 Tensor "
                              "Cores but none are using FP16/BF16")
    assert len(outer) == 2 and "were eligible" not in problem
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT SUM(tc_eligible) FROM agg_ops").fetchone()[0] == 0
