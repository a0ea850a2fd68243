"""Write a profile database as a Chrome trace (JSON) that chrome://tracing and Perfetto UI open (and, through
:mod:`.perfetto_export`, in Perfetto's protobuf format).

Each rank is a process (``pid`` = rank + 1, named "rank N": Perfetto treats pid 0 as the kernel's idle task);
each CPU thread and each GPU stream of it is a thread
(CPU threads first, then the GPU streams by device and stream). Ops, annotation ranges, runtime calls, kernels,
memory operations and synchronizations are complete ("X") events, with Kineto's categories and ``args`` names,
so the file also imports back into dlscope (``dlscope import``); flow events ("s"/"f", category ``ac2g``) join
each launch to its kernel or memory operation; allocator samples are ``[memory]`` instants plus a counter track
per device. Times are the database's exact ns written as decimal µs with three fractional digits (integer
arithmetic, never a float), so a re-import gives back the same ns.

Events are read from SQLite in chunks and turned into JSON text a column at a time (numpy string arrays: no
Python dict per event), so a profile of millions of events is written in bounded memory.
"""

from __future__ import annotations

import gzip
import json
import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, cast

import numpy as np
import orjson
import pandas as pd

from ..distributed.job import run_aggregations
from ..errors import DlscopeError
from ..processes import owned_name
from ..store import reader

FORMATS = ("chrome", "perfetto")
#: rows read and encoded at a time
CHUNK_ROWS = 100_000
#: the names Kineto gives CUPTI's synchronization kinds (the importer reads them back)
SYNC_LABELS = {"device": "Context Sync", "stream": "Stream Sync", "event": "Event Sync",
               "stream_wait_event": "Stream Wait Event", "unknown": "Unknown"}
#: Kineto's category of an annotation range, by the domain dlscope stored it under
RANGE_CATEGORIES = {"gpu_user_annotation": "gpu_user_annotation", "python_function": "python_function"}


@dataclass(frozen=True)
class IterationRange:
    """Iterations ``first``..``last`` (both included); None: from the first / to the last."""

    first: int | None = None
    last: int | None = None

    def __str__(self) -> str:
        return f"{'' if self.first is None else self.first}:{'' if self.last is None else self.last}"


def parse_iterations(text: str) -> IterationRange:
    """``"3:5"`` (3 to 5, both included, like --iter-start/--iter-stop), ``"3"``, ``"3:"`` or ``":5"``."""
    first, sep, last = text.strip().partition(":")

    def number(part: str) -> int | None:
        part = part.strip()
        if not part:
            return None
        try:
            value = int(part)
        except ValueError:
            raise DlscopeError(f"--iterations {text!r}: {part!r} is not an iteration number (use A:B)") from None
        if value < 0:
            raise DlscopeError(f"--iterations {text!r}: iteration numbers are not negative")
        return value

    a = number(first)
    b = number(last) if sep else a
    if a is not None and b is not None and a > b:
        raise DlscopeError(f"--iterations {text!r}: {b} is before {a}")
    return IterationRange(a, b)


@dataclass
class RankWindow:
    """What one rank contributes: its iterations (None: all of its events) and their time window."""

    rank: int
    iterations: tuple[int, int] | None = None
    start: int | None = None
    end: int | None = None


@dataclass
class ExportResult:
    path: Path
    ranks: list[int]
    events: dict[str, int] = field(default_factory=dict)

    def describe(self) -> str:
        counts = ", ".join(f"{n:,} {k}" for k, n in self.events.items() if n)
        plural = "s" if len(self.ranks) != 1 else ""
        return f"wrote {self.path} ({len(self.ranks)} rank{plural}: {counts or 'no events'})"


def export_trace(database: str | Path, output: str | Path | IO[bytes], *, iterations: IterationRange | None = None,
                 rank: int | None = None, fmt: str = "chrome", force: bool = False,
                 agg_id: int | None = None) -> ExportResult:
    """Write the profile (or ``iterations`` of it, or one ``rank``) as a trace file; ``output`` ending in
    ``.gz`` is gzipped. A path is written to a temporary file renamed into place when complete (a failed
    export leaves nothing half-written); a file object gets the bytes as they are made. Iteration windows come
    from the aggregation run of ``agg_id`` (default: the current one)."""
    if fmt not in FORMATS:
        raise DlscopeError(f"--format {fmt!r}: use {' or '.join(FORMATS)}")
    if fmt == "perfetto":
        from .perfetto_export import protos

        protos()  # installed, or say how before anything is read
    conn = reader.connect(database)
    try:
        windows = rank_windows(conn, iterations, rank, agg_id)
        if isinstance(output, (str, Path)):
            path = Path(output)
            with _atomic(path, force) as out:
                counts = _write(conn, windows, out, fmt)
        else:
            path = Path(getattr(output, "name", "-"))
            counts = _write(conn, windows, output, fmt)
    finally:
        conn.close()
    return ExportResult(path, [w.rank for w in windows], counts)


@contextmanager
def _atomic(path: Path, force: bool) -> Iterator[IO[bytes]]:
    """A file object whose bytes land at ``path`` only when the block completes; errors are one line."""
    if path.is_dir():
        raise DlscopeError(f"{path}: is a directory; name the trace file to write with -o")
    if path.exists() and not force:
        raise DlscopeError(f"{path}: already exists (use --force to overwrite)")
    if not path.parent.is_dir():
        raise DlscopeError(f"{path}: folder {path.parent} does not exist")
    tmp = path.parent / owned_name(f".{path.name}", ".tmp")
    try:
        with (gzip.open(tmp, "wb") if path.suffix == ".gz" else open(tmp, "wb")) as out:
            yield cast(IO[bytes], out)
        os.replace(tmp, path)
    except OSError as e:
        raise DlscopeError(f"{path}: cannot be written ({e.strerror or e})") from None
    finally:
        tmp.unlink(missing_ok=True)


def trace_chunks(database: str | Path, iterations: IterationRange | None = None, rank: int | None = None,
                 agg_id: int | None = None) -> Iterator[bytes]:
    """The Chrome trace as byte chunks (for a streamed HTTP download); the request is checked now, so a bad
    one fails before the first byte is sent."""
    conn = reader.connect(database, any_thread=True)
    try:
        windows = rank_windows(conn, iterations, rank, agg_id)
    except BaseException:
        conn.close()
        raise

    def chunks() -> Iterator[bytes]:
        try:
            yield from _chunks(conn, windows, {})
        finally:
            conn.close()

    return chunks()


# ------------------------------------------------------------------------------------ what is exported


def rank_windows(conn: sqlite3.Connection, iterations: IterationRange | None, rank: int | None,
                 agg_id: int | None = None) -> list[RankWindow]:
    """The ranks to export with their iteration windows, from ``agg_iterations`` of the aggregation run of
    ``agg_id`` (default: the current one); a one-line error for a rank or an iteration range the profile does
    not have."""
    if agg_id is not None:
        reader.resolve_agg_id(conn, agg_id)
    aggs = {int(a["rank"]): int(a["agg_id"]) for a in run_aggregations(conn, agg_id)}
    ranks = sorted(set(aggs) | {int(r) for (r,) in conn.execute("SELECT DISTINCT rank FROM sources")})
    if rank is not None:
        if rank not in ranks:
            raise DlscopeError(f"--rank {rank}: the profile has no rank {rank} (ranks: "
                               f"{', '.join(map(str, ranks)) or 'none'})")
        ranks = [rank]
    if iterations is None:
        return [RankWindow(r) for r in ranks]
    windows = []
    for r in ranks:
        rows = conn.execute('SELECT iteration, start, "end" FROM agg_iterations WHERE agg_id = ? ORDER BY iteration',
                            (aggs.get(r, -1),)).fetchall()
        have = [row[0] for row in rows]
        first = have[0] if have and iterations.first is None else iterations.first
        last = have[-1] if have and iterations.last is None else iterations.last
        chosen = [row for row in rows if first <= row[0] <= last] if have else []
        if not chosen or first not in have or last not in have:
            span = f"{have[0]}..{have[-1]}" if have else "none"
            raise DlscopeError(f"--iterations {iterations}: rank {r} has no iterations {first}..{last} "
                               f"(its iterations: {span})")
        assert first is not None and last is not None  # both are among the rank's iterations, checked above
        windows.append(RankWindow(r, (first, last), chosen[0][1], chosen[-1][2]))
    return windows


def _write(conn: sqlite3.Connection, windows: list[RankWindow], out: IO[bytes], fmt: str) -> dict[str, int]:
    if fmt == "perfetto":
        from .perfetto_export import write_perfetto

        return write_perfetto(conn, windows, out)
    counts: dict[str, int] = {}
    for chunk in _chunks(conn, windows, counts):
        out.write(chunk)
    return counts


def _chunks(conn: sqlite3.Connection, windows: list[RankWindow], counts: dict[str, int]) -> Iterator[bytes]:
    yield _header(conn, windows)
    lanes = Lanes()
    first = True
    for window in windows:
        lanes.rank(conn, window)
        for kind, text in _rank_events(conn, window, lanes):
            counts[kind] = counts.get(kind, 0) + len(text)
            if len(text):
                yield (b"" if first else b",\n") + ",\n".join(text.tolist()).encode()
                first = False
        for line in lanes.metadata(window.rank):
            yield (b"" if first else b",\n") + line
            first = False
    yield b"\n]}\n"


def _header(conn: sqlite3.Connection, windows: list[RankWindow]) -> bytes:
    """The keys before the events: Kineto's ``deviceProperties`` and ``distributedInfo`` when one rank is
    written (so a re-import knows its GPUs and rank), and what was exported."""
    meta = reader.meta(conn)
    head: dict = {"schemaVersion": 1, "displayTimeUnit": "ns",
                  "dlscope": {"profile_name": meta.get("profile_name", ""), "ranks": [w.rank for w in windows],
                              "iterations": {str(w.rank): list(w.iterations) for w in windows if w.iterations}}}
    if len(windows) == 1:
        r = windows[0].rank
        world = conn.execute("SELECT MAX(world_size) FROM sources WHERE rank = ?", (r,)).fetchone()[0]
        head["distributedInfo"] = {"rank": r, "world_size": int(world) if world and world > 0 else 1}
        head["deviceProperties"] = [
            {"id": d, "name": name, "numSms": sms, "totalGlobalMem": mem, "computeMajor": major, "computeMinor": minor}
            for d, name, sms, mem, major, minor in conn.execute(
                "SELECT device, name, sm_count, memory_bytes, cc_major, cc_minor FROM gpus WHERE rank = ? "
                "ORDER BY device", (r,))]
    return orjson.dumps(head)[:-1] + b',"traceEvents":[\n'


class Lanes:
    """Thread ids of a rank's lanes, unique over the whole file (Perfetto keys threads by tid): CPU threads
    (pid, tid) first, then GPU streams (device, stream); names and sort order go out as metadata events."""

    def __init__(self) -> None:
        self.next_tid = 1
        self.cpu: dict[tuple[int, int], int] = {}
        self.gpu: dict[tuple[int, int], int] = {}
        self.allocator: dict[int, int] = {}

    def rank(self, conn: sqlite3.Connection, window: RankWindow) -> None:
        where, params = _where(window, "rank = ?")
        cpu = set()
        for sql in ("SELECT DISTINCT pid, tid FROM op_instances", "SELECT DISTINCT pid, tid FROM api_calls",
                    "SELECT DISTINCT pid, tid FROM ranges"):
            extra = " AND device < 0" if "ranges" in sql else ""
            cpu |= set(conn.execute(f"{sql} WHERE {where}{extra}", params).fetchall())
        gpu = set()
        for sql in ("SELECT DISTINCT device, stream FROM kernels", "SELECT DISTINCT device, stream FROM memops",
                    "SELECT DISTINCT device, tid FROM ranges", "SELECT DISTINCT device, stream FROM syncs"):
            extra = " AND device >= 0" if "ranges" in sql or "syncs" in sql else ""
            gpu |= set(conn.execute(f"{sql} WHERE {where}{extra}", params).fetchall())
        cpu |= set(conn.execute(f"SELECT DISTINCT pid, tid FROM syncs WHERE {where} AND device < 0", params).fetchall())
        self.cpu, self.gpu, self.allocator = {}, {}, {}
        for key in sorted(cpu):
            self.cpu[key] = self._take()
        for key in sorted(gpu):
            self.gpu[key] = self._take()

    def _take(self) -> int:
        self.next_tid += 1
        return self.next_tid - 1

    def allocator_tid(self, device: int) -> int:
        if device not in self.allocator:
            self.allocator[device] = self._take()
        return self.allocator[device]

    def tids(self, keys: pd.DataFrame, gpu: bool) -> np.ndarray:
        """The tid of each row's lane (two key columns)."""
        table = self.gpu if gpu else self.cpu
        index = pd.MultiIndex.from_tuples(list(table), names=["a", "b"]) if table else None
        if index is None:
            return np.zeros(len(keys), dtype=np.int64)
        pos = index.get_indexer(pd.MultiIndex.from_arrays([keys.iloc[:, 0], keys.iloc[:, 1]]))
        values = np.fromiter(table.values(), dtype=np.int64, count=len(table))
        return np.where(pos >= 0, values[pos], 0)

    def names(self) -> list[tuple[int, str]]:
        """(tid, name) of every lane: "thread T" (with its pid when the rank has several processes),
        "GPU D stream S", "GPU D allocator"."""
        several = len({k[0] for k in self.cpu}) > 1
        names = [(tid, f"thread {t}" + (f" (pid {p})" if several else "")) for (p, t), tid in self.cpu.items()]
        names += [(tid, f"GPU {d} stream {s}") for (d, s), tid in self.gpu.items()]
        names += [(tid, f"GPU {d} allocator" if d >= 0 else "CPU allocator") for d, tid in self.allocator.items()]
        return names

    def metadata(self, rank: int) -> list[bytes]:
        """process_name / thread_name and their sort indexes (few: one per lane)."""
        pid = process_id(rank)
        out = [_meta("process_name", pid, 0, {"name": f"rank {rank}"}),
               _meta("process_sort_index", pid, 0, {"sort_index": rank})]
        for tid, name in self.names():
            out.append(_meta("thread_name", pid, tid, {"name": name}))
            out.append(_meta("thread_sort_index", pid, tid, {"sort_index": tid}))
        return out


def process_id(rank: int) -> int:
    """The trace's pid of a rank: never 0, which Perfetto reserves for the kernel's idle task ("swapper")."""
    return rank + 1


def _meta(name: str, pid: int, tid: int, args: dict) -> bytes:
    return orjson.dumps({"ph": "M", "name": name, "pid": pid, "tid": tid, "args": args})


def _where(window: RankWindow, base: str, prefix: str = "") -> tuple[str, tuple]:
    """The rank (and iteration range) filter of a table that has an ``iteration`` column."""
    if window.iterations is None:
        return base, (window.rank,)
    return f"{base} AND {prefix}iteration BETWEEN ? AND ?", (window.rank, *window.iterations)


# ------------------------------------------------------------------------------------------ the events


@dataclass
class Slices:
    """A chunk of one table's events, ready for either writer: ``frame`` has start, end and name (and for GPU
    work, the launching call: api_id, api_pid, api_tid, api_start); ``cat``: one Kineto category or each
    row's; ``tid``: each row's lane; ``args``: (key, how, values), how = "int", "str", "json" (JSON text,
    checked) or "raw" (JSON text dlscope wrote)."""

    kind: str
    frame: pd.DataFrame
    cat: str | pd.Series
    tid: np.ndarray
    args: list[tuple[str, str, pd.Series]]


def rank_slices(conn: sqlite3.Connection, w: RankWindow, lanes: Lanes, chunk_rows: int | None = CHUNK_ROWS
                ) -> Iterator[Slices]:
    """Every complete event of a rank, table by table, ``chunk_rows`` rows at a time (None: whole tables)."""
    where, params = _where(w, "i.rank = ?", "i.")
    for df in _read(conn, f"""SELECT i.pid, i.tid, n.name, i.start, i."end", i.external_id, i.seq, n.input_shapes,
                   n.input_dtypes, n.concrete_inputs, n.scope, n.direction, n.tc_eligible, i.using_tc
                   FROM op_instances i JOIN op_nodes n ON n.node_id = i.node_id WHERE {where}""", params, chunk_rows):
        verdict = pd.Series(np.where(df.using_tc.to_numpy() == 1, "uses Tensor Cores",
                                     np.where(df.tc_eligible.to_numpy() == 1, "eligible, not using Tensor Cores",
                                              "not eligible")))
        yield Slices("ops", df, "cpu_op", lanes.tids(df[["pid", "tid"]], False), [
            ("External id", "int", df.external_id), ("Sequence number", "int", df.seq),
            ("Input Dims", "json", df.input_shapes), ("Input type", "json", df.input_dtypes),
            ("Concrete Inputs", "json", df.concrete_inputs), ("scope", "str", df.scope),
            ("direction", "str", df.direction), ("Tensor Core", "str", verdict)])
    where, params = _where(w, "rank = ?")
    for df in _read(conn, f'SELECT pid, tid, device, name, domain, start, "end", category FROM ranges WHERE {where}',
                    params, chunk_rows):
        on_gpu = (df.device >= 0).to_numpy()
        tid = np.where(on_gpu, lanes.tids(df[["device", "tid"]], True), lanes.tids(df[["pid", "tid"]], False))
        cat = df.domain.map(lambda d: RANGE_CATEGORIES.get(d, "user_annotation"))
        yield Slices("ranges", df, cat, tid, [("device", "int", df.device), ("domain", "str", df.domain),
                                              ("category", "str", df.category)])
    for df in _read(conn, f'SELECT api_id, pid, tid, name, kind, start, "end", correlation FROM api_calls '
                          f'WHERE {where}', params, chunk_rows):
        cat = pd.Series(np.where(df.kind.to_numpy() == "driver", "cuda_driver", "cuda_runtime"))
        yield Slices("api_calls", df, cat, lanes.tids(df[["pid", "tid"]], False),
                     [("correlation", "int", df.correlation)])
    where, params = _where(w, "k.rank = ?", "k.")
    for df in _read(conn, f"""SELECT k.kernel_id AS row_id, k.device, k.stream, k.name, k.start, k."end",
                   k.correlation, k.grid_x, k.grid_y, k.grid_z, k.block_x, k.block_y, k.block_z, k.registers,
                   k.shared_mem, k.uses_tc, k.api_id, a.pid AS api_pid, a.tid AS api_tid, a.start AS api_start,
                   COALESCE(n.name, '') AS op FROM kernels k LEFT JOIN api_calls a ON a.api_id = k.api_id
                   LEFT JOIN op_instances o ON o.op_id = k.op_id LEFT JOIN op_nodes n ON n.node_id = o.node_id
                   WHERE {where}""", params, chunk_rows):
        yield Slices("kernels", df, "kernel", lanes.tids(df[["device", "stream"]], True), [
            ("device", "int", df.device), ("stream", "int", df.stream), ("correlation", "int", df.correlation),
            ("grid", "raw", _triple(df.grid_x, df.grid_y, df.grid_z)),
            ("block", "raw", _triple(df.block_x, df.block_y, df.block_z)),
            ("registers per thread", "int", df.registers), ("shared memory", "int", df.shared_mem),
            ("Tensor Core", "str", df.uses_tc.map({1: "yes", 0: "no"}).fillna("unknown")), ("op", "str", df.op)])
    where, params = _where(w, "m.rank = ?", "m.")
    for df in _read(conn, f"""SELECT m.memop_id AS row_id, m.device, m.stream, m.kind, m.name, m.copy_kind,
                   m.start, m."end", m.bytes, m.correlation, m.api_id, a.pid AS api_pid, a.tid AS api_tid,
                   a.start AS api_start FROM memops m LEFT JOIN api_calls a ON a.api_id = m.api_id WHERE {where}""",
                    params, chunk_rows):
        cat = pd.Series(np.where(df.kind.to_numpy() == "memset", "gpu_memset", "gpu_memcpy"))
        yield Slices("memops", df, cat, lanes.tids(df[["device", "stream"]], True), [
            ("device", "int", df.device), ("stream", "int", df.stream), ("correlation", "int", df.correlation),
            ("bytes", "int", df.bytes), ("copy kind", "str", df.copy_kind)])
    where, params = _where(w, "rank = ?")
    for df in _read(conn, f'SELECT pid, tid, device, stream, kind, start, "end", correlation FROM syncs WHERE {where}',
                    params, chunk_rows):
        on_gpu = (df.device >= 0).to_numpy()
        tid = np.where(on_gpu, lanes.tids(df[["device", "stream"]], True), lanes.tids(df[["pid", "tid"]], False))
        df["name"] = df.kind.map(SYNC_LABELS).fillna("Unknown")
        yield Slices("syncs", df, "cuda_sync", tid, [
            ("device", "int", df.device), ("stream", "int", df.stream), ("correlation", "int", df.correlation),
            ("cuda_sync_kind", "str", df.name)])


def memory_samples(conn: sqlite3.Connection, w: RankWindow, chunk_rows: int | None = CHUNK_ROWS
                   ) -> Iterator[pd.DataFrame]:
    """The rank's allocator samples (inside its iteration window), by time; pid, tid and addr are -1 in
    databases written before they were recorded."""
    have = {r[1] for r in conn.execute('PRAGMA table_info("memory")')}
    extra = ", ".join(c if c in have else f"-1 AS {c}" for c in ("pid", "tid", "addr"))
    sql = f"SELECT device, ts, bytes_delta, total_allocated, total_reserved, {extra} FROM memory WHERE rank = ?"
    params: tuple = (w.rank,)
    if w.iterations is not None:
        sql, params = sql + " AND ts >= ? AND ts <= ?", (w.rank, w.start, w.end)
    yield from _read(conn, sql + " ORDER BY ts", params, chunk_rows)


def _rank_events(conn: sqlite3.Connection, w: RankWindow, lanes: Lanes) -> Iterator[tuple[str, np.ndarray]]:
    """(kind, JSON text of each event) chunk by chunk, table by table; flows and allocator samples last."""
    flows = []
    for chunk in rank_slices(conn, w, lanes):
        yield chunk.kind, _events(chunk, process_id(w.rank))
        if chunk.kind in ("kernels", "memops"):
            flows.append(_flows(chunk.frame, w.rank, chunk.tid, lanes, chunk.kind == "memops"))
    for text in flows:
        yield "flows", text
    carry: dict[int, int] = {}  # a trace of deltas sums them from its start, before the window too
    if w.iterations is not None:
        carry = dict(conn.execute("SELECT device, SUM(bytes_delta) FROM memory WHERE rank = ? AND ts < ? "
                                  "GROUP BY device", (w.rank, w.start)).fetchall())
    for df in memory_samples(conn, w):
        yield "memory", _memory_events(df, w.rank, lanes, carry)


def _read(conn: sqlite3.Connection, sql: str, params: tuple, chunk_rows: int | None = CHUNK_ROWS
          ) -> Iterator[pd.DataFrame]:
    if chunk_rows is None:
        df = pd.read_sql_query(sql, conn, params=params)
        if len(df):
            yield df
        return
    for df in pd.read_sql_query(sql, conn, params=params, chunksize=chunk_rows):
        if len(df):
            yield df


def _events(chunk: Slices, pid: int) -> np.ndarray:
    """One complete ("X") event per row, as JSON text."""
    df = chunk.frame
    start = df.start.to_numpy(np.int64)
    cat = _json_text(chunk.cat) if isinstance(chunk.cat, str) else _strings(chunk.cat)
    head = ('{"ph":"X","cat":' + cat + ',"name":' + _strings(df.name) + f',"pid":{pid},"tid":'
            + _as_object(chunk.tid.astype(str)) + ',"ts":' + _us(start) + ',"dur":'
            + _us(df["end"].to_numpy(np.int64) - start) + ',"args":{')
    body = np.full(len(df), "", dtype=object)
    for i, (key, how, values) in enumerate(chunk.args):
        text = {"int": _ints, "json": _raw_json, "str": _strings, "raw": _as_object}[how](values)
        body = body + (("," if i else "") + orjson.dumps(key).decode() + ":") + text
    return head + body + "}}"


def _flows(df: pd.DataFrame, rank: int, tid: np.ndarray, lanes: Lanes, kind: int) -> np.ndarray:
    """Launch → kernel (or memory operation) arrows: a flow start on the launching call, its end on the GPU
    event (``bp: e``: bound to the event that starts there). Ids are unique over the file."""
    launched = (df.api_id >= 0).to_numpy() & df.api_pid.notna().to_numpy()
    if not launched.any():
        return np.array([], dtype=object)
    d = df[launched]
    ids = _as_object(((np.int64(rank) * 2 + kind) << 32 | (d.row_id.to_numpy(np.int64) & 0xFFFFFFFF)).astype(str))
    api_tid = lanes.tids(d[["api_pid", "api_tid"]].astype(np.int64), False)
    common = f',"cat":"ac2g","name":"launch","pid":{process_id(rank)},"id":'
    start = ('{"ph":"s"' + common + ids + ',"tid":' + _as_object(api_tid.astype(str)) + ',"ts":'
             + _us(d.api_start.to_numpy(np.int64)) + "}")
    end = ('{"ph":"f","bp":"e"' + common + ids + ',"tid":' + _as_object(tid[launched].astype(str)) + ',"ts":'
           + _us(d.start.to_numpy(np.int64)) + "}")
    return np.concatenate([start, end])


def _memory_events(df: pd.DataFrame, rank: int, lanes: Lanes, carry: dict[int, int]) -> np.ndarray:
    """Kineto's ``[memory]`` instants on the allocating thread (what an importer reads back; a sample of a thread
    with no other event goes on the device's allocator lane) and a counter per device that Perfetto and
    chrome://tracing draw as allocated / reserved bytes over time. A trace of deltas only has no totals: its
    counter is their running sum (``carry``: the sum so far per device, across chunks) and has no reserved."""
    device = df.device.to_numpy(np.int64)
    own = lanes.tids(df[["pid", "tid"]], False)
    devices = np.unique(device)
    lane = np.fromiter((lanes.allocator_tid(int(d)) for d in devices), dtype=np.int64)[np.searchsorted(devices, device)]
    tid = np.where(own > 0, own, lane)
    ts = _us(df.ts.to_numpy(np.int64))
    pid = str(process_id(rank))
    device_type = np.where(device >= 0, "1", "0").astype(object)
    instants = ('{"ph":"i","s":"t","cat":"cpu_instant_event","name":"[memory]","pid":' + pid + ',"tid":'
                + _as_object(tid.astype(str)) + ',"ts":' + ts + ',"args":{"Device Type":' + device_type
                + ',"Device Id":' + _ints(df.device) + ',"Addr":' + _ints(df.addr) + ',"Bytes":' + _ints(df.bytes_delta)
                + ',"Total Allocated":' + _ints(df.total_allocated) + ',"Total Reserved":'
                + _ints(df.total_reserved) + "}}")
    totals = df.total_allocated.to_numpy(np.int64) >= 0
    summed = df.groupby("device")["bytes_delta"].cumsum().to_numpy(np.int64, copy=True)
    summed += np.array([carry.get(int(d), 0) for d in devices], dtype=np.int64)[np.searchsorted(devices, device)]
    for d in devices:
        carry[int(d)] = int(summed[device == d][-1])
    allocated = _ints(pd.Series(np.where(totals, df.total_allocated.to_numpy(np.int64), summed)))
    reserved = np.where(totals, ',"reserved":' + _ints(df.total_reserved), "")
    label = np.where(device >= 0, np.char.add("GPU ", device.astype(str)), "CPU").astype(object)
    counters = ('{"ph":"C","name":"' + label + ' memory","pid":' + pid + ',"ts":' + ts
                + ',"args":{"allocated":' + allocated + reserved + "}}")
    return np.concatenate([instants, counters])


# ----------------------------------------------------------------------------- column → JSON text


def _as_object(values: np.ndarray) -> np.ndarray:
    return np.asarray(values).astype(object)


def _us(ns: np.ndarray) -> np.ndarray:
    """Exact ns as decimal µs with three fractional digits ("1234.567"), by integer arithmetic."""
    ns = np.asarray(ns, dtype=np.int64)
    magnitude = np.abs(ns)
    whole = (magnitude // 1000).astype(str)
    frac = np.strings.zfill((magnitude % 1000).astype(str), 3)
    text = np.strings.add(np.strings.add(whole, "."), frac)
    return _as_object(np.where(ns < 0, np.strings.add("-", text), text))


def _ints(values: pd.Series) -> np.ndarray:
    """Integers as JSON text; a missing value (NULL) is -1, dlscope's "unknown"."""
    return _as_object(values.fillna(-1).to_numpy(np.int64).astype(str))


def _triple(x: pd.Series, y: pd.Series, z: pd.Series) -> pd.Series:
    """Grid or block dimensions as JSON text: "[x,y,z]"."""
    return pd.Series("[" + _ints(x) + "," + _ints(y) + "," + _ints(z) + "]", index=x.index)


def _json_text(value: str) -> str:
    try:
        return orjson.dumps(value).decode()
    except TypeError:  # a lone surrogate: escaped the standard library's way
        return json.dumps(value)


def _strings(values: pd.Series) -> np.ndarray:
    """Strings as JSON strings, each distinct one encoded once (names repeat: a million kernels have a few
    hundred names). Quotes, newlines, control characters and ``</script>`` stay inert JSON text."""
    codes, uniques = pd.factorize(values.fillna("").astype(str), sort=False)
    encoded = np.array([_json_text(u) for u in uniques] or [""], dtype=object)
    return encoded[codes]


def _raw_json(values: pd.Series) -> np.ndarray:
    """Columns dlscope keeps as JSON text (input shapes and types): the JSON itself when it parses, else a
    string; empty is null. Each distinct text is checked once."""
    codes, uniques = pd.factorize(values.fillna("").astype(str), sort=False)

    def one(text: str) -> str:
        if not text:
            return "null"
        try:
            return orjson.dumps(orjson.loads(text)).decode()
        except orjson.JSONDecodeError:
            return _json_text(text)

    encoded = np.array([one(u) for u in uniques] or ["null"], dtype=object)
    return encoded[codes]
