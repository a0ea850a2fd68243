"""Import a PyTorch profiler / Kineto Chrome-trace JSON file (plain or gzip) into the normalized model.

Every schema generation is accepted: 2021 "legacy" categories (``Operator``/``Runtime``/``Kernel``/
``Memcpy``/``Memset``), current ones (``cpu_op``/``cuda_runtime``/``cuda_driver``/``kernel``/...), ROCm
traces (same categories, HIP names), fractional-µs (ns resolution) timestamps and bare event lists.
Every decoder reads JSON floats in untyped fields as their text (``float_hook=str``), so ``ts`` and
``dur`` arrive as ints or as the numbers' own text and are converted to exact int64 ns per column (see
:mod:`.exact_ns`); a float64 would be off by up to 125 ns on epoch-µs timestamps with 3 decimals.

Speed and memory come from msgspec. The event array is cut by byte pattern into pieces of a few MB,
each decoded on its own into typed Structs that hold only the fields we map (unknown keys are skipped in
C; the structs are not GC-tracked); a cut is trusted only when every piece decodes (see
:func:`_cut_events`), else the document is parsed once into raw JSON slices that are decoded batch by
batch. Each piece or batch is turned into column chunks and dropped, so at most one batch of Python
objects is alive at a time, whatever the trace size. Large files are decoded by two processes.

A file too large for the memory budget (``max_memory``) is streamed instead: read (and gunzipped) in
blocks and cut into the same pieces as in memory, so memory holds a block and a piece of text, not the
file, and the tables are identical. When a streamed cut is not between events, ijson (yajl2_c backend)
walks the ``traceEvents`` array event by event instead, each batch re-encoded and decoded by the same
typed decoder (same rows; ids follow its batches).
"""

from __future__ import annotations

import gc
import multiprocessing as mp
import gzip
import itertools
import mmap
import os
import re
import zlib
from collections import Counter, defaultdict
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Generic, Iterator, TypeVar

import msgspec
import numpy as np
import pandas as pd
from msgspec import field

from ..errors import InputError, reading
from ..model import Profile, make_table
from .exact_ns import TimeOutOfRange, checked_end, us_to_ns

GZIP_MAGIC = b"\x1f\x8b"
UTF8_BOM = b"\xef\xbb\xbf"
BATCH_EVENTS = 16_384  # ~10 MB of decoded structs at a time
MAX_GZIP_RATIO = 100  # JSON traces compress 10-20x; a larger size in the gzip trailer is not trusted

OP_CATS = ("cpu_op", "Operator")
KERNEL_CATS = ("kernel", "Kernel")
MEMCPY_CATS = ("gpu_memcpy", "Memcpy")
MEMSET_CATS = ("gpu_memset", "Memset")
RUNTIME_CATS = ("cuda_runtime", "Runtime")
DRIVER_CATS = ("cuda_driver",)
CUDA_DEVICE_TYPE = 1  # c10::DeviceType::CUDA (ROCm builds report HIP devices as CUDA too)

# Kineto writes these as ints, but a lenient type keeps one odd value from failing a whole import;
# the column builders turn anything non-numeric into -1.
_Int = int | float | str | None
_NO_JSON = msgspec.Raw()


class _Args(msgspec.Struct, gc=False, frozen=True):
    """The ``args`` keys any table needs; every other key is skipped while decoding."""

    external_id: _Int = field(name="External id", default=-1)
    legacy_external_id: _Int = field(name="external id", default=-1)  # 2021 schema spelling
    seq: _Int = field(name="Sequence number", default=-1)
    # Kept as JSON text (no nested lists built); only ops turn them into compact strings.
    input_dims: msgspec.Raw = field(name="Input Dims", default=_NO_JSON)
    input_types: msgspec.Raw = field(name="Input type", default=_NO_JSON)
    concrete_inputs: msgspec.Raw = field(name="Concrete Inputs", default=_NO_JSON)
    correlation: _Int = -1
    device: _Int = -1
    stream: _Int = -1
    grid: Any = None
    block: Any = None
    registers: _Int = field(name="registers per thread", default=-1)
    shared_mem: _Int = field(name="shared memory", default=-1)
    bytes: _Int = -1
    sync_kind: Any = field(name="cuda_sync_kind", default="")
    device_type: _Int = field(name="Device Type", default=-1)
    device_id: _Int = field(name="Device Id", default=-1)
    bytes_delta: _Int = field(name="Bytes", default=-1)
    total_allocated: _Int = field(name="Total Allocated", default=-1)
    total_reserved: _Int = field(name="Total Reserved", default=-1)
    # Collective metadata (record_param_comms cpu_ops, and NCCL kernels in newer traces)
    collective: Any = field(name="Collective name", default="")
    in_nelems: _Int = field(name="In msg nelems", default=-1)
    out_nelems: _Int = field(name="Out msg nelems", default=-1)
    group_size: _Int = field(name="Group size", default=-1)
    comm_dtype: Any = field(name="dtype", default="")
    pg_name: Any = field(name="Process Group Name", default="")
    pg_ranks: Any = field(name="Process Group Ranks", default="")


_NO_ARGS = _Args()  # shared by every event without args (flows, metadata), so they cost no allocation


class _Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: _Int = -1
    tid: _Int = -1
    # µs: an int, or a JSON float's text (float_hook=str); converted to exact ns per column, never a float
    ts: Any = 0
    dur: Any = 0
    args: _Args = _NO_ARGS


_E = TypeVar("_E")


class _Trace(msgspec.Struct, Generic[_E], gc=False):
    """The top level; its events are raw JSON slices (decoded later, batch by batch) or typed events."""

    traceEvents: list[_E] | None = None
    deviceProperties: Any = None
    distributedInfo: Any = None
    schemaVersion: Any = None
    traceName: Any = None
    record_shapes: Any = None
    host_name: Any = None
    hostname: Any = None
    baseTimeNanoseconds: Any = None


def _decoder(kind: Any) -> msgspec.json.Decoder:
    """Every decoder of the file's keys and events: a float in an untyped field (``ts``, ``dur``, and the
    header's values, so they read the same on every path) is kept as its text, never rounded to float64.

    The hook gets the number's text; ``str.strip`` returns that very string (a number has no spaces) and
    is a cheaper call than ``str`` (10% of the decode of a fractional-µs trace)."""
    return msgspec.json.Decoder(kind, float_hook=str.strip)


_TOP_DECODER = _decoder(_Trace[msgspec.Raw] | list[msgspec.Raw])
_BATCH_DECODER = _decoder(list[_Event])
_HEADER_DECODER = _decoder(_Trace[_Event])
_TRAILER_DECODER = _HEADER_DECODER

#: The in-memory path holds the JSON text plus (on the raw-slice path) one object per event: at most about
#: this many times the JSON's size at its peak (measured on the real traces; see bench/README.md). Files whose estimate does
#: not fit the budget are streamed.
IN_MEMORY_PEAK_FACTOR = 3
LEAST_GZIP_RATIO = 5  # below any Kineto trace seen (they compress 10-20x)
ESTIMATED_GZIP_RATIO = 15  # when the gzip trailer cannot tell the size (multi-GB files wrap at 4 GiB)
STREAM_TAIL_BYTES = 65_536  # the bytes after ``traceEvents`` (traceName, baseTimeNanoseconds) fit in this

_Text = bytes | mmap.mmap  # a trace's JSON text: decompressed bytes, or a plain file mapped into memory

#: ``progress(bytes_read, events_decoded)``; bytes are of the file as stored (compressed when gzip).
Progress = Callable[[int, int], None]


def load_kineto(path: Path, *, max_memory: int | None = None, progress: Progress | None = None) -> Profile:
    """Import one Kineto trace file; raise :class:`InputError` when it is not a readable trace.

    With ``max_memory`` (bytes), a file whose in-memory import would not fit is streamed.
    """
    path = Path(path)
    gc_was_enabled = gc.isenabled()
    gc.disable()  # millions of small containers would trigger repeated, useless full collections
    try:
        if max_memory is not None and should_stream(path, max_memory):
            header, tables, event_count = _streamed_tables(path, progress)
        else:
            header, tables, event_count = _in_memory_tables(path, progress)
        rank = _rank(header)
        profile = tables.profile(rank, header.deviceProperties)
    except TimeOutOfRange as e:
        raise InputError(path, f"has an event whose {e}") from None
    finally:
        if gc_was_enabled:
            gc.enable()
    profile.meta.update(_meta(path, header, event_count))
    return profile


def should_stream(path: Path, max_memory: int) -> bool:
    """Whether the in-memory import of ``path`` would exceed ``max_memory`` bytes (an estimate)."""
    return IN_MEMORY_PEAK_FACTOR * estimated_json_size(path) > max_memory


def estimated_json_size(path: Path, least: bool = False) -> int:
    """The JSON text's size: the file size, or for gzip the trailer's size when it is plausible, else a
    typical ratio times the file size.

    ``least``: a lower bound instead. The trailer holds the size modulo 4 GiB (of the last member), never
    more than the text, so a plausible trailer bounds it from below even when it may have wrapped.
    """
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            if f.read(2) != GZIP_MAGIC:
                return size
            f.seek(-4, os.SEEK_END)
            trailer = int.from_bytes(f.read(4), "little")
    except OSError:
        return 0  # the import itself reports the problem
    plausible = size <= trailer <= MAX_GZIP_RATIO * size
    if plausible and size < 2**32 // MAX_GZIP_RATIO:
        return trailer
    if least:
        return max(trailer if plausible else 0, LEAST_GZIP_RATIO * size)
    return ESTIMATED_GZIP_RATIO * size


def _tables_from(source: tuple[_Trace, Iterator[list[_Event]]]) -> tuple[_Trace, "_Tables", int]:
    header, batches = source
    tables, event_count = _Tables(), 0
    for events in batches:
        event_count += len(events)
        tables.add(events)
        del events  # one batch of structs alive at a time
    return header, tables, event_count


#: a file with at least this many events is decoded by two processes (this one and a forked worker)
PARALLEL_MIN_EVENTS = 300_000
PARALLEL_MIN_BYTES = 64 * 2**20  # the same, for files cut into pieces (about 200 bytes per event)
_FORKED: tuple | None = None  # what a forked decoding worker reads (inherited, not pickled)


def _in_memory_tables(path: Path, progress: Progress | None) -> tuple[_Trace, "_Tables", int]:
    """Decode a file held in memory, cut into pieces when it can be (fast), else through raw event slices."""
    data = _read_json_bytes(path)
    cuts = _cut_events(data)
    if cuts is not None:
        try:
            return _piecewise_tables(path, data, cuts, progress)
        except _Unsplittable:
            pass  # the whole-document path decodes it again and names the problem if there is one
    return _raw_slice_tables(path, data, progress)


def _can_fork() -> bool:
    return (os.cpu_count() or 1) >= 2 and "fork" in mp.get_all_start_methods()


# --------------------------------------------------------------------------- pieces of the event array

#: The traceEvents array is cut into pieces of about this many bytes, each decoded on its own.
PIECE_BYTES = 4 * 2**20
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_BETWEEN_OBJECTS = re.compile(rb"\}\s*,\s*\{")
_OBJECT_START = re.compile(rb"\s*\{")


class _Unsplittable(Exception):
    """A piece did not decode on its own, so the cuts are not all between events (or the file is bad)."""


def _cut_events(data: _Text) -> list[int] | None:
    """Byte offsets that cut the traceEvents array into pieces, found by pattern without parsing.

    ``[events_start, piece2_start, ...]``; None when the document is not an object with ``traceEvents``
    near its start. A cut is only a guess (``}, {`` may sit inside a string or a nested object); it is
    proven when every piece decodes alone: the header closed with ``]}`` must be a valid object, so the
    array opens at the top level, and a piece that is a valid JSON array is balanced and leaves no
    string open, so by induction every cut lies between two events of that array.
    """
    if not _OBJECT_START.match(data):
        return None
    key = _EVENTS_KEY.search(data, 0, 2**20)  # Kineto writes its metadata first
    if key is None:
        return None
    cuts = [key.end()]
    while True:
        gap = _BETWEEN_OBJECTS.search(data, cuts[-1] + PIECE_BYTES)
        if gap is None:
            return cuts
        cuts.append(gap.end() - 1)  # the next piece starts at the "{"


def _piecewise_tables(path: Path, data: _Text, cuts: list[int], progress: Progress | None
                      ) -> tuple[_Trace, "_Tables", int]:
    """Tables from the pieces; a large file's later pieces are decoded by a forked worker meanwhile."""
    header = _decode_piece(_HEADER_DECODER, data[:cuts[0]] + b"]}")
    if progress:  # offsets in the JSON text, reported as bytes of the file as stored
        stored, report = os.path.getsize(path), progress
        progress = lambda done, events: report(stored * done // len(data), events)  # noqa: E731
    if len(data) < PARALLEL_MIN_BYTES or len(cuts) < 4 or not _can_fork():
        tables, events, trailer = _piece_tables(data, cuts, 0, len(cuts), progress)
        return _with_trailer(header, trailer), tables, events
    global _FORKED
    half = len(cuts) // 2
    _FORKED = (data, cuts)
    try:
        with ProcessPoolExecutor(1, mp_context=mp.get_context("fork")) as pool:
            later = pool.submit(_decode_forked_pieces, half, len(cuts))
            tables, events, _ = _piece_tables(data, cuts, 0, half, progress)
            state, more_events, trailer = later.result()
    finally:
        _FORKED = None
    tables.absorb(state)
    return _with_trailer(header, trailer), tables, events + more_events


def _decode_forked_pieces(lo: int, hi: int) -> tuple[dict, int, _Trace | None]:
    """In the forked worker: the tables of pieces [lo, hi) of the inherited file, as plain data."""
    data, cuts = _FORKED
    gc.disable()
    tables, events, trailer = _piece_tables(data, cuts, lo, hi, None)
    return tables.state(), events, trailer


def _piece_tables(data: _Text, cuts: list[int], lo: int, hi: int, progress: Progress | None
                  ) -> tuple["_Tables", int, _Trace | None]:
    """Decode pieces [lo, hi) one at a time into tables; the last piece also gives the trailing keys."""
    tables, events, trailer = _Tables(), 0, None
    for i in range(lo, hi):
        if i + 1 < len(cuts):
            # between two cuts: "{...}, ..., {...}" up to the "}" before the next cut's ", {"
            end = data.rfind(b"}", cuts[i], cuts[i + 1]) + 1
            batch = _decode_piece(_BATCH_DECODER, b"[" + data[cuts[i]:end] + b"]")
        else:
            trailer = _decode_piece(_TRAILER_DECODER, b'{"traceEvents":[' + data[cuts[i]:])
            batch, trailer.traceEvents = trailer.traceEvents or [], None
        events += len(batch)
        tables.add(batch)
        del batch
        if progress:
            progress(cuts[i + 1] if i + 1 < len(cuts) else len(data), events)
    return tables, events, trailer


def _decode_piece(decoder: msgspec.json.Decoder, text: bytes) -> Any:
    try:
        return decoder.decode(text)
    except (msgspec.DecodeError, UnicodeDecodeError):  # ValidationError is a DecodeError
        raise _Unsplittable from None


def _with_trailer(header: _Trace, trailer: _Trace | None) -> _Trace:
    """The header's keys completed by those written after the event array (traceName, ...)."""
    for name in header.__struct_fields__ if trailer is not None else ():
        if getattr(header, name) is None:
            setattr(header, name, getattr(trailer, name))
    header.traceEvents = None
    return header


# ------------------------------------------------------------------ whole document, raw event slices


def _raw_slice_tables(path: Path, data: _Text, progress: Progress | None) -> tuple[_Trace, "_Tables", int]:
    """Parse the document once keeping each event as a raw slice, then decode the slices batch by batch.

    Slower than pieces but takes any valid JSON layout, and names the problem in a bad file.
    """
    header, raw_events = _decode_top(path, data)
    del data
    n = len(raw_events)
    if n < PARALLEL_MIN_EVENTS or not _can_fork():
        result = _tables_from((header, _batches(path, raw_events, 0, n, progress, n)))
        raw_events.clear()  # the last reference to the file's bytes
        return result
    global _FORKED
    half = (n // 2 // BATCH_EVENTS) * BATCH_EVENTS
    _FORKED = (path, raw_events)
    try:
        with ProcessPoolExecutor(1, mp_context=mp.get_context("fork")) as pool:
            later = pool.submit(_decode_forked_range, half, n)
            _, tables, _ = _tables_from((header, _batches(path, raw_events, 0, half, progress, n)))
            tables.absorb(later.result())
    finally:
        _FORKED = None
    raw_events.clear()
    return header, tables, n


def _decode_forked_range(lo: int, hi: int) -> dict:
    """In the forked worker: the tables of events [lo, hi) of the inherited raw events, as plain data."""
    path, raw_events = _FORKED
    gc.disable()
    return _tables_from((None, _batches(path, raw_events, lo, hi, None, hi)))[1].state()


def _batches(path: Path, raw_events: list, lo: int, hi: int, progress: Progress | None,
             total: int) -> Iterator[list[_Event]]:
    """Typed events of [lo, hi), ``BATCH_EVENTS`` at a time, so only one batch of structs is alive."""
    size = os.path.getsize(path)
    for offset in range(lo, hi, BATCH_EVENTS):
        events = _decode_json(path, _BATCH_DECODER,
                              b"[" + b",".join(raw_events[offset:min(offset + BATCH_EVENTS, hi)]) + b"]", offset)
        if progress:
            progress(size * (offset + len(events)) // max(total, 1), offset + len(events))
        yield events


# ----------------------------------------------------------------------------------------- reading


def _read_json_bytes(path: Path) -> _Text:
    """The file's JSON text, gunzipped when it starts with the gzip magic (names are not trusted).

    A plain file is memory-mapped rather than read: no private copy of hundreds of MB to make (the
    decoders and the pieces read the page cache directly).
    """
    with reading(path), open(path, "rb") as f:
        if f.read(2) == GZIP_MAGIC:
            f.seek(0)
            try:
                data = _gunzip(f.read())
            except (OSError, EOFError, zlib.error):
                raise InputError(path, "is a truncated or corrupt gzip file") from None
        else:
            size = os.fstat(f.fileno()).st_size
            data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
    if data[:len(UTF8_BOM)] == UTF8_BOM:
        data = data[len(UTF8_BOM):]
    if _BLANK.match(data):  # stops at the first other byte
        raise InputError(path, "is empty")
    return data


_BLANK = re.compile(rb"\s*\Z")


def _gunzip(data: bytes) -> bytes:
    """Decompress into one buffer sized from the gzip trailer, so the peak is 1x the JSON, not 2x.

    The trailer holds the size of the last member only; when it does not match (a multi-member file),
    fall back to :func:`gzip.decompress`, which handles every member.
    """
    size = int.from_bytes(data[-4:], "little")
    plausible = size <= MAX_GZIP_RATIO * len(data)  # a corrupt trailer must not make us over-allocate
    out = zlib.decompress(data, wbits=31, bufsize=size if plausible and size else zlib.DEF_BUF_SIZE)
    return out if len(out) % 2**32 == size else gzip.decompress(data)


def _decode_top(path: Path, data: _Text) -> tuple[_Trace, list[msgspec.Raw]]:
    """Parse the whole document once, keeping each event as a raw slice of ``data``."""
    decoded = _decode_json(path, _TOP_DECODER, data)
    if isinstance(decoded, list):
        return _Trace(), decoded
    if decoded.traceEvents is None:
        raise InputError(path, "is JSON but not a Chrome/Kineto trace (no traceEvents)")
    raw_events, decoded.traceEvents = decoded.traceEvents, None
    return decoded, raw_events


def _decode_json(path: Path, decoder: msgspec.json.Decoder, data: bytes,
                 first_event: int | None = None) -> Any:
    """Decode, turning every msgspec / UTF-8 failure into a one-line :class:`InputError`.

    ``first_event`` is the index of a batch's first event, to report positions in the whole file.
    """
    try:
        return decoder.decode(data)
    except msgspec.ValidationError as e:
        problem = _one_line(e)
        if first_event is not None:
            problem = re.sub(r"\$\[(\d+)\]",
                             lambda m: f"$.traceEvents[{first_event + int(m.group(1))}]", problem)
        raise InputError(path, f"is JSON but not a Chrome/Kineto trace ({problem})") from None
    except msgspec.DecodeError as e:
        raise InputError(path, f"is not valid JSON: {_one_line(e)}") from None
    except UnicodeDecodeError as e:
        raise InputError(path, f"is not valid JSON: not UTF-8 text ({_one_line(e)})") from None


def _one_line(error: Exception) -> str:
    return " ".join(str(error).split())


# -------------------------------------------------------------------------------------- streaming


#: bytes of the (decompressed) file read at a time by the streamed piece reader
STREAM_BLOCK_BYTES = 8 * 2**20


def _streamed_tables(path: Path, progress: Progress | None) -> tuple[_Trace, "_Tables", int]:
    """Tables of a file read as a stream: pieces cut as in memory when the layout allows, else ijson."""
    try:
        found = _streamed_piece_tables(path, progress)
    except _Unsplittable:
        found = None
    return found if found is not None else _tables_from(_stream_events(path, progress))


def _streamed_piece_tables(path: Path, progress: Progress | None) -> tuple[_Trace, "_Tables", int] | None:
    """The pieces of :func:`_cut_events`, cut and decoded while the file is read block by block.

    The cuts are the same as in memory (the first ``}, {`` at least ``PIECE_BYTES`` past the previous
    cut), so the tables are identical; memory holds about one block and one piece of text. None when the
    file does not start like a Kineto object; :class:`_Unsplittable` when a piece does not decode (the
    caller then reads the file again with ijson, which also names what is wrong with a bad file).
    """
    reader = _CountingReader(path)
    with _stream_errors(path, reader):
        head = _read_header(reader)
        if head is None:
            return None
        header, text = head

        def more() -> bool:
            nonlocal text
            block = reader.read(STREAM_BLOCK_BYTES)
            text += block
            return bool(block)

        tables, events = _Tables(), 0
        while True:
            gap = _BETWEEN_OBJECTS.search(text, PIECE_BYTES)
            if gap is None:
                if more():
                    continue
                break
            cut = gap.end() - 1
            batch = _decode_piece(_BATCH_DECODER, b"[" + text[:text.rfind(b"}", 0, cut) + 1] + b"]")
            text = text[cut:]
            events += len(batch)
            tables.add(batch)
            del batch
            if progress:
                progress(reader.stored_bytes(), events)
        trailer = _decode_piece(_TRAILER_DECODER, b'{"traceEvents":[' + text)
        batch, trailer.traceEvents = trailer.traceEvents or [], None
        events += len(batch)
        tables.add(batch)
        if progress:
            progress(reader.stored_bytes(), events)
    return _with_trailer(header, trailer), tables, events


def _read_header(reader: "_CountingReader") -> tuple[_Trace, bytes] | None:
    """The keys before the event array (Kineto writes its metadata first) and the text read after them;
    None when the file does not start like an object with ``traceEvents`` in its first MiB."""
    text = b""
    while _EVENTS_KEY.search(text, 0, 2**20) is None and len(text) < 2**20:
        block = reader.read(STREAM_BLOCK_BYTES)
        if not block:
            break
        text += block
    if text[:len(UTF8_BOM)] == UTF8_BOM:
        text = text[len(UTF8_BOM):]
    key = _EVENTS_KEY.search(text, 0, 2**20) if _OBJECT_START.match(text) else None
    if key is None:
        return None
    return _decode_piece(_HEADER_DECODER, text[:key.end()] + b"]}"), text[key.end():]


class _CountingReader:
    """The decompressed stream for ijson, counting the stored bytes read and keeping the last ones."""

    def __init__(self, path: Path):
        self.file = open(path, "rb")
        gz = self.file.read(2) == GZIP_MAGIC
        self.file.seek(0)
        self.stream = gzip.GzipFile(fileobj=self.file, mode="rb") if gz else self.file
        self.tail = b""

    def read(self, n: int = -1) -> bytes:
        data = self.stream.read(n)
        self.tail = (self.tail + data)[-STREAM_TAIL_BYTES:] if len(data) < STREAM_TAIL_BYTES else \
            data[-STREAM_TAIL_BYTES:]
        return data

    def stored_bytes(self) -> int:
        return self.file.tell()

    def close(self) -> None:
        self.file.close()


def _stream_events(path: Path, progress: Progress | None) -> tuple[_Trace, Iterator[list[_Event]]]:
    """Header and event batches of a trace read as a stream: memory holds one batch, not the file."""
    import ijson

    head, bare = _stream_head(path)
    reader = _CountingReader(path)
    header: dict[str, Any] = dict(head)

    def batches() -> Iterator[list[_Event]]:
        done, batch = 0, []
        with _stream_errors(path, reader):
            # Decimals, not floats: the numbers' exact values, written back as JSON numbers below
            items = ijson.items(reader, "item" if bare else "traceEvents.item", use_float=False)
            for event in items:
                batch.append(event)
                if len(batch) == BATCH_EVENTS:
                    yield _decode_streamed(path, batch, done)
                    done += len(batch)
                    batch = []
                    if progress:
                        progress(reader.stored_bytes(), done)
            if batch:
                yield _decode_streamed(path, batch, done)
                done += len(batch)
            if progress:
                progress(reader.stored_bytes(), done)
            if not bare:
                header.update({k: v for k, v in _trailing_keys(reader.tail).items() if k not in header})
                final[0] = _header(path, header)

    final = [_header(path, header)]

    class _Header:  # the trailing keys are known only after the last batch; load_kineto reads it then
        def __getattr__(self, name: str) -> Any:
            return getattr(final[0], name)

    return _Header(), batches()  # type: ignore[return-value]


@contextmanager
def _stream_errors(path: Path, reader: "_CountingReader") -> Iterator[None]:
    """A stream's JSON and gzip failures as one-line :class:`InputError` s; the file closed either way."""
    import ijson

    try:
        yield
    except (ijson.JSONError, ijson.IncompleteJSONError) as e:
        raise InputError(path, f"is not valid JSON: {_one_line(e)}") from None
    except (OSError, EOFError, zlib.error):
        raise InputError(path, "is a truncated or corrupt gzip file") from None
    finally:
        reader.close()


def _stream_head(path: Path) -> tuple[dict[str, Any], bool]:
    """The top-level keys before ``traceEvents`` (Kineto writes its metadata first); stops there."""
    import ijson

    reader = _CountingReader(path)
    out: dict[str, Any] = {}
    key, builder = None, None
    value = None
    with _stream_errors(path, reader):
        for prefix, event, value in ijson.parse(reader, use_float=True):
            if prefix == "":
                if event == "start_array":
                    return out, True
                if event in ("map_key", "end_map"):
                    if builder is not None:
                        out[key] = builder.value
                    if event == "end_map" or value == "traceEvents":
                        break
                    key, builder = value, ijson.ObjectBuilder()
                elif event != "start_map":
                    raise InputError(path, "is JSON but not a Chrome/Kineto trace (not an object or list)")
            elif builder is not None:
                builder.event(event, value)
        else:
            raise InputError(path, "is empty")
    if value != "traceEvents":
        raise InputError(path, "is JSON but not a Chrome/Kineto trace (no traceEvents)")
    return out, False


def _trailing_keys(tail: bytes) -> dict[str, Any]:
    """Top-level keys after the ``traceEvents`` array, from the last bytes of the file.

    The array's closing bracket is the leftmost ``]`` after which the rest reads as the remainder of
    a JSON object; brackets inside the last events leave unbalanced text and are rejected.
    """
    for m in re.finditer(rb"\](?=\s*[,}])", tail):
        try:
            rest = msgspec.json.decode(b'{"_":0' + tail[m.end():])
        except msgspec.DecodeError:
            continue
        if isinstance(rest, dict):
            rest.pop("_", None)
            return rest
    return {}


_STREAMED_ENCODER = msgspec.json.Encoder(decimal_format="number")


def _header(path: Path, keys: dict[str, Any]) -> _Trace:
    keys = {k: v for k, v in keys.items() if k != "traceEvents"}
    return _decode_json(path, _decoder(_Trace), _STREAMED_ENCODER.encode(keys))


def _decode_streamed(path: Path, batch: list[dict], first_event: int) -> list[_Event]:
    """ijson's dicts through the same typed decoder as the in-memory path (its Decimals are written back
    as the numbers they were read from, so ``ts``/``dur`` convert as in memory)."""
    return _decode_json(path, _BATCH_DECODER, _STREAMED_ENCODER.encode(batch), first_event)


# ---------------------------------------------------------------------------------------- assembly


class _Tables:
    """Column chunks of every table, added batch by batch and joined into DataFrames once at the end."""

    def __init__(self) -> None:
        self.chunks: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
        self.names: dict[str, str] = {}  # names repeat: one string object per distinct name, not per event
        self.rows: Counter[str] = Counter()
        self.unmapped: Counter[str] = Counter()
        self.dropped_python_functions = 0

    def state(self) -> dict:
        """Plain, picklable contents (to send from a worker process)."""
        return {"chunks": {t: dict(cols) for t, cols in self.chunks.items()}, "rows": dict(self.rows),
                "unmapped": dict(self.unmapped), "dropped_python_functions": self.dropped_python_functions}

    def absorb(self, later: dict) -> None:
        """Append the tables of the events after ours (a worker's :meth:`state`)."""
        for table, cols in later["chunks"].items():
            for col, chunks in cols.items():
                self.chunks[table][col].extend(chunks)
        self.rows.update(later["rows"])
        self.unmapped.update(later["unmapped"])
        self.dropped_python_functions += later["dropped_python_functions"]

    def add(self, events: list[_Event]) -> None:
        by_cat, memory_events = _group(events)
        ops, steps = _split_profiler_steps(_take(by_cat, OP_CATS))
        python_functions = by_cat.pop("python_function", [])
        data_loading = _data_loading(python_functions)
        self.dropped_python_functions += len(python_functions) - len(data_loading)
        self._add("ops", _op_columns(ops))
        self._add("comm_args", _comm_columns(ops, "op"))
        self._add("ranges", _range_columns(by_cat.pop("user_annotation", []) + steps,
                                           by_cat.pop("gpu_user_annotation", []), data_loading))
        self._add("api_calls", _api_columns(_take(by_cat, RUNTIME_CATS), _take(by_cat, DRIVER_CATS)))
        kernels = _take(by_cat, KERNEL_CATS)
        self._add("kernels", _kernel_columns(kernels))
        self._add("comm_args", _comm_columns(kernels, "kernel"))
        self._add("memops", _memop_columns(_take(by_cat, MEMCPY_CATS), _take(by_cat, MEMSET_CATS)))
        self._add("syncs", _sync_columns(by_cat.pop("cuda_sync", [])))
        self._add("memory", _memory_columns(memory_events))
        self.unmapped.update({cat: len(evs) for cat, evs in by_cat.items() if cat})

    def _add(self, table: str, columns: dict[str, Any]) -> None:
        n = len(next(iter(columns.values())))
        if n:
            if "name" in columns:
                columns["name"] = [self.names.setdefault(name, name) for name in columns["name"]]
            for col, values in columns.items():
                self.chunks[table][col].append(values)
            self.rows[table] += n

    def profile(self, rank: int, device_properties: Any) -> Profile:
        tables = {name: self._frame(name, rank) for name in
                  ("ops", "ranges", "api_calls", "kernels", "memops", "syncs", "memory")}
        tables["gpus"] = _gpus_frame(device_properties, tables["kernels"]["device"], rank)
        profile = Profile(**tables)
        profile.comm_args = self._comm_frame(rank)  # extension table, see COMM_COLUMNS
        profile.meta = {
            "trace_start_ns": _first_start(profile),
            "dropped_python_functions": self.dropped_python_functions,
            "unmapped_categories": dict(self.unmapped),
        }
        return profile

    def _comm_frame(self, rank: int) -> pd.DataFrame:
        chunks = self.chunks.pop("comm_args", {})
        n = self.rows["comm_args"]
        data = {}
        for col, dtype in COMM_COLUMNS.items():
            values = _concat(chunks[col]) if col in chunks else np.full(n, rank)
            data[col] = np.asarray(values, dtype=np.int64) if dtype == "int64" else _objects(values, n)
        return pd.DataFrame(data)

    def _frame(self, table: str, rank: int) -> pd.DataFrame:
        n = self.rows[table]
        columns = {col: _concat(chunks) for col, chunks in self.chunks.pop(table, {}).items()}
        columns["rank"] = np.full(n, rank, dtype=np.int64)
        if table == "ops" and n:
            columns["op_type"] = columns["name"]  # until op types are classified
        if table != "memory":
            columns[_ID_COLUMNS[table]] = np.arange(n, dtype=np.int64)
        return make_table(table, columns, n)


def _objects(values: Any, n: int) -> np.ndarray:
    out = np.empty(n, dtype=object)  # object, not pandas' inferred string dtype, like make_table
    out[:] = values
    return out


_ID_COLUMNS = {"ops": "op_id", "ranges": "range_id", "api_calls": "api_id", "kernels": "kernel_id",
               "memops": "memop_id", "syncs": "sync_id"}


def _concat(chunks: list) -> np.ndarray | list:
    if isinstance(chunks[0], np.ndarray):
        return np.concatenate(chunks) if len(chunks) > 1 else chunks[0]
    return list(itertools.chain.from_iterable(chunks))


def _group(events: list[_Event]) -> tuple[dict[str, list[_Event]], list[_Event]]:
    """One pass: complete ("X") events by category, plus the allocator ``[memory]`` instant events."""
    by_cat: dict[str, list[_Event]] = defaultdict(list)
    memory: list[_Event] = []
    for e in events:
        if e.ph == "X":
            by_cat[e.cat].append(e)
        elif e.ph == "i" and e.name == "[memory]":
            memory.append(e)
    return by_cat, memory


def _take(by_cat: dict[str, list[_Event]], cats: tuple[str, ...]) -> list[_Event]:
    """Remove and concatenate the events of the given (old and new spelling) categories."""
    out: list[_Event] = []
    for cat in cats:
        out += by_cat.pop(cat, [])
    return out


def _split_profiler_steps(ops: list[_Event]) -> tuple[list[_Event], list[_Event]]:
    """ProfilerStep#N is recorded as an op in some versions; it is an iteration range, not an op."""
    steps = [e for e in ops if e.name.startswith("ProfilerStep#")]
    if not steps:
        return ops, steps
    return [e for e in ops if not e.name.startswith("ProfilerStep#")], steps


def _data_loading(python_functions: list[_Event]) -> list[_Event]:
    """The python_function frames that show data loading; the rest (often 100k+) are not kept.

    Frames repeat with every call, so the name test runs once per distinct name.
    """
    names = {e.name for e in python_functions}
    keep = {n for n in names if "__next__" in n or "dataloader" in n.lower()}
    return [e for e in python_functions if e.name in keep] if keep else []


def _rank(header: _Trace) -> int:
    rank = _as_int(_get(header.distributedInfo, "rank", 0))
    return rank if rank >= 0 else 0


def _identity(header: _Trace) -> dict[str, Any]:
    """What the job's rank numbering reads from a trace (see ``distributed.inputs.identities``)."""
    return {"rank": _rank(header), "world_size": max(_as_int(_get(header.distributedInfo, "world_size", 1)), 1),
            "rank_in_trace": _as_int(_get(header.distributedInfo, "rank", -1)) >= 0}


def read_identity(path: Path) -> dict[str, Any] | None:
    """:func:`_identity` from the keys before the event array, without reading the events; None when the
    file does not start like a Kineto object (then only a whole import can tell)."""
    reader = _CountingReader(Path(path))
    with _stream_errors(Path(path), reader):
        try:
            head = _read_header(reader)
        except _Unsplittable:
            return None
    return None if head is None else _identity(head[0])


def _meta(path: Path, header: _Trace, event_count: int) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "source_format": "kineto",
        "source_path": str(path),
        **_identity(header),
        "trace_name": header.traceName if isinstance(header.traceName, str) else "",
        "schema_version": header.schemaVersion,
        "event_count": event_count,
    }
    hostname = header.host_name or header.hostname
    if hostname:
        meta["hostname"] = str(hostname)
    if header.record_shapes is not None:
        meta["record_shapes"] = header.record_shapes
    if header.baseTimeNanoseconds is not None:
        meta["base_time_ns"] = _as_int(header.baseTimeNanoseconds)
    return meta


def _first_start(profile: Profile) -> int:
    """The earliest timestamp of any mapped event, in ns (-1 for a trace with none)."""
    starts = [t["start"].min() for t in (profile.ops, profile.ranges, profile.api_calls, profile.kernels,
                                         profile.memops, profile.syncs) if len(t)]
    return int(min(starts)) if starts else -1


# ------------------------------------------------------------------------ per-batch table columns


def _op_columns(evs: list[_Event]) -> dict[str, Any]:
    names = [e.name for e in evs]
    args = [e.args for e in evs]
    start, end = _times(evs)
    return {
        "pid": _ints([e.pid for e in evs]),
        "tid": _ints([e.tid for e in evs]),
        "name": names,
        "start": start,
        "end": end,
        "external_id": _external_ids(args),
        "seq": _ints([a.seq for a in args]),
        "direction": _directions(names),
        "input_shapes": _json_strings([a.input_dims for a in args]),
        "input_dtypes": _json_strings([a.input_types for a in args]),
        "concrete_inputs": _json_strings([a.concrete_inputs for a in args]),
    }


#: Columns of ``Profile.comm_args``: the collective metadata of record_param_comms ops and of NCCL kernels
#: that carry it, keyed to their op by (rank, pid, tid, start, name) or kernel by (rank, device, stream, start).
COMM_COLUMNS = {"rank": "int64", "kind": "object", "pid": "int64", "tid": "int64", "device": "int64",
                "stream": "int64", "name": "object", "start": "int64", "end": "int64", "collective": "object",
                "in_nelems": "int64", "out_nelems": "int64", "group_size": "int64", "dtype": "object",
                "pg_name": "object", "pg_ranks": "object"}


def _comm_columns(evs: list[_Event], kind: str) -> dict[str, Any]:
    """Events that carry collective metadata (or are record_param_comms, whose sizes may come later)."""
    evs = [e for e in evs if e.name == "record_param_comms" or e.args.collective or e.args.in_nelems != -1]
    args = [e.args for e in evs]
    start, end = _times(evs)
    return {
        "kind": [kind] * len(evs),
        "pid": _ints([e.pid for e in evs]),
        "tid": _ints([e.tid for e in evs]) if kind == "op" else np.full(len(evs), -1, np.int64),
        "device": _ints([a.device for a in args]),
        "stream": _ints([a.stream for a in args]),
        "name": [e.name for e in evs],
        "start": start,
        "end": end,
        "collective": [str(a.collective or "") for a in args],
        "in_nelems": _ints([a.in_nelems for a in args]),
        "out_nelems": _ints([a.out_nelems for a in args]),
        "group_size": _ints([a.group_size for a in args]),
        "dtype": [str(a.comm_dtype or "") for a in args],
        "pg_name": [str(a.pg_name or "") for a in args],
        "pg_ranks": [str(a.pg_ranks or "") for a in args],
    }


def _directions(names: list[str]) -> list[str]:
    """Mark autograd backward ops "bwd" and the rest "", testing each distinct name once."""
    bwd = {n for n in set(names) if "Backward" in n or n.startswith("autograd::engine::evaluate_function")}
    return ["bwd" if n in bwd else "" for n in names]


def _range_columns(cpu: list[_Event], gpu: list[_Event], python: list[_Event]) -> dict[str, Any]:
    """CPU annotations keep their pid/tid; GPU ones sit on a device lane (pid -1, tid = stream lane)."""
    evs = cpu + gpu + python
    n_cpu, n_gpu = len(cpu), len(gpu)
    pid = _ints([e.pid for e in evs])
    pid[n_cpu:n_cpu + n_gpu] = -1
    device = np.full(len(evs), -1, dtype=np.int64)
    device[n_cpu:n_cpu + n_gpu] = _gpu_lane_devices(gpu)
    start, end = _times(evs)
    return {
        "pid": pid,
        "tid": _ints([e.tid for e in evs]),
        "device": device,
        "name": [e.name for e in evs],
        "domain": (["user_annotation"] * n_cpu + ["gpu_user_annotation"] * n_gpu
                   + ["python_function"] * len(python)),
        "start": start,
        "end": end,
    }


def _gpu_lane_devices(evs: list[_Event]) -> np.ndarray:
    """``args.device`` when present, else the pid, which Kineto sets to the device index on GPU lanes."""
    device = _ints([e.args.device for e in evs])
    return np.where(device >= 0, device, _ints([e.pid for e in evs]))


def _api_columns(runtime: list[_Event], driver: list[_Event]) -> dict[str, Any]:
    evs = runtime + driver
    start, end = _times(evs)
    return {
        "pid": _ints([e.pid for e in evs]),
        "tid": _ints([e.tid for e in evs]),
        "name": [e.name for e in evs],
        "kind": ["runtime"] * len(runtime) + ["driver"] * len(driver),
        "start": start,
        "end": end,
        "correlation": _ints([e.args.correlation for e in evs]),
    }


def _kernel_columns(evs: list[_Event]) -> dict[str, Any]:
    args = [e.args for e in evs]
    grid = _triples([a.grid for a in args])
    block = _triples([a.block for a in args])
    start, end = _times(evs)
    return {
        "device": _ints([a.device for a in args]),
        "stream": _ints([a.stream for a in args]),
        "name": [e.name for e in evs],
        "start": start,
        "end": end,
        "correlation": _ints([a.correlation for a in args]),
        "grid_x": grid[:, 0], "grid_y": grid[:, 1], "grid_z": grid[:, 2],
        "block_x": block[:, 0], "block_y": block[:, 1], "block_z": block[:, 2],
        "registers": _ints([a.registers for a in args]),
        "shared_mem": _ints([a.shared_mem for a in args]),
    }


def _memop_columns(memcpy: list[_Event], memset: list[_Event]) -> dict[str, Any]:
    evs = memcpy + memset
    names = [e.name for e in evs]
    parsed = [_parse_memop_name(n) for n in names]
    args = [e.args for e in evs]
    start, end = _times(evs)
    return {
        "device": _ints([a.device for a in args]),
        "stream": _ints([a.stream for a in args]),
        "kind": ["memcpy"] * len(memcpy) + ["memset"] * len(memset),
        "name": names,
        "copy_kind": [p[0] for p in parsed],
        "src_mem": [p[1] for p in parsed],
        "dst_mem": [p[2] for p in parsed],
        "start": start,
        "end": end,
        "bytes": _ints([a.bytes for a in args]),
        "correlation": _ints([a.correlation for a in args]),
    }


_MEMCPY_NAME = re.compile(r"Memcpy\s+(\w+)\s*\(\s*(\w+)\s*->\s*(\w+)\s*\)")
_MEMSET_NAME = re.compile(r"Memset\s*\(\s*(\w+)\s*\)")


@lru_cache(maxsize=256)
def _parse_memop_name(name: str) -> tuple[str, str, str]:
    """("HtoD", "pageable", "device") from "Memcpy HtoD (Pageable -> Device)"; a memset only has a dst."""
    m = _MEMCPY_NAME.search(name)
    if m:
        return m.group(1), m.group(2).lower(), m.group(3).lower()
    m = _MEMSET_NAME.search(name)
    return ("", "", m.group(1).lower()) if m else ("", "", "")


def _sync_columns(evs: list[_Event]) -> dict[str, Any]:
    args = [e.args for e in evs]
    stream = _ints([a.stream for a in args])
    stream[stream >= 0xFFFFFFFF] = -1  # CUPTI writes "no stream" as -1 or as uint32 -1
    start, end = _times(evs)
    return {
        "device": _ints([a.device for a in args]),
        "stream": stream,
        "kind": [_sync_kind(str(a.sync_kind or e.name)) for a, e in zip(args, evs)],
        "start": start,
        "end": end,
        "correlation": _ints([a.correlation for a in args]),
    }


@lru_cache(maxsize=64)
def _sync_kind(label: str) -> str:
    """CUPTI's sync type ("Stream Sync", "Event Sync", "Stream Wait Event", "Context Sync") to ours."""
    label = label.lower()
    if "wait" in label:
        return "stream_wait_event"
    if "event" in label:
        return "event"
    if "stream" in label:
        return "stream"
    if "context" in label or "device" in label:
        return "device"  # cudaDeviceSynchronize is recorded as a context sync
    return "unknown"


def _memory_columns(evs: list[_Event]) -> dict[str, Any]:
    """Allocator samples on CUDA devices; CPU allocator samples are dropped."""
    args = [e.args for e in evs]
    keep = _ints([a.device_type for a in args]) == CUDA_DEVICE_TYPE
    return {
        "device": _ints([a.device_id for a in args])[keep],
        "ts": us_to_ns([e.ts for e in evs], "ts")[keep],
        "bytes_delta": _ints([a.bytes_delta for a in args])[keep],
        "total_allocated": _ints([a.total_allocated for a in args])[keep],
        "total_reserved": _ints([a.total_reserved for a in args])[keep],
    }


def _gpus_frame(device_properties: Any, kernel_devices: pd.Series, rank: int) -> pd.DataFrame:
    """One row per ``deviceProperties`` entry, plus a blank row for any kernel device it lacks."""
    props = [p for p in device_properties or [] if isinstance(p, dict)]
    devices = [_as_int(p.get("id", -1)) for p in props]
    missing = sorted(set(np.unique(kernel_devices).tolist()) - set(devices) - {-1})
    return make_table("gpus", {
        "rank": [rank] * (len(props) + len(missing)),
        "device": devices + missing,
        "name": [str(p.get("name", "")) for p in props] + [""] * len(missing),
        "sm_count": [_as_int(p.get("numSms", -1)) for p in props] + [-1] * len(missing),
        "memory_bytes": [_as_int(p.get("totalGlobalMem", -1)) for p in props] + [-1] * len(missing),
        "cc_major": [_as_int(p.get("computeMajor", -1)) for p in props] + [-1] * len(missing),
        "cc_minor": [_as_int(p.get("computeMinor", -1)) for p in props] + [-1] * len(missing),
    })


# ----------------------------------------------------------------------------------- column helpers


def _times(evs: list[_Event]) -> tuple[np.ndarray, np.ndarray]:
    """Start and end in exact int ns, each from the JSON text of ``ts`` and ``dur``."""
    start = us_to_ns([e.ts for e in evs], "ts")
    return start, checked_end(start, us_to_ns([e.dur for e in evs], "dur"))


def _ints(values: list) -> np.ndarray:
    """An int64 column; the fast path covers clean ints, the slow one maps junk to -1."""
    try:
        return np.array(values, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        return np.array([_as_int(v) for v in values], dtype=np.int64)


def _as_int(value: Any) -> int:
    """int for ints, floats and numeric strings ("7", "7.0": untyped floats arrive as text); -1 for anything
    else (e.g. "stream 7", None)."""
    try:
        out = int(value)
    except ValueError:
        try:
            out = int(float(value))
        except (TypeError, ValueError, OverflowError):
            return -1
    except (TypeError, OverflowError):
        return -1
    return out if -(2**63) <= out < 2**63 else -1


def _triples(values: list) -> np.ndarray:
    """An (n, 3) int64 array from [x, y, z] lists (grid / block), -1 where one is missing or odd."""
    try:
        out = np.array(values, dtype=np.int64)
        if out.shape == (len(values), 3):
            return out
    except (TypeError, ValueError, OverflowError):
        pass
    out = np.full((len(values), 3), -1, dtype=np.int64)
    for i, v in enumerate(values):
        if isinstance(v, list):
            for j, x in enumerate(v[:3]):
                out[i, j] = _as_int(x)
    return out


def _external_ids(args: list[_Args]) -> np.ndarray:
    new, legacy = _ints([a.external_id for a in args]), _ints([a.legacy_external_id for a in args])
    return np.where(new != -1, new, legacy)


def _json_strings(values: list[msgspec.Raw]) -> list[str]:
    """Compact JSON text per value ("" when absent or null), so equal shapes compare equal as strings.

    Shapes and dtypes repeat across ops, so each distinct text is compacted once and its string shared.
    """
    cache: dict[bytes, str] = {b"": "", b"null": ""}
    out = []
    for raw in values:
        text = bytes(raw)
        compact = cache.get(text)
        if compact is None:
            compact = cache[text] = msgspec.json.encode(msgspec.json.decode(text)).decode()
        out.append(compact)
    return out


def _get(obj: Any, key: str, default: Any) -> Any:
    return obj.get(key, default) if isinstance(obj, dict) else default
