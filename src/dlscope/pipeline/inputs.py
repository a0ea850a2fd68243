"""Which files make up a job, and which rank, world size and host each file is.

A folder argument stands for the trace files inside it, in natural order (rank-2 before rank-10). A
file's rank comes from its own metadata (Kineto ``distributedInfo``) when every file has a distinct one,
else from the file names (rank-3, worker5, proc2, rank3of8 ...) when they give distinct ranks, else from
the order of the files.

Several profiler cycles of one process (a torch.profiler ``schedule`` with ``repeat`` > 1, written by
``dlscope.trace_handler`` or ``tensorboard_trace_handler`` as ``{worker}.{timestamp}.pt.trace.json``: same
worker name, same rank) are windows of that process, not ranks, and are refused with a message saying what to
do: an aggregation's iteration windows partition one continuous wall clock, and the unrecorded time between
two cycles would be counted as time of the job (its last iteration before the gap would run to the next
cycle's first), so neither joining them into one rank nor numbering them as ranks gives right figures.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..distributed.tables import cycle_patterns, host_patterns, rank_patterns, table
from ..errors import DlscopeError, InputError


def natural_key(path: Path) -> list:
    """Sort key that orders embedded numbers by value."""
    return [int(part) if part.isdigit() else part.lower() for part in re.split(r"(\d+)", path.name)]


def expand_inputs(args: Iterable[str | Path]) -> list[Path]:
    """Files as given; each folder replaced by the trace files directly inside it, naturally sorted."""
    suffixes = tuple(table()["trace_suffixes"])
    out: list[Path] = []
    for arg in args:
        path = Path(arg)
        if path.is_dir():
            found = sorted((p for p in path.iterdir() if p.is_file() and not p.name.startswith(".")
                            and p.name.lower().endswith(suffixes)), key=natural_key)
            if not found:
                raise InputError(path, f"is a folder with no trace files (looked for {', '.join(suffixes)})")
            out.extend(found)
        else:
            out.append(path)
    return out


def prepare_inputs(args: Iterable[str | Path], output: str | Path, force: bool) -> list[Path]:
    """The files of an import, checked against its output before anything is read.

    Folders are expanded (:func:`expand_inputs`); the output must be a database file or a free name
    (:func:`dlscope.store.writer.check_output`: never a folder, FIFO, device or socket, even with
    ``--force``) and never one of the inputs; pipes and FIFOs are read once into a copy
    (:func:`dlscope.importers.streams.copy_streams`).
    """
    from ..importers.streams import copy_streams
    from ..store.writer import check_output

    paths = expand_inputs(args)
    if not paths:
        raise DlscopeError("no trace files given")
    output = Path(output)
    check_output(output, force)
    for path in paths:
        if _same_file(path, output):
            raise DlscopeError(f"{output}: is also an input ({path}); the output must be a new file")
    copy_streams(paths)
    return paths


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet)
        return False


@dataclass(frozen=True)
class Identity:
    """Who a file is in the job; ``rank_source`` is "trace", "file_name" or "order"."""

    rank: int
    world_size: int
    hostname: str
    rank_source: str


def rank_from_name(path: Path) -> tuple[int, int] | None:
    """(rank, world size or -1) spelled in the file name, or None."""
    for pattern in rank_patterns():
        m = pattern.search(path.name)
        if m:
            world = m.groupdict().get("world")
            return int(m.group("rank")), int(world) if world else -1
    return None


def host_from_name(path: Path) -> str:
    """The host in torch's default trace name ``{hostname}_{pid}.{ms}.pt.trace.json``, else ""."""
    for pattern in host_patterns():
        m = pattern.search(path.name)
        if m:
            return m.group("host")
    return ""


def worker_from_name(path: Path) -> str | None:
    """The worker name of torch's per-cycle trace name ``{worker}.{timestamp}.pt.trace.json``, else None."""
    for pattern in cycle_patterns():
        m = pattern.match(path.name)
        if m:
            return m.group("worker")
    return None


def check_one_file_per_process(paths: Sequence[Path], metas: Sequence[dict]) -> None:
    """Refuse several profiler cycles of one process (see the module docstring for why)."""
    groups: dict[tuple, list[Path]] = {}
    for path, meta in zip(paths, metas):
        worker = worker_from_name(Path(path))
        if worker is None:
            continue
        rank = meta.get("rank") if meta.get("rank_in_trace") else None
        groups.setdefault((worker, rank), []).append(Path(path))
    for (worker, _), files in groups.items():
        if len(files) > 1:
            names = ", ".join(f.name for f in files[:4]) + (f" and {len(files) - 4} more" if len(files) > 4 else "")
            raise InputError(files[0].parent, f"{names} are {len(files)} profiler cycles of one process ({worker}), "
                                              "not ranks of a job: import each cycle on its own (dlscope import "
                                              f"{files[-1].name} -o cycle.sqlite) and compare cycles with dlscope "
                                              "diff; a job takes one trace per rank")


def identities(paths: Sequence[Path], metas: Sequence[dict]) -> list[Identity]:
    """Rank, world size and host of every file of one job (see the module docstring for the order)."""
    check_one_file_per_process(paths, metas)
    n = len(paths)
    in_trace = [m.get("rank") if m.get("rank_in_trace") else None for m in metas]
    from_name = [rank_from_name(Path(p)) for p in paths]
    known_in_trace = [r for r in in_trace if r is not None]
    known_from_name = [r for r in from_name if r is not None]
    if n and len(known_in_trace) == n and len(set(known_in_trace)) == n:
        ranks, source = [int(r) for r in known_in_trace], "trace"
    elif n and len(known_from_name) == n and len({r[0] for r in known_from_name}) == n:
        ranks, source = [r[0] for r in known_from_name], "file_name"
    elif n == 1 and metas[0].get("rank") is not None:
        ranks, source = [int(metas[0]["rank"])], "trace" if metas[0].get("rank_in_trace") else "order"
    else:
        ranks, source = list(range(n)), "order"
    worlds = [int(m.get("world_size") or 1) for m in metas if m.get("rank_in_trace")]
    worlds += [r[1] for r in from_name if r is not None]
    world = max([n, max(ranks, default=-1) + 1, *worlds])
    return [Identity(rank, world, str(m.get("hostname") or host_from_name(Path(p))), source)
            for rank, m, p in zip(ranks, metas, paths)]
