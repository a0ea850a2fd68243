"""The fast readers: the ``traceEvents`` array cut by byte pattern into pieces, each decoded on its own.

A cut is only a guess (``}, {`` may sit inside a string or a nested object). Pieces are decoded in file
order, each starting where the one before ended: the header, closed with ``]}``, must decode as an object,
so the array opens at the top level; and a piece that starts between two events and decodes alone as a
JSON array is balanced and leaves no string open, so it also ends between two events. A piece that does
not decode is merged with the next one (the guessed cut between them is dropped) and tried again, so a
name holding the pattern costs one larger piece, never a wrong event. A piece that still fails at the end
of the file or after ``MAX_MERGES`` merges means a bad file or a layout pieces cannot cut
(:class:`~.events.Unsplittable`; the caller reads it with ijson, which also names the problem), so a bad
byte early in a large file costs a few failed pieces, not a decode of the rest per piece.

In memory, a large file's second half is decoded meanwhile by a forked child
(:class:`dlscope.processes.ForkedCall`) from its first guessed cut; its result is used only when this
process's pieces prove that cut, else it is killed and this process decodes on. `dlscope import` of one large
plain trace forks that child as the command starts, before pandas and the pipeline load
(:mod:`dlscope.pipeline.head_start`): it maps the file and cuts it itself (:func:`later_pieces`, the same cuts)
and decodes a larger share; the reader takes it (:func:`in_memory`) where it was started for this file and these
pieces, else it is killed (:func:`drop_started`). Streamed, the file is read
in blocks and cut by the same rule as in memory, so the pieces, and the tables, are identical.
"""

from __future__ import annotations

import gc
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ... import processes
from ...errors import InputError
from ..streams import source
from .columns import Tables
from .events import (
    BATCH_DECODER,
    HEADER_DECODER,
    TRAILER_DECODER,
    Event,
    Trace,
    Unsplittable,
    decode_piece,
)
from .text import LOST_EXIT, LOST_MESSAGE, UTF8_BOM, CountingReader, Text, json_text, release, stream_errors

EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
BETWEEN_OBJECTS = re.compile(rb"\}\s*,\s*\{")
OBJECT_START = re.compile(rb"\s*\{")
#: Kineto writes its metadata first: the array must open in the first MiB for pieces to be cut
HEADER_WINDOW = 2**20

#: merges of one piece with the next before the file is left to ijson (a piece spans at most this many + 1)
MAX_MERGES = 8

#: ``progress(bytes_read, events_decoded)``; bytes are of the file as stored (compressed when gzip).
Progress = Callable[[int, int], None]
#: the pieces this process decodes when a forked child decodes the rest: half, the measured best (this process
#: also joins the tables and takes the child's back, about what the child spends pickling them). 235 MB trace,
#: parse walls of 5 runs each on 2 cores: 0.46 0.91-1.03 s, 0.48 0.93-0.95 s, 0.50 0.87-0.92 s, 0.52 0.88-0.94 s
#: (bench/README.md, h25speed)
PARENT_SHARE = 0.5
Result = tuple[Trace, Tables, int]


def cut_events(text: Text, piece_bytes: int) -> list[int] | None:
    """Guessed cuts of the traceEvents array: ``[events_start, piece2_start, ...]``, each the ``{`` of the
    first ``}, {`` at least ``piece_bytes`` past the guess before; None when the document is not an object
    whose ``traceEvents`` array opens in its first MiB."""
    if not OBJECT_START.match(text):
        return None
    key = EVENTS_KEY.search(text, 0, HEADER_WINDOW)
    if key is None:
        return None
    cuts = [key.end()]
    while True:
        gap = BETWEEN_OBJECTS.search(text, cuts[-1] + piece_bytes)
        if gap is None:
            return cuts
        cuts.append(gap.end() - 1)  # the next piece starts at the "{"


def in_memory(path: Path, text: Text, piece_bytes: int, processes_wanted: int, progress: Progress | None
              ) -> Result:
    """Tables of the text's pieces; with ``processes_wanted`` 2, the later pieces decoded by a forked child (the one
    started with the command for this file, :func:`take_started`, else one forked here for the second half)."""
    cuts = cut_events(text, piece_bytes)
    if cuts is None:
        raise Unsplittable
    header = decode_piece(HEADER_DECODER, bytes(text[:cuts[0]]) + b"]}")
    release(text, 0, len(text))  # the pages the header and the cuts' searches mapped: each process maps its own pieces
    if progress:  # offsets in the JSON text, reported as bytes of the file as stored
        stored, report, size = os.path.getsize(source(path)), progress, len(text)

        def in_stored_bytes(done: int, events: int) -> None:
            report(stored * done // size, events)
        progress = in_stored_bytes
    started = take_started(path, piece_bytes) if processes_wanted >= 2 and len(cuts) >= 4 else None
    drop_started()
    if processes_wanted < 2 or len(cuts) < 4:
        tables, events, trailer, _ = _decode(text, cuts, 0, len(cuts), progress)
        return with_trailer(header, trailer), tables, events
    if started is not None:  # forked as the command started, mapping the file and cutting it itself
        half = first_later(len(cuts), 1 - started.child_share)
        child = started.child
    else:
        half = first_later(len(cuts), PARENT_SHARE)
        child = processes.ForkedCall(_decode_later_half, text, cuts, half)
    try:
        tables, events, trailer, stopped = _decode(text, cuts, 0, half, progress)
        if stopped != half:  # a merge crossed the child's first cut: its guess was wrong, this process went on
            child.kill()
            return with_trailer(header, trailer), tables, events
        try:
            done = child.result()
        except processes.ChildFailed as e:
            if e.exit_code == LOST_EXIT:
                raise InputError(path, LOST_MESSAGE) from None
            raise
    except BaseException:
        child.kill()
        raise
    if started is not None:
        if done is None or done[:2] != (cuts[half], len(cuts)):  # its map was cut elsewhere: not the same bytes
            raise InputError(path, LOST_MESSAGE)
        done = done[2:]
    later, more_events, trailer = done
    tables.absorb(later)
    return with_trailer(header, trailer), tables, events + more_events


def first_later(pieces: int, parent_share: float) -> int:
    """The first of ``pieces`` that the child decodes: ``parent_share`` of them left to this process, at least
    one on either side."""
    return min(max(round(pieces * parent_share), 1), pieces - 1)


@dataclass
class Started:
    """A child forked as the command started (:mod:`dlscope.pipeline.head_start`) that decodes the later
    ``child_share`` of the pieces of the file ``file`` (its device, inode, size and modification time) names,
    cut every ``piece_bytes`` (:func:`later_pieces`)."""

    file: tuple[int, int, int, int]
    piece_bytes: int
    child_share: float
    child: processes.ForkedCall
    owner: int  # the process that forked it (a process forked later inherits this record, not the child)


_STARTED: list[Started] = []


def file_identity(path: Path) -> tuple[int, int, int, int]:
    st = os.stat(source(path))
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def adopt_started(path: Path, piece_bytes: int, child_share: float, child: processes.ForkedCall) -> None:
    """Record a child started for ``path``'s later pieces (:func:`later_pieces`) for the reader to take."""
    _STARTED.append(Started(file_identity(path), piece_bytes, child_share, child, os.getpid()))


def take_started(path: Path, piece_bytes: int) -> Started | None:
    """The started child decoding this file (unchanged since) cut every ``piece_bytes``, else None."""
    for i, one in enumerate(_STARTED):
        if one.owner == os.getpid() and one.piece_bytes == piece_bytes and one.file == file_identity(path):
            return _STARTED.pop(i)
    return None


def drop_started() -> None:
    """Kill the started children no reader took (a process forked since only forgets them)."""
    while _STARTED:
        one = _STARTED.pop()
        if one.owner == os.getpid():
            one.child.kill()


def later_pieces(path: Path, piece_bytes: int, child_share: float, limit: int
                 ) -> tuple[int, int, dict, int, Trace | None] | None:
    """In a child forked as the command started: the file's text mapped (at most ``limit`` bytes), cut as
    :func:`in_memory` cuts it, and its later ``child_share`` of the pieces decoded. Returns where those
    pieces start and how many pieces there are (the reader checks both against its own cuts), then what
    :func:`_decode_later_half` returns; None when the file cannot be cut or is too short to split."""
    gc.disable()
    with json_text(path, limit) as text:
        cuts = cut_events(text, piece_bytes)
        if cuts is None or len(cuts) < 4:
            return None
        release(text, 0, len(text))
        half = first_later(len(cuts), 1 - child_share)
        tables, events, trailer, _ = _decode(text, cuts, half, len(cuts), None)
        return cuts[half], len(cuts), tables.state(), events, trailer


def _decode_later_half(text: Text, cuts: list[int], half: int) -> tuple[dict, int, Trace | None]:
    """In the forked child: pieces [half, end) as plain data (its parent proves or drops the first cut)."""
    gc.disable()
    tables, events, trailer, _ = _decode(text, cuts, half, len(cuts), None)
    return tables.state(), events, trailer


def _decode(text: Text, cuts: list[int], lo: int, hi: int, progress: Progress | None
            ) -> tuple[Tables, int, Trace | None, int]:
    """Pieces from ``cuts[lo]`` (taken as proven) up to ``cuts[hi]``, merging a piece that does not decode
    with the next; past ``hi`` when a merge crosses it (then to the end). The last piece also gives the keys
    after the array. Returns the tables, events, trailer (None unless the end was reached) and the index of
    the cut where decoding stopped."""
    tables, events, trailer = Tables(), 0, None
    i = lo
    while i < hi:
        j = i + 1
        while True:
            try:
                if j < len(cuts):  # "{...}, ..., {...}" up to the "}" before the cut's ", {"
                    end = text.rfind(b"}", cuts[i], cuts[j]) + 1
                    batch = decode_piece(BATCH_DECODER, bracketed(text, cuts[i], end))
                else:
                    trailer = decode_piece(TRAILER_DECODER, b'{"traceEvents":[' + text[cuts[i]:])
                    batch, trailer.traceEvents = trailer.traceEvents or [], None
                break
            except Unsplittable:
                if j >= len(cuts) or j - i > MAX_MERGES:
                    raise  # still no valid piece: a bad file or layout
                j += 1  # the guessed cut at j-1 is dropped: merge with the next piece
        if j > hi:
            hi = len(cuts)
        events += len(batch)
        tables.add(batch)
        del batch
        release(text, cuts[i], cuts[j] if j < len(cuts) else len(text))
        if progress:
            progress(cuts[j] if j < len(cuts) else len(text), events)
        i = j
    return tables, events, trailer, i


def bracketed(text: Text, start: int, end: int) -> bytes:
    """``[`` + ``text[start:end]`` + ``]``, the piece as a JSON array, copied once: a slice of the map and a
    concatenation would copy it twice (a third of the time spent outside decoding on a large file). Joined
    from a view, not filled into a zeroed bytearray: the zeroing cost as much as the copy (235 MB trace:
    0.055 -> 0.028 s CPU)."""
    with memoryview(text) as view:
        return b"".join((b"[", view[start:end], b"]"))


def with_trailer(header: Trace, trailer: Trace | None) -> Trace:
    """The header's keys completed by those written after the event array (traceName, ...)."""
    for name in header.__struct_fields__ if trailer is not None else ():
        if getattr(header, name) is None:
            setattr(header, name, getattr(trailer, name))
    header.traceEvents = None
    return header


# ------------------------------------------------------------------------------------------ streamed


#: a streamed piece that grows past this without decoding (no cut, or merges) is left to ijson
MAX_STREAMED_PIECE = 64 * 2**20


def streamed(path: Path, piece_bytes: int, block_bytes: int, progress: Progress | None) -> Result | None:
    """The pieces of :func:`cut_events`, cut and decoded while the file is read block by block: memory holds
    about a block and a piece of text, not the file. None when the file does not start like a Kineto
    object; :class:`Unsplittable` when it cannot be cut (a bad file, or a piece larger than
    ``MAX_STREAMED_PIECE``)."""
    reader = CountingReader(path)
    with stream_errors(path, reader):
        head = read_header(reader, block_bytes)
        if head is None:
            return None
        header, text = head
        tables, events = Tables(), 0
        guess, merges = 0, 0  # the last guessed cut (text starts at a proven one); merges since

        def more() -> bool:
            nonlocal text
            if len(text) > MAX_STREAMED_PIECE + piece_bytes:
                raise Unsplittable
            block = reader.read(block_bytes)
            text += block
            return bool(block)

        while True:
            gap = BETWEEN_OBJECTS.search(text, guess + piece_bytes)
            if gap is None:
                if more():
                    continue
                break
            cut = gap.end() - 1
            try:
                batch: list[Event] = decode_piece(BATCH_DECODER, bracketed(text, 0, text.rfind(b"}", 0, cut) + 1))
            except Unsplittable:
                merges += 1
                if merges > MAX_MERGES:
                    raise
                guess = cut  # merge with the next piece
                continue
            text, guess, merges = text[cut:], 0, 0
            events += len(batch)
            tables.add(batch)
            del batch
            if progress:
                progress(reader.stored_bytes(), events)
        trailer = decode_piece(TRAILER_DECODER, b'{"traceEvents":[' + text)
        batch, trailer.traceEvents = trailer.traceEvents or [], None
        events += len(batch)
        tables.add(batch)
        if progress:
            progress(reader.stored_bytes(), events)
    return with_trailer(header, trailer), tables, events


def read_header(reader: CountingReader, block_bytes: int) -> tuple[Trace, bytes] | None:
    """The keys before the event array (Kineto writes its metadata first) and the text read after them;
    None when the file does not start like an object with ``traceEvents`` in its first MiB."""
    text = b""
    while EVENTS_KEY.search(text, 0, HEADER_WINDOW) is None and len(text) < HEADER_WINDOW:
        block = reader.read(block_bytes)
        if not block:
            break
        text += block
    if text[:len(UTF8_BOM)] == UTF8_BOM:
        text = text[len(UTF8_BOM):]
    key = EVENTS_KEY.search(text, 0, HEADER_WINDOW) if OBJECT_START.match(text) else None
    if key is None:
        return None
    return decode_piece(HEADER_DECODER, text[:key.end()] + b"]}"), text[key.end():]
