"""The timeline's fast orders and lane keys (``analyze.timeline``) against numpy's plain ones: a stable argsort and
the distinct rows of ``np.unique(axis=0)``, on keys that take the packed paths and on keys too wide for them."""

from __future__ import annotations

import numpy as np
import pytest

from dlscope.analyze.timeline import _lanes_of, _stable_order


@pytest.mark.parametrize("low, high", [(0, 5), (-3, 3), (0, 10 ** 6),
                                       (1_700_000_000_000_000_000, 1_700_000_000_100_000_000),  # ns timestamps
                                       (-(2 ** 62), 2 ** 62)])  # too wide to pack: numpy's stable argsort
def test_stable_order_is_a_stable_argsort(low, high):
    rng = np.random.default_rng(7)
    key = rng.integers(low, high, 5000, dtype=np.int64)
    key[::4] = key[0]  # many ties: their order must be the rows' order
    assert np.array_equal(_stable_order(key), np.argsort(key, kind="stable"))


def test_stable_order_of_nothing_and_of_one():
    assert len(_stable_order(np.zeros(0, np.int64))) == 0
    assert _stable_order(np.array([42], np.int64)).tolist() == [0]


def test_lanes_are_the_sorted_distinct_rows_of_all_keys():
    rng = np.random.default_rng(3)

    def keys(n, wide):
        cols = [rng.integers(0, 2, n), rng.integers(-1, 3, n),
                rng.integers(-(2 ** 40), 2 ** 40, n) if wide else rng.integers(0, 4, n),
                rng.integers(0, 3, n), rng.integers(0, 70000, n) % 5]
        return np.column_stack(cols).astype(np.int64)

    parts = [keys(3000, False), keys(0, False), keys(500, True), keys(7, False)]
    lanes, lane_of = _lanes_of([list(p.T) for p in parts])  # each key as its columns
    every = np.concatenate(parts)
    distinct, inverse = np.unique(every, axis=0, return_inverse=True)
    assert np.array_equal(lanes, distinct)
    assert np.array_equal(np.concatenate(lane_of), inverse.reshape(-1))
    assert [len(x) for x in lane_of] == [len(p) for p in parts]


def test_stored_npy_bytes_are_what_np_save_writes():
    import io

    from dlscope.analyze.timeline import _from_npy, _npy

    for values in (np.arange(-5, 7, dtype=np.int64), np.array([True, False, True]), np.arange(9, dtype=np.int32),
                   np.zeros(0, np.int64), np.arange(12, dtype=np.int64)[::3]):
        buf = io.BytesIO()
        np.save(buf, values, allow_pickle=False)
        assert _npy(values) == buf.getvalue()
        assert np.array_equal(_from_npy(_npy(values)), values)
