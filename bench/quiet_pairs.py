"""Whole `dlscope` commands of two trees, alternated in pairs, each pair run only once the machine was idle over the
second before (``--idle``, share of all cores): on a machine shared with other work, the wall times of the pairs
that ran undisturbed are comparable. Prints per pair the idle share before and after it and each tree's wall and
CPU seconds (user + system, all processes: ``/usr/bin/time``); keep the pairs whose "after" is high too.

    python bench/quiet_pairs.py --tree /work/ref7/src --tree src --pairs 12 -- \\
        import bench/out/job64 -o /tmp/X.sqlite --force -q
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time


def idle_share(seconds: float) -> float:
    """The machine's idle share (idle + iowait of all cores, /proc/stat) over ``seconds``."""
    def counters() -> tuple[int, int]:
        with open("/proc/stat") as f:
            values = [int(v) for v in f.readline().split()[1:]]
        return values[3] + values[4], sum(values)

    idle0, total0 = counters()
    time.sleep(seconds)
    idle1, total1 = counters()
    return (idle1 - idle0) / max(total1 - total0, 1)


def timed(tree: str, args: list[str]) -> tuple[float, float]:
    """(wall, user + system CPU) of ``python -m dlscope ARGS`` with ``tree`` on PYTHONPATH."""
    run = subprocess.run(["/usr/bin/time", "-f", "%e %U %S", sys.executable, "-m", "dlscope", *args],
                         env=dict(os.environ, PYTHONPATH=tree), capture_output=True, text=True)
    wall, user, system = (float(v) for v in run.stderr.strip().splitlines()[-1].split())
    return wall, user + system


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", action="append", required=True, help="a src folder (twice: A then B)")
    parser.add_argument("--pairs", type=int, default=10)
    parser.add_argument("--idle", type=float, default=0.9, help="least idle share over the second before a pair")
    parser.add_argument("--give-up", type=float, default=900, help="seconds after which no new pair starts")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the dlscope arguments")
    args = parser.parse_args()
    if len(args.tree) != 2 or not args.command:
        parser.error("two --tree and a command after --")
    command = args.command[1:] if args.command[0] == "--" else args.command
    deadline, done = time.monotonic() + args.give_up, 0
    while done < args.pairs and time.monotonic() < deadline:
        before = idle_share(1.0)
        if before < args.idle:
            continue
        order = [0, 1] if done % 2 == 0 else [1, 0]  # which tree goes first alternates
        results = {i: timed(args.tree[i], command) for i in order}
        after = idle_share(0.5)
        print(f"{time.strftime('%H:%M:%S')} idle before {before:.2f} after {after:.2f}  "
              + "  ".join(f"{args.tree[i]}: {results[i][0]:.2f} s wall {results[i][1]:.2f} s CPU" for i in (0, 1)),
              flush=True)
        done += 1


if __name__ == "__main__":
    main()
