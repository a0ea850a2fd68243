"""CPU of the single trace's hand-over, in one process (so the figures do not depend on the load): the pieces
that the head start's child decodes (``TRACE_CHILD_SHARE``), handed over as the child sends them
(:meth:`Tables.state`, pickled), then the parent's unpickle, :meth:`Tables.absorb` into its own pieces' tables
and the file's columns (:meth:`Tables.columns`). Medians of ``--repeat`` runs.

    PYTHONPATH=src python bench/trace_hand_over_cpu.py /tmp/h21s/bench_trace.json --repeat 5
"""

from __future__ import annotations

import argparse
import gc
import pickle
import statistics
import time
from pathlib import Path

from dlscope.importers.kineto import PIECE_BYTES, in_memory_limit, pieces
from dlscope.importers.kineto.text import json_text
from dlscope.pipeline import head_start


def cpu(fn, *args, **kwargs):
    gc.collect()
    start = time.process_time()
    value = fn(*args, **kwargs)
    return value, time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("trace", type=Path)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    figures: dict[str, list[float]] = {}
    gc.disable()
    with json_text(args.trace, in_memory_limit(None)) as text:
        cuts = pieces.cut_events(text, PIECE_BYTES)
        half = pieces.first_later(len(cuts), 1 - head_start.TRACE_CHILD_SHARE)
        for _ in range(args.repeat):
            first = pieces._decode(text, cuts, 0, half, None)[0]
            later = pieces._decode(text, cuts, half, len(cuts), None)[0]
            state, join = cpu(later.state)
            payload, dump = cpu(pickle.dumps, (True, state), protocol=pickle.HIGHEST_PROTOCOL)
            del state, later
            (_, came), load = cpu(pickle.loads, payload)
            _, absorb = cpu(first.absorb, came)
            _, columns = cpu(first.columns, 0, None)
            buffers: list = []
            pickle.dumps(came, protocol=5, buffer_callback=buffers.append)
            for name, value in (("state (child)", join), ("pickle (child)", dump), ("unpickle (parent)", load),
                                ("absorb (parent)", absorb), ("columns (parent)", columns),
                                ("in all", join + dump + load + absorb + columns),
                                ("MiB", len(payload) / 2**20), ("buffers", len(buffers))):
                figures.setdefault(name, []).append(value)
    for name, values in figures.items():
        print(f"{name:20s} median {statistics.median(values):8.4f}  ({' '.join(f'{v:.4f}' for v in values)})")


if __name__ == "__main__":
    main()
