#!/usr/bin/env python3
"""The critical path's replay alone, as the import runs it (graph, unchanged replay, each aggregation's walk,
its findings priced), on the job stored in a profile database: CPU seconds, and with memray (not a dependency
of dlscope: ``pip install memray``) the live bytes at the replay's high-water mark by the dlscope line that
allocated them. The job is loaded before tracking starts, so only the replay's own allocations count.

    PYTHONPATH=TREE/src python bench/replay_memory.py DATABASE [--top 25] [--no-memray]

Run it once per tree (before, after) on the same database.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from measure import high_water_by_line

from dlscope.store import reader
from dlscope.whatif import stored
from dlscope.whatif.job import from_database

MiB = 2**20


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("database", type=Path)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--no-memray", action="store_true", help="CPU time only")
    args = ap.parse_args()
    conn = reader.connect(args.database)
    try:
        job = from_database(conn)
        requests = []
        for agg_id, rank, lo, hi in conn.execute("SELECT agg_id, rank, iter_start, iter_stop FROM aggregations"):
            rules = conn.execute("SELECT rule, est_saving_ns FROM findings WHERE agg_id = ? ORDER BY finding_id",
                                 (agg_id,)).fetchall()
            requests.append((rank, lo, hi, [(rule, est) for rule, est in rules]))
    finally:
        conn.close()

    def replay() -> stored.Replay:
        r = stored.Replay(lambda: job)
        r.figures(requests)
        return r

    if args.no_memray:
        cpu = time.process_time()
        r = replay()
        cpu = time.process_time() - cpu
    else:
        with tempfile.TemporaryDirectory() as tmp:
            r, by_line, cpu = high_water_by_line(replay, Path(tmp) / "replay.bin")
        print(f"live at the replay's high-water mark: {sum(by_line.values()) / MiB:,.1f} MiB")
        for line, size in by_line.most_common(args.top):
            print(f"  {size / MiB:8.1f}  {line}")
    g = r.g
    print(f"{args.database}: {g.n if g else 0:,} vertices, {len(g.src) if g else 0:,} cross edges, "
          f"{len(requests)} aggregations; replay CPU {cpu:.2f} s{' (under memray)' if not args.no_memray else ''}")


if __name__ == "__main__":
    main()
