"""CPU seconds (``time.process_time``) of the analysis stage alone, for the tree on PYTHONPATH: the traces are
parsed once (serially), then ``analyse`` runs on a fresh copy of the parse each time; prints each run and the
minimum. Run it with one tree, then the other.

    PYTHONPATH=TREE/src python bench/analysis_cpu.py bench/out/job64 [--repeat 5] [--key-node NAME]
        [--without-profiler-steps]

``--without-profiler-steps`` drops the ProfilerStep#N ranges first, as if the job had been captured without a
profiler schedule: every rank then goes through the later iteration methods.
"""

from __future__ import annotations

import argparse
import pickle
import time
from pathlib import Path

from dlscope.analyze.analysis import analyse
from dlscope.analyze.categories import matches
from dlscope.pipeline.executors import load_profiles_parallel


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("traces", help="a trace file or a folder of one file per rank")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--key-node", default=None)
    parser.add_argument("--without-profiler-steps", action="store_true")
    args = parser.parse_args()
    source = Path(args.traces)
    paths = sorted(str(p) for p in source.iterdir() if p.is_file()) if source.is_dir() else [str(source)]
    parsed = pickle.dumps(load_profiles_parallel(paths, 1))
    runs = []
    for _ in range(args.repeat):
        profile = pickle.loads(parsed)
        if args.without_profiler_steps:
            profile.ranges = profile.ranges[~matches(profile.ranges["name"], "profiler_step")].reset_index(drop=True)
        start = time.process_time()
        analyse(profile, args.key_node)
        runs.append(time.process_time() - start)
    print("analyse CPU s:", ", ".join(f"{r:.3f}" for r in runs), f"(min {min(runs):.3f})")


if __name__ == "__main__":
    main()
