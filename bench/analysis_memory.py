#!/usr/bin/env python3
"""The analysis stage alone (``analyse``), on a trace parsed before tracking starts: its high-water mark (the
bytes it allocated that are live at its peak: the columns it adds and its transient frames), by the dlscope
line that allocated them (memray, measuring only), over the imported tables' size (``memory_usage(deep=True)``):
issue 21's target 3, "a rank's analysis in <= 1.5x its imported tables". Also the columns the analysis added to
each table, by size.

    PYTHONPATH=TREE/src python bench/analysis_memory.py TRACE [--top 20] [--columns 15]

Run it once per tree (before, after) on the same trace.
"""

from __future__ import annotations

import argparse
import gc
import pickle
import tempfile
from pathlib import Path

from measure import high_water_by_line

from dlscope.analyze.analysis import analyse
from dlscope.model import TABLES
from dlscope.pipeline.executors import load_profiles_parallel

MiB = 2**20


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace", help="a trace file or a folder of one file per rank")
    ap.add_argument("--top", type=int, default=20, help="the allocation sites to list")
    ap.add_argument("--columns", type=int, default=15, help="the largest added columns to list")
    ap.add_argument("--gc", action="store_true", help="the cyclic GC on (the import pauses it: garbage in cycles "
                    "stays until the import ends, and counts here as it does there)")
    args = ap.parse_args()
    source = Path(args.trace)
    paths = sorted(str(p) for p in source.iterdir() if p.is_file()) if source.is_dir() else [str(source)]
    # parsed, then rebuilt from its pickle: the tables are laid out as a fresh process would hold them
    profile = pickle.loads(pickle.dumps(load_profiles_parallel(paths, 1)))
    before = {t: set(profile.table(t).columns) for t in TABLES}
    tables = sum(int(profile.table(t).memory_usage(deep=True, index=False).sum()) for t in TABLES)
    with tempfile.TemporaryDirectory() as tmp:
        if not args.gc:
            gc.disable()
        an, by_line, cpu = high_water_by_line(lambda: analyse(profile), Path(tmp) / "analyse.bin")
        gc.enable()
    peak = sum(by_line.values())
    added = []
    for t in TABLES:
        frame = an.profile.table(t)
        sizes = frame.memory_usage(deep=True, index=False)
        added += [(int(sizes[c]), f"{t}.{c}", str(frame[c].dtype)) for c in frame.columns if c not in before[t]]
    print(f"{args.trace}: imported tables {tables / MiB:,.1f} MiB; analyse CPU {cpu:.2f} s (under memray)")
    print(f"analysis high-water {peak / MiB:,.1f} MiB; analysis peak / tables {peak / tables:.2f}")
    for line, size in by_line.most_common(args.top):
        print(f"  {size / MiB:8.1f}  {line}")
    print(f"columns the analysis added: {sum(a[0] for a in added) / MiB:,.1f} MiB")
    for size, name, dtype in sorted(added, reverse=True)[:args.columns]:
        print(f"  {size / MiB:8.1f}  {name} ({dtype})")


if __name__ == "__main__":
    main()
