#!/usr/bin/env python3
"""Where an import's resident memory peaks, phase by phase, and how much of it is malloc's free pages: the
import run in this process (``build_database``), its resident set (RSS: the figure a quiet machine's summed PSS
comes to when no other process shares the libraries) and glibc's heap (``mallinfo2``: bytes held from the
system, bytes in use) sampled every 10 ms, and the peaks of each within the phases of the importing process's
main thread: the rules (``aggregate_ranks``, while the raw writer ingests beside them), the critical path's
replay (``annotate``) and the rest.

    PYTHONPATH=TREE/src python bench/import_memory_phases.py TRACE [--repeat 2]

A heap much larger than its bytes in use is free pages malloc keeps resident (fragmentation). Run it once per
tree, alternated; glibc only (mallinfo2: glibc 2.33 or later).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import tempfile
import threading
import time
from pathlib import Path

from dlscope.pipeline import build

MiB = 2**20


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]


def _libc():
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = _MallInfo2
    return libc


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def one_import(trace: str) -> dict[str, tuple[float, float, float]]:
    """Per phase: the peak RSS, malloc's heap held (arenas + mmapped chunks) and in use, MiB."""
    libc = _libc()
    phases: list[tuple[float, str]] = [(0.0, "parse + analysis")]
    samples: list[tuple[float, int, int, int]] = []
    t0 = time.perf_counter()

    def phase(name: str, fn):
        def wrapped(*args, **kwargs):
            phases.append((time.perf_counter() - t0, name))
            try:
                return fn(*args, **kwargs)
            finally:
                phases.append((time.perf_counter() - t0, "the rest"))
        return wrapped

    real = {name: getattr(build, name) for name in ("aggregate_ranks", "annotate")}
    build.aggregate_ranks = phase("rules (writer beside)", real["aggregate_ranks"])
    build.annotate = phase("critical path replay", real["annotate"])
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            m = libc.mallinfo2()
            samples.append((time.perf_counter() - t0, rss_bytes(), m.arena + m.hblkhd, m.uordblks + m.hblkhd))
            time.sleep(0.01)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        with tempfile.TemporaryDirectory(prefix="dlscope-phases-") as tmp:
            build.build_database([trace], Path(tmp) / "out.sqlite", progress=False)
    finally:
        done.set()
        sampler.join()
        for name, fn in real.items():
            setattr(build, name, fn)
    peaks: dict[str, tuple[float, float, float]] = {}
    for t, rss, held, used in samples:
        name = next(n for start, n in reversed(phases) if start <= t)
        old = peaks.get(name, (0.0, 0.0, 0.0))
        peaks[name] = (max(old[0], rss / MiB), max(old[1], held / MiB), max(old[2], used / MiB))
    return peaks


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    for _ in range(args.repeat):
        peaks = one_import(args.trace)
        overall = max(p[0] for p in peaks.values())
        print(f"peak RSS {overall:.1f} MiB; per phase: peak RSS / malloc heap held / in use (MiB)")
        for name, (rss, held, used) in peaks.items():
            print(f"  {name:24s} {rss:7.1f} {held:7.1f} {used:7.1f}")


if __name__ == "__main__":
    main()
