"""A mid-sized job's later files, or one large trace's later pieces, read by a child forked before the import's
heavy modules load.

`dlscope import` spends its first ~0.4 s loading numpy, pyarrow, pandas and the analysis on one core. A job whose
later half a forked child reads anyway (:func:`.executors._in_two_halves`: 32 to 64 MiB of JSON, no ``--workers``,
``--scheduler`` or ``--max-memory``) has that child forked here instead, as the command starts (:func:`started`,
once the Kineto importer is loaded, before pandas and ``dlscope.pipeline.build``): it reads its files meanwhile,
without pandas (a job file comes back as numpy and Arrow columns, :class:`dlscope.model.TableColumns`), so it
takes the larger share of the bytes (:data:`CHILD_SHARE`). The import takes the child (:func:`take`) where it
reads the files the child was given, else the child is killed; an import that fails first kills it too. The child
hands its files over joined column by column (:func:`_handed_over`), which the join takes as it takes the files:
the result is the serial one either way.

One plain Kineto trace of :data:`~dlscope.importers.streams.SPLIT_MIN_BYTES` of JSON or more, whose later
pieces a forked child decodes anyway (:func:`dlscope.importers.kineto.pieces.in_memory`), has that child
forked here too (:func:`_decode_later`): it maps and cuts the file itself and decodes :data:`TRACE_CHILD_SHARE`
of the pieces; the reader takes it where the file and the cuts are the ones it was started for, else kills it.

Deciding loads no numpy, pyarrow or pandas (only the standard library and dlscope's light modules), so a command
that forks no child pays nothing here.
"""

from __future__ import annotations

import gc
import os
import stat
import sys
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from itertools import accumulate
from pathlib import Path
from typing import Any

from ..errors import DlscopeError
from ..importers import streams
from ..importers.streams import estimated_json_size
from ..processes import ForkedCall, fork_pays

#: below this much JSON text in all (a gzip file's trailer says how much it inflates to; another file counts its
#: own size), worker processes cost more than the parallel import saves. Measured with bench/job_parse.py on jobs
#: of 8 to 64 files cut from bench/out/job64 and the DLRM 8-rank job (bench/README.md, h21jobparse): up to the
#: 51.5 MiB of job64, 2 workers spend 1.3x (job64) to 2.6x (8 files) the serial CPU and never won on the wall
#: clock (a shared 2-core machine); the serial parse is about 1 s per 50 MiB of JSON, so below this little is
#: left to win.
PARALLEL_MIN_BYTES = 64 * 2**20

#: from this much JSON in all (and two files), a job too small for worker processes has its later half read by
#: one forked child (:func:`.executors._in_two_halves`) beside this process: measured on bench/out/job64
#: (51.5 MiB) and jobs cut from it in bench/README.md (h22startup)
FORKED_HALF_MIN_BYTES = 32 * 2**20

#: the child's share of the job's bytes when it starts as the command does: it reads while this process loads
#: pandas and the pipeline (~0.25-0.3 s of CPU after the fork), so it takes more than half (bench/README.md, h27job)
CHILD_SHARE = 0.66

#: the child's share of one trace's pieces when it starts as the command does (:func:`_decode_later`), measured
#: as :data:`CHILD_SHARE` was (bench/README.md, h28head: 0.58); its result now reaches the parent ~0.08 s sooner
#: (its buffers out of band, :class:`dlscope.processes.ForkedCall`), so it takes more: in the quietest runs of a
#: loaded machine, 0.60 ended both halves together (h30parse)
TRACE_CHILD_SHARE = 0.60


@dataclass
class _Started:
    paths: list[Path]
    reading: Any
    first_later: int  # the first file the child reads
    child: ForkedCall


_STARTED: list[_Started] = []


@contextmanager
def started(args: Iterable[str | Path], *, workers: int | None, scheduler: str | None, max_memory: Any,
            reading: Any = None) -> Iterator[None]:
    """Fork the child reading the later files of the job ``args`` names (:func:`_job_pays`), or the later pieces
    of the one trace it names (:func:`_trace_if_it_pays`), where the import would fork one; kill it on the way
    out unless the import took it."""
    paths = None
    if workers is None and scheduler is None and max_memory is None and "pandas" not in sys.modules:
        paths = _regular_files(args)
    trace = _trace_if_it_pays(paths, reading) if paths is not None and len(paths) == 1 else None
    if paths is not None and len(paths) > 1 and _job_pays(paths):
        # what both processes read with (numpy, pyarrow, msgspec, the Kineto importer: ~0.15 s), loaded once
        from ..importers import kineto, validate  # noqa: F401

        sizes = [os.path.getsize(p) for p in paths]
        first_later = later_start(sizes, 1 - CHILD_SHARE)
        _STARTED.append(_Started(paths, reading, first_later, ForkedCall(_handed_over, paths[first_later:], reading)))
    elif trace is not None:
        from ..importers.kineto import PIECE_BYTES, in_memory_limit, pieces  # what the child decodes with

        piece_bytes = reading.piece_bytes if reading is not None else PIECE_BYTES
        if os.path.getsize(trace) <= in_memory_limit(None):  # else streamed: no second process
            pieces.adopt_started(trace, piece_bytes, TRACE_CHILD_SHARE, ForkedCall(
                _decode_later, trace, piece_bytes, TRACE_CHILD_SHARE, in_memory_limit(None)))
    try:
        yield
    finally:
        drop_untaken()


def drop_untaken() -> None:
    """Kill the children started here that the import did not take (it read its files without them)."""
    while _STARTED:
        _STARTED.pop().child.kill()
    if "dlscope.importers.kineto.pieces" in sys.modules:
        from ..importers.kineto import pieces

        pieces.drop_started()


def take(paths: Sequence[Path], reading: Any) -> tuple[int, ForkedCall] | None:
    """The started child and the first file it reads, where it reads the later files of ``paths`` with this
    ``reading``; else None (a child started for other files is killed)."""
    if not _STARTED:
        return None
    one = _STARTED.pop()
    if one.paths == [Path(p) for p in paths] and one.reading is reading:
        return one.first_later, one.child
    one.child.kill()
    return None


def later_start(sizes: Sequence[int], first_share: float) -> int:
    """The first file after ``first_share`` of the bytes (each file counted one byte more), at least one file on
    either side (the same cut as :func:`.executors._later_half_start` at one half)."""
    weights = list(accumulate(float(s) + 1.0 for s in sizes))
    return min(max(bisect_left(weights, weights[-1] * first_share) + 1, 1), len(sizes) - 1)


def _regular_files(args: Iterable[str | Path]) -> list[Path] | None:
    """The input files (folders expanded) where all are regular files and two cores can read them; None
    otherwise, or where the arguments are anything else (a pipe, a missing file: the import reports it as it
    would)."""
    if not fork_pays():
        return None
    from .inputs import expand_inputs

    try:
        paths = expand_inputs(args)
        if not paths or not all(stat.S_ISREG(os.stat(p).st_mode) for p in paths):
            return None
    except (DlscopeError, OSError):
        return None
    return paths


def _job_pays(paths: list[Path]) -> bool:
    """Whether the import would read the job's later half in a forked child: 32 to 64 MiB of JSON in all."""
    return FORKED_HALF_MIN_BYTES <= sum(estimated_json_size(p) for p in paths) < PARALLEL_MIN_BYTES


def _trace_if_it_pays(paths: list[Path], reading: Any) -> Path | None:
    """The one trace whose later pieces the import would decode in a forked child: a plain (not gzip) file of
    ``SPLIT_MIN_BYTES`` or more, read in memory by the default number of processes. A gzip file is not: both
    processes would inflate all of it before cutting (bench/README.md, h28head)."""
    path, = paths
    if reading is not None and (reading.method not in ("auto", "in_memory") or reading.processes not in (None, 2)):
        return None
    try:
        with open(path, "rb") as f:
            if f.read(2) == streams.GZIP_MAGIC:
                return None
        return path if os.path.getsize(path) >= streams.SPLIT_MIN_BYTES else None
    except OSError:
        return None


def _decode_later(path: Path, piece_bytes: int, child_share: float, limit: int) -> Any:
    """The child of one trace: its later pieces (:func:`~dlscope.importers.kineto.pieces.later_pieces`), without
    pandas (pyarrow's shim would load it on its first array, ~0.2 s of CPU), unless the pieces need it. None for
    a file of another format (a TensorFlow trace, an nsys export: the parent reads it alone)."""
    from ..importers import sniff
    from ..importers.kineto import pieces

    if sniff(path) != "kineto":
        return None
    return _without_pandas(partial(pieces.later_pieces, path, piece_bytes, child_share, limit))


def _without_pandas(read: Any) -> Any:
    """``read()`` with pandas hidden (unless it is loaded already); where it needs pandas after all, pandas
    loaded (pyarrow's shim sees it from then on) and ``read()`` again."""
    hidden = _NoPandas() if "pandas" not in sys.modules else None
    if hidden is not None:
        sys.meta_path.insert(0, hidden)
    try:
        return read()
    except ImportError as e:
        if hidden is None or (e.name or "").split(".")[0] != "pandas":
            raise
        sys.meta_path.remove(hidden)
        hidden = None
        import pyarrow.lib

        pyarrow.lib._pandas_api.pd  # noqa: B018 - pyarrow's shim loads pandas and sees it from now on
        return read()
    finally:
        if hidden is not None:
            sys.meta_path.remove(hidden)


def _handed_over(paths: list[Path], reading: Any) -> list:
    """The child of a job: its files (:func:`_read`) as one block (:func:`as_block`)."""
    return as_block(_read(paths, reading))


def as_block(files: list) -> list:
    """A forked child's files as one block (:func:`dlscope.model.file_block`: one array per table and column,
    pickled and unpickled as a few dozen buffers instead of one per file and column, bench/README.md, h29hand);
    as they are where a file came back as a profile or a text column is not all strings."""
    from ..model import TableColumns, file_block

    if len(files) < 2 or not all(isinstance(f, TableColumns) for f in files):
        return files
    block = _without_pandas(partial(file_block, files))
    return files if block is None else [block]


def _read(paths: list[Path], reading: Any) -> list:
    """The child of a job: each file as :func:`.executors._serial` imports it. pyarrow is told pandas is absent
    (it converts lists and numpy arrays the same way without it), so the child never loads it, unless dlscope's
    own code needs it for a file (a trace with Python frames, one validation changes): then pandas loads and
    that file is read again (:func:`_without_pandas`)."""
    gc.disable()
    from ..importers import load_for_job

    return [_without_pandas(partial(load_for_job, str(path), reading=reading)) for path in paths]


class _NoPandas:
    """An import finder that says pandas is not installed (pyarrow then works without it)."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name.split(".")[0] == "pandas":
            raise ModuleNotFoundError(f"No module named {name!r} (not loaded in this child)", name=name)
        return None
