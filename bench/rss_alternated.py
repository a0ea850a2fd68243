#!/usr/bin/env python3
"""`dlscope import INPUT -q` with two or more source trees, alternated run by run, without sampling: the peak RSS of
the largest process (``/usr/bin/time``'s %M: the importing process wherever the peak has no helper beside it, as on
the benchmark trace), CPU seconds of all processes (user + system) and wall seconds; medians at the end.

Unlike the summed PSS (``pss_alternated.py``), RSS does not fall when other processes on the machine share the
libraries' pages, so a loaded machine reads as a quiet one.

    python bench/rss_alternated.py INPUT --repeat 4 --tree /work/ref6/src --tree $PWD/src [--env 'NAME=VALUE,...']

``--env`` (one per tree, in order, optional): environment variables for that tree's runs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

MiB = 2**20


def one_run(source: str, tree: str, out: Path, env: dict[str, str]) -> tuple[float, float, float]:
    """(peak RSS MiB, CPU s, wall s) of one import."""
    cmd = ["/usr/bin/time", "-f", "%M %U %S %e", sys.executable, "-m", "dlscope", "import", source, "-o", str(out),
           "--force", "-q"]
    done = subprocess.run(cmd, env={**os.environ, "PYTHONPATH": tree, **env}, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{tree}: dlscope import failed: {done.stderr.strip()[-2000:]}")
    rss_kib, user, system, wall = done.stderr.split()[-4:]
    return int(rss_kib) * 1024 / MiB, float(user) + float(system), float(wall)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("source", help="a trace or a folder of a job's traces")
    ap.add_argument("--tree", action="append", required=True, help="a source tree (PYTHONPATH), repeatable")
    ap.add_argument("--env", action="append", default=[], help="NAME=VALUE,... for the tree of the same position")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    envs = [dict(kv.split("=", 1) for kv in spec.split(",") if kv) for spec in args.env]
    envs += [{}] * (len(args.tree) - len(envs))
    runs: dict[int, list[tuple[float, float, float]]] = {i: [] for i in range(len(args.tree))}
    with tempfile.TemporaryDirectory(prefix="dlscope-rss-") as tmp:
        for _ in range(args.repeat):
            for i, tree in enumerate(args.tree):
                rss, cpu, wall = one_run(args.source, tree, Path(tmp) / f"{i}.sqlite", envs[i])
                runs[i].append((rss, cpu, wall))
                print(f"{tree:28s} load {os.getloadavg()[0]:4.1f}  peak RSS {rss:6.1f} MiB  CPU {cpu:5.2f} s  "
                      f"wall {wall:5.2f} s", flush=True)
    for i, tree in enumerate(args.tree):
        rss, cpu, wall = (sorted(r[k] for r in runs[i]) for k in range(3))
        print(f"{tree:28s} median peak RSS {statistics.median(rss):6.1f} MiB ({rss[0]:.1f}-{rss[-1]:.1f}), "
              f"CPU {statistics.median(cpu):5.2f} s, wall {statistics.median(wall):5.2f} s")


if __name__ == "__main__":
    main()
