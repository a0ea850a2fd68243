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
