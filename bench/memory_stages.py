#!/usr/bin/env python3
"""Where an import's memory goes after the parse: the imported tables' size per table and per column
(``memory_usage(deep=True)``), then the peak summed PSS (this process and its forked helpers: the database
writer, rank workers) during each stage of ``build_database``, sampled every 20 ms.

    PYTHONPATH=TREE/src python bench/memory_stages.py TRACE.json [--columns 15] [--max-memory 8GB]

The stage names are the functions of ``dlscope.pipeline.build`` that run in turn (each wrapped here);
``post-parse peak / tables`` is the figure ``pipeline.budget.ANALYSIS_PEAK_FACTOR`` estimates.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from pathlib import Path

import psutil
from measure import pss_bytes

from dlscope.model import TABLES
from dlscope.pipeline import build

MiB = 2**20


class Sampler(threading.Thread):
    """The peak summed PSS of this process and its children, per stage label."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.stage, self.peaks, self.stop = "start", {}, False
        self.split: dict[str, tuple[int, int]] = {}  # per stage, at its peak: (this process, its children)
        self.own: dict[str, int] = {}  # per stage: the peak PSS of this process alone, and of the largest child
        self.child: dict[str, int] = {}
        self.me = psutil.Process()

    def run(self) -> None:
        while not self.stop:
            try:
                kids = [p.pid for p in self.me.children(recursive=True)]
            except psutil.Error:
                kids = []
            mine = pss_bytes(os.getpid())
            theirs = [pss_bytes(k) for k in kids]
            total = mine + sum(theirs)
            self.own[self.stage] = max(self.own.get(self.stage, 0), mine)
            self.child[self.stage] = max([self.child.get(self.stage, 0), *theirs])
            if total > self.peaks.get(self.stage, 0):
                self.peaks[self.stage], self.split[self.stage] = total, (mine, total - mine)
            time.sleep(0.02)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--columns", type=int, default=15, help="the largest columns to list")
    ap.add_argument("--max-memory")
    args = ap.parse_args()
    sampler = Sampler()
    sizes: dict[str, dict[str, int]] = {}

    def staged(name, fn, before=None):
        def wrapped(*a, **k):
            if before:
                before(*a, **k)
            sampler.stage = name
            return fn(*a, **k)
        return wrapped

    def measure_tables(profile, *_a, **_k):
        for t in TABLES:
            frame = profile.table(t)
            sizes[t] = {c: int(v) for c, v in frame.memory_usage(deep=True, index=False).items()}

    build.load_profiles_parallel = staged("parse", build.load_profiles_parallel)
    build.analyse = staged("analyse", build.analyse, measure_tables)
    build.aggregate_ranks = staged("aggregate + rules (writer running)", build.aggregate_ranks)
    build.annotate = staged("critical path", build.annotate)
    build.rank_figures = staged("rank figures", build.rank_figures)
    build._write_results = staged("write results", build._write_results)
    sampler.start()
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        build.build_database([args.trace], Path(tmp) / "m.sqlite", progress=False, max_memory=args.max_memory)
        wall = time.perf_counter() - t0
        sampler.stage = "done"
        time.sleep(0.1)
    sampler.stop = True
    total = sum(sum(cols.values()) for cols in sizes.values())
    print(f"{args.trace}: imported tables {total / MiB:,.1f} MiB, import {wall:.1f} s")
    for t, cols in sorted(sizes.items(), key=lambda kv: -sum(kv[1].values())):
        if sum(cols.values()):
            print(f"  {t:14s} {sum(cols.values()) / MiB:9.1f} MiB")
    print("largest columns:")
    flat = sorted(((v, f"{t}.{c}") for t, cols in sizes.items() for c, v in cols.items()), reverse=True)
    for v, name in flat[:args.columns]:
        print(f"  {name:28s} {v / MiB:9.1f} MiB")
    print("peak summed PSS per stage (MiB); at that moment this process + its children (writer, workers); "
          "the stage's own peaks of this process and of its largest child:")
    for stage, peak in sampler.peaks.items():
        mine, kids = sampler.split[stage]
        print(f"  {stage:36s} {peak / MiB:9.1f}  = {mine / MiB:7.1f} + {kids / MiB:7.1f}   "
              f"{sampler.own[stage] / MiB:7.1f} {sampler.child[stage] / MiB:7.1f}")
    after = max(v for k, v in sampler.peaks.items() if k not in ("start", "parse"))
    print(f"post-parse peak {after / MiB:,.1f} MiB = {after / total:.2f} x tables; "
          f"(peak - 400 MiB) / tables = {(after - 400 * MiB) / total:.2f}")


if __name__ == "__main__":
    main()
