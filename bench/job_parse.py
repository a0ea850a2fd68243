#!/usr/bin/env python3
"""Time the parse stage of a job alone (``load_profiles_parallel``: the files read and joined into one profile),
in this process, with 1 and more workers: wall, the parent's CPU and the workers' CPU; the tree on PYTHONPATH
decides which code runs (before and after a change). Each configuration ``--repeat`` times, interleaved; the
median run's figures.

    PYTHONPATH=TREE/src python bench/job_parse.py bench/out/job64 [--workers 1,2,default] [--repeat 5]

``default``: no --workers, as ``dlscope import`` runs it (a job too small for worker processes may still have
its later half read by a forked child, whose CPU counts as the workers').
"""

import argparse
import gc
import json
import resource
import statistics
import time

from dlscope.pipeline.executors import load_profiles_parallel
from dlscope.pipeline.inputs import expand_inputs


def _cpu() -> tuple[float, float]:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder")
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    paths = expand_inputs([args.folder])
    load_profiles_parallel(paths[:1], workers=1)  # the importers' modules loaded, as in an import
    gc.disable()  # as build_database runs it
    runs: dict[int | None, list[tuple[float, float, float]]] = {
        None if w == "default" else int(w): [] for w in args.workers.split(",")}
    for _ in range(args.repeat):
        for workers, out in runs.items():
            t0, (p0, c0) = time.perf_counter(), _cpu()
            profile = load_profiles_parallel(paths, workers=workers)
            t1, (p1, c1) = time.perf_counter(), _cpu()
            out.append((t1 - t0, p1 - p0, c1 - c0))
            del profile
            gc.collect()
    for workers, out in runs.items():
        mid = sorted(out)[len(out) // 2]
        print(json.dumps({"files": len(paths), "workers": workers, "wall_s": round(mid[0], 3),
                          "parent_cpu_s": round(mid[1], 3), "workers_cpu_s": round(mid[2], 3),
                          "walls": [round(r[0], 3) for r in out],
                          "min_parent_cpu_s": round(min(r[1] for r in out), 3),
                          "median_parent_cpu_s": round(statistics.median(r[1] for r in out), 3)}), flush=True)


if __name__ == "__main__":
    main()
