"""The vectorised parts of the expert rules (bench/README.md, "h22rules"): the sort-based numbering that
replaced pd.factorize / pd.unique / np.unique(axis=0) in fusion_candidates, top_by and node_ids, the job-wide
name codes, the first matching names, the iteration columns, and roofline_quadrant's per-node placement —
each against a hand-made example worked out here or pandas' own functions, ties and empty inputs included."""

from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from experts_helpers import stored_findings
from trace_builder import KinetoTrace

from dlscope.experts.context import Context, RuleFrames
from dlscope.experts.evidence import iterations_of, top_by
from dlscope.experts.rules.fusion import _distinct_rows, _factorized, _first_seen_groups
from dlscope.experts.spans import first_seen
from dlscope.pipeline import build_database

A100_FP16_TC, A100_DRAM = 312e12, 2.039e12  # A100 SXM4 80 GB datasheet: dense FP16 Tensor Core, HBM2e
N = 4096 * 4096
GEMM_FLOPS, GEMM_BYTES = 2 * 4096**3, 3 * N * 2  # a 4096³ FP16 product: A, B and C once each, 2 bytes each
ELEMENTWISE_BYTES = 3 * N * 2  # two FP16 inputs and the output
GEMM_KERNEL = "ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_nn"
HALF_INPUTS = {"Input Dims": [[4096, 4096], [4096, 4096]], "Input type": ["c10::Half", "c10::Half"]}


# ---------------------------------------------------------------- numbering by first appearance

def test_first_seen_numbers_integers_by_first_appearance_with_repeats():
    codes, uniques = first_seen(np.array([5, 3, 5, 7, 3, 3, -1], dtype=np.int64))
    assert codes.tolist() == [0, 1, 0, 2, 1, 1, 3]
    assert uniques.tolist() == [5, 3, 7, -1]


def test_first_seen_of_nothing_is_nothing():
    codes, uniques = first_seen(np.zeros(0, dtype=np.int64))
    assert len(codes) == 0 and len(uniques) == 0


def test_groups_of_several_columns_are_numbered_by_their_first_row():
    device = np.array([0, 0, 1, 0, 1, 0])
    stream = np.array([7, 7, 7, 7, 7, 9])
    iteration = np.array([1, 2, 1, 1, 1, 1])
    assert _first_seen_groups(device, stream, iteration).tolist() == [0, 1, 2, 0, 2, 3]
    assert _first_seen_groups(np.zeros(0), np.zeros(0)).tolist() == []


def test_distinct_patterns_sort_lexicographically_and_keep_run_order_within_a_pattern():
    """Rows [2,1], [0,3], [2,1], [-1,0], [0,3]: distinct rows [-1,0] < [0,3] < [2,1] (a missing name is -1);
    occurrences of one pattern keep their order."""
    pattern = np.array([[2, 1], [0, 3], [2, 1], [-1, 0], [0, 3]])
    distinct, which, by = _distinct_rows(pattern)
    assert distinct.tolist() == [[-1, 0], [0, 3], [2, 1]]
    assert which.tolist() == [2, 1, 2, 0, 1]
    assert by.tolist() == [3, 1, 4, 0, 2]


def test_distinct_patterns_too_wide_for_one_int64_key_give_the_same_answer():
    """Codes up to 60,000 in windows of 4: 60,002⁴ > 2⁶² — the rows are compared column by column instead."""
    pattern = np.array([[60_000, 1, 2, 3], [0, 59_999, 2, 3], [60_000, 1, 2, 3], [0, 59_999, 2, 2]])
    distinct, which, by = _distinct_rows(pattern)
    assert distinct.tolist() == [[0, 59_999, 2, 2], [0, 59_999, 2, 3], [60_000, 1, 2, 3]]
    assert which.tolist() == [2, 1, 2, 0]
    assert by.tolist() == [3, 1, 0, 2]


def test_kept_names_from_the_job_codes_equal_pandas_factorize_of_the_names():
    """The job's names coded once, a rank's kept rows renumbered: the same codes and names as pd.factorize of
    the kept names themselves (a missing name is -1)."""
    names = np.array(["relu", "add", "relu", None, "mul", "add", "gemm", "mul"], dtype=object)
    job_codes, job_names = pd.factorize(names, sort=False)
    for keep in (np.ones(8, bool), np.array([0, 1, 1, 1, 0, 1, 0, 1], bool), np.zeros(8, bool),
                 np.array([0, 0, 0, 1, 0, 0, 0, 0], bool)):
        codes, kept_names = _factorized(job_codes, np.asarray(job_names, dtype=object), keep)
        want_codes, want_names = pd.factorize(names[keep], sort=False)
        assert codes.tolist() == want_codes.tolist()
        assert list(kept_names) == list(want_names)


# ---------------------------------------------------------------- evidence helpers

@pytest.mark.parametrize("keys, weights", [
    ([7, 3, 7, 3, 9], [1, 2, 1, 2, 4]),          # ties: 3 and 9 both sum to 4
    ([1, 2, 3, 4], [5, 5, 5, 5]),                # all tied
    ([4, 4, 4], [0, 0, 0]),
    ([10, -1, 10, 20], [3, 9, 3, 6]),
])
def test_top_by_integer_keys_ranks_as_pandas_groupby_and_sort_values(keys, weights):
    frame = pd.DataFrame({"k": np.array(keys, dtype=np.int64), "w": np.array(weights, dtype=np.int64)})
    want = frame.groupby("k", sort=False)["w"].sum().sort_values(ascending=False).index.tolist()
    for n in (1, 2, len(keys)):
        got = top_by({"k": frame["k"].to_numpy(), "w": frame["w"].to_numpy()}, "k", "w", n)
        assert got == want[:n]
    assert top_by({"k": np.zeros(0, np.int64), "w": np.zeros(0, np.int64)}, "k", "w", 3) == []


def test_iterations_of_are_distinct_ascending_without_minus_one():
    assert iterations_of(np.array([3, -1, 1, 3, 2, -1])) == [1, 2, 3]
    assert iterations_of(np.zeros(0, dtype=np.int64)) == []


# ---------------------------------------------------------------- context columns

def _context(iterations: pd.DataFrame, frames: RuleFrames | None = None, rank: int = 0) -> Context:
    row = {"rank": rank, "iter_start": 0, "iter_stop": 9, "window_start": 0, "window_end": 1000,
           "wall_clock_ns": 1000, "iteration_method": "profiler_step"}
    return Context({}, {}, SimpleNamespace(row=row, iterations=iterations), frames)


def test_iteration_columns_are_the_profiled_iterations_in_number_order():
    its = pd.DataFrame({"iteration": [3, 1, 2, 5], "profiled": [True, True, False, True],
                        "start": [30, 10, 20, 50]})
    ctx = _context(its)
    assert ctx.iteration_col("iteration").tolist() == [1, 3, 5]
    assert ctx.iteration_col("start").tolist() == [10, 30, 50]
    none = _context(its.assign(profiled=False))
    assert none.iteration_col("iteration").tolist() == []


def test_first_matching_names_are_the_first_distinct_ones_in_time_order():
    """100 ranges named backward_a, then fwd, backward_b, backward_a, backward_c: the first three distinct
    names matching 'backward' lie beyond the first 64 hits; the first one among them."""
    names = ["backward_a"] * 100 + ["fwd", "backward_b", "backward_a", "backward_c"]
    ranges = pd.DataFrame({"rank": 0, "device": -1, "start": np.arange(len(names)) * 10,
                           "end": np.arange(len(names)) * 10 + 5, "name": names, "category": "",
                           "domain": ""})
    frames = RuleFrames({"ranges": ranges}, {0: (0, 9, 0, 10_000)})
    pattern = re.compile("backward")
    assert frames.first_matches("ranges", pattern, 0, 3) == ["backward_a", "backward_b", "backward_c"]
    assert frames.first_matches("ranges", pattern, 0, 1) == ["backward_a"]
    assert frames.first_matches("ranges", pattern, 0, 0) == []
    assert frames.first_matches("ranges", re.compile("optimizer"), 0, 3) == []


# ---------------------------------------------------------------- roofline_quadrant's placement

def _two_ops(tmp_path, first: tuple[str, dict, str, float], second: tuple[str, dict, str, float]):
    """One 5 ms step on an A100: two ops, each launching one kernel of the given length (µs)."""
    t = KinetoTrace()
    t.step(1, 0, 5000)
    at = 200.0
    for i, (op, inputs, kernel, us) in enumerate((first, second)):
        t.op(op, 100 + 200 * i, 200 + 200 * i, **inputs)
        t.launch(110 + 200 * i, 120 + 200 * i, kernel, at, at + us)
        at += us + 50
    return stored_findings(build_database([t.write(tmp_path / "t.json")], tmp_path / "t.sqlite", progress=False))


def test_each_op_is_placed_under_its_own_roof_with_its_percent_of_it(tmp_path):
    """A GEMM of 4 ms (math bound: 2·4096³ FLOPs over 3·4096²·2 bytes is above the A100's ridge point) at
    100·(FLOPs / 4 ms) / 312 TFLOP/s of its roof, and an FP16 add of 150 µs (memory bound) at
    100·(bytes / 150 µs) / 2.039 TB/s; both below 70 % of their roof, listed by saving."""
    got = _two_ops(tmp_path, ("aten::mm", HALF_INPUTS, GEMM_KERNEL, 4000),
                   ("aten::add", HALF_INPUTS, "vectorized_elementwise_kernel<add_half>", 150))["roofline_quadrant"]
    ops = got["evidence"]["ops"]
    assert [o["op_name"] for o in ops] == ["aten::mm", "aten::add"]
    assert ops[0]["pct_of_ceiling"] == pytest.approx(100 * GEMM_FLOPS / 4000e-6 / A100_FP16_TC, rel=1e-12)
    assert ops[1]["pct_of_ceiling"] == pytest.approx(100 * ELEMENTWISE_BYTES / 150e-6 / A100_DRAM, rel=1e-12)
    gemm_saving = 4000e3 - max(GEMM_FLOPS / A100_FP16_TC, GEMM_BYTES / A100_DRAM) * 1e9 / 0.7
    add_saving = 150e3 - ELEMENTWISE_BYTES / A100_DRAM * 1e9 / 0.7
    assert [o["saving_ns"] for o in ops] == [int(gemm_saving), int(add_saving)]
    assert got["est_saving_ns"] == int(gemm_saving + add_saving)


@pytest.mark.parametrize("order", [("aten::add", "aten::mul"), ("aten::mul", "aten::add")])
def test_ops_with_equal_savings_are_listed_in_the_order_they_first_ran(tmp_path, order):
    """An add and a mul of the same FP16 shapes and the same 300 µs: the same bytes, the same roof, the same
    saving; the tie keeps the op nodes' order (equal GPU time: by node, the first to run first)."""
    ops = [(name, HALF_INPUTS, f"vectorized_elementwise_kernel<{name[6:]}_half>", 300.0) for name in order]
    got = _two_ops(tmp_path, *ops)["roofline_quadrant"]
    listed = got["evidence"]["ops"]
    assert [o["op_name"] for o in listed] == list(order)
    assert listed[0]["saving_ns"] == listed[1]["saving_ns"] == int(300e3 - ELEMENTWISE_BYTES / A100_DRAM * 1e9 / 0.7)


def test_silent_when_no_op_node_has_a_model(tmp_path):
    """Ops without recorded shapes have no FLOPs or bytes: nothing to place, no finding."""
    got = _two_ops(tmp_path, ("aten::mm", {}, GEMM_KERNEL, 4000),
                   ("aten::add", {}, "vectorized_elementwise_kernel<add_half>", 150))
    assert "roofline_quadrant" not in got


# ---------------------------------------------------------------- gpu_memory_near_capacity's early exit

GIB = 2**30
CAPACITY = 80 * GIB  # the builder's A100-SXM4-80GB


def _memory_step(tmp_path, allocated: int, reserved: int, outside: bool = False):
    """Two steps of one op node whose allocation peaks at ``allocated`` bytes with ``reserved`` held by the
    caching allocator; ``outside``: the samples fall before the first step, in no iteration."""
    t = KinetoTrace()
    for n in range(2):
        base = 1000 + 1000 * n
        t.step(n, base, base + 800)
        t.op("aten::linear", base + 100, base + 500)
        t.launch(base + 300, base + 310, "ampere_sgemm_128x64_nn", base + 320, base + 480)
    at = 150 if outside else 1150
    for ts, delta, total, addr in ((at, GIB, GIB, 1), (at + 10, allocated - GIB, allocated, 2),
                                   (at + 20, -(allocated - GIB), GIB, 2)):
        t.events.append({"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": 100,
                         "tid": 100, "ts": ts, "args": {"Device Type": 1, "Device Id": 0, "Addr": addr,
                                                        "Bytes": delta, "Total Allocated": total,
                                                        "Total Reserved": reserved}})
    return stored_findings(build_database([t.write(tmp_path / "m.json")], tmp_path / "m.sqlite", progress=False))


@pytest.mark.parametrize("allocated, reserved, fires", [
    (72 * GIB, 72 * GIB, True),            # exactly 90 % of 80 GiB: at the threshold
    (72 * GIB - 1, 72 * GIB - 1, False),   # one byte under it
    (70 * GIB, 73 * GIB, True),            # allocated under, reserved over: the reserved peak counts
    (73 * GIB, 0, True),                   # reserved unknown (0): the allocated peak counts
])
def test_near_capacity_fires_from_90_percent_of_the_gpu_memory_held(tmp_path, allocated, reserved, fires):
    got = _memory_step(tmp_path, allocated, reserved)
    assert ("gpu_memory_near_capacity" in got) == fires
    if fires:
        assert got["gpu_memory_near_capacity"]["evidence"]["peak_bytes"] == max(allocated, reserved)


def test_near_capacity_is_silent_when_the_peak_lies_outside_the_profiled_iterations(tmp_path):
    assert "gpu_memory_near_capacity" not in _memory_step(tmp_path, 76 * GIB, 76 * GIB, outside=True)
