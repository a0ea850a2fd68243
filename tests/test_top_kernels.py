"""The top-kernel texts ("name ×calls; …", at most five, by GPU time then name) of op nodes, op types and
kernels: a hand-computed example, and every stored text of a real 8-rank job recomputed in the test from the
database's own per-node kernel rows (sqlite3 and sorted(), nothing of dlscope's)."""

from __future__ import annotations

from collections import defaultdict

import pandas as pd
import pytest
from conftest import data_file, sql

from dlscope.analyze.aggregation import _top_kernels


def test_top_kernels_sums_per_name_orders_by_gpu_time_then_name_and_keeps_five():
    rows = [(7, "b", 10, 1), (7, "a", 10, 2), (7, "c", 30, 1), (7, "a", 5, 1),  # a: 15 ns, 3 calls
            (3, "y", 4, 1), (3, "x", 4, 2), (3, None, 100, 1),                   # a tie: by name; no name: dropped
            *[(9, f"k{i}", 7 - i, 1) for i in range(1, 7)]]                      # six kernels: five kept
    frame = pd.DataFrame(rows, columns=["node_id", "kernel_name", "gpu_time_ns", "calls"])
    text = _top_kernels(frame, "node_id")
    assert list(text.index) == [3, 7, 9]
    assert text[3] == "x ×2; y ×1"
    assert text[7] == "c ×1; a ×3; b ×1"
    assert text[9] == "k1 ×1; k2 ×1; k3 ×1; k4 ×1; k5 ×1"


@pytest.mark.parametrize("dtype", [object, "str"])
def test_top_kernels_breaks_ties_by_name_in_python_order_for_object_and_arrow_string_names(dtype):
    # four names with equal GPU time: Python's sorted() puts "Z" < "z" < "é" < "ž" (code points)
    names = ["ž", "é", "z", "Z", None]
    frame = pd.DataFrame({"node_id": [1, 1, 1, 1, 1], "kernel_name": pd.array(names, dtype=dtype),
                          "gpu_time_ns": [4, 4, 4, 4, 9], "calls": [1, 2, 3, 4, 5]})
    text = _top_kernels(frame, "node_id")
    assert text[1] == "; ".join(f"{n} ×{c}" for n, c in sorted(zip(names[:4], [1, 2, 3, 4])))


@pytest.mark.parametrize("calls_dtype", ["int64", "float64"])
def test_top_kernels_of_groups_with_the_same_kernels_share_one_text_and_differ_where_calls_or_order_do(calls_dtype):
    # nodes 1, 4 and 6: the same kernels and calls (6 in another row order); 2: one call more; 3: the same
    # names, other times (another order); 5: a prefix of 1's kernels
    rows = [(1, "a", 9, 1), (1, "b", 5, 2), (2, "a", 9, 1), (2, "b", 5, 3), (3, "a", 5, 1), (3, "b", 9, 2),
            (4, "a", 9, 1), (4, "b", 5, 2), (5, "a", 9, 1), (6, "b", 5, 2), (6, "a", 9, 1)]
    frame = pd.DataFrame(rows, columns=["node_id", "kernel_name", "gpu_time_ns", "calls"]).astype(
        {"calls": calls_dtype})
    text = _top_kernels(frame, "node_id")
    calls = [f"{float(c)}" if calls_dtype == "float64" else f"{c}" for c in (1, 2, 3)]
    assert text.to_dict() == {1: f"a ×{calls[0]}; b ×{calls[1]}", 2: f"a ×{calls[0]}; b ×{calls[2]}",
                              3: f"b ×{calls[1]}; a ×{calls[0]}", 4: f"a ×{calls[0]}; b ×{calls[1]}",
                              5: f"a ×{calls[0]}", 6: f"a ×{calls[0]}; b ×{calls[1]}"}


def test_top_kernels_of_nothing_is_empty():
    frame = pd.DataFrame({"node_id": [1], "kernel_name": [None], "gpu_time_ns": [5], "calls": [1]})
    assert _top_kernels(frame, "node_id").empty
    assert _top_kernels(frame.iloc[:0], "node_id").empty


def _top(weights: dict[str, list[int]], limit: int = 5) -> str:
    """The oracle: ``weights`` name -> [gpu time, calls], largest time first, ties by name."""
    best = sorted(weights.items(), key=lambda kv: (-kv[1][0], kv[0]))[:limit]
    return "; ".join(f"{name} ×{calls}" for name, (_, calls) in best)


@pytest.fixture(scope="module")
def job_db(import_db):
    return import_db(data_file("kineto", "param_dlrm_8rank_v100"), workers=1)


def test_every_op_node_op_type_and_kernel_text_of_a_real_job_matches_its_per_node_kernel_rows(job_db):
    node_rows = sql(job_db, "SELECT agg_id, node_id, op_name, op_type, kernels FROM agg_ops")
    op_kernels = sql(job_db, "SELECT agg_id, node_id, kernel_name, gpu_time_ns, calls FROM agg_op_kernels")
    assert len({r[0] for r in node_rows}) == 8 and op_kernels
    node = {(a, n): (name, kind) for a, n, name, kind, _ in node_rows}
    per_node: dict = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    per_type: dict = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    per_kernel: dict = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    for agg, node_id, kernel, gpu, calls in op_kernels:
        for table, key, name in ((per_node, (agg, node_id), kernel),
                                 (per_type, (agg, node.get((agg, node_id), (None, None))[1]), kernel),
                                 (per_kernel, (agg, kernel), node.get((agg, node_id), (None, None))[0])):
            if name is not None and None not in key:
                table[key][name][0] += gpu
                table[key][name][1] += calls
    for agg, node_id, _, _, text in node_rows:
        assert text == _top(per_node.get((agg, node_id), {})), (agg, node_id)
    types = sql(job_db, "SELECT agg_id, op_type, kernels FROM agg_op_types")
    assert types and any(text for *_, text in types)
    for agg, kind, text in types:
        assert text == _top(per_type.get((agg, kind), {})), (agg, kind)
    kernels = sql(job_db, "SELECT agg_id, kernel_name, op_names FROM agg_kernels")
    assert kernels and any(text for *_, text in kernels)
    for agg, kernel, text in kernels:
        assert text == _top(per_kernel.get((agg, kernel), {})), (agg, kernel)
