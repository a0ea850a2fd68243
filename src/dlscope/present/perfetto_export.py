"""Perfetto's own trace format (protobuf ``TracePacket`` s of ``TrackEvent`` s), written with the message classes
of Google's ``perfetto`` package (``pip install 'dlscope[perfetto]'``).

The same events as the Chrome trace (:mod:`.trace_export` reads them): each rank a process (pid = rank + 1),
each CPU thread and GPU stream a thread, slices with exact ns timestamps (protobuf holds integers: no µs
decimals), launch → kernel flows, and allocated / reserved bytes per device as counter tracks. A slice is a
begin and an end event on its thread's track; per rank they are put in the order Perfetto needs to nest them
(by time; at one instant ends before begins, inner slices ending first and outer ones beginning first).
Packets are built one per event (the protobuf classes have no columnar API) and written in batches.
"""

from __future__ import annotations

import sqlite3
from typing import IO

import numpy as np
import pandas as pd

from ..errors import DlscopeError
from .trace_export import Lanes, RankWindow, Slices, memory_samples, process_id, rank_slices

#: packets serialized at a time
BATCH_PACKETS = 20_000
SEQUENCE_ID = 1
RANK_TRACK = 1 << 48
COUNTER_TRACK = 2 << 48


def protos():
    """The perfetto package's trace protos, or a one-line error saying how to install them."""
    try:
        from perfetto.protos.perfetto.trace import perfetto_trace_pb2
    except ImportError:
        raise DlscopeError("--format perfetto needs the perfetto package: pip install 'dlscope[perfetto]' "
                           "(or use --format chrome, which Perfetto UI opens too)") from None
    return perfetto_trace_pb2


def write_perfetto(conn: sqlite3.Connection, windows: list[RankWindow], out: IO[bytes]) -> dict[str, int]:
    pb = protos()
    writer = _Writer(pb, out)
    counts: dict[str, int] = {}
    lanes = Lanes()
    for w in windows:
        lanes.rank(conn, w)
        chunks = list(rank_slices(conn, w, lanes, chunk_rows=None))
        memory = pd.concat(list(memory_samples(conn, w, chunk_rows=None)) or [pd.DataFrame(
            {"device": [], "ts": [], "bytes_delta": [], "total_allocated": [], "total_reserved": []})])
        memory = memory.assign(total_allocated=np.where(
            memory.total_allocated >= 0, memory.total_allocated, memory.groupby("device")["bytes_delta"].cumsum()))
        pid = process_id(w.rank)
        writer.process(pid, w.rank)
        for tid, name in lanes.names():
            writer.thread(pid, tid, name)
        counter_tracks = {}
        for device in sorted(set(memory.device.astype(int).tolist())):
            label = f"GPU {device}" if device >= 0 else "CPU"
            counter_tracks[device] = (writer.counter(pid, f"{label} allocated", 2 * device + 10),
                                      writer.counter(pid, f"{label} reserved", 2 * device + 11))
        for chunk in chunks:
            counts[chunk.kind] = counts.get(chunk.kind, 0) + len(chunk.frame)
        _slices(writer, chunks)
        counts["memory"] = len(memory)
        for device, ts, allocated, reserved in zip(memory.device.astype(int), memory.ts.astype(np.int64),
                                                   memory.total_allocated.astype(np.int64),
                                                   memory.total_reserved.astype(np.int64)):
            writer.count(counter_tracks[device][0], int(ts), int(allocated))
            if reserved >= 0:  # unknown in traces of deltas only
                writer.count(counter_tracks[device][1], int(ts), int(reserved))
    writer.flush()
    return counts


def _slices(writer: _Writer, chunks: list[Slices]) -> None:
    """Every slice of a rank as begin/end events in nesting order, with its args and flows."""
    if not chunks:
        return
    starts = np.concatenate([c.frame.start.to_numpy(np.int64) for c in chunks])
    ends = np.concatenate([c.frame["end"].to_numpy(np.int64) for c in chunks])
    if len(starts) and starts.min() < 0:
        raise DlscopeError("--format perfetto: the profile has negative timestamps, which Perfetto's format cannot "
                           "hold; use --format chrome")
    sizes = [len(c.frame) for c in chunks]
    table = np.repeat(np.arange(len(chunks)), sizes)
    row = np.concatenate([np.arange(n) for n in sizes])
    n = len(starts)
    # boundary order keys: time; then ends (0) before begins (1) before the ends of empty slices (2);
    # among begins the longer (outer) first, among ends the later-starting (inner) first
    ts = np.concatenate([starts, ends])
    phase = np.concatenate([np.ones(n, np.int8), np.where(ends == starts, 2, 0).astype(np.int8)])
    tie = np.concatenate([-ends, -starts])
    order = np.lexsort((tie, phase, ts))
    tids = np.concatenate([c.tid for c in chunks])
    # flows: the launching call starts one (id: its api_id + 1); the first GPU event it launched ends it
    launched: dict[int, tuple[int, int, int]] = {}  # api_id -> (chunk, row, start) of its first GPU event
    for i, c in enumerate(chunks):
        if c.kind in ("kernels", "memops"):
            f = c.frame
            ok = (f.api_id >= 0) & f.api_pid.notna()
            for api_id, at, start in zip(f.api_id[ok].astype(np.int64), np.flatnonzero(ok.to_numpy()), f.start[ok]):
                key = int(api_id)
                best = launched.get(key)
                if best is None or start < best[2]:
                    launched[key] = (i, int(at), int(start))
    terminating = {(i, r): api_id + 1 for api_id, (i, r, _) in launched.items()}
    api_rows = {}
    for i, c in enumerate(chunks):
        if c.kind == "api_calls":
            for r, api_id in enumerate(c.frame.api_id.astype(np.int64)):
                if int(api_id) in launched:
                    api_rows[(i, r)] = int(api_id) + 1
    columns = [_columns(c) for c in chunks]
    for j in order:
        k = j - n if j >= n else j
        i, r = int(table[k]), int(row[k])
        if j >= n:
            writer.end(int(tids[k]), int(ts[j]))
            continue
        name, cat, args = columns[i]
        writer.begin(int(tids[k]), int(ts[j]), name[r], cat[r], [(key, how, values[r]) for key, how, values in args],
                     api_rows.get((i, r)), terminating.get((i, r)))


def _columns(chunk: Slices) -> tuple[list, list, list]:
    """Python lists of a chunk's names, categories and args (one conversion per column, not per event)."""
    f = chunk.frame
    n = len(f)
    cat = [chunk.cat] * n if isinstance(chunk.cat, str) else chunk.cat.astype(str).tolist()
    args = []
    for key, how, values in chunk.args:
        if how == "int":
            args.append((key, how, values.fillna(-1).astype(np.int64).tolist()))
        else:
            args.append((key, how, values.fillna("").astype(str).tolist()))
    return f.name.fillna("").astype(str).tolist(), cat, args


class _Writer:
    """Packets on one sequence, serialized in batches."""

    def __init__(self, pb, out: IO[bytes]):
        self.pb, self.out = pb, out
        self.trace = pb.Trace()
        self.first = True
        self.BEGIN = pb.TrackEvent.TYPE_SLICE_BEGIN
        self.END = pb.TrackEvent.TYPE_SLICE_END
        self.COUNTER = pb.TrackEvent.TYPE_COUNTER

    def _packet(self):
        if len(self.trace.packet) >= BATCH_PACKETS:
            self.flush()
        p = self.trace.packet.add()
        p.trusted_packet_sequence_id = SEQUENCE_ID
        if self.first:
            p.first_packet_on_sequence = True
            p.sequence_flags = self.pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
            self.first = False
        return p

    def flush(self) -> None:
        if len(self.trace.packet):
            self.out.write(self.trace.SerializeToString())  # concatenated Trace messages are one Trace
            self.trace = self.pb.Trace()

    def process(self, pid: int, rank: int) -> None:
        d = self._packet().track_descriptor
        d.uuid = RANK_TRACK + pid
        d.process.pid = pid
        d.process.process_name = f"rank {rank}"

    def thread(self, pid: int, tid: int, name: str) -> None:
        d = self._packet().track_descriptor
        d.uuid = tid
        d.parent_uuid = RANK_TRACK + pid
        d.thread.pid = pid
        d.thread.tid = tid
        d.thread.thread_name = name

    def counter(self, pid: int, name: str, slot: int) -> int:
        d = self._packet().track_descriptor
        d.uuid = COUNTER_TRACK + (pid << 20) + slot
        d.parent_uuid = RANK_TRACK + pid
        d.name = name
        d.counter.unit = self.pb.CounterDescriptor.UNIT_SIZE_BYTES
        return d.uuid

    def begin(self, track: int, ts: int, name: str, cat: str, args: list, flow: int | None,
              terminates: int | None) -> None:
        p = self._packet()
        p.timestamp = ts
        e = p.track_event
        e.type = self.BEGIN
        e.track_uuid = track
        e.name = name
        e.categories.append(cat)
        for key, how, value in args:
            a = e.debug_annotations.add()
            a.name = key
            if how == "int":
                a.int_value = value
            else:
                a.string_value = value
        if flow is not None:
            e.flow_ids.append(flow)
        if terminates is not None:
            e.terminating_flow_ids.append(terminates)

    def end(self, track: int, ts: int) -> None:
        p = self._packet()
        p.timestamp = ts
        p.track_event.type = self.END
        p.track_event.track_uuid = track

    def count(self, track: int, ts: int, value: int) -> None:
        p = self._packet()
        p.timestamp = ts
        p.track_event.type = self.COUNTER
        p.track_event.track_uuid = track
        p.track_event.counter_value = value
