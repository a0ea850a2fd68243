"""How the files of an import are read: one after the other, in worker processes on this machine, or on an
existing Dask cluster.

Each task imports one file and hands its tables back as Arrow IPC, not as pickled DataFrames: a
process-pool worker writes them to files in a private temporary folder (the parent memory-maps them), a
Dask task returns the IPC bytes, which Dask ships without copying them through pickle. The parent
merges the files in input order, so the result is the same however and wherever the import ran.
"""

from __future__ import annotations

import gc
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd
import pyarrow as pa

from ..errors import DlscopeError, InputError
from ..importers.streams import source
from ..model import TABLES, Profile
from ..processes import can_fork, owned_name, remove_dead, stop_pool, worker_pool
from .budget import check_analysis_fits, most_json_bytes, parse_size
from .inputs import Identity, identities

Step = Callable[..., None]


def _noop(*_a: Any, **_k: Any) -> None:
    return None


# ------------------------------------------------------------------------------------- one file


def import_file(path: str, max_memory: int | None = None, progress=None, reading=None) -> Profile:
    """Import one file of any supported format, validated (:func:`dlscope.importers.load`); under
    ``max_memory`` a trace may not inflate past what that budget can analyse (:func:`.budget.most_json_bytes`)."""
    from ..importers import load

    return load(path, max_memory=max_memory, progress=progress, reading=reading,
                json_limit=most_json_bytes(max_memory) if max_memory else None)


def _frames(profile: Profile) -> dict[str, pd.DataFrame]:
    return {name: profile.table(name) for name in TABLES}


def _to_ipc(frame: pd.DataFrame, sink) -> None:
    table = pa.Table.from_pandas(frame, preserve_index=False)
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)


def _from_ipc(source, dtypes: dict[str, str]) -> pd.DataFrame:
    with pa.ipc.open_file(source) as reader:
        frame = reader.read_all().to_pandas()
    for col, dtype in dtypes.items():  # the importer's own dtypes (object strings stay object)
        if str(frame[col].dtype) != dtype:
            frame[col] = frame[col].astype(dtype)
    return frame


def _dtypes(frame: pd.DataFrame) -> dict[str, str]:
    return {col: str(t) for col, t in frame.dtypes.items()}


def import_to_files(path: str, max_memory: int | None, folder: str, reading=None) -> tuple[dict, dict]:
    """Process-pool task: import, write each table to ``folder`` as an Arrow IPC file; return paths."""
    gc.disable()
    profile = import_file(path, max_memory, reading=reading)
    files = {}
    for name, frame in _frames(profile).items():
        fd, out = tempfile.mkstemp(prefix=f"{name}.", suffix=".arrow", dir=folder)
        with os.fdopen(fd, "wb") as sink:
            _to_ipc(frame, sink)
        files[name] = (out, _dtypes(frame))
    return profile.meta, files


def import_to_bytes(path: str, max_memory: int | None, reading=None) -> tuple[dict, dict]:
    """Dask task: import, return each table as Arrow IPC bytes (the worker may be another machine)."""
    profile = import_file(path, max_memory, reading=reading)
    out = {}
    for name, frame in _frames(profile).items():
        sink = pa.BufferOutputStream()
        _to_ipc(frame, sink)
        out[name] = (sink.getvalue().to_pybytes(), _dtypes(frame))
    return profile.meta, out


def _profile_from(meta: dict, tables: dict[str, tuple[Any, dict]]) -> Profile:
    profile = Profile()
    for name, (where, dtypes) in tables.items():
        if isinstance(where, str):
            with pa.memory_map(where) as mm:
                frame = _from_ipc(mm, dtypes)
            os.unlink(where)
        else:
            frame = _from_ipc(pa.BufferReader(where), dtypes)
        setattr(profile, name, frame)
    profile.meta = meta
    return profile


# ------------------------------------------------------------------------------------- the job


def load_profiles_parallel(paths: Sequence[str | Path], workers: int | None = None, scheduler: str | None = None,
                           max_memory: int | str | None = None, step: Step = _noop, reading=None) -> Profile:
    """Import every file of a job and merge them into one profile, one rank per file.

    ``workers``: local worker processes (default: the machine's cores for jobs of 64 MiB or more, else 1;
    1 imports in this process).
    ``scheduler``: a Dask scheduler address (``tcp://host:8786``); the files must be readable there.
    ``max_memory``: the budget shared by the concurrent imports; a file whose in-memory import would
    not fit its share is streamed. Progress goes to ``step(description, advance=bytes, total=bytes)``.
    ``reading``: the Kineto reader to use (a :class:`dlscope.importers.kineto.Reading`; default: chosen).
    """
    files = [Path(p) for p in paths]
    if not files:
        raise DlscopeError("no trace files given")
    budget = parse_size(max_memory)
    sizes = [file_size(p) for p in files]
    step(f"reading {len(files)} file(s)", advance=0, total=sum(sizes) + 3)
    if scheduler:
        profiles = _on_dask(files, sizes, scheduler, budget, step, reading)
    else:
        n = max(1, min(workers or _default_workers(sizes), len(files))) if can_fork() else 1
        share = budget // n if budget else None
        profiles = _serial(files, sizes, share, step, reading) if n == 1 else \
            _on_processes(files, sizes, n, share, step, reading)
    profile = merge(profiles, files)
    if budget:
        check_analysis_fits(profile, budget, files)
    return profile


#: below this much input, worker start-up costs more than the parallel import saves (bench/README.md)
PARALLEL_MIN_BYTES = 64 * 2**20


def _default_workers(sizes: list[int]) -> int:
    """The machine's cores when the job is large enough to pay for worker processes, else 1."""
    return (os.cpu_count() or 1) if sum(sizes) >= PARALLEL_MIN_BYTES else 1


def file_size(path: Path) -> int:
    try:
        return source(path).stat().st_size
    except OSError:
        return 0


class FileProgress:
    """Files, bytes and events done, for the progress line."""

    def __init__(self, step: Step, files: int):
        self.step, self.files, self.done, self.events = step, files, 0, 0

    def finished(self, profile_meta: dict, size: int) -> None:
        self.done += 1
        self.events += int(profile_meta.get("event_count") or 0)
        self.step(f"read {self.done}/{self.files} files, {self.events:,} events", advance=size)


def _serial(paths, sizes, budget, step, reading) -> list[Profile]:
    files = FileProgress(step, len(paths))
    return [import_with_progress(path, size, budget, files, reading) for path, size in zip(paths, sizes)]


def import_with_progress(path: Path, size: int, budget: int | None, files: FileProgress, reading=None) -> Profile:
    """Import one file in this process, reporting its bytes and events as they are read."""
    seen = [0]

    def progress(done_bytes: int, events: int) -> None:
        files.step(f"reading {path.name}: {events:,} events", advance=max(done_bytes - seen[0], 0))
        seen[0] = max(done_bytes, seen[0])

    gc_was = gc.isenabled()
    gc.disable()
    try:
        profile = import_file(str(path), budget, progress, reading)
    finally:
        if gc_was:
            gc.enable()
    files.finished(profile.meta, max(size - seen[0], 0))
    return profile


def _on_processes(paths, sizes, workers, budget, step, reading) -> list[Profile]:
    """Each file imported by a worker of a forked pool (:func:`dlscope.processes.worker_pool`); the tables
    come back through Arrow files in a folder named for this run, so a later run removes it if this one
    is killed."""
    counter = FileProgress(step, len(paths))
    results: list[Profile | None] = [None] * len(paths)
    remove_dead(tempfile.gettempdir(), "dlscope-import.")
    folder = tempfile.mkdtemp(prefix=owned_name("dlscope-import") + "-")
    pool = worker_pool(workers, "fork")
    try:
        pending = {pool.submit(import_to_files, str(p), budget, folder, reading): i for i, p in enumerate(paths)}
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                i = pending.pop(future)
                try:
                    meta, files = future.result()  # an importer's InputError is re-raised here as itself
                except BrokenProcessPool:
                    raise InputError(paths[i], "the worker importing it ended abruptly (out of memory, killed, "
                                               "or the file changed while it was read)") from None
                results[i] = _profile_from(meta, files)
                counter.finished(meta, sizes[i])
        pool.shutdown()
    finally:
        stop_pool(pool)  # on a failure or an interrupt: the other workers are killed, not awaited
        shutil.rmtree(folder, ignore_errors=True)
    return cast(list[Profile], results)  # every slot was filled: each import returned or raised


def _on_dask(paths, sizes, scheduler, budget, step, reading) -> list[Profile]:
    try:
        from distributed import Client
    except ImportError:
        raise DlscopeError("--scheduler needs Dask: pip install 'dlscope[dask]'") from None
    try:
        client = Client(scheduler, timeout="10s", set_as_default=False)
    except (OSError, TimeoutError) as e:
        raise DlscopeError(f"--scheduler {scheduler}: cannot connect ({e})") from None
    counter = FileProgress(step, len(paths))
    results: list[Profile | None] = [None] * len(paths)
    try:
        # absolute (the workers' folder may differ) but not resolved: the path is recorded as the user gave it
        futures = client.map(import_to_bytes, [os.path.abspath(source(p)) for p in paths], max_memory=budget,
                             reading=reading, pure=False)
        for i, future in enumerate(futures):  # in input order; the cluster runs them all meanwhile
            meta, tables = future.result()
            future.release()
            results[i] = _profile_from(meta, tables)
            counter.finished(meta, sizes[i])
    finally:
        client.close()
    return cast(list[Profile], results)  # every slot was filled: each import returned or raised


def apply_identity(profile: Profile, who: Identity, path: Path) -> None:
    """Record the file's place in the job in its meta and in every row."""
    profile.meta.update(rank=who.rank, world_size=who.world_size, rank_source=who.rank_source,
                        source_path=str(path))  # the same whichever process or host read it
    if who.hostname:
        profile.meta["hostname"] = who.hostname
    for name in TABLES:
        getattr(profile, name)["rank"] = np.int64(who.rank)


def merge(profiles: list[Profile], paths: Sequence[Path]) -> Profile:
    """Give each file its rank (see :mod:`.inputs`) and join them into one profile in input order."""
    ids = identities(paths, [p.meta for p in profiles])
    for profile, who, path in zip(profiles, ids, paths):
        apply_identity(profile, who, path)
    return Profile.concat(profiles)
