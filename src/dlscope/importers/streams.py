"""Inputs that can be read only once: pipes and FIFOs (``dlscope import <(zcat trace.json.gz)``).

An import reads a file several times (the format sniff, the size for the memory budget, the reader, a
fallback reader), which a pipe cannot give. Each such input is read once, as a stream, into a temporary
file of this run (its name carries the run's tag, so a later run removes it if this one is killed); every
importer opens :func:`source` of the path it was given, while messages and metadata keep the name the user
typed. Devices and sockets are refused: they are not traces, and some never end.
"""

from __future__ import annotations

import atexit
import os
import shutil
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path

from ..errors import InputError, reading
from ..processes import owned_name, remove_dead

_COPIES: dict[str, str] = {}  # the path as given -> the copy to open


def source(path: str | Path) -> Path:
    """The file to open for the input ``path``: its copy when it was a stream, else itself."""
    return Path(_COPIES.get(str(path), path))


def copy_streams(paths: Iterable[Path]) -> None:
    """Read every pipe or FIFO among ``paths`` into a temporary file once; refuse devices and sockets."""
    for path in paths:
        if str(path) in _COPIES:
            continue
        with reading(path):
            mode = os.stat(path).st_mode
        if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
            continue
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
            raise InputError(path, "is a device, not a trace file")
        if stat.S_ISSOCK(mode):
            raise InputError(path, "is a socket, not a trace file")
        _copy(path)


def _copy(path: Path) -> None:
    folder = tempfile.gettempdir()
    remove_dead(folder, "dlscope-input.")
    fd, copy = tempfile.mkstemp(prefix=owned_name("dlscope-input") + "-", dir=folder)
    _COPIES[str(path)] = copy
    with os.fdopen(fd, "wb") as out, reading(path), open(path, "rb") as stream:
        try:
            shutil.copyfileobj(stream, out, 2**20)
        except OSError as e:
            raise InputError(path, f"could not be read to its end ({e.strerror or e})") from None


@atexit.register
def release() -> None:
    """Remove the copies (at exit; a killed run's copies go with the next run's :func:`remove_dead`)."""
    while _COPIES:
        _, copy = _COPIES.popitem()
        try:
            os.unlink(copy)
        except OSError:
            pass


GZIP_MAGIC = b"\x1f\x8b"
MAX_GZIP_RATIO = 100  # JSON traces compress 10-20x; a larger size in the gzip trailer is not trusted
LEAST_GZIP_RATIO = 5  # below any Kineto trace seen (they compress 10-20x)
ESTIMATED_GZIP_RATIO = 15  # when the gzip trailer cannot tell the size (multi-GB files wrap at 4 GiB)
#: a Kineto file with at least this much JSON is decoded by two processes (the importing one and a forked child;
#: :mod:`.kineto.pieces`); here, not in the Kineto importer, so that `dlscope import` can decide to fork that
#: child before it loads numpy and pyarrow (:mod:`dlscope.pipeline.head_start`)
SPLIT_MIN_BYTES = 64 * 2**20


def estimated_json_size(path: Path, least: bool = False) -> int:
    """The JSON text's size: the file size, or for gzip the trailer's size when it is plausible, else a
    typical ratio times the file size.

    ``least``: a lower bound instead. The trailer holds the size modulo 4 GiB (of the last member), never
    more than the text, so a plausible trailer bounds it from below even when it may have wrapped.
    """
    try:
        size = os.path.getsize(source(path))
        with open(source(path), "rb") as f:
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
