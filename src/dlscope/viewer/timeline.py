"""The Timeline view's data: one rank's events in a time window, as lanes, with level of detail.

A rank's ops, annotation ranges, CUDA runtime calls, kernels and memory operations are read once into numpy arrays
(``RankEvents``, cached per database and rank): a window is then binary searches per lane and pixel column and
a look at the few events long enough to draw, whatever its size, so zoom and pan stay fast on windows of
millions of events. An event at least one pixel
wide at the requested width is sent as itself; the others are summed per lane and pixel column (count, busy
time) so what cannot be seen is still drawn and counted. Times are sent relative to the rank's ``origin``:
epoch nanoseconds (~1.7e18) do not fit a JavaScript number exactly.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np
import orjson
import pandas as pd

from dlscope.analyze.memory import allocator_series
from dlscope.viewer.params import BadParameter, parse_int
from dlscope.viewer.profile_db import ProfileDB

#: Widths a client may ask for, in pixels.
MAX_WIDTH = 8192
#: Events sent one by one per window at most; past it the shorter ones go into the buckets too.
#: The longest window (ns, ~146 years): pixel edges must stay within int64.
MAX_SPAN = 2 ** 62
MAX_EVENTS = 50_000
#: Ranks whose arrays stay in memory (a rank of 1M events holds ~80 MB).
CACHED_RANKS = 4
KINDS = ("range", "op", "runtime", "kernel", "memop")


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

    @classmethod
    def of(cls, kind: str, ids, start, end, lane, n_lanes: int, tc=None) -> Track:
        order = np.argsort(start, kind="stable")
        start, end, lane, dur = start[order], end[order], lane[order], (end - start)[order]
        by_lane = np.argsort(lane, kind="stable")
        by_dur = np.argsort(-dur, kind="stable")
        return cls(kind, ids[order], start, end, lane, None if tc is None else tc[order], dur,
                   int(dur.max()) if len(dur) else 0, start[by_lane],
                   np.concatenate([[0], np.cumsum(dur[by_lane])]),
                   np.searchsorted(lane[by_lane], np.arange(n_lanes + 1)), by_dur, -dur[by_dur])

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


class RankEvents:
    """Everything the timeline draws of one rank, in memory: lanes, one track per kind and the memory counters."""

    def __init__(self, db: ProfileDB, rank: int):
        self.rank = rank
        self.lanes: list[dict] = []
        self.tracks: dict[str, Track] = {}
        conn = db.connection()

        def read(table: str, sql: str, ncols: int) -> np.ndarray:
            if not db.has(table):
                return np.zeros((0, ncols), np.int64)
            rows = conn.execute(sql, (rank,)).fetchall()
            return np.array(rows, dtype=np.int64).reshape(-1, ncols) if rows else np.zeros((0, ncols), np.int64)

        ops = read("op_instances", 'SELECT op_id, COALESCE(pid, -1), COALESCE(tid, -1), COALESCE(depth, 0), start, '
                   '"end" FROM op_instances WHERE rank = ?', 6)
        rng = read("ranges", 'SELECT range_id, COALESCE(pid, -1), COALESCE(tid, -1), COALESCE(device, -1), start, '
                   '"end" FROM ranges WHERE rank = ?', 6)
        api = read("api_calls", 'SELECT api_id, COALESCE(pid, -1), COALESCE(tid, -1), start, "end" FROM api_calls '
                   "WHERE rank = ?", 5)
        ker = read("kernels", 'SELECT kernel_id, COALESCE(device, -1), COALESCE(stream, -1), start, "end", '
                   "COALESCE(uses_tc, 0) FROM kernels WHERE rank = ?", 6)
        mem = read("memops", 'SELECT memop_id, COALESCE(device, -1), COALESCE(stream, -1), start, "end" FROM memops '
                   "WHERE rank = ?", 5)
        samples = _memory_samples(db, rank)
        depth = _nesting_depth(rng)
        gpu_rng = rng[:, 3] >= 0

        def const(rows, value):
            return np.full(len(rows), value, np.int64)

        # Lane keys (side, a, b, row kind, row): each CPU thread (annotation rows, op rows by depth, its CUDA
        # runtime calls), then each GPU (annotation rows, then each stream's kernels and memory operations).
        rng_key = np.where(gpu_rng[:, None], _key(const(rng, 1), rng[:, 3], const(rng, -1), const(rng, 0), depth),
                           _key(const(rng, 0), rng[:, 1], rng[:, 2], const(rng, 0), depth))
        parts = [("range", rng[:, 0], rng[:, 4], rng[:, 5], rng_key, None),
                 ("op", ops[:, 0], ops[:, 4], ops[:, 5],
                  _key(const(ops, 0), ops[:, 1], ops[:, 2], const(ops, 1), ops[:, 3]), None),
                 ("runtime", api[:, 0], api[:, 3], api[:, 4],
                  _key(const(api, 0), api[:, 1], api[:, 2], const(api, 2), const(api, 0)), None),
                 ("kernel", ker[:, 0], ker[:, 3], ker[:, 4],
                  _key(const(ker, 1), ker[:, 1], ker[:, 2], const(ker, 1), const(ker, 0)), ker[:, 5]),
                 ("memop", mem[:, 0], mem[:, 3], mem[:, 4],
                  _key(const(mem, 1), mem[:, 1], mem[:, 2], const(mem, 2), const(mem, 0)), None)]
        series = samples["series"]
        counter_keys = np.array([_counter_key(device, what) for device, what, _, _ in series],
                                np.int64).reshape(-1, 5)
        keys = _distinct_rows(np.concatenate([p[4] for p in parts] + [counter_keys]))
        for side, a, b, sub, row in keys.tolist():
            self.lanes.append({"id": len(self.lanes), **_lane(side, a, b, sub, row)})
        self.counters: list[Counter] = []
        for (device, _, ts, value), lane in zip(series, _lane_index(keys, counter_keys).tolist()):
            same = [v for d, _, _, v in series if d == device]
            self.lanes[lane].update(scale_min=int(min(0, *(int(v.min()) for v in same))),
                                    scale_max=int(max(int(v.max()) for v in same)),
                                    peak=int(value.max()), basis=samples["basis"][device])
            self.counters.append(Counter(lane, ts, value))
        self.runtime_lane = {(lane["pid"], lane["tid"]): lane["id"] for lane in self.lanes if lane["kind"] == "runtime"}
        for kind, ids, start, end, key, tc in parts:
            self.tracks[kind] = Track.of(kind, ids, start, end, _lane_index(keys, key), len(keys), tc)
        starts = [t.start[0] for t in self.tracks.values() if len(t.start)]
        ends = [t.end.max() for t in self.tracks.values() if len(t.end)]
        self.first = int(min(starts)) if starts else 0
        self.last = int(max(ends)) if ends else 0


def _memory_samples(db: ProfileDB, rank: int) -> dict:
    """The rank's allocator samples with allocated and reserved bytes after each (``analyze.memory``'s reading:
    totals when the trace has them, else the deltas summed from the trace's start), as arrays per device."""
    out: dict = {"series": [], "basis": {}}
    if not db.has("memory"):
        return out
    cols = ("device", "ts", "bytes_delta", "total_allocated", "total_reserved")
    rows = db.connection().execute("SELECT COALESCE(device, -1), ts, COALESCE(bytes_delta, 0), "
                                   "COALESCE(total_allocated, -1), COALESCE(total_reserved, -1) FROM memory "
                                   "WHERE rank = ? AND ts IS NOT NULL ORDER BY rowid", (rank,)).fetchall()
    if not rows:
        return out
    s = allocator_series(pd.DataFrame(np.array(rows, np.int64), columns=list(cols)))
    for device, part in s.groupby("device", sort=True):
        out["basis"][int(device)] = str(part["basis"].iloc[0])
        ts = part["ts"].to_numpy(np.int64)
        for what in ("allocated", "reserved"):
            value = part[what].to_numpy(np.int64)
            if what == "reserved" and (value < 0).all():
                continue  # unknown (a trace of deltas, the CPU allocator): no lane
            out["series"].append((int(device), what, ts, value))
    return out


#: Counter lanes sort before a GPU's annotation rows (stream -1) and streams: memory heads the GPU's group.
_COUNTER_ROW = -(2 ** 40)


def _counter_key(device: int, what: str) -> tuple[int, int, int, int, int]:
    """The lane key of a device's counter: in the GPU's group, or a group of its own for the CPU allocator."""
    row = ("allocated", "reserved").index(what)
    return (1, device, _COUNTER_ROW, 3, row) if device >= 0 else (2, device, _COUNTER_ROW, 3, row)


def _key(*cols) -> np.ndarray:
    return np.column_stack(cols).astype(np.int64).reshape(-1, 5)


def _packed(keys: np.ndarray, columns: list[np.ndarray] | None = None) -> tuple[np.ndarray, list[np.ndarray]]:
    """Rows of small-cardinality integer columns as one integer each: every column ranked among its distinct
    values (``columns``: the distinct values to rank against), the ranks packed (np.unique over rows is 20x
    slower)."""
    values: list[np.ndarray] = (columns if columns is not None
                                else [np.unique(keys[:, c]) for c in range(keys.shape[1])])
    packed = np.zeros(len(keys), np.int64)
    for c, v in enumerate(values):
        packed = packed * (len(v) + 1) + np.searchsorted(v, keys[:, c])
    return packed, values


def _distinct_rows(keys: np.ndarray) -> np.ndarray:
    """The distinct rows of ``keys``, sorted."""
    if not len(keys):
        return keys
    packed, _ = _packed(keys)
    _, first = np.unique(packed, return_index=True)
    return keys[first]


def _lane_index(keys: np.ndarray, key: np.ndarray) -> np.ndarray:
    """The row of ``keys`` (sorted, distinct) equal to each row of ``key``."""
    if not len(key):
        return np.zeros(0, np.int32)
    packed_keys, values = _packed(keys)
    packed, _ = _packed(key, values)
    return np.searchsorted(packed_keys, packed).astype(np.int32)


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
    open at its start. Sorted by (start, longest first), the k-th range of a lane has k ranges started before
    it; those ended by its start are not around it. Vectorized per lane (a loop over lanes, not events)."""
    depth = np.zeros(len(rng), np.int64)
    if not len(rng):
        return depth
    gpu = rng[:, 3] >= 0
    lane_key = np.column_stack([np.where(gpu, -2, rng[:, 1]), np.where(gpu, -2, rng[:, 2]), rng[:, 3]])
    _, lane = np.unique(_packed(lane_key)[0], return_inverse=True)
    lane = lane.reshape(-1)
    for k in np.unique(lane):
        rows = np.flatnonzero(lane == k)
        start, end = rng[rows, 4], rng[rows, 5]
        order = np.lexsort((-(end - start), start))
        ends = np.sort(end)
        ended = np.searchsorted(ends, start[order], "right")
        depth[rows[order]] = np.maximum(np.arange(len(rows)) - ended, 0)
    return depth


class TimelineCache:
    """``RankEvents`` per (database file generation, rank), built once under a lock, the newest few kept."""

    def __init__(self):
        self._lock = threading.Lock()
        self._items: dict[tuple, RankEvents] = {}

    def get(self, db: ProfileDB, rank: int) -> RankEvents:
        key = (str(db.path), db._generation, rank)
        with self._lock:
            hit = self._items.pop(key, None)
            if hit is None:
                hit = RankEvents(db, rank)
            self._items[key] = hit
            while len(self._items) > CACHED_RANKS:
                self._items.pop(next(iter(self._items)))
            return hit


CACHE = TimelineCache()


def warm(db: ProfileDB) -> None:
    """Read the shown aggregation's rank into memory ahead of the first Timeline request (reading a rank of
    1M events takes seconds; a window of it then takes milliseconds)."""
    agg = db.current_agg_id()
    row = db.execute_one("SELECT rank FROM aggregations WHERE agg_id = ?", (agg,)) if agg is not None else None
    known = ranks(db)
    if row is not None or known:
        CACHE.get(db, row[0] if row is not None else known[0])


_RANKS: dict[tuple, list[int]] = {}


def ranks(db: ProfileDB) -> list[int]:
    """The ranks with events (read once per database file: every timeline request checks its rank)."""
    key = (str(db.path), db._generation)
    if key not in _RANKS:
        _RANKS[key] = []
        for table in ("kernels", "op_instances", "ranges"):
            if db.has(table):
                _RANKS[key] = [r[0] for r in db.execute(f"SELECT DISTINCT rank FROM {table} ORDER BY rank")]
                if _RANKS[key]:
                    break
    return _RANKS[key]


def parse_window(db: ProfileDB, params) -> tuple[int, int, int, int]:
    """(rank, start, end, width) from the URL, each a validated integer (400 naming the parameter otherwise)."""
    known = ranks(db)
    rank = parse_int("rank", params.get("rank") or str(known[0] if known else 0))
    if known and rank not in known:
        raise BadParameter("rank", f"rank {rank} is not in this profile (have {', '.join(map(str, known))})")
    for name in ("start", "end"):
        if not params.get(name):
            raise BadParameter(name, "is required: the window's start and end in ns, as the trace's clock")
    start, end = parse_int("start", params["start"]), parse_int("end", params["end"])
    if end <= start:
        raise BadParameter("end", f"{end} is not after start {start}")
    if end - start > MAX_SPAN:
        raise BadParameter("end", f"the window is longer than {MAX_SPAN} ns")
    width = parse_int("width", params.get("width") or "1200", 1, MAX_WIDTH)
    return rank, start, end, width


def window(db: ProfileDB, rank: int, start: int, end: int, width: int) -> dict:
    """The lanes of ``rank`` in [start, end) drawn ``width`` pixels wide: events of >= 1 px, buckets for the rest."""
    ev = CACHE.get(db, rank)
    ns_per_px = max((end - start) / width, 1.0)
    origin = ev.first
    per_lane: dict[int, dict] = {}
    found = {kind: ev.tracks[kind].window(start, end, ns_per_px) for kind in KINDS}
    counts = {kind: n for kind, (n, _, _) in found.items()}
    # one threshold for all kinds: the longest MAX_EVENTS events at most are sent one by one
    min_ns = ns_per_px
    if sum(len(long) for _, long, _ in found.values()) > MAX_EVENTS:
        durs = np.concatenate([ev.tracks[k].dur[long] for k, (_, long, _) in found.items()])
        min_ns = float(np.partition(durs, len(durs) - MAX_EVENTS)[len(durs) - MAX_EVENTS])
    # column c holds the events starting in [edges[c], edges[c + 1]); those starting before the window in column 0
    edges = np.minimum(start + np.ceil(np.arange(width + 1) * ns_per_px).astype(np.int64), end)
    edges[-1] = end
    shown: dict[str, np.ndarray] = {}
    for kind in KINDS:
        t, (_, long, before) = ev.tracks[kind], found[kind]
        long = long[t.dur[long] >= min_ns]
        shown[kind] = long
        drawn = long[t.start[long] >= start]
        drawn_key = t.lane[drawn].astype(np.int64) * width + np.searchsorted(edges, t.start[drawn], "right") - 1
        early = before[t.dur[before] < min_ns]
        for lane in np.flatnonzero(np.diff(t.lane_ptr)):
            lo, hi = t.lane_ptr[lane], t.lane_ptr[lane + 1]
            idx = lo + np.searchsorted(t.lane_start[lo:hi], edges, "left")
            cnt = np.diff(idx)
            busy = np.diff(t.lane_busy[idx]).astype(np.float64)
            mine = drawn_key[(drawn_key // width) == lane] % width
            np.subtract.at(cnt, mine, 1)
            np.subtract.at(busy, mine, t.dur[drawn][(drawn_key // width) == lane])
            first = early[t.lane[early] == lane]
            cnt[0] += len(first)
            busy[0] += float(np.sum(np.minimum(t.end[first], edges[1]) - start))
            cells = np.flatnonzero(cnt)
            if len(cells):
                per_lane.setdefault(int(lane), _empty())["buckets"] = {
                    "col": cells.tolist(), "count": cnt[cells].tolist(),
                    "busy": np.round(np.minimum(busy[cells], ns_per_px * cnt[cells])).astype(np.int64).tolist()}
    for counter in ev.counters:
        cell = counter.window(edges, origin)
        if cell is not None:
            per_lane.setdefault(counter.lane, _empty())["counter"] = cell
    names, extra = _event_names(db, {k: t.ids[shown[k]] for k, t in ev.tracks.items()}, ev)
    name_index: dict[str, int] = {}
    for kind in KINDS:
        t, idx = ev.tracks[kind], shown[kind]
        if not len(idx):
            continue
        ids = t.ids[idx]
        order = np.lexsort((t.start[idx], t.lane[idx]))
        idx, ids = idx[order], ids[order]
        lanes = t.lane[idx]
        cuts = np.flatnonzero(np.diff(lanes)) + 1
        for part in np.split(np.arange(len(idx)), cuts):
            lane_no = int(lanes[part[0]])
            sel, sel_ids = idx[part], ids[part]
            out = per_lane.setdefault(lane_no, _empty())["events"]
            out["id"] = sel_ids.tolist()
            out["start"] = (t.start[sel] - origin).tolist()
            out["end"] = (t.end[sel] - origin).tolist()
            out["name"] = [name_index.setdefault(names[kind].get(i, ""), len(name_index)) for i in out["id"]]
            if kind == "kernel" and t.tc is not None:  # kernels always carry their Tensor Core verdicts
                out["tc"] = t.tc[sel].tolist()
            if kind in extra:
                links = extra[kind]
                out["launch"] = [links.get(i, (None, None))[0] for i in out["id"]]
                out["launch_lane"] = [links.get(i, (None, None))[1] for i in out["id"]]
    return {"rank": rank, "origin": str(origin), "start": str(start), "end": str(end),
            "start_rel": _js_number(start - origin), "end_rel": _js_number(end - origin), "width": width,
            "ns_per_px": ns_per_px,
            "extent": {"start": ev.first - origin, "end": ev.last - origin, "first": str(ev.first),
                       "last": str(ev.last)},
            "lanes": ev.lanes, "counts": counts, "shown": {k: int(len(v)) for k, v in shown.items()},
            "names": list(name_index), "data": {str(k): v for k, v in per_lane.items()}}


def _js_number(v: int) -> int | float:
    """An offset as JSON: exact while JavaScript can hold it, else a float (a window far from every event)."""
    return v if abs(v) < 2 ** 53 else float(v)


def _empty() -> dict:
    return {"events": {}, "buckets": None}


def _event_names(db: ProfileDB, ids: dict[str, np.ndarray], ev: RankEvents) -> tuple[dict, dict]:
    """Names of the events sent one by one, and each kernel's / memory operation's launch (time relative to the
    origin, the lane of the runtime call that launched it: its ``api_id``), read by primary key for just those
    events."""
    names: dict[str, dict] = {k: {} for k in KINDS}
    extra: dict[str, dict] = {}
    sql = {
        "op": "SELECT i.op_id, n.name, NULL, NULL, NULL FROM op_instances i JOIN op_nodes n "
              "ON n.node_id = i.node_id WHERE i.op_id IN (SELECT value FROM json_each(?))",
        "range": "SELECT range_id, name, NULL, NULL, NULL FROM ranges WHERE range_id IN "
                 "(SELECT value FROM json_each(?))",
        "runtime": "SELECT api_id, name, NULL, NULL, NULL FROM api_calls WHERE api_id IN "
                   "(SELECT value FROM json_each(?))",
        "kernel": "SELECT k.kernel_id, k.name, a.start, a.pid, a.tid FROM kernels k LEFT JOIN "
                  "api_calls a ON a.api_id = k.api_id WHERE k.kernel_id IN (SELECT value FROM json_each(?))",
        "memop": "SELECT m.memop_id, COALESCE(m.name, m.kind), a.start, a.pid, a.tid "
                 "FROM memops m LEFT JOIN api_calls a ON a.api_id = m.api_id "
                 "WHERE m.memop_id IN (SELECT value FROM json_each(?))",
    }
    for kind, these in ids.items():
        if not len(these):
            continue
        rows = db.execute(sql[kind], (orjson.dumps(these.tolist()).decode(),), limit_ms=10_000)
        names[kind] = {r[0]: r[1] or "" for r in rows}
        if kind in ("kernel", "memop"):
            extra[kind] = {r[0]: (None if r[2] is None else r[2] - ev.first, ev.runtime_lane.get((r[3], r[4])))
                           for r in rows}
    return names, extra


def event_details(db: ProfileDB, kind: str, event_id: int) -> dict | None:
    """The details pane of one event: what it is, when, where, and for GPU work the op that launched it."""
    queries = {   # table.* so a database written before a column was added still shows what it has
        "kernel": """SELECT k.*, o.name AS op_name, o.op_type, o.input_shapes, o.input_dtypes, o.tc_eligible,
                     r.name AS op_node_name, r.node_id FROM kernels k LEFT JOIN ops o ON o.op_id = k.op_id
                     LEFT JOIN ops r ON r.op_id = k.root_op_id WHERE k.kernel_id = ?""",
        "memop": """SELECT m.*, o.name AS op_name, o.op_type FROM memops m LEFT JOIN ops o ON o.op_id = m.op_id
                    WHERE m.memop_id = ?""",
        "op": """SELECT op_id, name, op_type, direction, rank, pid, tid, depth, start, "end", dur, input_shapes,
                 input_dtypes, scope, data_type, iteration, node_id, tc_eligible, using_tc, kernel_count,
                 tc_kernel_count, kernel_time, gpu_time, api_time FROM ops WHERE op_id = ?""",
        "runtime": """SELECT a.*, a."end" - a.start AS dur, o.name AS op_name FROM api_calls a LEFT JOIN ops o
                      ON o.op_id = a.op_id WHERE a.api_id = ?""",
        "range": """SELECT *, "end" - start AS dur FROM ranges WHERE range_id = ?""",
    }
    if kind not in queries:
        raise BadParameter("kind", f"{kind!r}: use {', '.join(queries)}")
    table = {"kernel": "kernels", "memop": "memops", "op": "op_instances", "range": "ranges",
             "runtime": "api_calls"}[kind]
    if not db.has(table):
        return None
    conn = db.connection()
    cur = conn.execute(queries[kind], (event_id,))
    row = cur.fetchone()
    if row is None:
        return None
    out = dict(zip([d[0] for d in cur.description], row))
    if kind == "kernel":
        out["grid"] = f"{out.pop('grid_x')}×{out.pop('grid_y')}×{out.pop('grid_z')}"
        out["block"] = f"{out.pop('block_x')}×{out.pop('block_y')}×{out.pop('block_z')}"
        out["tensor_core"] = _tc_verdict(out)
    return {"kind": kind, "id": event_id, **out}


def _tc_verdict(k: dict) -> str:
    if k.get("uses_tc"):
        return "uses Tensor Cores"
    if k.get("tc_eligible"):
        return "does not use Tensor Cores, though its op is eligible"
    return "does not use Tensor Cores (its op is not eligible)" if k.get("op_name") else "does not use Tensor Cores"
