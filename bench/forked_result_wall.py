"""Wall and CPU of a forked child's result coming back (:class:`dlscope.processes.ForkedCall`): the child returns
the tables of the head start's share of a trace's pieces (``TRACE_CHILD_SHARE``, decoded before the fork, so only
the hand-over is timed: the child's pickle and write, the pipe, the parent's read and unpickle). Medians of
``--repeat`` runs; run it with one tree, then the other.

    PYTHONPATH=TREE/src python bench/forked_result_wall.py /tmp/h21s/bench_trace.json --repeat 9
"""

from __future__ import annotations

import argparse
import gc
import resource
import statistics
import time
from pathlib import Path

from dlscope.importers.kineto import PIECE_BYTES, in_memory_limit, pieces
from dlscope.importers.kineto.text import json_text
from dlscope.pipeline import head_start
from dlscope.processes import ForkedCall


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("trace", type=Path)
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args()
    gc.disable()
    with json_text(args.trace, in_memory_limit(None)) as text:
        cuts = pieces.cut_events(text, PIECE_BYTES)
        half = pieces.first_later(len(cuts), 1 - head_start.TRACE_CHILD_SHARE)
        state = pieces._decode(text, cuts, half, len(cuts), None)[0].state()
    walls, parent, child = [], [], []
    for _ in range(args.repeat):
        wall, cpu, kids = time.perf_counter(), time.process_time(), _children_cpu()
        came = ForkedCall(lambda: state).result()
        walls.append(time.perf_counter() - wall)
        parent.append(time.process_time() - cpu)
        child.append(_children_cpu() - kids)
        del came
    for name, values in (("wall", walls), ("parent CPU", parent), ("child CPU", child)):
        print(f"{name:12s} median {statistics.median(values):.4f}  ({' '.join(f'{v:.4f}' for v in values)})")


if __name__ == "__main__":
    main()
