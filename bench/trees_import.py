"""Whole imports of one input with two source trees, alternating (before, after, before, …): wall and CPU seconds
(every process of the import), peak RSS of the largest process, and, from one more sampled run each, the peak
summed PSS of the process tree (``bench/measure.py``). For a change that moves work between processes (the
critical path replayed in a child beside the aggregation), where one process's CPU time says nothing.

    python bench/trees_import.py INPUT --tree BEFORE/src --tree AFTER/src [--repeat 5] [-- IMPORT OPTIONS]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

from measure import measured


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("input")
    ap.add_argument("--tree", action="append", required=True)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("options", nargs="*", help="after --: options of dlscope import")
    args = ap.parse_args()
    runs: dict[str, list[dict]] = {t: [] for t in args.tree}
    with tempfile.TemporaryDirectory() as tmp:
        def one(tree: str, sample: bool) -> dict:
            cmd = [sys.executable, "-m", "dlscope", "import", args.input, "-o", str(Path(tmp) / "x.sqlite"), "--force",
                   "-q", *args.options]
            return measured(cmd, sample_memory=sample, env={**os.environ, "PYTHONPATH": tree})
        for _ in range(args.repeat):
            for tree in args.tree:
                runs[tree].append(one(tree, False))
        pss = {tree: one(tree, True)["peak_pss_tree_mib"] for tree in args.tree}
    print(f"{args.input} {' '.join(args.options)}: {args.repeat} runs each, alternating")
    print("| tree | best wall s | median wall s | runs | median CPU s | peak RSS MiB (largest) | peak PSS MiB (all) |")
    print("|---|---:|---:|---|---:|---:|---:|")
    for tree, rs in runs.items():
        walls = [r["wall_s"] for r in rs]
        listed = ", ".join(f"{w:.2f}" for w in walls)
        print(f"| {tree} | {min(walls):.2f} | {statistics.median(walls):.2f} | {listed} | "
              f"{statistics.median(r['cpu_s'] for r in rs):.2f} | {max(r['peak_rss_mib'] for r in rs):.0f} | "
              f"{pss[tree]:.0f} |")


if __name__ == "__main__":
    main()
