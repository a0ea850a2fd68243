"""The flow end to end: import → analyze → store. The CLI, the capture and the viewer call these."""

from __future__ import annotations

import gc
import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager, nullcontext
from dataclasses import replace
from functools import partial
from pathlib import Path

import pandas as pd

from ..analyze.aggregation import resolve_range
from ..analyze.analysis import FINAL_BEFORE_OPS, KEPT_AS_PARSED, Analysed, analyse, profile_ranks
from ..analyze.timeline import matrices_by_rank, stored_arrays
from ..distributed import write_distributed
from ..distributed.figures import collective_rows as job_collective_rows
from ..distributed.figures import job_figures, rank_figures, rank_parts, world_sizes
from ..distributed.store import ingest_collectives
from ..errors import DlscopeError
from ..experts import write_findings
from ..importers import sniff
from ..model import ID_COLUMNS, MISSING, TABLES, Profile
from ..processes import FirstComer, fork_pays, release_free_memory
from ..roofline.ncu import read_ncu_csv, write_ncu_kernels
from ..store import reader, writer
from ..system import job_facts
from ..whatif.job import from_analysed, from_database, world_sizes_of
from ..whatif.stored import annotate, annotated_beside, skip
from .budget import (
    check_analysis_fits,
    check_traces_could_fit,
    parse_size,
    whole_job_fits,
)
from .executors import (
    FileProgress,
    apply_identity,
    file_size,
    import_with_progress,
    load_profiles_parallel,
)
from .inputs import prepare_inputs
from .per_rank import aggregate_ranks
from .rank_by_rank import IdOffsets, by_rank, identity_after_import, job_identities


@contextmanager
def _gc_paused() -> Iterator[None]:
    """The cyclic GC off while millions of short-lived objects are made (it finds no cycles here)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@contextmanager
def arrow_from_malloc() -> Iterator[None]:
    """Arrow's buffers from the C library's malloc (pyarrow's system pool) while an import runs, its default pool
    (mimalloc) again after. The import's Arrow buffers are few and short-lived (strings converted, batches
    ingested: at most ~9 MiB at once on the benchmark trace), but mimalloc kept ~27 MiB resident for them in its
    own region, out of reach of the pages malloc reuses for the tables and the replay: the import's peak 15 MiB
    higher at the same CPU (bench/README.md, "h27mem"). Buffers made before keep the pool they came from."""
    import pyarrow as pa

    before = pa.default_memory_pool()
    pa.set_memory_pool(pa.system_memory_pool())
    try:
        yield
    finally:
        pa.set_memory_pool(before)


@contextmanager
def _progress(enabled: bool) -> Iterator:
    """A Rich progress bar on stderr (silent when disabled or not a terminal)."""
    if not enabled:
        yield lambda *_a, **_k: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    with Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), console=console,
                  transient=True, disable=not console.is_terminal) as bar:
        task = bar.add_task("importing", total=None)

        def step(description: str, advance: float = 1, total: float | None = None) -> None:
            if total is not None:
                bar.update(task, total=total)
            bar.update(task, description=description, advance=advance)
        yield step


def _raw_tables(an: Analysed) -> dict[str, pd.DataFrame]:
    return {"iterations": an.iterations, **{name: an.profile.table(name) for name in TABLES},
            "python_tree": an.python_tree}


#: Rows of the tables kept as parsed from which they are written during the analysis: their ingest (~0.6 us a row)
#: then outweighs what the early writer thread adds to it (the file's creation and ADBC's load, a few ms, taken
#: from the analysis' GIL where a forked writer would do them on the other core: the 64-rank job's 1.3k rows stay)
EARLY_ROWS = 20_000


def _kept_as_parsed(profile: Profile) -> dict[str, pd.DataFrame]:
    """The raw tables that the analysis leaves as the parse made them (``KEPT_AS_PARSED``), where they hold
    ``EARLY_ROWS`` or more: their ingest (~0.12 s of the benchmark trace's writer CPU, most of it the allocator
    samples) can run while the analysis keeps one core busy and the other idle, instead of beside the rules and
    the replay."""
    kept = {name: frame for name in KEPT_AS_PARSED if len(frame := profile.table(name))}
    return kept if sum(len(frame) for frame in kept.values()) >= EARLY_ROWS else {}


#: the note of aggregations made with --no-critical-path
NO_CRITICAL_PATH = "not computed (--no-critical-path)"


def build_database(trace_paths: Sequence[str | Path], db_path: str | Path, *, profile_name: str | None = None,
                   iter_start: int | None = None, iter_stop: int | None = None, key_node: str | None = None,
                   force: bool = False, extra_meta: dict | None = None, progress: bool = True,
                   rules_config: str | Path | None = None, workers: int | None = None,
                   scheduler: str | None = None, max_memory: str | int | None = None, reading=None,
                   critical_path: bool = True) -> Path:
    """Import traces (and Nsight Compute CSVs) into a new profile database with one aggregation per rank.

    Folders expand to the traces inside; several files are the ranks of one job, imported by ``workers``
    processes or on the Dask cluster at ``scheduler``. Under ``max_memory``, traces too large to read whole
    are streamed and a job of Kineto traces too large to analyse at once is imported one rank at a time
    (same database).
    Returns the database path. Counter CSVs alone give a database holding only their kernels' counters.
    ``reading`` names the Kineto reader (:class:`dlscope.importers.kineto.Reading`; default: chosen per file).
    """
    db_path = Path(db_path)
    paths = prepare_inputs(trace_paths, db_path, force)
    kinds = {p: sniff(p) for p in paths}
    if "cprofile" in kinds.values():
        return build_cprofile_database(paths, db_path, force=force, profile_name=profile_name,
                                       extra_meta=extra_meta)
    counters = [p for p in paths if kinds[p] == "ncu_csv"]
    traces = [p for p in paths if p not in counters]
    budget = parse_size(max_memory)
    one_at_a_time = bool(budget and len(traces) > 1 and not scheduler and
                         all(kinds[p] == "kineto" for p in traces) and not whole_job_fits(traces, budget))
    if budget:
        check_traces_could_fit([p for p in traces if kinds[p] == "kineto"], budget, one_at_a_time)
    if one_at_a_time:
        assert budget is not None  # one rank at a time only under a memory budget
        who = job_identities(traces)
        if who is not None:
            return _build_rank_by_rank(traces, who, counters, db_path, budget, force=force, progress=progress,
                                       name=profile_name or _default_name(paths), extra_meta=extra_meta,
                                       key_node=key_node, iter_start=iter_start, iter_stop=iter_stop,
                                       rules_config=rules_config, reading=reading, critical_path=critical_path)
    with _progress(progress) as step, _gc_paused(), arrow_from_malloc(), ExitStack() as opened:
        ncu = [(p, read_ncu_csv(p)) for p in counters]
        an, windows, early, handed = None, [], {}, set[str]()
        db: writer.NewDatabase | None = None
        if traces:
            profile = load_profiles_parallel(traces, workers, scheduler, max_memory, step, reading)
            early = {} if budget else _kept_as_parsed(profile)
            if early:  # written by a thread while the analysis runs on one core (a bad range removes the file)
                db = opened.enter_context(writer.atomic_database(db_path, force))
                db.write_raw(early, last=False, fork=False)

            pays: list[bool] = []

            def final(tables: dict[str, pd.DataFrame]) -> None:
                """The tables the analysis has finished part-way through it, handed to the writer thread (after
                its work so far) with their indexes, while the analysis goes on: on the core it leaves idle."""
                nonlocal db
                if not pays:
                    pays.append(not budget and _hand_over_pays(profile))
                if not pays[0]:
                    return
                if db is None:
                    db = opened.enter_context(writer.atomic_database(db_path, force))
                # shallow copies: the writer's own frames, whatever columns the import adds to the tables later
                db.write_raw({name: frame.copy(deep=False) for name, frame in tables.items()},
                             first=not early and not handed, last=False, fork=False, own_indexes=True,
                             op_names=profile.ops[["op_id", "name"]] if "kernels" in tables else None)
                handed.update(tables)
            step("analysing")
            an = analyse(profile, key_node, final)
            for rank in an.ranks:  # a bad --iter-start/--iter-stop fails here, before the database is complete
                # each rank's iterations: known before its aggregation, a replay beside it walks them
                its = resolve_range(an, rank, iter_start, iter_stop)["iteration"]
                windows.append((rank, int(its.min()), int(its.max())))
        step("writing database")
        with (nullcontext(db) if db is not None else writer.atomic_database(db_path, force)) as db, \
                _replay(an if critical_path and not budget else None, windows, beside=True) as annotate_here:
            # the timeline arrays: built by the writer after its indexes, or here first if this process is idle
            timelines = FirstComer(partial(timeline_arrays, an)) if an is not None else None
            if an is not None:
                db.write_raw({name: frame for name, frame in _raw_tables(an).items()
                              if name not in early and name not in handed},
                             first=not early and not handed, timelines=timelines, fork=_replay_beside_pays(an))
                if budget:  # one stage at a time: the writer's ingest beside the rules' frames would add
                    # ~0.7x the tables to the import's peak (bench/README.md, "h27big")
                    db.wait_written()
                    release_free_memory()  # what the writer's Arrow pool and thread arena keep, for the rules
            # while the raw tables and indexes are written in the background: aggregations, rules, ranks; a job's
            # many aggregation rows go in beside the rules, by a writer that starts once the raw writer ends
            # (on the core it leaves; not under a memory budget, estimated for one analysis at a time)
            beside: list = []

            def aggregated(made: list) -> None:
                beside.append(db.write_agg_tables_beside(made, writer.BEFORE_REPLAY))
            # (a replay beside prices each group of ranks' findings as their rules end)
            evaluated = getattr(annotate_here, "add", None) if critical_path else None
            per_rank = aggregate_ranks(an, iter_start, iter_stop, rules_config, workers,
                                       aggregated=None if budget else aggregated, evaluated=evaluated) if an else []
            aggs, findings = [agg for agg, _ in per_rank], [found for _, found in per_rank]
            if budget:  # the rules' frames, freed, handed back (not kept by malloc for the stages after)
                release_free_memory()
            if critical_path and hasattr(annotate_here, "send"):  # a replay beside prices them while we write
                annotate_here.send(aggs, findings)
            # the writer still busy (it has not begun the timeline arrays): they are built here once the replay
            # is in, on a core otherwise idle while the writer ends, and the aggregation tables written after it
            # (unless a writer beside the rules has them); else the aggregation tables go in while the per-rank
            # figures are made and the replay ends (the figures only read ``aggs``). (Under a memory budget the
            # arrays stay with the writer: the import is estimated for one analysis at a time.)
            here = timelines is not None and not budget and timelines.take()
            written = next((w for w in beside if w is not None), None) or (
                None if here else db.write_agg_tables(aggs, writer.BEFORE_REPLAY, beside=not budget))
            figures = rank_figures(an, aggs) if an is not None else None  # (the replay's figures are not read)
            sources = an.profile.meta.get("sources", [an.profile.meta]) if an else []
            facts = {"iteration_methods": an.iteration_methods if an else {},
                     "key_node_candidates": an.key_node_candidates if an else {}}
            if an is not None and critical_path:
                step("replaying the critical path")
                if budget:  # one stage at a time: the replay's columns copied out, the analysed tables let go
                    job = from_analysed(an, copy=True)
                    an = timelines = None
                    del profile
                    gc.collect()
                    release_free_memory()
                    annotate(lambda: job, aggs, findings)
                    del job
                else:
                    annotate_here(aggs, findings)
            elif an is not None:
                skip(aggs, findings, NO_CRITICAL_PATH)
            built_here = timelines.work() if here and timelines is not None else {}
            if figures is not None:  # many collectives: through ADBC, before the file is opened to sqlite3
                figures = ingest_collectives(db, figures)
            _write_results(db.connect(), sources, profile_name or _default_name(paths),
                           {**(extra_meta or {}), "key_node": key_node or "", **facts},
                           ncu, aggs, findings, figures, built_here, written)
    return db_path


#: A third process pays where the importing process's per-rank work (aggregation, rules and the replay's walks:
#: ~13 + 6 ms a rank) outweighs what it takes from the forked writer, the tail of an import of large ranks
#: (~0.3 s per million rows on two cores). Measured 2026-11-27 (bench/README.md, "The replay beside only where
#: it pays"): the 64-rank job (3.3k rows a rank) 3.10 -> 2.99 s beside; the benchmark trace (one rank, 1.08M
#: rows) 4.18 -> 4.52 s beside.
BESIDE_SECONDS_PER_RANK = 0.019
BESIDE_SECONDS_PER_ROW = 0.28e-6


def _replay_beside_pays(an: Analysed) -> bool:
    """Also whether the raw tables' writer is a forked child rather than a thread: where the rows outweigh the
    ranks, the importing process rewrites (the rules, the replay) pages a forked writer keeps a copy of for most
    of its run (~45 MiB of the benchmark trace's peak), while the writer's work is ADBC's, run without the GIL;
    where the ranks outweigh the rows, the per-rank Python work would hold the GIL the writer's steps wait for."""
    return _ranks_outweigh_rows(an.profile, len(an.ranks))


def _ranks_outweigh_rows(profile: Profile, ranks: int) -> bool:
    rows = sum(len(profile.table(name)) for name in Analysed.RAW)
    return ranks * BESIDE_SECONDS_PER_RANK >= rows * BESIDE_SECONDS_PER_ROW


def _hand_over_pays(profile: Profile) -> bool:
    """The tables final part-way through the analysis (``FINAL_BEFORE_OPS``) are written then where they hold
    ``EARLY_ROWS`` or more and the writer after the analysis is a thread that can follow theirs (a forked one
    would wait for them)."""
    rows = sum(len(profile.table(name)) for name in FINAL_BEFORE_OPS)
    return rows >= EARLY_ROWS and not _ranks_outweigh_rows(profile, len(profile_ranks(profile)))


@contextmanager
def _replay(an: Analysed | None, windows: list[tuple[int, int, int]], beside: bool) -> Iterator:
    """``annotate(aggs, findings)`` of the import: the graph built and replayed in a forked child while the
    aggregations and rules run here, where a second process pays and no memory budget is set (a budget is
    estimated for one analysis at a time); else :func:`annotate`, here, when called."""
    if an is None or not beside or not fork_pays() or not _replay_beside_pays(an):
        yield lambda aggs, findings: annotate(lambda: from_analysed(an), aggs, findings)
        return
    with annotated_beside(lambda: from_analysed(an), windows) as annotate_here:
        yield annotate_here


def build_cprofile_database(paths: list[Path], db_path: Path, *, force: bool = False,
                            profile_name: str | None = None, extra_meta: dict | None = None) -> Path:
    """A database of one cProfile output: its call tree (``python_tree``) and its source, nothing timed."""
    from ..importers.cprofile import load_cprofile

    if len(paths) != 1:
        raise DlscopeError(f"{paths[0]}: a cProfile output is imported on its own (got {len(paths)} files)")
    tree, source = load_cprofile(paths[0])
    with writer.atomic_database(db_path, force) as db:
        db.write_raw({"python_tree": tree})
        conn = db.connect()
        writer.write_sources(conn, [source])
        writer.write_meta(conn, profile_name or _default_name(paths),
                          {**(extra_meta or {}), "source_format": "cprofile"}, None)
    return db_path


def timeline_arrays(an: Analysed, ranks: list[int] | None = None) -> dict[int, dict[str, bytes]]:
    """Each rank's Timeline arrays (``analyze.timeline``) from the tables written as the raw tables, for the
    viewer to read a rank in milliseconds."""
    matrices = matrices_by_rank(_raw_tables(an), an.ranks if ranks is None else ranks)
    return {rank: stored_arrays(*of_rank) for rank, of_rank in matrices.items()}


def _write_results(conn, sources: list[dict], name: str, meta: dict, ncu: list, aggs: list, findings: list,
                   figures, timelines: dict[int, dict[str, bytes]],
                   written: Callable[[], tuple[list[int], dict[str, int | None]]] | None = None) -> None:
    """Everything but the raw tables: sources, meta, counters, aggregations, findings, the job's figures, the
    timeline's arrays. ``written``: the agg_ids reserved and the aggregation tables written already."""
    if sources:
        writer.write_sources(conn, sources)
    writer.write_meta(conn, name, meta, job_facts(sources, (meta.get("capture") or {}).get("system")))
    for path, frame in ncu:
        write_ncu_kernels(conn, frame, source=str(path))
    agg_ids = writer.write_aggregations(conn, aggs, *(written() if written else (None, None)))
    for agg_id, found in zip(agg_ids, findings):
        write_findings(conn, agg_id, found)
    if figures is not None:
        write_distributed(conn, None, aggs, agg_ids, figures)
    writer.write_timeline_arrays(conn, timelines)


def _build_rank_by_rank(traces: list[Path], who: list, counters: list[Path], db_path: Path, budget: int, *,
                        force: bool, progress: bool, name: str, extra_meta: dict | None, key_node: str | None,
                        iter_start: int | None, iter_stop: int | None, rules_config, reading=None,
                        critical_path: bool = True) -> Path:
    """:func:`build_database` of a job one rank at a time (see :mod:`.distributed.rank_by_rank`)."""
    offsets, iterations, methods, candidates, sources = IdOffsets(), [], {}, {}, []
    per_rank, parts, collective_rows = [], [], []
    timelines: dict[int, dict[str, bytes]] = {}
    with _progress(progress) as step, _gc_paused(), arrow_from_malloc(), writer.atomic_database(db_path, force) as db:
        ncu = [(p, read_ncu_csv(p)) for p in counters]
        sizes = [file_size(p) for p in traces]
        step(f"reading {len(traces)} file(s), one rank at a time", advance=0, total=sum(sizes) + 1)
        files = FileProgress(step, len(traces))
        for i, (path, identity, size) in enumerate(zip(traces, who, sizes)):
            profile = import_with_progress(path, size, budget, files, reading)
            apply_identity(profile, identity_after_import(identity, profile.meta, path), path)
            check_analysis_fits(profile, budget, [path])
            an = analyse(profile, key_node)
            resolve_range(an, identity.rank, iter_start, iter_stop)
            offsets.shift(an)
            db.write_raw({k: v for k, v in _raw_tables(an).items() if k != "iterations"}, first=i == 0, last=False)
            (agg, found), = aggregate_ranks(an, iter_start, iter_stop, rules_config, workers=1)
            per_rank.append((agg, found))
            parts.append(rank_parts(an, agg))
            collective_rows.append(job_collective_rows(an))
            iterations.append(an.iterations)
            methods.update(an.iteration_methods)
            candidates.update(an.key_node_candidates)
            sources.append(profile.meta)
            timelines.update(timeline_arrays(an, [identity.rank]))
            del an, profile
        step("writing database")
        db.write_raw({"iterations": by_rank(iterations)}, first=False, last=True)
        order = sorted(range(len(per_rank)), key=lambda j: per_rank[j][0].row["rank"])
        aggs = [per_rank[j][0] for j in order]
        figures = job_figures([parts[j] for j in order], pd.concat(collective_rows, ignore_index=True),
                              world_sizes(sources))
        conn = db.connect()  # the whole job's raw tables, written: its graph links the ranks as a whole import's
        if critical_path:
            annotate(lambda: replace(from_database(conn), world_sizes=world_sizes_of(sources),
                                     iteration_methods=dict(methods)), aggs, [per_rank[j][1] for j in order])
        else:
            skip(aggs, [per_rank[j][1] for j in order], NO_CRITICAL_PATH)
        _write_results(conn, sources, name, {**(extra_meta or {}), "key_node": key_node or "",
                                             "iteration_methods": dict(sorted(methods.items())),
                                             "key_node_candidates": dict(sorted(candidates.items()))},
                       ncu, aggs, [per_rank[j][1] for j in order], figures, timelines)
    return db_path


def _default_name(paths: list[Path]) -> str:
    name = paths[0].name
    for suffix in (".gz", ".json", ".sqlite", ".pt.trace"):
        name = name.removesuffix(suffix)
    return name if len(paths) == 1 else f"{name} (+{len(paths) - 1} files)"


def profile_from_database(conn) -> Profile:
    """Rebuild the imported model from a database's raw tables (for re-aggregation without re-import)."""
    profile = Profile()
    for name in TABLES:
        if name in ("comm_args", "python_frames") and not _has_table(conn, name):  # written before it was stored
            continue
        frame = reader.read_table(conn, name)
        cols = list(TABLES[name])
        frame = frame.reindex(columns=cols).copy()  # a column added since (ops.stack) reads as missing
        for col, dtype in TABLES[name].items():
            frame[col] = frame[col].fillna(MISSING[dtype]).astype(dtype)
        setattr(profile, name, frame)
    sources = [json.loads(r[0] or "{}") for r in conn.execute("SELECT meta_json FROM sources ORDER BY source_id")]
    profile.meta = {"sources": sources} if len(sources) != 1 else sources[0]
    return profile


def _has_table(conn, name: str) -> bool:
    return conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)).fetchone() is not None


def _stored_collectives(conn) -> pd.DataFrame | None:
    """The job's collectives as the import found them (their sizes and lags are recomputed with the figures)."""
    if not _has_table(conn, "collectives"):
        return None
    frame = reader.read_table(conn, "collectives")
    return frame[["rank", "source", "name", "device", "stream", "start", "end", "iteration", "collective",
                  "in_nelems", "out_nelems", "group_size", "dtype", "pg_name"]]


def aggregate(db_path: str | Path, iter_start: int | None = None, iter_stop: int | None = None,
              key_node: str | None = None, rank: int | None = None,
              rules_config: str | Path | None = None, critical_path: bool = True) -> list[int]:
    """Add aggregations to an existing database, as an import computes them (aggregation, expert findings,
    per-rank figures), all in one transaction; returns the new agg_ids.

    A different key node re-splits the iterations: the ``iterations`` table and the raw tables'
    ``iteration`` columns follow the newest split, earlier aggregations keep their own summaries.
    """
    conn = reader.connect(db_path, readonly=False)
    try:
        reader.check_timed(conn, db_path, "aggregate")
        an = analyse(profile_from_database(conn), key_node)
        if rank is not None and rank not in an.ranks:
            raise DlscopeError(f"no rank {rank} in the database (ranks: {', '.join(map(str, an.ranks))})")
        ranks = an.ranks if rank is None else [rank]
        for r in ranks:  # a bad --iter-start/--iter-stop fails here, before anything is written
            resolve_range(an, r, iter_start, iter_stop)
        per_rank = aggregate_ranks(an, iter_start, iter_stop, rules_config, workers=1, ranks=ranks)
        aggs = [agg for agg, _ in per_rank]
        if critical_path:
            annotate(lambda: from_analysed(an), aggs, [found for _, found in per_rank])
        else:
            skip(aggs, [found for _, found in per_rank], NO_CRITICAL_PATH)
        # the collectives as an import finds them (comm_args is stored); a database written before comm_args
        # was stored keeps the collectives its import found
        stored = None if _has_table(conn, "comm_args") else _stored_collectives(conn)
        figures = job_figures([rank_parts(an, agg) for agg in aggs],
                              stored if stored is not None else job_collective_rows(an),
                              world_sizes(an.profile.meta.get("sources", [an.profile.meta])))
        with conn:
            if key_node:
                _store_split(conn, an)
            writer.add_aggregation_columns(conn)
            ids = writer.write_aggregations(conn, aggs)
            for agg_id, (_, found) in zip(ids, per_rank):
                write_findings(conn, agg_id, found)
            renew = stored is None and _has_table(conn, "collectives")
            if renew:  # the collectives follow the newest split, like the raw tables' iteration columns
                conn.execute("DELETE FROM collectives")
            write_distributed(conn, None, aggs, ids, figures if renew else (figures[0], figures[1].iloc[0:0]))
        return ids
    finally:
        conn.close()


def _store_split(conn, an: Analysed) -> None:
    """The newest iteration split: the iterations table and every raw table's ``iteration`` column."""
    conn.execute("DELETE FROM iterations")
    writer.insert_frame(conn, "iterations", an.iterations)
    for name in ("ops", "ranges", "api_calls", "kernels", "memops", "syncs"):
        table, id_col, frame = writer.stored_name(name), ID_COLUMNS[name], an.profile.table(name)
        conn.execute("CREATE TEMP TABLE split (id INTEGER PRIMARY KEY, iteration INTEGER)")
        conn.executemany("INSERT INTO split VALUES (?, ?)",
                         zip(frame[id_col].tolist(), frame["iteration"].tolist()))
        conn.execute(f"UPDATE {table} SET iteration = (SELECT s.iteration FROM split s WHERE s.id = {id_col})")
        conn.execute("DROP TABLE split")
