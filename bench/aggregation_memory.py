#!/usr/bin/env python3
"""The aggregation and rules stage alone (``aggregate_ranks``, serial, as an import of one large rank runs it),
on a trace parsed and analysed before tracking starts: the bytes it allocated that are live at its high-water
mark, by the dlscope line that allocated them (memray, measuring only), over the imported tables' size.

    PYTHONPATH=TREE/src python bench/aggregation_memory.py TRACE [--top 30]

Run it once per tree (before, after) on the same trace.
"""

from __future__ import annotations

import argparse
import gc
import tempfile
from pathlib import Path

from measure import high_water_by_line

from dlscope.analyze.analysis import analyse
from dlscope.model import TABLES
from dlscope.pipeline.executors import load_profiles_parallel
from dlscope.pipeline.per_rank import aggregate_ranks

MiB = 2**20


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--top", type=int, default=30, help="the allocation sites to list")
    args = ap.parse_args()
    profile = load_profiles_parallel([args.trace], 1)
    tables = sum(int(profile.table(t).memory_usage(deep=True, index=False).sum()) for t in TABLES)
    gc.disable()  # as the import: the cyclic GC paused
    an = analyse(profile)
    with tempfile.TemporaryDirectory() as tmp:
        _, by_line, cpu = high_water_by_line(lambda: aggregate_ranks(an, None, None, None, 1), Path(tmp) / "a.bin")
    peak = sum(by_line.values())
    print(f"{args.trace}: imported tables {tables / MiB:,.1f} MiB; aggregate_ranks high-water {peak / MiB:,.1f} MiB "
          f"= {peak / tables:.2f}x the tables; CPU {cpu:.1f} s (under memray)")
    for line, size in by_line.most_common(args.top):
        print(f"  {size / MiB:8.1f}  {line}")


if __name__ == "__main__":
    main()
