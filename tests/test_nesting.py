"""Per-thread nesting of CPU intervals, against a brute-force reading of the same intervals."""

from __future__ import annotations

import numpy as np
import pandas as pd

from dlscope.analyze.analysis import _iteration_ends
from dlscope.analyze.nesting import Nesting


def _brute_parent(keys, starts, ends, i) -> int:
    """The latest-starting interval of the same thread that contains interval i's start (ties: longer first)."""
    best = -1
    for j in range(len(starts)):
        if j != i and keys[j] == keys[i] and starts[j] <= starts[i] and ends[i] <= ends[j] and \
                (starts[j], -ends[j], j) < (starts[i], -ends[i], i):
            if best < 0 or (starts[j], -ends[j]) > (starts[best], -ends[best]):
                best = j
    return best


def _random_nested(rng, n, origin):
    """Properly nested intervals (a random tree) on one thread, starting at ``origin``."""
    starts, ends, stack, t = [], [], [], origin
    for _ in range(n):
        while stack and rng.random() < 0.4:
            ends[stack.pop()] = t
            t += int(rng.integers(1, 5))
        starts.append(t)
        ends.append(-1)
        stack.append(len(starts) - 1)
        t += int(rng.integers(1, 5))
    for i in reversed(stack):
        ends[i] = t
        t += 1
    return starts, ends


def test_threads_on_clocks_far_apart_nest_as_if_alone():
    """Ranks recorded on different machines: 10^18 ns between their clocks must not overflow anything."""
    rng = np.random.default_rng(5)
    keys, starts, ends = [], [], []
    for key, origin in ((0, 1_740_461_679_600_000_000), (1, 12_000), (2, 4_458_676_639_000_000), (3, 0)):
        s, e = _random_nested(rng, 40, origin)
        keys += [key] * len(s)
        starts += s
        ends += e
    keys, starts, ends = np.array(keys), np.array(starts, np.int64), np.array(ends, np.int64)
    nest = Nesting.build(keys, starts, ends)
    assert nest.parent.tolist() == [_brute_parent(keys, starts, ends, i) for i in range(len(starts))]
    # the innermost interval open at each start is the interval itself
    assert nest.innermost_at(keys, starts).tolist() == list(range(len(starts)))
    assert nest.innermost_at(np.array([9]), np.array([5])).tolist() == [-1]  # a thread with no intervals


def test_iteration_ends_keep_nanoseconds_beyond_float_precision():
    """An iteration without GPU work (a missing value) must not turn the others' ns epochs into floats."""
    iterations = pd.DataFrame({"rank": [0, 1], "iteration": [1, 1], "cpu_end": [1_000, 1_740_461_679_600_357_000]})
    kernels = pd.DataFrame({"rank": [1], "iteration": [1], "end": [1_740_461_679_600_358_001]})
    memops = pd.DataFrame({"rank": pd.Series([], dtype="int64"), "iteration": pd.Series([], dtype="int64"),
                           "end": pd.Series([], dtype="int64")})
    assert _iteration_ends(iterations, kernels, memops).tolist() == [1_000, 1_740_461_679_600_358_001]
