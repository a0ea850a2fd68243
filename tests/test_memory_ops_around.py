"""The op at a memory sample, read from only the few op calls around it (``analyze.memory.enclosing_ops``), is
the op a nesting over every call names: on hand-made nested, overlapping, tied and zero-length calls (each
answer also worked out by hand) and on random ones with overlaps."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dlscope.analyze.memory import OpCalls, enclosing_ops
from dlscope.analyze.nesting import Nesting


def _calls(rows: list[tuple[str, int, int, int]]) -> OpCalls:
    """Calls (name, tid, start, end) of rank 0, pid 1, op ids 100, 101, … in the given row order."""
    frame = pd.DataFrame(rows, columns=["name", "tid", "start", "end"])
    frame["op_id"] = np.arange(100, 100 + len(rows))
    frame["rank"], frame["pid"] = 0, 1
    return OpCalls.of_frame(frame)


def _around(calls: OpCalls, samples: list[tuple[int, int]]) -> list[tuple[str | None, str | None]]:
    tid = np.array([t for t, _ in samples], np.int64)
    ts = np.array([s for _, s in samples], np.int64)
    inner, outer = enclosing_ops(calls, np.zeros(len(ts), np.int64), np.ones(len(ts), np.int64), tid, ts)
    names = calls.names(np.concatenate([np.where(inner >= 0, calls.op_id[np.maximum(inner, 0)], -1),
                                        np.where(outer >= 0, calls.op_id[np.maximum(outer, 0)], -1)]))
    return list(zip(names[: len(ts)], names[len(ts):]))


def _whole(calls: OpCalls, tid: np.ndarray, ts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """What the summary did before: one nesting over every call, its innermost at each time and that one's root."""
    nest = Nesting.build(calls.tid, calls.start, calls.end)
    inner = nest.innermost_at(tid, ts)
    inner = np.where(tid >= 0, inner, -1)
    return inner, np.where(inner >= 0, nest.root[np.maximum(inner, 0)], -1)


HAND_MADE = [
    ("nested", [("step", 1, 0, 100), ("linear", 1, 10, 60), ("t", 1, 10, 20), ("addmm", 1, 20, 60),
                ("empty", 1, 30, 31)],
     [(1, 30), (1, 25), (1, 15), (1, 60), (1, 99), (1, 100)],
     [("empty", "step"), ("addmm", "step"), ("t", "step"), ("step", "step"), ("step", "step"), (None, None)]),
    # "a" ends before the sample but overlaps "b", which encloses it: a nesting makes "a" b's parent
    ("overlapping", [("a", 1, 0, 50), ("b", 1, 40, 100), ("c", 1, 60, 70)],
     [(1, 65), (1, 80), (1, 45)], [("c", "a"), ("b", "a"), ("b", "a")]),
    # a chain of overlaps reaching back three calls, none of them running at the sample
    ("overlap chain", [("w", 1, 0, 12), ("x", 1, 10, 22), ("y", 1, 20, 32), ("z", 1, 30, 100)],
     [(1, 90)], [("z", "w")]),
    # equal intervals: the later row is the inner one; another thread's calls are not this thread's
    ("ties and threads", [("first", 1, 0, 10), ("second", 1, 0, 10), ("other", 2, 0, 10)],
     [(1, 5), (2, 5), (3, 5)], [("second", "first"), ("other", "other"), (None, None)]),
    # a zero-length call owns its time only where nothing of positive length encloses it
    ("zero length", [("outer", 1, 0, 10), ("mark", 1, 5, 5), ("lone", 1, 20, 20)],
     [(1, 5), (1, 20), (1, 21)], [("outer", "outer"), ("lone", "lone"), (None, None)]),
    ("unknown thread", [("op", 1, 0, 10)], [(-1, 5)], [(None, None)]),
]


@pytest.mark.parametrize("rows,samples,expected", [case[1:] for case in HAND_MADE], ids=[c[0] for c in HAND_MADE])
def test_the_calls_around_a_sample_name_the_op_a_whole_nesting_names(rows, samples, expected):
    calls = _calls(rows)
    assert _around(calls, samples) == expected
    tid = np.array([t for t, _ in samples], np.int64)
    ts = np.array([s for _, s in samples], np.int64)
    got = enclosing_ops(calls, np.zeros(len(ts), np.int64), np.ones(len(ts), np.int64), tid, ts)
    whole = _whole(calls, tid, ts)
    assert got[0].tolist() == whole[0].tolist() and got[1].tolist() == whole[1].tolist()


def test_random_overlapping_calls_give_the_whole_nestings_answer():
    rng = np.random.default_rng(7)
    for _ in range(200):
        n = int(rng.integers(1, 40))
        start = rng.integers(0, 200, n)
        length = np.where(rng.random(n) < 0.1, 0, rng.integers(1, 80, n))
        end = start + np.where(rng.random(n) < 0.05, -3, length)  # a few end before their start
        tid = rng.integers(1, 3, n)
        order = rng.permutation(n)
        calls = _calls([(f"op{i}", int(tid[i]), int(start[i]), int(end[i])) for i in order])
        k = int(rng.integers(1, 12))
        s_tid = rng.integers(0, 3, k) - (rng.random(k) < 0.1)
        s_ts = rng.integers(-5, 290, k)
        got = enclosing_ops(calls, np.zeros(k, np.int64), np.ones(k, np.int64), s_tid, s_ts)
        whole = _whole(calls, s_tid, s_ts)
        assert got[0].tolist() == whole[0].tolist() and got[1].tolist() == whole[1].tolist()
