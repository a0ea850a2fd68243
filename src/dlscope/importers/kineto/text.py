"""A trace's JSON text: in memory (gunzipped, or a plain file mapped), or as a counted stream of blocks.

Nothing here trusts the file: a gzip stream is inflated in steps and counted, so a small file that inflates
to gigabytes (a gzip bomb, or a trailer that lies) stops at the caller's limit instead of exhausting memory;
a plain file is memory-mapped, and losing it while it is read (truncated or rewritten in place by another
program) ends the import with one line instead of a silent SIGBUS.
"""

from __future__ import annotations

import ctypes
import gzip
import mmap
import os
import re
import signal
import sys
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ... import processes
from ...errors import InputError, reading
from ..streams import (  # noqa: F401 - the sizes' names are this module's too
    ESTIMATED_GZIP_RATIO,
    LEAST_GZIP_RATIO,
    MAX_GZIP_RATIO,
    estimated_json_size,
    source,
)

GZIP_MAGIC = b"\x1f\x8b"
UTF8_BOM = b"\xef\xbb\xbf"
STREAM_TAIL_BYTES = 65_536  # the bytes after ``traceEvents`` (traceName, baseTimeNanoseconds) fit in this
_READ_BYTES = 2**20  # compressed bytes read at a time
_INFLATE_STEP = 16 * 2**20  # decompressed bytes produced at a time, each counted against the limit

#: a trace's JSON text: decompressed bytes, or a plain file mapped into memory
Text = bytes | bytearray | mmap.mmap

_BLANK = re.compile(rb"\s*\Z")


class TooLarge(Exception):
    """The JSON text is larger than the caller's limit (the caller streams the file instead)."""


class TooMuchText(Exception):
    """More JSON text than the import may read at all (:func:`text_limit`)."""

    def __init__(self, limit: int):
        super().__init__(limit)
        self.limit = limit


_LIMIT: list[int | None] = [None]


@contextmanager
def text_limit(limit: int | None) -> Iterator[None]:
    """The most JSON text any reader of the enclosed import may inflate or read (None: no limit)."""
    saved, _LIMIT[0] = _LIMIT[0], limit
    try:
        yield
    finally:
        _LIMIT[0] = saved


def _count(total: int) -> None:
    if _LIMIT[0] is not None and total > _LIMIT[0]:
        raise TooMuchText(_LIMIT[0])


LOST_MESSAGE = "changed while it was read (it was truncated or rewritten in place); import a copy no program writes to"
#: exit status of a forked helper that lost its mapped file (its parent reports it)
LOST_EXIT = 2


@contextmanager
def json_text(path: Path, limit: int) -> Iterator[Text]:
    """The file's JSON text in memory, gunzipped when it starts with the gzip magic (names are not trusted);
    :class:`TooLarge` when it holds more than ``limit`` bytes.

    A plain file is memory-mapped rather than read (no private copy of hundreds of MB), under a guard
    that turns the loss of the file into one line (:func:`_lost_file_guard`); inside somebody else's
    process (:func:`dlscope.processes.embedded`), where no signal handler may end the process, it is read.
    """
    with reading(path), open(source(path), "rb") as f:
        if f.read(2) == GZIP_MAGIC:
            f.seek(0)
            try:
                data: Text = _gunzip(f, limit)
            except (OSError, EOFError, zlib.error):
                raise InputError(path, "is a truncated or corrupt gzip file") from None
            mapped = None
        else:
            f.seek(0)
            size = os.fstat(f.fileno()).st_size
            _count(size)
            if size > limit:
                raise TooLarge
            mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size and _can_guard() else None
            data = mapped if mapped is not None else f.read()
    with _lost_file_guard(path) if mapped is not None else _nothing():
        try:
            if data[:len(UTF8_BOM)] == UTF8_BOM:
                data = data[len(UTF8_BOM):]
            if _BLANK.match(data):  # stops at the first other byte
                raise InputError(path, "is empty")
            yield data
        finally:
            del data
            if mapped is not None:
                try:
                    mapped.close()
                except BufferError:  # a slice still exported; the map goes with its last reference
                    pass


def release(text: Text, start: int, end: int) -> None:
    """Drop this process's mapping of the text's pages from the one holding ``start`` up to the one holding
    ``end`` (kept: the next piece begins in it), once they are decoded.

    A mapped file's pages count in the process's memory (its PSS) while they stay mapped, so a 235 MB trace
    would hold 224 MiB until the end of the parse; dropped, a page costs nothing here and is read again from
    the page cache if touched (``MADV_DONTNEED`` on a read-only file mapping loses no data). Decompressed
    text (bytes) is left alone."""
    if not isinstance(text, mmap.mmap) or not hasattr(mmap, "MADV_DONTNEED"):
        return
    first, last = start // mmap.PAGESIZE * mmap.PAGESIZE, end // mmap.PAGESIZE * mmap.PAGESIZE
    if last > first:
        text.madvise(mmap.MADV_DONTNEED, first, last - first)


@contextmanager
def _nothing() -> Iterator[None]:
    yield


def _gunzip(f, limit: int) -> bytearray:
    """Every gzip member of ``f`` inflated in counted steps: never more than ``limit`` bytes held.

    One growing buffer (glibc grows large ones in place), so the peak is about 1x the JSON."""
    out = bytearray()
    inflate = zlib.decompressobj(wbits=31)
    in_member = False
    while True:
        data = f.read(_READ_BYTES)
        if not data:
            break
        while data:
            if not in_member and inflate.eof:
                inflate = zlib.decompressobj(wbits=31)
            if not in_member and not data.startswith(GZIP_MAGIC[:len(data)]):
                if data.strip(b"\0"):  # zero padding after the last member is allowed, anything else is not
                    raise zlib.error("trailing garbage after the last gzip member")
                break
            in_member = True
            out += inflate.decompress(data, _INFLATE_STEP)
            _count(len(out))
            if len(out) > limit:
                raise TooLarge
            data = inflate.unconsumed_tail
            if inflate.eof:
                in_member = False
                data = inflate.unused_data
    if in_member:
        raise EOFError("compressed file ended before the end-of-stream marker was reached")
    return out


class CountingReader:
    """The file's JSON text as a stream (gunzipped in blocks), counting the stored bytes read and keeping
    the last ones (the keys written after the event array)."""

    def __init__(self, path: Path):
        with reading(path):
            self.file = open(source(path), "rb")
        gz = self.file.read(2) == GZIP_MAGIC
        self.file.seek(0)
        self.stream = gzip.GzipFile(fileobj=self.file, mode="rb") if gz else self.file
        self.tail = b""
        self.text_bytes = 0

    def read(self, n: int = -1) -> bytes:
        data = self.stream.read(n)
        self.text_bytes += len(data)
        _count(self.text_bytes)
        self.tail = (self.tail + data)[-STREAM_TAIL_BYTES:] if len(data) < STREAM_TAIL_BYTES else \
            data[-STREAM_TAIL_BYTES:]
        return data

    def stored_bytes(self) -> int:
        return self.file.tell()

    def close(self) -> None:
        self.file.close()


@contextmanager
def stream_errors(path: Path, reader: CountingReader) -> Iterator[None]:
    """A stream's JSON and gzip failures as one-line :class:`InputError` s; the file closed either way."""
    import ijson

    try:
        yield
    except (ijson.JSONError, ijson.IncompleteJSONError) as e:
        problem = " ".join(str(e).split())
        raise InputError(path, f"is not valid JSON: {problem}") from None
    except UnicodeDecodeError as e:  # ijson decodes what yajl passed (a lone UTF-16 surrogate, for one)
        problem = " ".join(str(e).split())
        raise InputError(path, f"is not valid JSON: not UTF-8 text ({problem})") from None
    except (OSError, EOFError, zlib.error):
        raise InputError(path, "is a truncated or corrupt gzip file") from None
    finally:
        reader.close()


# ------------------------------------------------------------------------------ losing a mapped file


_libc: Any = None
_guard: dict = {"depth": 0, "message": b"", "owner": 0, "saved": None, "handler": None}


def _can_guard() -> bool:
    """Whether a mapped read can be guarded here: Linux (glibc's sigaction), and a process of our own."""
    global _libc
    if processes.is_embedded() or not sys.platform.startswith("linux"):
        return False
    if _libc is None:
        try:
            _libc = ctypes.CDLL(None, use_errno=True)
            _libc.sigaction.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
            _libc.signal.argtypes = [ctypes.c_int, ctypes.c_void_p]
            _libc.signal.restype = ctypes.c_void_p
        except (OSError, AttributeError):
            _libc = False
    return bool(_libc)


_HANDLER_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_int)


def _on_sigbus(signum: int) -> None:
    """A mapped page is gone (the file shrank): nothing can go on. One line and exit code 2 from the
    process that mapped it; a forked helper leaves silently with :data:`LOST_EXIT` for its parent to say."""
    if os.getpid() == _guard["owner"] and not processes.is_child():
        os.write(2, _guard["message"])
    os._exit(LOST_EXIT)


_HANDLER = _HANDLER_TYPE(_on_sigbus)


@contextmanager
def _lost_file_guard(path: Path) -> Iterator[None]:
    """SIGBUS while the enclosed code reads a mapped file: one line naming it, exit code 2.

    Python cannot turn SIGBUS into an exception (the faulting access would repeat), so a C-level handler
    (ctypes) writes the message and ends the process; the previous handler comes back afterwards. Children
    forked meanwhile inherit it; they die with their parent anyway.
    """
    if _guard["depth"] == 0:
        saved = ctypes.create_string_buffer(512)  # struct sigaction, whatever its size on this platform
        _libc.sigaction(signal.SIGBUS, None, saved)
        _guard.update(saved=saved, owner=os.getpid(),
                      message=f"dlscope: error: {path}: {LOST_MESSAGE}\n".encode(errors="replace"))
        _libc.signal(signal.SIGBUS, ctypes.cast(_HANDLER, ctypes.c_void_p))
    _guard["depth"] += 1
    try:
        yield
    finally:
        _guard["depth"] -= 1
        if _guard["depth"] == 0:
            _libc.sigaction(signal.SIGBUS, _guard["saved"], None)
