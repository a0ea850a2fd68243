"""How the files of an import are read: one after the other (a mid-sized job's later half meanwhile by one
forked child, :func:`_in_two_halves`), in worker processes on this machine, or on an existing Dask cluster.

A worker task imports a group of consecutive files (:func:`file_groups`: a few groups per worker, so a job of
many small files costs one round trip per group, not per file) and hands its tables back as Arrow IPC, not as
pickled DataFrames: a group's Kineto files come back as column arrays, joined column by column into one record
batch per table (each DataFrame made once per group, :func:`dlscope.model.joined_tables`; a group holding another
format, or a file validation changed, sends a batch per file), without the columns the parent rebuilds anyway (the
rank, and the row ids of a job); the serial import joins its files' columns so too, once per job. A process-pool
worker writes these files in a private temporary folder (the parent memory-maps them), a Dask task returns the
IPC bytes, which Dask ships without copying them through pickle. The parent joins every table once, in input order
(one Arrow concatenation, one conversion to pandas), so the result is the same however and wherever it ran.
"""

from __future__ import annotations

import gc
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd
import pyarrow as pa

from ..errors import DlscopeError, InputError
from ..importers.streams import source
from ..model import ID_COLUMNS, TABLES, FileBlock, Profile, S, TableColumns, concat_tables, joined_tables, text_column
from ..processes import (
    ChildFailed,
    ForkedCall,
    can_fork,
    fork_pays,
    owned_name,
    remove_dead,
    stop_pool,
    worker_pool,
)
from . import head_start
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


def import_job_file(path: str, max_memory: int | None = None, progress=None, reading=None
                    ) -> Profile | TableColumns:
    """:func:`import_file` for one file of a job: a Kineto trace comes back as column arrays when validation
    leaves it as it is (:func:`dlscope.importers.load_for_job`), for the job to make its DataFrames once."""
    from ..importers import load_for_job

    return load_for_job(path, max_memory=max_memory, progress=progress, reading=reading,
                        json_limit=most_json_bytes(max_memory) if max_memory else None)


def as_profile(file: Profile | TableColumns) -> Profile:
    return file.profile() if isinstance(file, TableColumns) else file


def joined_files(files: Sequence[Profile | TableColumns]) -> dict[str, pd.DataFrame] | None:
    """The files' tables joined column by column, each DataFrame made once (:func:`dlscope.model.joined_tables`);
    None when a file came back as a profile (another format, or one validation changed) or a text column is not
    all strings: those are joined frame by frame, as before."""
    if len(files) < 2 or not all(isinstance(f, TableColumns) for f in files):
        return None
    return joined_tables(cast(list[TableColumns], list(files)))


# ------------------------------------------------------------------------------------- a group of files


@dataclass
class Segment:
    """Consecutive files' rows of one table, as Arrow IPC (a file's path, or bytes): one record batch per file,
    all of the same column types (``dtypes``: the pandas dtypes of the columns sent, in order; ``columns``: all
    the frame's columns, those rebuilt by the parent included)."""

    dtypes: list[tuple[str, Any]]
    columns: list[str]
    where: str | bytes


@dataclass
class GroupTables:
    """What a worker task hands back for its group of files: each file's meta, each table's rows per file, and
    each table's segments in file order."""

    metas: list[dict] = field(default_factory=list)
    rows: dict[str, list[int]] = field(default_factory=lambda: {name: [] for name in TABLES})
    segments: dict[str, list[Segment]] = field(default_factory=lambda: {name: [] for name in TABLES})


class _SegmentWriter:
    """One table's Arrow IPC output of a group: each file's rows appended as a record batch; a new segment
    starts where a file's column types differ from the file before it (an empty column of objects, say)."""

    def __init__(self, new_sink: Callable[[], tuple[Any, Callable[[], str | bytes]]]):
        self.new_sink = new_sink
        self.key: tuple | None = None  # (Arrow schema, dtypes, columns) of the open segment
        self.writer: Any = None
        self.finish: Callable[[], str | bytes] = lambda: b""
        self.done: list[Segment] = []

    def add(self, frame: pd.DataFrame, rebuilt: set[str]) -> None:
        sent = [c for c in frame.columns if c not in rebuilt]
        arrays, dtypes = [], []
        for col in sent:  # column by column: pa.Table.from_pandas costs 2-4x more on small frames
            series = frame[col]
            dtype = series.dtype
            if isinstance(dtype, pd.CategoricalDtype):  # text (model.S): its strings, whatever each file's words
                dtypes.append((col, S))
                arrays.append(_text_strings(series))
                continue
            dtypes.append((col, dtype))
            arrays.append(pa.array(series.to_numpy()) if isinstance(dtype, np.dtype) and dtype.kind != "O"
                          else pa.array(series.array, from_pandas=True))
        table = pa.Table.from_arrays(arrays, names=sent)
        key = (table.schema, dtypes, list(frame.columns))
        if self.key is None or not (key[0].equals(self.key[0]) and key[1:] == self.key[1:]):
            self.close()
            sink, finish = self.new_sink()
            self.key, self.writer, self.finish = key, pa.ipc.new_file(sink, table.schema), finish
        self.writer.write_table(table)

    def close(self) -> list[Segment]:
        if self.key is not None:
            self.writer.close()
            self.done.append(Segment(self.key[1], self.key[2], self.finish()))
            self.key = self.writer = None
        return self.done


def import_group(paths: Sequence[str], max_memory: int | None, new_sink, reading=None,
                 job: bool = True) -> GroupTables:
    """Import each file in turn and append its tables to the group's Arrow output; ``job``: the ids are
    renumbered over the whole job by the parent, so they are not sent."""
    out = GroupTables()
    writers = {name: _SegmentWriter(new_sink) for name in TABLES}
    rebuilt = {"rank", *(ID_COLUMNS.values() if job else ())}
    try:
        files = [import_job_file(path, max_memory, reading=reading) for path in paths]
        out.metas.extend(f.meta for f in files)
        joined = joined_files(files)
        if joined is not None:  # the group's files as one record batch per table
            for name, writer in writers.items():
                out.rows[name].extend(f.rows.get(name, 0) for f in cast(list[TableColumns], files))
                writer.add(joined[name], rebuilt)
        else:
            for file in files:
                profile = as_profile(file)
                for name, writer in writers.items():
                    frame = profile.table(name)
                    out.rows[name].append(len(frame))
                    writer.add(frame, rebuilt)
        del files, joined
    finally:
        for name, writer in writers.items():
            out.segments[name] = writer.close()
    return out


def import_group_to_files(paths: Sequence[str], max_memory: int | None, folder: str, reading=None,
                          job: bool = True) -> GroupTables:
    """Process-pool task: :func:`import_group`, each segment an Arrow IPC file in ``folder``."""
    gc.disable()

    def new_sink():
        fd, out = tempfile.mkstemp(suffix=".arrow", dir=folder)
        sink = pa.OSFile(out, "wb")
        os.close(fd)
        return sink, lambda: (sink.close(), out)[1]

    return import_group(paths, max_memory, new_sink, reading, job)


def import_group_to_bytes(paths: Sequence[str], max_memory: int | None, reading=None, job: bool = True) -> GroupTables:
    """Dask task: :func:`import_group`, each segment Arrow IPC bytes (the worker may be another machine)."""
    def new_sink():
        sink = pa.BufferOutputStream()
        return sink, lambda: sink.getvalue().to_pybytes()

    return import_group(paths, max_memory, new_sink, reading, job)


def _text_strings(series: pd.Series) -> pa.Array:
    """A text column's strings as one Arrow array (taken from its words by code in Arrow, no per-row Python): the
    files of a group each have their own words, so codes cannot be sent; the parent encodes the joined column
    once (:func:`_to_pandas`)."""
    codes = series.cat.codes.to_numpy()
    words = pa.array(np.asarray(series.cat.categories, dtype=object), type=pa.large_string())
    return words.take(pa.array(codes, mask=codes < 0))


def _read_segment(where: str | bytes) -> pa.Table:
    if isinstance(where, str):
        with pa.memory_map(where) as mm:
            table = pa.ipc.open_file(mm).read_all()
        os.unlink(where)
        return table
    return pa.ipc.open_file(pa.BufferReader(where)).read_all()


def _to_pandas(table: pa.Table, dtypes: list[tuple[str, Any]]) -> pd.DataFrame:
    text = [col for col, dtype in dtypes if isinstance(dtype, str) and dtype == S]
    frame = table.drop_columns(text).to_pandas()
    for col, dtype in dtypes:  # the importer's own dtypes (strings of object dtype stay object)
        if col in text:
            frame[col] = text_column(table.column(col))
        elif frame[col].dtype != dtype:
            frame[col] = frame[col].astype(dtype)
    return frame[[col for col, _ in dtypes]]


def joined_profile(groups: Sequence[GroupTables], paths: Sequence[Path]) -> Profile:
    """The job's profile from its groups' tables, in input order: each file given its rank (see :mod:`.inputs`),
    each table joined once and its ids renumbered (as :func:`merge` does with the files' profiles)."""
    metas = [meta for g in groups for meta in g.metas]
    who = identities(paths, metas)
    for meta, identity, path in zip(metas, who, paths):
        _record_identity(meta, identity, path)
    ranks = np.array([w.rank for w in who], dtype=np.int64)
    tables = {}
    for name in TABLES:
        segments = [s for g in groups for s in g.segments[name]]
        read = [_read_segment(s.where) for s in segments]
        if all(s.dtypes == segments[0].dtypes and t.schema.equals(read[0].schema) for s, t in zip(segments, read)):
            frame = _to_pandas(pa.concat_tables(read), segments[0].dtypes)
        else:  # files whose columns differ in type: joined as the files' frames are (:func:`merge`)
            frame = concat_tables(name, [_to_pandas(t, s.dtypes) for s, t in zip(segments, read)])
        del read
        rows = [n for g in groups for n in g.rows[name]]
        tables[name] = _with_rebuilt_columns(
            frame, segments[0].columns, ID_COLUMNS.get(name) if len(paths) > 1 else None, np.repeat(ranks, rows))
    profile = Profile(**tables)
    profile.meta = metas[0] if len(metas) == 1 else {"sources": metas}
    return profile


def _with_rebuilt_columns(frame: pd.DataFrame, columns: list[str], id_column: str | None,
                          ranks: np.ndarray) -> pd.DataFrame:
    """The rank column, and the row ids of a job's table (``id_column``), put back where the files had them."""
    rebuilt = {"rank": ranks}
    if id_column is not None:
        rebuilt[id_column] = np.arange(len(frame), dtype=np.int64)
    for i, col in enumerate(columns):  # every column before i is there by now
        if col in rebuilt and col in frame:
            frame[col] = rebuilt.pop(col)
        elif col in rebuilt:
            frame.insert(i, col, rebuilt.pop(col))
    for col, values in rebuilt.items():  # a table without a rank column gets one at its end
        frame[col] = values
    return frame


# ------------------------------------------------------------------------------------- the job


def load_profiles_parallel(paths: Sequence[str | Path], workers: int | None = None, scheduler: str | None = None,
                           max_memory: int | str | None = None, step: Step = _noop, reading=None) -> Profile:
    """Import every file of a job and merge them into one profile, one rank per file.

    ``workers``: local worker processes (default: the machine's cores for jobs of ``head_start.PARALLEL_MIN_BYTES`` of
    JSON or more, else 1; 1 imports in this process).
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
        profile = _on_dask(files, sizes, scheduler, budget, step, reading)
    else:
        n = max(1, min(workers or _default_workers(files), len(files))) if can_fork() else 1
        share = budget // n if budget else None
        if n > 1:
            profile = _on_processes(files, sizes, n, share, step, reading)
        elif workers is None and budget is None and _later_half_pays(files):
            profile = merge(_in_two_halves(files, sizes, step, reading), files)
        else:
            profile = merge(_serial(files, sizes, share, step, reading), files)
    head_start.drop_untaken()  # a child started with the command for files read without it (not a Kineto trace)
    if budget:
        check_analysis_fits(profile, budget, files)
    return profile


def _default_workers(paths: Sequence[Path]) -> int:
    """The machine's cores when the job's JSON is large enough to pay for worker processes, else 1."""
    from ..importers.kineto.text import estimated_json_size

    json_bytes = sum(estimated_json_size(p) for p in paths)
    return (os.cpu_count() or 1) if json_bytes >= head_start.PARALLEL_MIN_BYTES else 1


def _later_half_pays(paths: Sequence[Path]) -> bool:
    from ..importers.kineto.text import estimated_json_size

    return (len(paths) >= 2 and fork_pays() and
            sum(estimated_json_size(p) for p in paths) >= head_start.FORKED_HALF_MIN_BYTES)


def _in_two_halves(paths, sizes, step, reading) -> list[Profile | TableColumns]:
    """The serial import of a job's files (:func:`_serial`), its later half (by bytes) read meanwhile by a
    forked child (:class:`dlscope.processes.ForkedCall`: no pool, no Arrow files; the files' column arrays come
    back pickled) and joined after this process's own half, so the result is the serial one. A bad file of the
    first half fails here first, as in the serial import; the child's first bad file otherwise. A child forked as
    the command started for these files (:mod:`.head_start`) is taken instead of a new one. Either child hands
    its files over as one :class:`~dlscope.model.FileBlock`, which :func:`merge` takes as the files themselves."""
    started = head_start.take(paths, reading)  # forked as the command started, with a larger share
    if started is not None:
        half, child = started
    else:
        half = _later_half_start(sizes)
        child = ForkedCall(_serial_as_block, paths[half:], sizes[half:], None, _noop, reading)
    try:
        first = _serial(paths[:half], sizes[:half], None, step, reading)
        try:
            later = child.result()
        except ChildFailed:
            others = len(paths) - half - 1
            raise InputError(paths[half], "the process importing it" +
                             (f" or one of the {others} files after it" if others else "") +
                             " ended abruptly (out of memory, killed, or the file changed while it was read)"
                             ) from None
    except BaseException:
        child.kill()
        raise
    FileProgress(step, len(paths) - half).finished({}, sum(sizes[half:]))
    return first + later


def _serial_as_block(paths, sizes, budget, step, reading) -> list[Profile | TableColumns]:
    """A forked child's files (:func:`_serial`), handed over as one block (:func:`.head_start.as_block`)."""
    return head_start.as_block(_serial(paths, sizes, budget, step, reading))


def _later_half_start(sizes: Sequence[int]) -> int:
    """The first file of the later half: about half the bytes on either side, at least one file each."""
    weights = np.cumsum(np.asarray(sizes, dtype=np.float64) + 1.0)
    return int(min(max(np.searchsorted(weights, weights[-1] / 2) + 1, 1), len(sizes) - 1))


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


def _serial(paths, sizes, budget, step, reading) -> list[Profile | TableColumns]:
    files = FileProgress(step, len(paths))
    return [_with_progress(import_job_file, path, size, budget, files, reading) for path, size in zip(paths, sizes)]


def import_with_progress(path: Path, size: int, budget: int | None, files: FileProgress, reading=None) -> Profile:
    """Import one file in this process, reporting its bytes and events as they are read."""
    return _with_progress(import_file, path, size, budget, files, reading)


def _with_progress(importer: Callable[..., Any], path: Path, size: int, budget: int | None, files: FileProgress,
                   reading=None) -> Any:
    seen = [0]

    def progress(done_bytes: int, events: int) -> None:
        files.step(f"reading {path.name}: {events:,} events", advance=max(done_bytes - seen[0], 0))
        seen[0] = max(done_bytes, seen[0])

    gc_was = gc.isenabled()
    gc.disable()
    try:
        profile = importer(str(path), budget, progress, reading)
    finally:
        if gc_was:
            gc.enable()
    files.finished(profile.meta, max(size - seen[0], 0))
    return profile


#: worker tasks per worker: a job's files go in this many groups per worker, so that one slow group does not
#: leave the other workers idle for long, while each group costs the parent one set of tables to join
GROUPS_PER_WORKER = 2


def file_groups(sizes: Sequence[int], workers: int) -> list[range]:
    """Consecutive files in about ``GROUPS_PER_WORKER * workers`` groups of about equal bytes (a file larger
    than a group's share is a group of its own)."""
    weights = np.asarray(sizes, dtype=np.float64) + 1.0  # an empty or unsized file still counts
    share = weights.sum() / (GROUPS_PER_WORKER * workers)
    groups, first, filled = [], 0, 0.0
    for i, w in enumerate(weights):
        filled += w
        if filled >= share * (1 - 1e-9) or i == len(weights) - 1:
            groups.append(range(first, i + 1))
            first, filled = i + 1, 0.0
    return groups


def _on_processes(paths, sizes, workers, budget, step, reading) -> Profile:
    """Groups of files (:func:`file_groups`) imported by the workers of a forked pool
    (:func:`dlscope.processes.worker_pool`); the tables come back through Arrow files in a folder named for
    this run, so a later run removes it if this one is killed."""
    counter = FileProgress(step, len(paths))
    groups = file_groups(sizes, workers)
    results: list[GroupTables | None] = [None] * len(groups)
    remove_dead(tempfile.gettempdir(), "dlscope-import.")
    folder = tempfile.mkdtemp(prefix=owned_name("dlscope-import") + "-")
    pool = worker_pool(workers, "fork")
    try:
        pending = {pool.submit(import_group_to_files, [str(paths[i]) for i in group], budget, folder, reading,
                               len(paths) > 1): g for g, group in enumerate(groups)}
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in sorted(done, key=pending.__getitem__):  # in input order
                g = pending.pop(future)
                try:
                    results[g] = future.result()  # an importer's InputError is re-raised here as itself
                except BrokenProcessPool:  # every unfinished group fails so: which one killed it is unknown
                    unread = [i for u, group in enumerate(groups) if results[u] is None for i in group]
                    others = (f" or one of the {len(unread) - 1} other files not yet read "
                              f"({_names(paths, unread[1:])})" if len(unread) > 1 else "")
                    raise InputError(paths[unread[0]], f"the worker importing it{others} ended abruptly (out "
                                                       "of memory, killed, or the file changed while it was read)"
                                     ) from None
                for i, meta in zip(groups[g], results[g].metas):  # type: ignore[union-attr]
                    counter.finished(meta, sizes[i])
        pool.shutdown()
        return joined_profile(cast(list[GroupTables], results), paths)  # every group returned or raised
    finally:
        stop_pool(pool)  # on a failure or an interrupt: the other workers are killed, not awaited
        shutil.rmtree(folder, ignore_errors=True)


def _names(paths, rows: list[int], most: int = 3) -> str:
    """The first few of these files' names, for a message (the unread files need not follow one another)."""
    shown = ", ".join(Path(paths[i]).name for i in rows[:most])
    return shown + (f" and {len(rows) - most} more" if len(rows) > most else "")


def _on_dask(paths, sizes, scheduler, budget, step, reading) -> Profile:
    try:
        from distributed import Client
    except ImportError:
        raise DlscopeError("--scheduler needs Dask: pip install 'dlscope[dask]'") from None
    try:
        client = Client(scheduler, timeout="10s", set_as_default=False)
    except (OSError, TimeoutError) as e:
        raise DlscopeError(f"--scheduler {scheduler}: cannot connect ({e})") from None
    counter = FileProgress(step, len(paths))
    try:
        groups = file_groups(sizes, max(1, sum(client.nthreads().values())))
        # absolute (the workers' folder may differ) but not resolved: the path is recorded as the user gave it
        absolute = [os.path.abspath(source(p)) for p in paths]
        futures = client.map(import_group_to_bytes, [[absolute[i] for i in group] for group in groups],
                             max_memory=budget, reading=reading, job=len(paths) > 1, pure=False)
        results = []
        for group, future in zip(groups, futures):  # in input order; the cluster runs them all meanwhile
            results.append(future.result())
            future.release()
            for i, meta in zip(group, results[-1].metas):
                counter.finished(meta, sizes[i])
    finally:
        client.close()
    return joined_profile(results, paths)


def _record_identity(meta: dict, who: Identity, path: Path) -> None:
    """The file's place in the job, in its meta."""
    meta.update(rank=who.rank, world_size=who.world_size, rank_source=who.rank_source,
                source_path=str(path))  # the same whichever process or host read it
    if who.hostname:
        meta["hostname"] = who.hostname


def apply_identity(profile: Profile, who: Identity, path: Path) -> None:
    """Record the file's place in the job in its meta and in every row."""
    _record_identity(profile.meta, who, path)
    for name in TABLES:
        getattr(profile, name)["rank"] = np.int64(who.rank)


def merge(files: Sequence[Profile | TableColumns], paths: Sequence[Path]) -> Profile:
    """Give each file its rank (see :mod:`.inputs`) and join them into one profile in input order, each table
    joined once (column by column where the files came back as columns), its rank column and (for a job) its
    ids made for all its rows at once. A :class:`~dlscope.model.FileBlock` among ``files`` stands for its files
    (a forked child's, handed over joined)."""
    metas = [meta for f in files for meta in (f.metas if isinstance(f, FileBlock) else [f.meta])]
    who = identities(paths, metas)
    if len(files) == 1 and not isinstance(files[0], FileBlock):
        profile = as_profile(files[0])
        apply_identity(profile, who[0], paths[0])
        return profile
    for meta, identity, path in zip(metas, who, paths):
        _record_identity(meta, identity, path)
    ranks = np.array([w.rank for w in who], dtype=np.int64)
    joined = joined_files(files)
    profiles = None if joined is not None else [as_profile(f) for f in files]
    tables = {}
    for name in TABLES:
        if joined is not None:
            frame = joined.pop(name)
        else:
            frame = concat_tables(name, [p.table(name) for p in cast(list[Profile], profiles)])
        rows = [n for f in files for n in _rows_per_file(f, name)]
        tables[name] = _with_rebuilt_columns(frame, list(frame.columns), ID_COLUMNS.get(name),
                                             np.repeat(ranks, rows))
    out = Profile(**tables)
    out.meta = {"sources": metas}
    return out


def _rows_per_file(file: Profile | TableColumns, name: str) -> list[int]:
    """Each file's rows of table ``name`` (a block's files each)."""
    if isinstance(file, FileBlock):
        return file.file_rows[name]
    return [file.rows.get(name, 0)] if isinstance(file, TableColumns) else [len(file.table(name))]
