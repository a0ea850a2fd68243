"""The import's last steps, each with its start (seconds from process start), wall and CPU seconds of the thread
that ran it (``time.thread_time``): the timeline arrays, the collectives' ADBC ingest, ``_write_results`` and its
parts, the write-out begun beside them (``sync_file_range``, on its own thread) and the rename (``os.replace``;
with ``--force`` over an earlier database). Works on trees before these steps existed (their lines are missing).

    PYTHONPATH=TREE/src python bench/results_cpu.py import TRACE -o X.sqlite --force -q
"""

from __future__ import annotations

import contextlib
import os
import sys
import time

T0 = time.perf_counter()

import dlscope.cli  # noqa: E402 - timed from before the imports
import dlscope.distributed.store as distributed_store  # noqa: E402
from dlscope.pipeline import build  # noqa: E402
from dlscope.store import writer  # noqa: E402

ROWS: list[tuple[str, float, float, float]] = []


def timed(name: str, fn):
    def run(*a, **k):
        wall, cpu = time.perf_counter(), time.thread_time()
        try:
            return fn(*a, **k)
        finally:
            ROWS.append((name, wall - T0, time.perf_counter() - wall, time.thread_time() - cpu))
    return run


def main() -> None:
    for name in ("rank_figures", "timeline_arrays", "ingest_collectives", "_write_results", "write_findings",
                 "write_distributed"):
        if hasattr(build, name):
            setattr(build, name, timed(name, getattr(build, name)))
    for name in ("write_sources", "write_meta", "write_aggregations", "write_timeline_arrays"):
        setattr(writer, name, timed(name, getattr(writer, name)))
    distributed_store.insert_frame = timed("insert_frame (distributed)", distributed_store.insert_frame)
    writer.NewDatabase.connect = timed("connect (waits for the writer)", writer.NewDatabase.connect)
    if hasattr(writer, "_sync_file_range"):
        found = writer._sync_file_range

        def sync_file_range():
            call = found()
            return None if call is None else timed("sync_file_range (thread)", call)
        writer._sync_file_range = sync_file_range
    os.replace = timed("os.replace", os.replace)
    atomic = writer.atomic_database

    @contextlib.contextmanager
    def timed_atomic(*a, **k):
        with atomic(*a, **k) as db:
            yield db
            wall, cpu = time.perf_counter(), time.thread_time()
        ROWS.append(("end (commit, close, rename)", wall - T0, time.perf_counter() - wall, time.thread_time() - cpu))

    build.writer.atomic_database = timed_atomic
    try:
        dlscope.cli.main(sys.argv[1:])
    finally:
        for name, at, wall, cpu in ROWS:
            print(f"{name:32s} at {at:7.3f} s  wall {wall * 1e3:7.1f} ms  cpu {cpu * 1e3:7.1f} ms")
        print(f"{'end':32s} at {time.perf_counter() - T0:7.3f} s")


if __name__ == "__main__":
    main()
