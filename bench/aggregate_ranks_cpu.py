"""CPU seconds (``time.process_time``) of a job's per-rank stage, for the tree on PYTHONPATH: the job is parsed
and analysed once, then ``aggregate_ranks`` (job-wide aggregation and MFU, the rules' frames, each rank's
aggregation and rules) and ``rank_figures`` run ``--repeat`` times, each from the analysed tables as an import
has them (the split of the tables by rank undone before each run). Prints the minimum and the median of each.
Alternate two trees to compare them on a busy machine.

    PYTHONPATH=TREE/src python bench/aggregate_ranks_cpu.py FOLDER [--repeat 10]     # e.g. bench/out/job64
"""

from __future__ import annotations

import argparse
import gc
import time

from dlscope.distributed.figures import rank_figures
from dlscope.pipeline import build, per_rank
from dlscope.pipeline.inputs import expand_inputs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder")
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    profile = build.load_profiles_parallel(expand_inputs([args.folder]), 1)
    an = build.analyse(profile, None)
    gc.disable()  # as an import runs them (build_database pauses the collector)
    ranks_s, figures_s = [], []
    for _ in range(args.repeat):
        an._by_rank = None  # the tables split by rank (or their order) made again, as in an import
        start = time.process_time()
        aggs = [agg for agg, _ in per_rank.aggregate_ranks(an, None, None, None, workers=1)]
        ranks_s.append(time.process_time() - start)
        start = time.process_time()
        rank_figures(an, aggs)
        figures_s.append(time.process_time() - start)
    for name, spent in (("aggregate_ranks", ranks_s), ("rank_figures", figures_s)):
        spent.sort()
        print(f"{name}: min {spent[0]:.3f} s CPU, median {spent[len(spent) // 2]:.3f} s ({args.repeat} runs)")


if __name__ == "__main__":
    main()
