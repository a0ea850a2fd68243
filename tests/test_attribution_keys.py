"""Thread keys, launch links and the folded (thread, start) search, against hand-made examples and a
brute-force reading of the same rows."""

from __future__ import annotations

import numpy as np
import pandas as pd

from dlscope.analyze.analysis import _data_types, op_types
from dlscope.analyze.attribution import OpTree, ancestor_rows, link_api_calls, pack_keys, thread_keys
from dlscope.analyze.nesting import Nesting, _last_at_or_before
from dlscope.model import make_table, words_column

BIG = np.iinfo(np.int64).max


def _same_partition(keys: np.ndarray, tuples: list[tuple]) -> bool:
    """Equal keys exactly where the tuples are equal."""
    return all((keys[i] == keys[j]) == (tuples[i] == tuples[j]) for i in range(len(tuples)) for j in range(len(tuples)))


def test_thread_keys_are_equal_exactly_for_the_same_thread_across_tables():
    ops = pd.DataFrame({"rank": [0, 0, 1, 0], "pid": [7, 7, 7, 8], "tid": [1, 2, 1, 1]})
    calls = pd.DataFrame({"rank": [1, 0, 3], "pid": [7, 8, 7], "tid": [1, 1, 1]})
    op_keys, call_keys = thread_keys([ops, calls])
    tuples = list(map(tuple, ops.to_numpy().tolist())) + list(map(tuple, calls.to_numpy().tolist()))
    assert _same_partition(np.concatenate([op_keys, call_keys]), tuples)
    assert call_keys[0] == op_keys[2] and call_keys[1] == op_keys[3]  # the same threads in both tables
    assert call_keys[2] not in op_keys                                   # rank 3 has no ops


def test_keys_stay_distinct_when_values_span_the_whole_int64_range():
    """Thread ids like pthread addresses and negative sentinels: the plain fold would overflow."""
    rng = np.random.default_rng(3)
    pool = np.array([-BIG - 1, -1, 0, 5, 1 << 40, BIG - 1, BIG], np.int64)
    cols = [pool[rng.integers(0, len(pool), 300)] for _ in range(3)]
    (keys,) = pack_keys([[c] for c in cols])
    assert _same_partition(keys, list(zip(*(c.tolist() for c in cols))))


def test_a_column_of_one_value_leaves_the_keys_as_the_other_columns_make_them():
    """A single trace's rank (one value in every table) folds nothing in: the keys are those of the other columns,
    and still tell apart the tuples they should."""
    rng = np.random.default_rng(4)
    pid, tid = [rng.integers(0, 5, 50) for _ in range(2)], [rng.integers(0, 9, 50) for _ in range(2)]
    rank = [np.full(50, 7), np.full(50, 7)]
    with_rank, without = pack_keys([rank, pid, tid]), pack_keys([pid, tid])
    assert all(a.tolist() == b.tolist() for a, b in zip(with_rank, without))
    tuples = list(zip(np.concatenate(pid).tolist(), np.concatenate(tid).tolist()))
    assert _same_partition(np.concatenate(with_rank), tuples)


def test_keys_of_empty_tables():
    a, b = pack_keys([[np.zeros(0, np.int64), np.zeros(0, np.int64)]])
    assert len(a) == 0 and len(b) == 0


def test_each_activity_is_linked_to_the_first_call_with_its_correlation():
    calls = pd.DataFrame({"rank": [0, 0, 0, 1, 0, 0], "pid": [1, 1, 1, 1, 2, 1],
                          "correlation": [10, 11, 10, 10, 10, -1]})
    # rows 0 and 2 share (0, 1, 10): the first one launched it; a negative correlation links nothing
    act = pd.DataFrame({"rank": [0, 1, 0, 0, 0, 0, 2], "pid": [1, 1, 2, 1, 1, 1, 1],
                        "correlation": [10, 10, 10, 11, 12, -1, 10]})
    assert link_api_calls(act, calls).tolist() == [0, 3, 4, 1, -1, -1, -1]


def test_without_pids_the_link_ignores_the_pid():
    """GPU activity recorded without a process (pid -1) is matched on rank and correlation alone."""
    calls = pd.DataFrame({"rank": [0, 0], "pid": [5, 6], "correlation": [3, 4]})
    act = pd.DataFrame({"rank": [0, 0, 0], "pid": [-1, -1, -1], "correlation": [4, 3, 9]})
    assert link_api_calls(act, calls).tolist() == [1, 0, -1]
    assert link_api_calls(act.iloc[0:0], calls).tolist() == []
    assert link_api_calls(act, calls.iloc[0:0]).tolist() == [-1, -1, -1]


def _brute_last(keys, starts, order, key, t) -> int:
    """The last sorted position of thread ``key`` whose start is <= t, -1 if none."""
    found = [p for p, row in enumerate(order) if keys[row] == key and starts[row] <= t]
    return found[-1] if found else -1


def test_folded_search_finds_the_last_start_at_or_before_each_time():
    """Ties (equal starts), times before and after every start and at the int64 ends, unknown threads."""
    keys = np.array([2, 2, 2, 5, 5, 9, 2], np.int64)
    starts = np.array([10, 10, 30, 10, 20, 40, 50], np.int64)
    ends = np.array([40, 20, 35, 30, 25, 45, 60], np.int64)
    nest = Nesting.build(keys, starts, ends)
    q_keys = np.array([2, 2, 2, 2, 2, 5, 5, 9, 9, 7, 2, 9], np.int64)
    q_times = np.array([9, 10, 29, 30, 99, 15, 20, 39, 40, 10, -BIG - 1, BIG], np.int64)
    thread = np.minimum(np.searchsorted(nest.thread_keys, q_keys), len(nest.thread_keys) - 1)
    lo = nest.thread_lo[thread]
    hi = np.append(nest.thread_lo[1:], len(nest.order))[thread]
    got = nest._last_at_or_before(thread, lo, hi, q_times)
    known = nest.thread_keys[thread] == q_keys
    expected = [_brute_last(keys, starts, nest.order, k, t) for k, t in zip(q_keys, q_times)]
    assert np.where(known, got, -1).tolist() == expected
    assert np.where(known, _last_at_or_before(nest.starts, lo, hi, q_times), -1).tolist() == expected
    assert len(nest._folded[0]) == len(starts)  # the folded search was the one used


def test_folded_and_plain_searches_agree_on_random_threads():
    rng = np.random.default_rng(8)
    for _ in range(20):
        n = int(rng.integers(1, 60))
        keys = rng.integers(0, 4, n).astype(np.int64)
        starts = rng.integers(-50, 50, n).astype(np.int64)
        nest = Nesting.build(keys, starts, starts + rng.integers(0, 20, n))
        thread = rng.integers(0, len(nest.thread_keys), 100)
        lo = nest.thread_lo[thread]
        hi = np.append(nest.thread_lo[1:], len(nest.order))[thread]
        times = rng.integers(-60, 60, 100).astype(np.int64)
        assert nest._last_at_or_before(thread, lo, hi, times).tolist() == \
            _last_at_or_before(nest.starts, lo, hi, times).tolist()


def test_op_types_take_the_importers_type_else_the_name_and_unwrap_autograd_nodes():
    ops = make_table("ops", {"name": ["aten::mm", "autograd::engine::evaluate_function: AddmmBackward0", "x",
                                      "aten::mm"],
                             "op_type": ["", "", "Linear", ""], "rank": [0, 0, 0, 0]})
    types = op_types(ops)
    assert list(types) == ["aten::mm", "AddmmBackward0", "Linear", "aten::mm"]
    assert list(types.categories) == ["", "AddmmBackward0", "Linear", "aten::mm"]  # the words used, sorted


def test_an_op_without_input_types_takes_a_descendants_data_type():
    # wrapper (no inputs) -> mm (float16) ; view (int64) alone ; wrapper2 -> nothing typed
    ops = make_table("ops", {"rank": [0] * 5, "pid": [1] * 5, "tid": [1] * 5,
                             "start": [0, 1, 10, 20, 21], "end": [9, 8, 11, 29, 28],
                             "input_dtypes": ["[]", '["c10::Half"]', '["long int"]', "", "[]"]})
    assert list(_data_types(ops, OpTree.build(ops))) == ["float16", "float16", "int64", "", ""]


def test_words_column_is_the_words_taken_by_code():
    got = words_column(np.array([1, 0, 1, 1], np.int8), ["fwd", "bwd"])
    assert list(got) == ["bwd", "fwd", "bwd", "bwd"]
    assert pd.Series(got).dtype == pd.Series(np.array(["x"], dtype=object)).dtype  # pandas' own string dtype
    assert len(words_column(np.zeros(0, np.int8), ["fwd", "bwd"])) == 0


def test_an_op_takes_the_data_type_its_kernels_launchers_ran_at():
    """Autocast: linear (FP32 input) -> to (FP32) -> copy_ (FP16 destination), and addmm (FP16): the cast's
    kernel takes 10 ns, the GEMM 100 ns, so linear ran at float16 (and `to`, whose only kernel is the FP16
    copy, too); a second linear whose own FP32 kernel and its addmm's FP16 one tie takes the first type
    by name (float16); an op without kernels keeps its own input's type."""
    ops = make_table("ops", {"rank": [0] * 7, "pid": [1] * 7, "tid": [1] * 7,
                             "start": [0, 1, 2, 5, 20, 21, 40], "end": [9, 4, 3, 8, 29, 28, 41],
                             "input_dtypes": ['["float"]', '["float"]', '["c10::Half", "float"]', '["c10::Half"]',
                                              '["float"]', '["c10::Half"]', '["float"]']})
    tree = OpTree.build(ops)
    # rows: 0 linear, 1 to, 2 copy_, 3 addmm | 4 linear, 5 addmm | 6 alone
    k_op = np.array([2, 3, 4, 5, -1], dtype=np.int64)      # the last kernel has no launching op
    k_dur = np.array([10, 100, 50, 50, 7], dtype=np.int64)
    got = list(_data_types(ops, tree, ancestor_rows(k_op, tree.parent), k_op, k_dur))
    assert got == ["float16", "float16", "float16", "float16", "float16", "float16", "float32"]
