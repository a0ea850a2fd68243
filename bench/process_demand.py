"""How many of a command's processes want a core, over time: whether the cores sit idle on its critical chain.

Samples the command's process tree every few milliseconds from ``/proc`` (``schedstat``: nanoseconds run and
waited runnable), so other load on the machine stretches the time axis but not the count of our processes that
were runnable: on a quiet two-core machine, a bin below 2.0 is a core left idle. Prints, per bin, the runnable
processes (run + wait over the bin) and each process's share, then each process's life and CPU seconds.

    PYTHONPATH=src python bench/process_demand.py [--bin-ms 50] -- python -m dlscope import DIR -o X --force -q
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections import defaultdict


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def _tree(root: int) -> list[int]:
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(_children(pid))
    return out


def _schedstat(pid: int) -> tuple[int, int] | None:
    """Nanoseconds run and waited on a run queue, all threads of the process."""
    run = wait = 0
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                r, w, _ = f.read().split()
            run, wait = run + int(r), wait + int(w)
    except (OSError, ValueError):
        return None
    return run, wait


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin-ms", type=float, default=50.0)
    parser.add_argument("--every-ms", type=float, default=2.0)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    t0 = time.perf_counter()
    proc = subprocess.Popen(command)
    last: dict[int, tuple[int, int]] = {}
    first_seen: dict[int, float] = {}
    last_seen: dict[int, float] = {}
    bins: dict[int, dict[int, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    while proc.poll() is None:
        now = time.perf_counter() - t0
        b = int(now * 1000 / args.bin_ms)
        for pid in _tree(proc.pid):
            stat = _schedstat(pid)
            if stat is None:
                continue
            first_seen.setdefault(pid, now)
            last_seen[pid] = now
            before = last.get(pid, (0, 0) if pid != proc.pid else stat)
            last[pid] = stat
            bins[b][pid][0] += stat[0] - before[0]
            bins[b][pid][1] += stat[1] - before[1]
        time.sleep(args.every_ms / 1000)
    wall = time.perf_counter() - t0
    names = {pid: f"p{i}" for i, pid in enumerate(sorted(first_seen, key=first_seen.__getitem__))}
    print(f"wall {wall:.3f} s; processes: " + ", ".join(
        f"{names[p]}={p} [{first_seen[p]:.2f}-{last_seen[p]:.2f} s]" for p in names))
    width = args.bin_ms * 1e6
    for b in sorted(bins):
        row = bins[b]
        demand = sum(r + w for r, w in row.values()) / width
        ran = sum(r for r, _ in row.values()) / width
        parts = " ".join(f"{names[p]}:{(r + w) / width:.2f}"
                         for p, (r, w) in sorted(row.items(), key=lambda kv: names[kv[0]]) if r + w > 0.02 * width)
        print(f"{b * args.bin_ms / 1000:6.2f} s  runnable {demand:4.2f}  ran {ran:4.2f}  {parts}")
    totals: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    for row in bins.values():
        for p, (r, w) in row.items():
            totals[p][0] += r
            totals[p][1] += w
    for p in names:
        print(f"{names[p]}: cpu {totals[p][0] / 1e9:.3f} s, waited {totals[p][1] / 1e9:.3f} s")
    sys.exit(proc.returncode)


if __name__ == "__main__":
    main()
