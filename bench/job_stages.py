"""CPU seconds (``time.process_time``, this process only) of each stage of a serial job import, for the tree on
PYTHONPATH: run it with one tree, then the other, to see which stage a change moved.

    PYTHONPATH=TREE/src python bench/job_stages.py FOLDER [--repeat 3]     # e.g. bench/out/job64

The stages are timed by wrapping the functions the pipeline calls (``--workers 1``: every stage runs here; the
raw-table writer is a forked process and not counted). Prints one JSON line per run and the per-stage minimum.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from dlscope.pipeline import build, per_rank

STAGES = [  # (module, attribute, stage)
    (build, "load_profiles_parallel", "parse"),
    (build, "analyse", "analysis"),
    (per_rank, "JobAggregation", "aggregation, job-wide"),
    (per_rank, "job_model_flops", "MFU, job-wide"),
    (per_rank, "evaluate", "rules, per rank"),
    (per_rank, "add_mfu", "MFU, per rank"),
    (build, "annotate", "critical path"),
    (build, "rank_figures", "per-rank figures"),
    (build, "_write_results", "writing results"),
]


def timed(spent: Counter, stage: str, func):
    def run(*args, **kwargs):
        start = time.process_time()
        try:
            return func(*args, **kwargs)
        finally:
            spent[stage] += time.process_time() - start
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    spent: Counter = Counter()
    per_rank.JobAggregation.aggregate = timed(spent, "aggregation, per rank", per_rank.JobAggregation.aggregate)
    if hasattr(per_rank, "JobMFU"):  # MFU of all ranks at once, then a look-up per rank
        per_rank.JobMFU.__init__ = timed(spent, "MFU, job-wide", per_rank.JobMFU.__init__)
        per_rank.JobMFU.add = timed(spent, "MFU, per rank", per_rank.JobMFU.add)
    if hasattr(per_rank, "RuleFrames"):
        per_rank.RuleFrames.make_all = timed(spent, "rules' frames, job-wide", per_rank.RuleFrames.make_all)
    build.fork_pays = lambda: False  # the critical path replayed here, as a stage of its own (not in a child)
    for module, name, stage in STAGES:
        if hasattr(module, name):
            setattr(module, name, timed(spent, stage, getattr(module, name)))
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeat):
            spent.clear()
            start = time.process_time()
            build.build_database([args.folder], Path(tmp) / f"job{i}.sqlite", progress=False, workers=1)
            total = time.process_time() - start
            row = {**{k: round(v, 3) for k, v in spent.items()}, "build_database": round(total, 3)}
            runs.append(row)
            print(json.dumps(row), file=sys.stderr)
    best = {k: min(r.get(k, 0.0) for r in runs) for k in runs[0]}
    print(json.dumps(best))


if __name__ == "__main__":
    main()
