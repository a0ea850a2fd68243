"""Each stage of an import with its start and end (seconds from process start) and its CPU seconds, per process
(the forked writers and the replay child included): which process ends last, and what it was doing. Stages: the
parse halves, the analysis, the per-rank stage, the replay's steps, the raw writer (its timeline arrays), the
aggregation writer (ADBC opened, each table, the replay's column filled), the results; a forked child's hand-over
(its block join, its pickle, the parent's unpickle).

    PYTHONPATH=TREE/src python bench/stage_cpu_timeline.py import TRACE -o X.sqlite --force -q
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

T0 = time.perf_counter()

import contextlib  # noqa: E402
import importlib  # noqa: E402

import dlscope.cli  # noqa: E402 - timed from before the imports

try:  # a tree that forks a job's later files as the command starts: the heavy modules load after that fork
    from dlscope.pipeline import head_start
except ImportError:
    head_start = None

LOG = os.path.join(tempfile.gettempdir(), f"stage_cpu_timeline.{os.getpid()}.log")


def record(name: str, start: float, cpu: float) -> None:
    with open(LOG, "a") as f:  # the forked children append their own lines
        f.write(f"{os.getpid():>7} {name:34s} {start - T0:6.3f} {time.perf_counter() - T0:6.3f} s  "
                f"cpu {time.process_time() - cpu:6.3f} s\n")


def timed(name: str, fn):
    def run(*a, **k):
        start, cpu = time.perf_counter(), time.process_time()
        try:
            return fn(*a, **k)
        finally:
            record(name, start, cpu)
    return run


STAGES = (("dlscope.pipeline.build", ("load_profiles_parallel", "analyse", "aggregate_ranks", "rank_figures",
                                       "timeline_arrays", "_write_results")),
          ("dlscope.pipeline.executors", ("_serial", "merge")),
          ("dlscope.store.writer", ("write_raw_file", "ingest_agg_tables", "_ingest_agg_table", "_fill_path",
                                    "index_names")),
          ("dlscope.whatif.stored", ("apply",)))


def patch_stages() -> None:
    """Time the stages (this imports the pipeline, as the import command does)."""
    for module_name, names in STAGES:
        module = importlib.import_module(module_name)
        for name in names:
            if hasattr(module, name):  # (a tree before a stage existed)
                setattr(module, name, timed(name, getattr(module, name)))
    stored = importlib.import_module("dlscope.whatif.stored")
    writer = importlib.import_module("dlscope.store.writer")
    for name in ("__init__", "walk_ahead", "plan_ahead", "figures"):
        setattr(stored.Replay, name, timed("Replay." + name, getattr(stored.Replay, name)))
    writer._ArrowIngest.__enter__ = timed("ADBC opened", writer._ArrowIngest.__enter__)
    record("imports", T0, 0.0)


def patch_hand_over() -> None:
    """Time a forked child's hand-over: its block join (a tree with :func:`dlscope.model.file_block`), the
    pickling of its result, and the parent's unpickling (each ForkedCall's: the head start's is the parent's
    first); the pipe is the gap between the child's pickle and the parent's unpickle."""
    import pickle
    import types

    from dlscope import model, processes

    if hasattr(model, "file_block"):
        model.file_block = timed("child: joins its block", model.file_block)
    processes._pickled = timed("child: pickles its result", processes._pickled)
    if hasattr(processes, "_write_all"):  # a tree that writes the buffers out of band (h30parse)
        processes._write_all = timed("child: writes its result", processes._write_all)
    processes.pickle = types.SimpleNamespace(dumps=pickle.dumps, HIGHEST_PROTOCOL=pickle.HIGHEST_PROTOCOL,
                                             loads=timed("unpickles a child's result", pickle.loads))


def main() -> None:
    patch_hand_over()
    if head_start is None:
        patch_stages()
    else:  # the child forked first (its reading timed), then the pipeline imported and timed
        head_start._read = timed("head start: child reads", head_start._read)
        if hasattr(head_start, "_decode_later"):  # one trace's later pieces, decoded by a child forked as it starts
            head_start._decode_later = timed("head start: child decodes", head_start._decode_later)
        started = head_start.started

        @contextlib.contextmanager
        def then_patched(*a, **k):
            with started(*a, **k):
                patch_stages()
                yield
        head_start.started = then_patched
    try:
        dlscope.cli.main(sys.argv[1:])
    finally:
        record("end", T0, 0.0)
        with open(LOG) as f:
            print(f.read())
        os.unlink(LOG)


if __name__ == "__main__":
    main()
