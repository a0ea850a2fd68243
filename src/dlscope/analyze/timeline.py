"""The Timeline view's lanes and per-lane arrays of one rank (``viewer/timeline.py`` draws windows of them).

A rank's ops, annotation ranges, CUDA runtime calls, kernels and memory operations become one ``Track`` per kind
(sorted by start, grouped by lane, ordered by duration) and its allocator samples one ``Counter`` per device and
total (allocated, reserved). Built from integer matrices (one row per event), the same whether they come from the
import's frames or from the database's rows; the import stores the result (``to_arrays``, table
``timeline_arrays``) so that the viewer reads a rank of millions of events as a few blobs instead of turning each
row into a Python tuple (seconds), and rebuilds only the cheap indexes (``from_arrays``).
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .intervals import sorted_unique
from .memory import _series

KINDS = ("range", "op", "runtime", "kernel", "memop")

#: Per kind: the table, its columns as the timeline reads them (a missing value reads as the default given).
COLUMNS: dict[str, tuple[str, tuple[tuple[str, int | None], ...]]] = {
    "op": ("op_instances", (("op_id", None), ("pid", -1), ("tid", -1), ("depth", 0), ("start", None),
                            ("end", None))),
    "range": ("ranges", (("range_id", None), ("pid", -1), ("tid", -1), ("device", -1), ("start", None),
                         ("end", None))),
    "runtime": ("api_calls", (("api_id", None), ("pid", -1), ("tid", -1), ("start", None), ("end", None))),
    "kernel": ("kernels", (("kernel_id", None), ("device", -1), ("stream", -1), ("start", None), ("end", None),
                           ("uses_tc", 0))),
    "memop": ("memops", (("memop_id", None), ("device", -1), ("stream", -1), ("start", None), ("end", None))),
}
#: The allocator samples' columns, in the order ``RankTimeline.build`` takes them.
MEMORY_COLUMNS = ("device", "ts", "bytes_delta", "total_allocated", "total_reserved")
#: Bumped when what ``to_arrays`` stores changes: a database holding another format is read from its rows.
ARRAYS_FORMAT = "2"


def select_sql(kind: str) -> str:
    """The query reading one kind's matrix of a rank (``?``: the rank) from the database's rows."""
    table, cols = COLUMNS[kind]
    return (f"SELECT {', '.join(_sql_col(c, d) for c, d in cols)} FROM {table} WHERE rank = ?")


def _sql_col(col: str, default: int | None) -> str:
    quoted = f'"{col}"'
    return quoted if default is None else f"COALESCE({quoted}, {default})"


def matrices_from_frames(tables: dict[str, pd.DataFrame], rank: int) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The matrices of one rank from the analysed tables the import writes (``ops`` is stored as
    ``op_instances``), with the database's row order and missing values as ``select_sql`` reads them. Only the
    columns read are taken (a rank's rows picked from each, not the whole frame copied first)."""
    table_of = {"op": "ops", "range": "ranges", "runtime": "api_calls", "kernel": "kernels", "memop": "memops"}
    out = {}
    for kind, (_, cols) in COLUMNS.items():
        frame = tables.get(table_of[kind])
        if frame is None or frame.empty:
            out[kind] = np.zeros((0, len(cols)), np.int64)
            continue
        rows = _rank_rows(frame, rank)
        out[kind] = np.column_stack([_int_column(frame, c, d, rows) for c, d in cols]).reshape(-1, len(cols))
    memory = tables.get("memory")
    if memory is None or memory.empty:
        return out, np.zeros((0, len(MEMORY_COLUMNS)), np.int64)
    rows = _rank_rows(memory, rank)
    return out, np.column_stack([_int_column(memory, c, -1 if c != "bytes_delta" else 0, rows)
                                 for c in MEMORY_COLUMNS]).reshape(-1, len(MEMORY_COLUMNS))


def matrices_by_rank(tables: dict[str, pd.DataFrame], ranks: Iterable[int]
                     ) -> dict[int, tuple[dict[str, np.ndarray], np.ndarray]]:
    """:func:`matrices_from_frames` of each of ``ranks``, for all of them at once: each column read and converted
    once for the job and each table's rows put in rank order once (a stable sort: a rank's rows keep the table's
    order), each rank's matrix a slice of that; a job of many small ranks spent its time in per-rank pandas calls
    on the job's whole columns (64 ranks: ~85 ms)."""
    ranks = [int(r) for r in ranks]
    table_of = {"op": "ops", "range": "ranges", "runtime": "api_calls", "kernel": "kernels", "memop": "memops"}
    wanted = {kind: (tables.get(table_of[kind]), cols) for kind, (_, cols) in COLUMNS.items()}
    wanted["memory"] = (tables.get("memory"), tuple((c, -1 if c != "bytes_delta" else 0) for c in MEMORY_COLUMNS))
    parts: dict[str, list[np.ndarray]] = {}
    for kind, (frame, cols) in wanted.items():
        if frame is None or frame.empty:
            parts[kind] = [np.zeros((0, len(cols)), np.int64)] * len(ranks)
            continue
        matrix = np.empty((len(frame), len(cols)), np.int64, order="F")  # column by column: each a memcpy,
        for j, (c, d) in enumerate(cols):  # and each of the layout's column reads contiguous
            matrix[:, j] = _int_column(frame, c, d)
        rank = frame["rank"].to_numpy(np.int64)
        if len(rank) > 1 and not bool((rank[1:] >= rank[:-1]).all()):  # (one rank's rows: read in place)
            order = np.argsort(rank, kind="stable")
            matrix, rank = matrix[order], rank[order]
        lo, hi = np.searchsorted(rank, ranks, side="left"), np.searchsorted(rank, ranks, side="right")
        parts[kind] = [matrix[a:b] for a, b in zip(lo, hi)]
    return {r: ({kind: parts[kind][i] for kind in COLUMNS}, parts["memory"][i]) for i, r in enumerate(ranks)}


def _rank_rows(frame: pd.DataFrame, rank: int) -> np.ndarray | None:
    """The rows of ``rank`` in order (None: every row is its)."""
    mine = frame["rank"].to_numpy() == rank
    return None if mine.all() else np.flatnonzero(mine)


def _int_column(frame: pd.DataFrame, col: str, default: int | None, rows: np.ndarray | None = None) -> np.ndarray:
    """One column as int64 (missing values as ``default``), of ``rows`` only (None: all); the frame's own array
    when it already is one (``np.column_stack`` copies it)."""
    n = len(frame) if rows is None else len(rows)
    if col not in frame:
        return np.full(n, -1 if default is None else default, np.int64)
    values = frame[col]
    if default is not None and values.hasnans:
        values = values.fillna(default)
    array = values.to_numpy()
    return np.asarray(array if rows is None else array[rows], dtype=np.int64)


@dataclass
class Track:
    """Events of one kind sorted by start (ids, start, end, dur, lane, kernels' Tensor Core flag), with the
    indexes that make a window cost O(lanes x width + events wide enough to draw), not O(events in it): the
    events by lane (starts and cumulative durations, for per-pixel counts and busy time by binary search) and
    by duration (the few long enough to draw one by one)."""

    kind: str
    ids: np.ndarray
    start: np.ndarray
    end: np.ndarray
    lane: np.ndarray
    tc: np.ndarray | None
    dur: np.ndarray
    max_dur: int
    lane_start: np.ndarray      # starts grouped by lane (lane_ptr[L]:lane_ptr[L+1]), sorted in each lane
    lane_busy: np.ndarray       # cumulative durations in that order, with a leading 0
    lane_ptr: np.ndarray
    by_dur: np.ndarray          # event indexes, longest first
    neg_dur: np.ndarray         # -dur in that order (ascending, for searchsorted)
    by_lane: np.ndarray         # event indexes grouped by lane (stable: by start in each lane)

    @classmethod
    def of(cls, kind: str, ids, start, end, lane, n_lanes: int, tc=None) -> Track:
        ids, start, end, lane, tc, by_lane, by_dur = _sorted_events(ids, start, end, lane, n_lanes, tc)
        return cls.indexed(kind, ids, start, end, lane, n_lanes, tc, by_lane, by_dur)

    @classmethod
    def indexed(cls, kind: str, ids, start, end, lane, n_lanes: int, tc, by_lane, by_dur) -> Track:
        """Events already sorted by start, with their by-lane and by-duration orders (as ``of`` makes them)."""
        dur = end - start
        return cls(kind, ids, start, end, lane, tc, dur, int(dur.max()) if len(dur) else 0, start[by_lane],
                   np.concatenate([[0], np.cumsum(dur[by_lane])]),
                   np.searchsorted(lane[by_lane], np.arange(n_lanes + 1)), by_dur, -dur[by_dur], by_lane)

    def window(self, lo: int, hi: int, min_ns: float) -> tuple[int, np.ndarray, np.ndarray]:
        """(events overlapping [lo, hi), indexes of those at least ``min_ns`` long, indexes of the short ones
        that start before ``lo``)."""
        a0 = int(np.searchsorted(self.start, max(lo - self.max_dur, -(2 ** 63)), "left"))
        a = int(np.searchsorted(self.start, lo, "left"))
        b = int(np.searchsorted(self.start, hi, "left"))
        before = a0 + np.flatnonzero(self.end[a0:a] > lo)
        long_total = int(np.searchsorted(self.neg_dur, -min_ns, "right"))
        if long_total < b - a0:
            cand = self.by_dur[:long_total]
            cand = np.sort(cand[(self.start[cand] < hi) & (self.end[cand] > lo)])
        else:
            cand = a0 + np.flatnonzero((self.dur[a0:b] >= min_ns) & (self.end[a0:b] > lo))
        return (b - a) + len(before), cand, before


@dataclass
class Counter:
    """One allocator counter of one device (allocated or reserved bytes after each sample), sorted by time: the
    value holds from a sample to the next, so a window is the value carried in at its start plus the samples in
    it, reduced per pixel column to max, min and last (a peak is never thinned away)."""

    lane: int
    ts: np.ndarray
    value: np.ndarray

    def window(self, edges: np.ndarray, origin: int) -> dict | None:
        """Per pixel column [edges[c], edges[c + 1]) holding samples: the largest value and the time of its first
        sample, the smallest, the last; ``before``: the value carried into the window (None: no sample yet)."""
        i = np.searchsorted(self.ts, edges, "left")
        before = int(self.value[i[0] - 1]) if i[0] > 0 else None
        cnt = np.diff(i)
        cols = np.flatnonzero(cnt)
        if not len(cols) and before is None:
            return None
        vals = self.value[i[0]:i[-1]]
        offsets = i[cols] - i[0]
        top = np.maximum.reduceat(vals, offsets) if len(cols) else vals[:0]
        seg = np.repeat(np.arange(len(cols)), cnt[cols])
        hits = np.flatnonzero(vals == top[seg])
        first = hits[np.searchsorted(seg[hits], np.arange(len(cols)))]
        return {"before": before, "col": cols.tolist(), "max": top.tolist(),
                "max_at": (self.ts[i[0] + first] - origin).tolist(),
                "min": (np.minimum.reduceat(vals, offsets) if len(cols) else vals[:0]).tolist(),
                "last": self.value[i[cols + 1] - 1].tolist(), "samples": int(i[-1] - i[0])}


class RankTimeline:
    """Everything the timeline draws of one rank: lanes, one track per kind and the memory counters."""

    def __init__(self, rank: int, lanes: list[dict], tracks: dict[str, Track], counters: list[Counter]):
        self.rank, self.lanes, self.tracks, self.counters = rank, lanes, tracks, counters
        self.runtime_lane = {(lane["pid"], lane["tid"]): lane["id"] for lane in lanes if lane["kind"] == "runtime"}
        starts = [t.start[0] for t in tracks.values() if len(t.start)]
        ends = [t.end.max() for t in tracks.values() if len(t.end)]
        self.first = int(min(starts)) if starts else 0
        self.last = int(max(ends)) if ends else 0

    @classmethod
    def build(cls, rank: int, m: dict[str, np.ndarray], memory: np.ndarray) -> RankTimeline:
        """From one matrix per kind (columns as ``COLUMNS``) and the allocator samples (``MEMORY_COLUMNS``, in
        the table's order)."""
        lanes, counters, parts = _layout(m, memory)
        tracks = {kind: Track.of(kind, ids, start, end, lane_ids, len(lanes), tc)
                  for kind, ids, start, end, lane_ids, tc in parts}
        return cls(rank, lanes, tracks, counters)

    def to_arrays(self) -> dict[str, bytes]:
        """What the import stores (table ``timeline_arrays``): the lanes as JSON, each track's events sorted by
        start (ids, start, end, lane, kernels' Tensor Core flag) and each counter's samples, as .npy bytes."""
        out = {"format": ARRAYS_FORMAT.encode(), "lanes": json.dumps(self.lanes).encode()}
        for t in self.tracks.values():
            out.update(_track_arrays(t.kind, t.ids, t.start, t.end, t.lane, t.tc, t.by_lane, t.by_dur))
        out.update(_counter_arrays(self.counters))
        return out

    @classmethod
    def from_arrays(cls, rank: int, stored: dict[str, bytes]) -> RankTimeline | None:
        """The rank as ``to_arrays`` stored it (None when the stored format is another), with the tracks'
        cumulative indexes rebuilt (gathers and a cumulative sum per kind: no sort)."""
        if stored.get("format") != ARRAYS_FORMAT.encode():
            return None
        lanes = json.loads(stored["lanes"])
        arrays = {name: _from_npy(data) for name, data in stored.items() if name not in ("format", "lanes")}
        tracks = {}
        for kind in KINDS:
            tracks[kind] = Track.indexed(kind, arrays[f"{kind}.ids"], arrays[f"{kind}.start"],
                                         arrays[f"{kind}.end"], arrays[f"{kind}.lane"], len(lanes),
                                         arrays.get(f"{kind}.tc"), arrays[f"{kind}.by_lane"].astype(np.intp),
                                         arrays[f"{kind}.by_dur"].astype(np.intp))
        n = sum(1 for name in arrays if name.startswith("counter.") and name.endswith(".lane"))
        counters = [Counter(int(arrays[f"counter.{i}.lane"][0]), arrays[f"counter.{i}.ts"],
                            arrays[f"counter.{i}.value"]) for i in range(n)]
        return cls(rank, lanes, tracks, counters)


def stored_arrays(m: dict[str, np.ndarray], memory: np.ndarray) -> dict[str, bytes]:
    """``RankTimeline.build(rank, m, memory).to_arrays()``, made one track at a time: each kind's matrix (taken
    out of ``m``) and track are let go once its arrays are made, so the import's writer holds at most one
    track beside the bytes (building every track first held them all: about twice the rank's events)."""
    lanes, counters, parts = _layout(m, memory)
    out = {"format": ARRAYS_FORMAT.encode(), "lanes": json.dumps(lanes).encode()}
    parts.reverse()
    while parts:
        kind, ids, start, end, lane_ids, tc = parts.pop()
        m.pop(kind, None)
        # (the arrays stored, not a Track: its lane and duration indexes are made where one is read)
        out.update(_track_arrays(kind, *_sorted_events(ids, start, end, lane_ids, len(lanes), tc)))
        del ids, start, end, lane_ids, tc
    out.update(_counter_arrays(counters))
    return out


def _layout(m: dict[str, np.ndarray], memory: np.ndarray) -> tuple[list[dict], list[Counter], list[tuple]]:
    """The lanes (counters' scales filled in), the memory counters, and per kind (in ``to_arrays``' order) the
    events' ids, starts, ends, lanes and Tensor Core flags, unsorted. Each kind's lane keys are made and
    reduced to its distinct rows one kind at a time."""
    ops, rng, api, ker, mem = m["op"], m["range"], m["runtime"], m["kernel"], m["memop"]
    series, basis = _memory_series(memory)
    depth = _nesting_depth(rng)
    gpu_rng = rng[:, 3] >= 0

    def const(rows, value):
        return np.broadcast_to(np.int64(value), len(rows))

    # Lane keys (side, a, b, row kind, row): each CPU thread (annotation rows, op rows by depth, its CUDA
    # runtime calls), then each GPU (its memory counters, annotation rows, then each stream's kernels and
    # memory operations), then the CPU allocator's counter.
    def keys():
        yield _key(gpu_rng.astype(np.int64), np.where(gpu_rng, rng[:, 3], rng[:, 1]),
                   np.where(gpu_rng, -1, rng[:, 2]), const(rng, 0), depth)
        yield _key(const(ops, 0), ops[:, 1], ops[:, 2], const(ops, 1), ops[:, 3])
        yield _key(const(api, 0), api[:, 1], api[:, 2], const(api, 2), const(api, 0))
        yield _key(const(ker, 1), ker[:, 1], ker[:, 2], const(ker, 1), const(ker, 0))
        yield _key(const(mem, 1), mem[:, 1], mem[:, 2], const(mem, 2), const(mem, 0))
        counter_keys = np.array([_counter_key(device, what) for device, what, _, _ in series], np.int64)
        yield _key(*counter_keys.reshape(-1, 5).T)

    distinct, lane_of = _lanes_of(keys())
    lanes = [{"id": i, **_lane(side, a, b, sub, row)} for i, (side, a, b, sub, row) in enumerate(distinct.tolist())]
    counters: list[Counter] = []
    for (device, _, ts, value), lane in zip(series, lane_of[-1].tolist()):
        same = [v for d, _, _, v in series if d == device]
        lanes[lane].update(scale_min=int(min(0, *(int(v.min()) for v in same))),
                           scale_max=int(max(int(v.max()) for v in same)),
                           peak=int(value.max()), basis=basis[device])
        counters.append(Counter(lane, ts, value))
    parts = [("range", rng[:, 0], rng[:, 4], rng[:, 5], lane_of[0], None),
             ("op", ops[:, 0], ops[:, 4], ops[:, 5], lane_of[1], None),
             ("runtime", api[:, 0], api[:, 3], api[:, 4], lane_of[2], None),
             ("kernel", ker[:, 0], ker[:, 3], ker[:, 4], lane_of[3], ker[:, 5]),
             ("memop", mem[:, 0], mem[:, 3], mem[:, 4], lane_of[4], None)]
    return lanes, counters, parts


def _sorted_events(ids, start, end, lane, n_lanes: int, tc=None) -> tuple:
    """(ids, start, end, lane, tc, by_lane, by_dur): the events by start and their orders by lane and by
    duration, what a :class:`Track` stores (its other indexes are made from them when it is read)."""
    # ties by id: the same order whatever order the rows came in (rows in id order: a stable sort by start)
    order = (_stable_order(start) if len(ids) < 2 or bool((ids[1:] > ids[:-1]).all())
             else np.lexsort((ids, start)))
    start, end, lane, dur = start[order], end[order], lane[order], (end - start)[order]
    by_lane = (np.argsort(lane.astype(np.int16), kind="stable") if n_lanes <= np.iinfo(np.int16).max
               else _stable_order(lane))  # 16-bit keys: numpy's radix sort
    by_dur = _stable_order(dur.max() - dur) if len(dur) else np.zeros(0, np.intp)
    return ids[order], start, end, lane, None if tc is None else tc[order], by_lane, by_dur


def _track_arrays(kind: str, ids, start, end, lane, tc, by_lane, by_dur) -> dict[str, bytes]:
    """One track as ``to_arrays`` stores it."""
    return {f"{kind}.{name}": _npy(values)
            for name, values in (("ids", ids), ("start", start), ("end", end), ("lane", lane),
                                 ("tc", tc), ("by_lane", _index(by_lane)), ("by_dur", _index(by_dur)))
            if values is not None}


def _counter_arrays(counters: list[Counter]) -> dict[str, bytes]:
    out = {}
    for i, c in enumerate(counters):
        out[f"counter.{i}.lane"] = _npy(np.array([c.lane], np.int64))
        out[f"counter.{i}.ts"], out[f"counter.{i}.value"] = _npy(c.ts), _npy(c.value)
    return out


def _stable_order(key: np.ndarray) -> np.ndarray:
    """``np.argsort(key, kind="stable")`` of integers: where the key's span and the row number fit in 63 bits,
    one unstable sort of (key - min) << bits | row (numpy's SIMD sort, several times faster than its timsort)."""
    n = len(key)
    if not n:
        return np.zeros(0, np.intp)
    lo, hi = int(key.min()), int(key.max())
    bits = max((n - 1).bit_length(), 1)
    if (hi - lo).bit_length() + bits > 62:
        return np.argsort(key, kind="stable")
    packed = (key.astype(np.int64) - lo) << bits
    packed |= np.arange(n, dtype=np.int64)
    packed.sort()
    return (packed & ((1 << bits) - 1)).astype(np.intp)


def _index(order: np.ndarray) -> np.ndarray:
    """A permutation in 4 bytes per event when it fits (half the blob)."""
    return order.astype(np.int32) if len(order) < 2 ** 31 else order


def _from_npy(data: bytes) -> np.ndarray:
    """A read-only view of the array in ``.npy`` bytes (no copy of the data; ``np.load`` would copy it)."""
    buf = io.BytesIO(data)
    version = np.lib.format.read_magic(buf)
    header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    shape, fortran, dtype = header(buf)
    if fortran or dtype.hasobject:
        raise ValueError("not a plain array")
    return np.frombuffer(data, dtype, count=int(np.prod(shape)), offset=buf.tell()).reshape(shape)


def _npy(values: np.ndarray) -> bytes:
    """``np.save``'s bytes, the data copied once (``np.save`` into a buffer copies it twice)."""
    values = np.ascontiguousarray(values)
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, np.lib.format.header_data_from_array_1_0(values))
    return b"".join((buf.getvalue(), values.reshape(-1).data.cast("B")))


def _memory_series(memory: np.ndarray) -> tuple[list[tuple[int, str, np.ndarray, np.ndarray]], dict[int, str]]:
    """Per device, allocated and reserved bytes after each sample (``analyze.memory``'s reading: totals when the
    trace has them, else the deltas summed from the trace's start) as (device, counter, ts, value); a counter
    never known (reserved of a trace of deltas, of the CPU allocator) has none. Also each device's basis."""
    series: list[tuple[int, str, np.ndarray, np.ndarray]] = []
    basis: dict[int, str] = {}
    if not len(memory):
        return series, basis
    s = _series(pd.DataFrame(memory, columns=list(MEMORY_COLUMNS)))  # allocator_series' figures, as arrays
    bounds = np.flatnonzero(np.diff(s["device"])) + 1
    for lo, hi in zip([0, *bounds.tolist()], [*bounds.tolist(), len(s["device"])]):
        device = int(s["device"][lo])
        basis[device] = "totals" if s["totals"][lo] else "deltas"
        ts = s["ts"][lo:hi]
        for what in ("allocated", "reserved"):
            value = s[what][lo:hi]
            if what == "reserved" and (value < 0).all():
                continue
            series.append((int(device), what, ts, value))
    return series, basis


#: Counter lanes sort before a GPU's annotation rows (stream -1) and streams: memory heads the GPU's group.
_COUNTER_ROW = -(2 ** 40)


def _counter_key(device: int, what: str) -> tuple[int, int, int, int, int]:
    """The lane key of a device's counter: in the GPU's group, or a group of its own for the CPU allocator."""
    row = ("allocated", "reserved").index(what)
    return (1, device, _COUNTER_ROW, 3, row) if device >= 0 else (2, device, _COUNTER_ROW, 3, row)


def _key(*cols) -> list[np.ndarray]:
    """A lane key's columns as int64 arrays (a constant one a broadcast view: no n x 5 matrix is made)."""
    return [np.asarray(c, np.int64) for c in cols]


def _packed(keys: list[np.ndarray], columns: list[np.ndarray] | None = None) -> tuple[np.ndarray, list[np.ndarray]]:
    """Rows of small-cardinality integer columns as one integer each, in the rows' sort order (np.unique over
    rows is 20x slower): a column spanning few values as its offset from its minimum (a min and a max, no
    sort), any other ranked among its distinct values (``columns``: the distinct values to rank against)."""
    values: list[np.ndarray] = []
    packed = np.zeros(len(keys[0]), np.int64)
    for c, col in enumerate(keys):
        if columns is None and len(col):
            lo, hi = int(col.min()), int(col.max())
            if hi - lo < _OFFSET_SPAN:
                values.append(np.arange(lo, hi + 1, dtype=np.int64))
                packed = packed * (hi - lo + 2) + (col - lo)
                continue
        v = columns[c] if columns is not None else sorted_unique(col)
        values.append(v)
        packed = packed * (len(v) + 1) + np.searchsorted(v, col)
    return packed, values


#: A key column spanning fewer values packs as its offset from its minimum instead of its rank.
_OFFSET_SPAN = 1 << 16


def _lanes_of(keys: Iterable[list[np.ndarray]]) -> tuple[np.ndarray, list[np.ndarray]]:
    """The distinct rows of all ``keys`` (sorted: the lanes in order) and, for each array, the lane of each row.
    Each array's distinct rows first (a sort of its own packed rows, no copy of all keys into one; ``keys`` may
    be a generator, each array let go once reduced), then the lanes among those few rows."""
    firsts: list[np.ndarray] = []
    inverses: list[np.ndarray] = []
    for k in keys:
        if len(k[0]):
            first, inverse = _distinct_rows(k)
            firsts.append(np.column_stack([c[first] for c in k]).reshape(-1, len(k)))
            inverses.append(inverse.reshape(-1))
        else:
            firsts.append(np.zeros((0, len(k)), np.int64))
            inverses.append(np.zeros(0, np.intp))
        del k  # before the generator makes the next one
    distinct = np.concatenate(firsts)
    if not len(distinct):
        return distinct, [np.zeros(0, np.int32) for _ in inverses]
    _, first, inverse = np.unique(_packed(list(distinct.T))[0], return_index=True, return_inverse=True)
    lane = inverse.reshape(-1).astype(np.int32)
    offsets = np.cumsum([0] + [len(f) for f in firsts])
    return distinct[first], [lane[offset + inv] for offset, inv in zip(offsets.tolist(), inverses)]


def _distinct_rows(key: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(a row holding each distinct row of the columns ``key``, each row's number among those), the distinct
    rows in no particular order (:func:`_lanes_of` sorts the few of them after): each column coded by its offset
    from its minimum where it spans few values, else hashed (no sort), the codes joined into one integer per row
    and that hashed once (``np.unique`` of the packed rows sorted every row: ~20 ms for the benchmark trace)."""
    n = len(key[0])
    packed: np.ndarray | None = None
    size = 1
    for col in key:
        lo, hi = int(col.min()), int(col.max())
        if hi == lo:  # (a constant column, broadcast or not, tells no rows apart)
            continue
        if hi - lo < _OFFSET_SPAN:
            code, span = col - lo, hi - lo + 1
        else:
            code, distinct = pd.factorize(col)
            span = len(distinct)
        size *= span
        if size >= 2 ** 62:  # too many combinations for one integer: the rows sorted
            _, first, inverse = np.unique(_packed(key)[0], return_index=True, return_inverse=True)
            return first, inverse.reshape(-1)
        packed = code.astype(np.int64) if packed is None else packed * span + code
    if packed is None:
        return np.zeros(1, np.intp), np.zeros(n, np.intp)
    inverse, distinct = pd.factorize(packed)
    first = np.empty(len(distinct), np.intp)
    first[inverse] = np.arange(n)  # (a row of each: the rows of one code are all the same row)
    return first, inverse


def _lane(side: int, a: int, b: int, sub: int, row: int) -> dict:
    if sub == 3:
        what = ("allocated", "reserved")[row]
        return {"kind": "counter", "group": f"GPU {a}" if side == 1 else "CPU memory (host allocator)",
                "label": f"memory · {what}", "device": a, "counter": what}
    if side == 0:
        kind = ("range", "op", "runtime")[sub]
        label = ("annotations · depth {}", "ops · depth {}", "CUDA runtime")[sub].format(row)
        return {"kind": kind, "group": f"CPU thread {b}" + (f" (process {a})" if a >= 0 else ""), "label": label,
                "pid": a, "tid": b, "depth": row}
    kind = ("range", "kernel", "memop")[sub]
    label = f"annotations · depth {row}" if sub == 0 else f"stream {b} · {'kernels' if sub == 1 else 'memory'}"
    where = {"stream": b} if sub else {"depth": row}
    return {"kind": kind, "group": f"GPU {a}", "label": label, "device": a, **where}


def _nesting_depth(rng: np.ndarray) -> np.ndarray:
    """Row of each annotation range among the ranges of its thread (or GPU): how many enclosing ranges are still
    open at its start. Sorted by (start, longest first, id), the k-th range of a lane has k ranges started before
    it; those ended by its start are not around it. Vectorized per lane (a loop over lanes, not events)."""
    depth = np.zeros(len(rng), np.int64)
    if not len(rng):
        return depth
    gpu = rng[:, 3] >= 0
    lane_key = [np.where(gpu, -2, rng[:, 1]), np.where(gpu, -2, rng[:, 2]), rng[:, 3]]
    _, lane = np.unique(_packed(lane_key)[0], return_inverse=True)
    lane = lane.reshape(-1)
    for k in np.unique(lane):
        rows = np.flatnonzero(lane == k)
        start, end = rng[rows, 4], rng[rows, 5]
        order = np.lexsort((rng[rows, 0], -(end - start), start))
        ends = np.sort(end)
        ended = np.searchsorted(ends, start[order], "right")
        depth[rows[order]] = np.maximum(np.arange(len(rows)) - ended, 0)
    return depth


