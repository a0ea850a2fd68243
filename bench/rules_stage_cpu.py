#!/usr/bin/env python3
"""CPU seconds (``time.process_time``) of the aggregation and rules stage alone (``aggregate_ranks``, serial: the
rules' frames made, then every rule), on a trace parsed and analysed before timing; the best of ``--repeat``
runs, each on a fresh analysis. Alternate trees to compare them (the machine's load moves both alike).

    PYTHONPATH=TREE/src python bench/rules_stage_cpu.py TRACE [--repeat 3]
"""

from __future__ import annotations

import argparse
import gc
import time

from dlscope.analyze.analysis import analyse
from dlscope.pipeline.executors import load_profiles_parallel
from dlscope.pipeline.per_rank import aggregate_ranks


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    best = []
    for _ in range(args.repeat):
        an = analyse(load_profiles_parallel([args.trace], 1))
        gc.collect()
        gc.disable()  # as the import: the cyclic GC paused
        t = time.process_time()
        aggregate_ranks(an, None, None, None, 1)
        best.append(time.process_time() - t)
        gc.enable()
        del an
    print(f"{args.trace}: aggregate_ranks CPU best {min(best):.3f} s of {', '.join(f'{b:.3f}' for b in best)}")


if __name__ == "__main__":
    main()
