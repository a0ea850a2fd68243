"""Iterations timed on the GPU where the GPU runs behind the CPU (docs/metrics.md, "Iteration time on the GPU").

An iteration's window runs from its CPU start to the next one's (PRODUCT.md), so where the GPU is the bottleneck
and the CPU queues work ahead, the windows time the CPU's pace and the last one holds every earlier iteration's
unfinished GPU work (an H200 FP32 CUDA-graph capture: windows of 8 ms, then one of 372 ms, for iterations that
each took 44 ms on the GPU). Where the iterations' GPU work ends, on the median, later than ``tolerance`` of the
median window after their windows end, each iteration is timed on the GPU instead: from the end of the previous
iteration's GPU work to the end of its own, the first from its window's start. The windows stay as defined; this
is a second reading of the same iterations, used by the ``iteration_variance`` advice and the summary.

Pure functions on arrays, so the rule (from the analysis's frames) and the summary (from the stored tables) time
the iterations the same way.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import NamedTuple

import numpy as np


class GpuTimed(NamedTuple):
    """The iterations timed on the GPU, in the order of the iterations given."""

    durations: np.ndarray  # int64 ns: the end of the previous iteration's GPU work to the end of its own
    starts: np.ndarray     # int64 ns: where each is timed from (the first: its window's start)
    lag_ns: int            # the median of (GPU work's end − window's end) over all but the last iteration


@lru_cache(maxsize=1)
def packaged_tolerance() -> float:
    """The ``iteration_variance`` rule's packaged ``tolerance`` (data/rules.json), read without loading the expert
    systems (16 ms that ``dlscope summary`` does not otherwise spend)."""
    rules = json.loads(resources.files("dlscope.data").joinpath("rules.json").read_text())
    return float(rules["iteration_variance"]["tolerance"])


def iteration_gpu_ends(activity_iteration, activity_end, numbers) -> np.ndarray:
    """Per iteration of ``numbers`` (sorted): the end of the last GPU activity (kernel or memory operation)
    attributed to it by its launching call, -1 where none was; activities of other iterations are ignored."""
    numbers = np.asarray(numbers, np.int64)
    ends = np.full(len(numbers), -1, np.int64)
    iteration = np.asarray(activity_iteration)
    if len(iteration) and len(numbers):
        iteration = iteration.astype(np.int64)
        at = np.searchsorted(numbers, iteration)
        ok = (at < len(numbers)) & (numbers[np.minimum(at, len(numbers) - 1)] == iteration)
        np.maximum.at(ends, at[ok], np.asarray(activity_end).astype(np.int64)[ok])
    return ends


def timed_on_gpu(gpu_ends, starts, ends, tolerance: float) -> GpuTimed | None:
    """The iterations timed on the GPU from each one's GPU work's end (``gpu_ends``, -1 where none) and window
    (``starts``, ``ends``), where the GPU ran behind the CPU; None where it did not, where fewer than 2
    iterations are given, or where an iteration ran no GPU work or its work ended no later than the previous
    one's (no GPU pace to read)."""
    gpu_ends = np.asarray(gpu_ends, np.int64)
    if len(gpu_ends) < 2 or (gpu_ends < 0).any() or (np.diff(gpu_ends) <= 0).any():
        return None
    start, end = np.asarray(starts, np.int64), np.asarray(ends, np.int64)
    lag = float(np.median(gpu_ends[:-1] - end[:-1]))
    if lag <= tolerance * float(np.median(end[:-1] - start[:-1])):
        return None
    timed_from = np.concatenate([start[:1], gpu_ends[:-1]])
    return GpuTimed(gpu_ends - timed_from, timed_from, int(lag))


def gpu_timed(activity_iteration, activity_end, numbers, starts, ends, tolerance: float) -> GpuTimed | None:
    """:func:`timed_on_gpu` from the GPU activities' iterations and ends (kernels and memory operations)."""
    return timed_on_gpu(iteration_gpu_ends(activity_iteration, activity_end, numbers), starts, ends, tolerance)
