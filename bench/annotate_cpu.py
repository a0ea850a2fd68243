"""CPU seconds of ``whatif.stored.annotate`` (what storing the critical path adds to an import) and of its
parts, on the tables an import hands it: best and median of N runs in one process (CPU time, not wall, so
that other load on a shared machine inflates it less).

    PYTHONPATH=TREE/src python bench/annotate_cpu.py TRACE_OR_FOLDER [--repeat 5]

Run it once per tree (before, after) to compare: the capture is the tree's own import.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import tempfile
import time
from pathlib import Path

import dlscope.pipeline.build as pipeline
import dlscope.whatif.stored as stored
from dlscope.whatif.graph import build


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("input", type=Path)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    handed: list = []
    real = pipeline.annotate
    pipeline.annotate = lambda *a: handed.append(a)
    pipeline.fork_pays = lambda: False  # annotate called here (not replayed in a child beside the aggregation)
    with tempfile.TemporaryDirectory() as tmp:
        pipeline.build_database([args.input], Path(tmp) / "x.sqlite", progress=False)
    pipeline.annotate = real
    job_of, aggs, findings = handed[0]
    job = job_of()
    runs, builds = [], []
    for _ in range(args.repeat):
        a, f = copy.deepcopy(aggs), copy.deepcopy(findings)
        t = time.process_time()
        stored.annotate(lambda: job, a, f)
        runs.append(time.process_time() - t)
        t = time.process_time()
        g = build(job)
        builds.append(time.process_time() - t)
    print(f"{args.input.name}: {g.n:,} vertices, {len(aggs)} aggregations; CPU s, best / median of {args.repeat}: "
          f"annotate {min(runs):.3f} / {statistics.median(runs):.3f}, "
          f"graph build {min(builds):.3f} / {statistics.median(builds):.3f}")


if __name__ == "__main__":
    main()
