"""Helpers that replaced sorts and ``np.isin`` on the import's main thread, against numpy's own functions."""

from __future__ import annotations

import numpy as np
import pytest

from dlscope.analyze.aggregation import _first_rows, group_stats, in_small
from dlscope.analyze.timeline import _distinct_rows
from dlscope.whatif.graph import _member


@pytest.mark.parametrize("seed", range(30))
def test_in_small_is_isin(seed):
    rng = np.random.default_rng(seed)
    values = rng.integers(-5, 80, int(rng.integers(0, 300)))
    wanted = rng.integers(0, 60, int(rng.integers(1, 20)))
    assert np.array_equal(in_small(values, wanted), np.isin(values, wanted))
    assert np.array_equal(_member(values, wanted), np.isin(values, wanted))


def test_in_small_by_hand():
    assert in_small(np.array([-1, 0, 3, 4, 9]), np.array([3, 4])).tolist() == [False, False, True, True, False]
    assert in_small(np.array([1, 2]), np.array([], np.int64)).tolist() == [False, False]
    big = np.array([0, 10 ** 12, 5])
    assert in_small(big, np.array([10 ** 12, 0])).tolist() == [True, True, False]  # a wide range: np.isin's way
    assert _member(np.array([7, 8]), np.array([], np.int64)).tolist() == [False, False]


@pytest.mark.parametrize("seed", range(30))
def test_first_rows_is_uniques_first_index(seed):
    import pandas as pd

    rng = np.random.default_rng(seed)
    codes = pd.factorize(rng.integers(0, 9, int(rng.integers(0, 200))))[0]
    assert np.array_equal(_first_rows(codes), np.unique(codes, return_index=True)[1])


def test_group_stats_by_hand():
    counts, stats = group_stats(np.array([2, 0, 2, 2]), 4, {"v": np.array([5, 1, -3, 7])})
    assert counts.tolist() == [1, 0, 3, 0]
    total, low, high = stats["v"]
    assert total.tolist() == [1, 0, 9, 0] and low.tolist() == [1, 0, -3, 0] and high.tolist() == [1, 0, 7, 0]


@pytest.mark.parametrize("seed", range(30))
def test_distinct_rows_are_the_distinct_rows(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    columns = [np.broadcast_to(np.int64(3), n),                       # a constant view
               rng.integers(0, 4, n) * 10 ** 9 + 140_000_000_000,    # a wide span, few values (thread ids)
               rng.integers(-2, 3, n),                                # a narrow span
               np.full(n, 7, np.int64)]
    first, inverse = _distinct_rows(columns)
    rows = np.column_stack(columns)
    assert np.array_equal(rows[first][inverse], rows)               # each row's number names a row like it
    assert len(first) == len(np.unique(rows, axis=0))               # one number per distinct row
    assert set(inverse.tolist()) == set(range(len(first)))          # numbered 0 .. distinct - 1


def test_distinct_rows_by_hand():
    first, inverse = _distinct_rows([np.array([5, 5, 6, 5]), np.array([1, 2, 1, 1])])
    assert len(first) == 3
    assert inverse[0] == inverse[3] and len({inverse[0], inverse[1], inverse[2]}) == 3
    first, inverse = _distinct_rows([np.array([4, 4]), np.array([9, 9])])
    assert len(first) == 1 and inverse.tolist() == [0, 0]
