"""CPU seconds of a single trace's parse and analysis, for the tree on PYTHONPATH: run it with one tree, then the
other (interleaved), to see what a change to the importer or the analysis moved.

    PYTHONPATH=TREE/src python bench/parse_stages.py TRACE.json [--repeat 3]

Per run: the library imports (first run only), the parse on one process, the parse as ``dlscope import`` runs
it (a large file's second half decoded by a forked child: this process's CPU and the child's, and the wall), and
``analyse``. Prints one JSON line per run and the per-stage minimum (CPU is what the other users of a shared
machine change least).
"""

from __future__ import annotations

import argparse
import json
import resource
import time

started = time.process_time()
from pathlib import Path  # noqa: E402 - the imports are the first stage timed

from dlscope.analyze.analysis import analyse  # noqa: E402
from dlscope.importers.kineto import Reading, load_kineto  # noqa: E402

IMPORTS = time.process_time() - started


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def one_run(path: Path) -> dict[str, float]:
    t = time.process_time()
    load_kineto(path, reading=Reading(processes=1))
    one = time.process_time() - t
    t, wall, child = time.process_time(), time.perf_counter(), _children_cpu()
    profile = load_kineto(path)
    two, two_wall, child = time.process_time() - t, time.perf_counter() - wall, _children_cpu() - child
    t = time.process_time()
    analyse(profile)
    return {"parse, one process": one, "parse, this process": two, "parse, forked child": child,
            "parse wall (two processes)": two_wall, "analysis": time.process_time() - t}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    runs = [one_run(args.trace) for _ in range(args.repeat)]
    for run in runs:
        print(json.dumps({k: round(v, 3) for k, v in run.items()}))
    best = {"imports": IMPORTS, **{k: min(r[k] for r in runs) for k in runs[0]}}
    print("best:", ", ".join(f"{k} {v:.2f} s" for k, v in best.items()))


if __name__ == "__main__":
    main()
