"""The Timeline view's data: one rank's events in a time window, as lanes, with level of detail.

A rank's ops, annotation ranges, CUDA runtime calls, kernels, memory operations and allocator samples are read
once into numpy arrays (``analyze.timeline.RankTimeline``, stored by the import, cached per database and rank):
a window is then binary searches per lane and pixel column and
a look at the few events long enough to draw, whatever its size, so zoom and pan stay fast on windows of
millions of events. An event at least one pixel
wide at the requested width is sent as itself; the others are summed per lane and pixel column (count, busy
time) so what cannot be seen is still drawn and counted. Times are sent relative to the rank's ``origin``:
epoch nanoseconds (~1.7e18) do not fit a JavaScript number exactly.
"""

from __future__ import annotations

import itertools
import threading

import numpy as np
import orjson

from dlscope.analyze.timeline import COLUMNS, KINDS, MEMORY_COLUMNS, RankTimeline, select_sql
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


def load_rank(db: ProfileDB, rank: int) -> RankTimeline:
    """The rank's timeline: as the import stored it (table ``timeline_arrays``: a few blobs, milliseconds), else
    (a database written before, or holding another format) built from its rows (seconds for millions)."""
    if db.has("timeline_arrays"):
        stored = {name: bytes(data) for name, data in db.connection().execute(
            "SELECT name, data FROM timeline_arrays WHERE rank = ?", (rank,))}
        if stored:
            try:
                built = RankTimeline.from_arrays(rank, stored)
            except (ValueError, KeyError, OSError, TypeError):  # unreadable: the rows still say it all
                built = None
            if built is not None:
                return built
    return rank_from_rows(db, rank)


def rank_from_rows(db: ProfileDB, rank: int) -> RankTimeline:
    """The rank's timeline built from the database's rows (what the import stores, computed again)."""
    conn = db.connection()
    matrices = {}
    for kind, (table, cols) in COLUMNS.items():
        if not db.has(table):
            matrices[kind] = np.zeros((0, len(cols)), np.int64)
            continue
        flat = np.fromiter(itertools.chain.from_iterable(conn.execute(select_sql(kind), (rank,))), np.int64)
        matrices[kind] = flat.reshape(-1, len(cols))
    memory = np.zeros((0, len(MEMORY_COLUMNS)), np.int64)
    if db.has("memory"):
        flat = np.fromiter(itertools.chain.from_iterable(conn.execute(
            "SELECT COALESCE(device, -1), ts, COALESCE(bytes_delta, 0), COALESCE(total_allocated, -1), "
            "COALESCE(total_reserved, -1) FROM memory WHERE rank = ? AND ts IS NOT NULL ORDER BY rowid",
            (rank,))), np.int64)
        memory = flat.reshape(-1, len(MEMORY_COLUMNS))
    return RankTimeline.build(rank, matrices, memory)


class TimelineCache:
    """``RankTimeline`` per (database file generation, rank), read once under a lock, the newest few kept."""

    def __init__(self):
        self._lock = threading.Lock()
        self._items: dict[tuple, RankTimeline] = {}

    def get(self, db: ProfileDB, rank: int) -> RankTimeline:
        key = (str(db.path), db._generation, rank)
        with self._lock:
            hit = self._items.pop(key, None)
            if hit is None:
                hit = load_rank(db, rank)
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


def _event_names(db: ProfileDB, ids: dict[str, np.ndarray], ev: RankTimeline) -> tuple[dict, dict]:
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
