"""CPU and wall time of ``summary_dict`` (what `dlscope import` prints after an import and `dlscope summary`
shows) on profile databases, and of its sections, in this process (imports excluded, first call warm-up).

    PYTHONPATH=src python bench/summary_cpu.py DB.sqlite [DB2.sqlite ...] [--repeat 5] [--sections]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time


def timed(fn, repeat: int) -> tuple[float, float]:
    """Median CPU s and wall s of ``repeat`` calls after one warm-up call."""
    fn()
    cpu, wall = [], []
    for _ in range(repeat):
        c, w = time.process_time(), time.perf_counter()
        fn()
        cpu.append(time.process_time() - c)
        wall.append(time.perf_counter() - w)
    return statistics.median(cpu), statistics.median(wall)


def sections(db: str, repeat: int) -> dict[str, float]:
    """Median CPU ms of the summary's slowest sections."""
    from dlscope.distributed.job import collective_calls, job_section, run_aggregations
    from dlscope.present import summary
    from dlscope.present.memory import memory_section
    from dlscope.store import reader

    conn = reader.connect(db)
    agg = reader.resolve_agg_id(conn, None)
    parts = {"profile": lambda: summary._profile_section(conn, {}), "job": lambda: job_section(conn, agg),
             "collectives": lambda: collective_calls(conn, run_aggregations(conn, agg)),
             "memory": lambda: memory_section(conn, agg)}
    return {name: round(1000 * timed(fn, repeat)[0], 1) for name, fn in parts.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("databases", nargs="+")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--sections", action="store_true", help="also time the slowest sections")
    args = ap.parse_args()
    from dlscope.present.summary import summary_dict

    for db in args.databases:
        cpu, wall = timed(lambda db=db: summary_dict(db), args.repeat)
        out = {"database": db, "summary_cpu_s": round(cpu, 3), "summary_wall_s": round(wall, 3)}
        if args.sections:
            out["sections_cpu_ms"] = sections(db, args.repeat)
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
