#!/usr/bin/env python3
"""`dlscope import TRACE -q` with two or more source trees, alternated run by run (so a loaded machine's spells hit
each alike): the peak summed PSS of the process tree (sampled every 50 ms, as ``measure.py``), the split at that
moment, each process's own peak, CPU seconds (user + system, all processes) and wall seconds.

    python bench/pss_alternated.py TRACE --repeat 4 --tree /work/ref6/src --tree $PWD/src [--summary]

``--summary``: without ``-q`` (the summary printed after the import, as users run it).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from measure import SAMPLE_S, pss_bytes

MiB = 2**20


def one_run(trace: str, tree: str, out: Path, summary: bool) -> str:
    cmd = ["/usr/bin/time", "-f", "%e %U %S", sys.executable, "-m", "dlscope", "import", trace, "-o", str(out),
           "--force", *([] if summary else ["-q"])]
    timer = psutil.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         env={**os.environ, "PYTHONPATH": tree})
    peak, split, own, t0, at = 0, [], {}, time.perf_counter(), 0.0
    while timer.poll() is None:
        try:
            tree_pss = {p.pid: pss_bytes(p.pid) for p in timer.children(recursive=True)}
        except psutil.NoSuchProcess:
            break
        if sum(tree_pss.values()) > peak:
            peak, at, split = sum(tree_pss.values()), time.perf_counter() - t0, sorted(tree_pss.values())[::-1]
        for pid, pss in tree_pss.items():
            own[pid] = max(own.get(pid, 0), pss)
        time.sleep(SAMPLE_S)
    stderr = timer.communicate()[1]
    if timer.returncode != 0:
        raise SystemExit(f"{tree}: dlscope import failed: {stderr.strip()[-2000:]}")
    wall, user, system = stderr.strip().splitlines()[-1].split()
    mib = lambda values: "+".join(f"{v / MiB:.0f}" for v in values if v >= MiB)  # noqa: E731
    return (f"peak {peak / MiB:6.1f} MiB at {at:4.1f} s = {mib(split)}; own peaks {mib(sorted(own.values())[::-1])}; "
            f"CPU {float(user) + float(system):5.2f} s (system {system}); wall {wall} s")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--tree", action="append", required=True, help="a source tree (PYTHONPATH), repeatable")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--summary", action="store_true", help="print the summary (no -q)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="dlscope-pss-") as tmp:
        for _ in range(args.repeat):
            for i, tree in enumerate(args.tree):
                print(f"{tree:28s} {one_run(args.trace, tree, Path(tmp) / f'{i}.sqlite', args.summary)}", flush=True)


if __name__ == "__main__":
    main()
