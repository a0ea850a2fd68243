"""Importers: real profile files in, one normalized :class:`~dlscope.model.Profile` out.

The format is detected from the file's content, never from its name. :func:`load` is the boundary every
import goes through (serial, worker processes, Dask, rank by rank): it picks the importer and passes its
result through :func:`.validate.validated`, the one place that checks the values.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InputError
from ..errors import reading as os_errors_as_input_errors

if TYPE_CHECKING:  # (a job's files are sized and sniffed before numpy loads: pipeline.head_start)
    from ..model import Profile, TableColumns

GZIP_MAGIC = b"\x1f\x8b"
SQLITE_MAGIC = b"SQLite format 3\x00"
#: the first byte of a marshalled dict (with the reference flag), as cProfile / profile write their statistics
MARSHAL_DICT = b"\xfb"
_HEAD_BYTES = 4096
#: leading whitespace read past while looking for the first byte of a JSON document
_MAX_LEADING_BLANK = 64 * 2**20
_BLANK = b"\xef\xbb\xbf \t\r\n"


def sniff(path: Path) -> str:
    """Return the format name of ``path``: "kineto", "nsys", "ncu_csv", "nsys_stats_csv", "tf_trace",
    "paddle", "xspace" or "cprofile" (or raise InputError)."""
    from .streams import source

    with os_errors_as_input_errors(path), open(source(path), "rb") as f:
        head = f.read(_HEAD_BYTES)
        if not head:
            raise InputError(path, "is empty")
        if head.startswith(MARSHAL_DICT):  # what cProfile writes: checked whole, or one line saying why not
            from .cprofile import read_stats

            read_stats(Path(source(path)))
            return "cprofile"
        if head.startswith(SQLITE_MAGIC):
            return "nsys"
        if head.startswith(GZIP_MAGIC):
            try:
                with gzip.open(source(path), "rb") as g:
                    head = g.read(_HEAD_BYTES)
                    first = _first_content(head, g)
            except (OSError, EOFError, zlib.error) as e:
                raise InputError(path, f"is not a readable gzip file ({e})") from None
        else:
            first = _first_content(head, f)
    if first in (b"{", b"["):
        from .frameworks import json_flavour

        return json_flavour(head.lstrip(_BLANK))
    from .xspace import looks_like_xspace

    if looks_like_xspace(head):
        return "xspace"
    if b"==PROF==" in head or b'"Kernel Name"' in head or b"Metric Name" in head:
        return "ncu_csv"
    from .nsys_stats_csv import looks_like_nsys_stats_csv

    if looks_like_nsys_stats_csv(path):
        return "nsys_stats_csv"
    if not first:
        raise InputError(path, "holds only whitespace")
    raise InputError(path, "is not a recognised profile (expected a PyTorch/Kineto JSON trace, "
                           "an Nsight Systems SQLite export, an Nsight Compute CSV, a TensorFlow/JAX "
                           "profile (.xplane.pb, .trace.json.gz) or a PaddlePaddle profiler trace)")


def _first_content(head: bytes, stream: Any) -> bytes:
    """The first byte that is not a BOM or whitespace, reading on past a long blank start (b"" if none)."""
    text, read = head.lstrip(_BLANK), len(head)
    while not text and read < _MAX_LEADING_BLANK:
        more = stream.read(2**20)
        if not more:
            break
        read += len(more)
        text = more.lstrip(_BLANK)
    return text[:1]


def load(path: str | Path, *, max_memory: int | None = None, progress: Callable[[int, int], None] | None = None,
         reading: Any = None, json_limit: int | None = None) -> Profile:
    """Import one file of any supported format into the normalized model, validated.

    ``max_memory`` and ``progress`` reach the Kineto reader (streamed under a budget; ``progress(bytes,
    events)``), ``reading`` names its reader (a :class:`.kineto.Reading`; default: chosen by it), and
    ``json_limit`` is the most JSON text it may read (a trace that inflates further is refused).
    """
    from .validate import validated

    path = Path(path)
    kind = sniff(path)
    if kind == "kineto":
        from .kineto import load_kineto

        profile = load_kineto(path, max_memory=max_memory, progress=progress, reading=reading, json_limit=json_limit)
    elif kind == "nsys":
        from .nsys import load_nsys

        profile = load_nsys(path)
    elif kind in ("tf_trace", "xspace", "paddle"):
        from .frameworks import load_framework
        from .streams import source

        profile = load_framework(source(path), kind)  # a pipe's copy; the copy's name is only in messages
    elif kind == "nsys_stats_csv":
        from .nsys_stats_csv import load_nsys_stats_csv

        profile = load_nsys_stats_csv(path)
    elif kind == "cprofile":
        raise InputError(path, "is a cProfile output: import it on its own (it has a call tree, no timeline)")
    else:
        raise InputError(path, f"{kind} files carry no timeline; import them next to a trace "
                               "(roofline counters)")
    return validated(profile, path)


def load_for_job(path: str | Path, *, max_memory: int | None = None,
                 progress: Callable[[int, int], None] | None = None, reading: Any = None,
                 json_limit: int | None = None) -> Profile | TableColumns:
    """:func:`load` for one file of a job: a Kineto trace that validation leaves as it is comes back as
    column arrays (:class:`~dlscope.model.TableColumns`), so that the job makes each DataFrame once
    (:func:`~dlscope.model.joined_tables`); any other file as its validated profile."""
    from .validate import validated, validated_columns

    path = Path(path)
    if sniff(path) != "kineto":
        return load(path, max_memory=max_memory, progress=progress, reading=reading, json_limit=json_limit)
    from .kineto import kineto_columns

    columns = kineto_columns(path, max_memory=max_memory, progress=progress, reading=reading,
                             json_limit=json_limit)
    return columns if validated_columns(columns, path) else validated(columns.profile(), path)
