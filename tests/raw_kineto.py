"""An independent reading of Kineto traces for the tests' oracles: the raw JSON, parsed by the standard
library with exact decimal timestamps, and the launching op of each GPU activity found by the definition
in PRODUCT.md written out plainly (no dlscope code is used here).
"""

from __future__ import annotations

import bisect
import gzip
import json
import re
from collections import defaultdict
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache
from itertools import accumulate
from pathlib import Path

OP_CATS = {"cpu_op", "Operator"}
LAUNCH_CATS = {"cuda_runtime", "Runtime", "cuda_driver"}
KERNEL_CATS = {"kernel", "Kernel"}
MEMOP_CATS = {"gpu_memcpy", "Memcpy", "gpu_memset", "Memset"}


def ns(value) -> int:
    """Microseconds as the JSON text wrote them, to exact integer nanoseconds (half up)."""
    return int((Decimal(str(value)) * 1000).to_integral_value(rounding="ROUND_HALF_EVEN"))


@dataclass(frozen=True)
class Event:
    index: int          # position in traceEvents
    cat: str
    name: str
    pid: object
    tid: object
    start: int          # ns
    end: int            # ns
    args: dict

    @property
    def correlation(self):
        return self.args.get("correlation")


def trace_events(path: Path) -> list:
    """The trace's raw event list (gzip or plain JSON, an object with traceEvents or a bare list), floats exact."""
    with gzip.open(path, "rt") if str(path).endswith(".gz") else open(path) as f:
        doc = json.load(f, parse_float=Decimal)
    return doc["traceEvents"] if isinstance(doc, dict) else doc


@lru_cache(maxsize=8)
def events(path: Path) -> tuple[Event, ...]:
    """Every complete ("X") event of a trace, with exact ns times."""
    raw = trace_events(path)
    out = []
    for i, e in enumerate(raw):
        if not isinstance(e, dict) or e.get("ph") != "X" or "ts" not in e:
            continue
        start = ns(e["ts"])
        out.append(Event(i, str(e.get("cat", "")), str(e.get("name", "")), e.get("pid"), e.get("tid"), start,
                         start + ns(e.get("dur", 0)), e.get("args") or {}))
    return tuple(out)


STEP_LIKE = re.compile(r"(?i)^(ProfilerStep#\d+|"
                       r"(train[_ ]?|training[_ ]?|eval[_ ]?)?(step|iter|iteration|batch)([ _#:=-]*\d+)?)$")


def is_step_marker(name: str) -> bool:
    return STEP_LIKE.match(name) is not None


class _Innermost:
    """Intervals of one kind per thread, answering "the innermost one enclosing time t"."""

    def __init__(self, intervals: list[Event]):
        by_thread: dict = defaultdict(list)
        for e in intervals:
            by_thread[(e.pid, e.tid)].append(e)
        self.by_thread = {k: sorted(v, key=lambda o: (o.start, -o.end, o.index)) for k, v in by_thread.items()}
        self.starts = {k: [o.start for o in v] for k, v in self.by_thread.items()}
        self.reach = {k: list(accumulate((o.end for o in v), max)) for k, v in self.by_thread.items()}

    def at(self, thread, t: int) -> Event | None:
        """Op start <= t < op end; among several the latest start, then the shortest, then the later one in
        the file; a zero-length one exactly at t only when none of positive length encloses t."""
        ops, starts, reach = self.by_thread.get(thread, []), self.starts.get(thread, []), self.reach.get(thread, [])
        hi = bisect.bisect_right(starts, t)
        for j in range(hi - 1, -1, -1):
            if ops[j].start <= t < ops[j].end:
                return ops[j]
            if reach[j] <= t:  # no earlier interval is still open at t
                break
        zero = [o for o in ops[bisect.bisect_left(starts, t):hi] if o.start == o.end == t]
        return zero[-1] if zero else None


def launching_ops(path: Path) -> dict[int, Event | None]:
    """For each kernel and memory operation (by event index) whose launch call is in the trace: the innermost
    op (cpu_op) enclosing the call's start on the call's thread; when no op does, the innermost annotation
    range (record_function; not a step marker), which then stands for an op. None when nothing encloses it."""
    evs = events(path)
    ops = _Innermost([e for e in evs if e.cat in OP_CATS and not is_step_marker(e.name)])
    ranges = _Innermost([e for e in evs if e.cat == "user_annotation" and not is_step_marker(e.name)])
    calls: dict = {}
    for e in evs:
        if e.cat in LAUNCH_CATS and e.correlation is not None:
            calls.setdefault(e.correlation, e)
    out: dict[int, Event | None] = {}
    for e in evs:
        if e.cat not in KERNEL_CATS | MEMOP_CATS or e.correlation is None or e.correlation not in calls:
            continue
        call = calls[e.correlation]
        thread = (call.pid, call.tid)
        out[e.index] = ops.at(thread, call.start) or ranges.at(thread, call.start)
    return out


def _outermost(intervals: list[Event]) -> list[Event]:
    """Those no earlier one of the same thread (start, then longest first, then file order) is still open
    at their start: the roots of each thread's nesting."""
    out = []
    for group in _Innermost(intervals).by_thread.values():
        reach = None
        for e in group:
            if reach is None or reach <= e.start:
                out.append(e)
            reach = e.end if reach is None else max(reach, e.end)
    return out


def op_nodes(path: Path) -> list[Event]:
    """The op node calls (PRODUCT.md): the outermost framework ops of each thread, and the outermost of the
    annotation ranges that stand for an op because they launched GPU work no framework op encloses."""
    evs = events(path)
    ops = [e for e in evs if e.cat in OP_CATS and not is_step_marker(e.name)]
    ranges = {o.index: o for o in launching_ops(path).values() if o is not None and o.cat not in OP_CATS}
    return _outermost(ops) + _outermost(list(ranges.values()))


def activity_by_op_node(path: Path) -> dict[int, list[Event]]:
    """Per op node call (event index of the outermost op, or of the range standing for an op), the kernels and
    memory operations launched beneath it: those whose launching op is it or nested in it."""
    nodes = op_nodes(path)
    by_thread: dict = defaultdict(list)
    for n in nodes:
        by_thread[(n.pid, n.tid, n.cat in OP_CATS)].append(n)
    for group in by_thread.values():
        group.sort(key=lambda o: (o.start, -o.end, o.index))
    starts = {k: [(o.start, -o.end, o.index) for o in v] for k, v in by_thread.items()}
    out: dict[int, list[Event]] = defaultdict(list)
    by_index = {e.index: e for e in events(path)}
    for index, owner in launching_ops(path).items():
        if owner is None:
            continue
        key = (owner.pid, owner.tid, owner.cat in OP_CATS)
        # the op node holding the owner: the last root at or before it (roots of a thread never overlap)
        pos = bisect.bisect_right(starts[key], (owner.start, -owner.end, owner.index)) - 1
        out[by_thread[key][pos].index].append(by_index[index])
    return out


@dataclass(frozen=True)
class MemorySample:
    index: int          # position in traceEvents
    device: int         # CUDA device index, -1 for the CPU allocator
    ts: int             # ns
    delta: int
    allocated: int | None   # the allocator's totals after the sample, None when the trace has only deltas
    reserved: int | None


@lru_cache(maxsize=4)
def memory_samples(path: Path) -> tuple[MemorySample, ...]:
    """Every allocator ``[memory]`` instant event of CUDA devices and the CPU allocator, in file order."""
    raw = trace_events(path)
    out = []
    for i, e in enumerate(raw):
        if not isinstance(e, dict) or e.get("ph") != "i" or e.get("name") != "[memory]":
            continue
        a = e.get("args") or {}
        kind = a.get("Device Type")
        if kind not in (0, 1):
            continue
        device = int(a.get("Device Id", -1)) if kind == 1 else -1
        out.append(MemorySample(i, device, ns(e["ts"]), int(a.get("Bytes", 0)), a.get("Total Allocated"),
                                a.get("Total Reserved")))
    return tuple(out)


def flops_at_op_level(events: list, start: float, end: float, model) -> list[tuple[dict, float]]:
    """The ops of ``[start, end)`` whose FLOP ``model`` (event -> FLOPs or None) gives a value and that no op around
    them on their thread already counted (the op level MFU sums at), with their FLOPs: [(event, flops)]."""
    threads: dict[tuple, list] = {}
    for e in events:
        if e.get("cat") == "cpu_op" and e.get("ph") == "X" and start <= e["ts"] < end:
            threads.setdefault((e["pid"], e["tid"]), []).append(e)
    counted = []
    for ops in threads.values():
        open_ops: list[tuple[float, bool]] = []  # (end, this op or one around it counts)
        for e in sorted(ops, key=lambda e: (e["ts"], -e["dur"])):
            while open_ops and open_ops[-1][0] <= e["ts"]:
                open_ops.pop()
            covered = any(counts for _, counts in open_ops)
            work = model(e)
            if work is not None and not covered:
                counted.append((e, work))
            open_ops.append((e["ts"] + e["dur"], covered or work is not None))
    return counted
