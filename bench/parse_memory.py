#!/usr/bin/env python3
"""The parse alone (``load_profiles_parallel`` of one trace, as an import runs it): the peak summed PSS of this
process and its forked children, sampled every 10 ms, split into anonymous memory and file pages (a plain trace
is read through a memory map, whose pages count as the process's file-backed PSS while they stay mapped), and
the CPU seconds of all of them.

    PYTHONPATH=TREE/src python bench/parse_memory.py TRACE.json [--repeat 3]

Alternate two trees to compare them.
"""

from __future__ import annotations

import argparse
import os
import resource
import threading
import time
from pathlib import Path

import psutil

from dlscope.pipeline.executors import load_profiles_parallel

FIELDS = ("Pss", "Pss_Anon", "Pss_File")


def rollup(pid: int) -> dict[str, int]:
    """PSS fields of ``pid`` in KiB (zeros once it is gone)."""
    found = dict.fromkeys(FIELDS, 0)
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            key, *rest = line.split()
            if key.rstrip(":") in found:
                found[key.rstrip(":")] = int(rest[0])
    except (OSError, ValueError, IndexError):
        pass
    return found


def cpu_seconds() -> float:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def parse_once(trace: str) -> str:
    me, peak, stop = psutil.Process(), {"Pss": 0}, threading.Event()

    def sample() -> None:
        while not stop.is_set():
            parts = [rollup(os.getpid())] + [rollup(k.pid) for k in me.children(recursive=True)]
            total = {f: sum(p[f] for p in parts) for f in FIELDS}
            if total["Pss"] > peak["Pss"]:
                peak.update(total, processes=len(parts))
            time.sleep(0.01)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    cpu, wall = cpu_seconds(), time.perf_counter()
    load_profiles_parallel([trace])
    cpu, wall = cpu_seconds() - cpu, time.perf_counter() - wall
    stop.set()
    sampler.join()
    return (f"peak summed PSS {peak['Pss'] / 1024:6.0f} MiB (anonymous {peak['Pss_Anon'] / 1024:4.0f}, file pages "
            f"{peak['Pss_File'] / 1024:4.0f}; {peak.get('processes', 1)} processes)   "
            f"CPU {cpu:.2f} s   wall {wall:.2f} s")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--repeat", type=int, default=1, help="parses, each in a fresh process")
    args = ap.parse_args()
    if args.repeat == 1:
        print(parse_once(args.trace))
        return
    import subprocess
    import sys

    for _ in range(args.repeat):  # a fresh process each: the first parse's heap would flatter the next
        subprocess.run([sys.executable, __file__, args.trace], check=True)


if __name__ == "__main__":
    main()
