"""Import a PyTorch profiler / Kineto Chrome-trace JSON file (plain or gzip) into the normalized model.

Every schema generation is accepted: 2021 "legacy" categories (``Operator``/``Runtime``/``Kernel``/
``Memcpy``/``Memset``), current ones (``cpu_op``/``cuda_runtime``/``cuda_driver``/``kernel``/...), ROCm
traces (same categories, HIP names), fractional-µs (ns resolution) timestamps and bare event lists.

The package by responsibility:

* :mod:`.events`: the typed msgspec structs and decoders (floats kept as their text, exact ns later);
* :mod:`.columns`: the tables, built batch by batch from typed events, and what the header says;
* :mod:`.text`: the file's JSON text, in memory (counted gunzip, guarded memory map) or as a stream;
* :mod:`.pieces`: the fast readers, the event array cut by byte pattern into pieces (in memory, on one or
  two processes, or streamed block by block), proven by decoding;
* :mod:`.stream`: ijson, for any layout pieces cannot cut, naming the problem in a bad file.

Which reader runs is a :class:`Reading`: chosen from the file and the memory budget by default, named
explicitly by tests and benchmarks. Only readers the benchmark justifies are kept (bench/README.md):
in-memory pieces (two processes halve the parse of large files), streamed pieces (bounded memory under
``--max-memory``, identical tables), and ijson (correctness for other layouts, not speed).
"""

from __future__ import annotations

import gc
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ... import processes
from ...errors import InputError
from ...model import Profile, TableColumns
from .. import streams
from ..exact_ns import TimeOutOfRange
from ..python_frames import MAX_FRAMES
from . import pieces
from .columns import Tables, identity, meta, rank_of
from .events import Trace, Unsplittable
from .stream import ijson_tables
from .text import (
    CountingReader,
    TooLarge,
    TooMuchText,
    estimated_json_size,
    json_text,
    stream_errors,
    text_limit,
)

__all__ = ["IN_MEMORY_PEAK_FACTOR", "Reading", "estimated_json_size", "in_memory_limit",
           "kineto_columns", "load_kineto", "read_identity", "should_stream"]

#: The in-memory reader holds the JSON text plus one piece of objects at a time: at most about this many
#: times the JSON's size at its peak (measured on the real traces; see bench/README.md). Files whose
#: estimate does not fit the budget are streamed.
IN_MEMORY_PEAK_FACTOR = 3
PIECE_BYTES = 4 * 2**20
STREAM_BLOCK_BYTES = 8 * 2**20

Progress = pieces.Progress
METHODS = ("auto", "in_memory", "streamed", "ijson")


@dataclass(frozen=True)
class Reading:
    """How a Kineto file is read; ``Reading()`` lets the importer choose.

    ``method``: "auto" (in memory unless the budget says stream), "in_memory" (pieces of the text in
    memory), "streamed" (pieces cut while the file is read in blocks) or "ijson" (event by event).
    ``processes``: in-memory pieces decoded by 1 or 2 processes; None: 2 for files of
    :data:`~dlscope.importers.streams.SPLIT_MIN_BYTES` of JSON or more, where dlscope may fork and two cores
    exist. ``piece_bytes`` / ``block_bytes``: the size of a piece and of a streamed block. ``fallback``: read a
    file the pieces cannot cut with ijson (off in tests that prove the pieces handled a file on their own).
    ``max_python_frames``: the most Python frames kept (the longest).
    """

    method: str = "auto"
    processes: int | None = None
    piece_bytes: int = PIECE_BYTES
    block_bytes: int = STREAM_BLOCK_BYTES
    fallback: bool = True
    #: the most python_function frames kept (the longest; the count dropped goes into the meta and the summary)
    max_python_frames: int = MAX_FRAMES

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"Reading.method must be one of {METHODS}, not {self.method!r}")


def load_kineto(path: Path, *, max_memory: int | None = None, progress: Progress | None = None,
                reading: Reading | None = None, json_limit: int | None = None) -> Profile:
    """Import one Kineto trace file (:func:`kineto_columns`, made into DataFrames)."""
    return kineto_columns(path, max_memory=max_memory, progress=progress, reading=reading,
                          json_limit=json_limit).profile()


def kineto_columns(path: Path, *, max_memory: int | None = None, progress: Progress | None = None,
                   reading: Reading | None = None, json_limit: int | None = None) -> TableColumns:
    """Import one Kineto trace file as column arrays (:class:`~dlscope.model.TableColumns`: a job joins its
    files' columns and makes each DataFrame once); raise :class:`InputError` when it is not a readable trace.

    With ``max_memory`` (bytes), a file whose in-memory import would not fit is streamed, and so is one
    whose text turns out larger than its estimate while it is inflated. ``json_limit``: the most JSON text
    to read (counted as it is inflated); a file with more is refused.
    """
    path = Path(path)
    gc_was_enabled = gc.isenabled()
    gc.disable()  # millions of small containers would trigger repeated, useless full collections
    try:
        with text_limit(json_limit):
            header, tables, event_count = _read(path, max_memory, progress, reading or Reading())
        reading = reading or Reading()
        columns = tables.columns(rank_of(header), header.deviceProperties, reading.max_python_frames)
    except TimeOutOfRange as e:
        raise InputError(path, f"has an event whose {e}") from None
    except TooMuchText as e:
        raise InputError(path, f"holds more than {e.limit / 1e9:.1f} GB of JSON text, more than --max-memory "
                               "leaves room to analyse; raise --max-memory") from None
    finally:
        if gc_was_enabled:
            gc.enable()
    columns.meta.update(meta(path, header, event_count))
    return columns


def _read(path: Path, max_memory: int | None, progress: Progress | None, reading: Reading
          ) -> tuple[Trace, Tables, int]:
    try:
        return _read_with(path, max_memory, progress, reading)
    finally:  # a child started with the command for this file's later pieces that the reader did not take
        pieces.drop_started()


def _read_with(path: Path, max_memory: int | None, progress: Progress | None, reading: Reading
               ) -> tuple[Trace, Tables, int]:
    method = reading.method
    if method == "auto":
        method = "streamed" if max_memory is not None and should_stream(path, max_memory) else "in_memory"
    if method == "in_memory":
        try:
            with json_text(path, in_memory_limit(max_memory)) as text:
                wanted = reading.processes or (2 if len(text) >= streams.SPLIT_MIN_BYTES else 1)
                return pieces.in_memory(path, text, reading.piece_bytes,
                                        wanted if processes.fork_pays() else 1, progress)
        except TooLarge:  # more text than the estimate said (a gzip bomb, a lying trailer): bounded instead
            method = "streamed"
        except Unsplittable:
            method = _fallback(path, reading)
    if method == "streamed":
        try:
            found = pieces.streamed(path, reading.piece_bytes, reading.block_bytes, progress)
        except Unsplittable:
            found = None
        if found is not None:
            return found
        method = _fallback(path, reading)
    return ijson_tables(path, progress)


def in_memory_limit(max_memory: int | None) -> int:
    """The most JSON text read into memory whole (more is streamed): a share of the budget, or of the machine."""
    return (max_memory if max_memory is not None else _physical_memory()) // IN_MEMORY_PEAK_FACTOR


def _fallback(path: Path, reading: Reading) -> str:
    if not reading.fallback:
        raise InputError(path, "cannot be cut into pieces (and Reading.fallback is off)")
    return "ijson"


def _physical_memory() -> int:
    """The machine's memory in bytes: the in-memory text is bounded by a share of it even without a budget."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 2**62


def should_stream(path: Path, max_memory: int) -> bool:
    """Whether the in-memory import of ``path`` would exceed ``max_memory`` bytes (an estimate)."""
    return IN_MEMORY_PEAK_FACTOR * estimated_json_size(path) > max_memory


def read_identity(path: Path) -> dict[str, Any] | None:
    """:func:`.columns.identity` from the keys before the event array, without reading the events; None
    when the file does not start like a Kineto object (then only a whole import can tell)."""
    reader = CountingReader(Path(path))
    with stream_errors(Path(path), reader):
        try:
            head = pieces.read_header(reader, STREAM_BLOCK_BYTES)
        except Unsplittable:
            return None
    return None if head is None else identity(head[0])
