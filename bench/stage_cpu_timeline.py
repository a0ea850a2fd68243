"""Each stage of an import with its start and end (seconds from process start) and its CPU seconds, per process
(the forked writers and the replay child included): which process ends last, and what it was doing. Stages: the
parse halves, the analysis, the per-rank stage, the replay's steps, the raw writer (its timeline arrays), the
aggregation writer (ADBC opened, each table, the replay's column filled), the results.

    PYTHONPATH=TREE/src python bench/stage_cpu_timeline.py import TRACE -o X.sqlite --force -q
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

T0 = time.perf_counter()

import dlscope.cli  # noqa: E402 - timed from before the imports
import dlscope.whatif.stored as stored  # noqa: E402
from dlscope.pipeline import build, executors  # noqa: E402
from dlscope.store import writer  # noqa: E402

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


STAGES = ((build, ("load_profiles_parallel", "analyse", "aggregate_ranks", "rank_figures", "timeline_arrays",
                   "_write_results")),
          (executors, ("_serial", "merge")),
          (writer, ("write_raw_file", "ingest_agg_tables", "_ingest_agg_table", "_fill_path", "index_names")),
          (stored, ("apply",)))


def main() -> None:
    for module, names in STAGES:
        for name in names:
            if hasattr(module, name):  # (a tree before a stage existed)
                setattr(module, name, timed(name, getattr(module, name)))
    for name in ("__init__", "walk_ahead", "plan_ahead", "figures"):
        setattr(stored.Replay, name, timed("Replay." + name, getattr(stored.Replay, name)))
    writer._ArrowIngest.__enter__ = timed("ADBC opened", writer._ArrowIngest.__enter__)
    record("imports", T0, 0.0)
    try:
        dlscope.cli.main(sys.argv[1:])
    finally:
        record("end", T0, 0.0)
        with open(LOG) as f:
            print(f.read())
        os.unlink(LOG)


if __name__ == "__main__":
    main()
