"""CPU of the head start's hand-over on a job, in one process (so the figures do not depend on the load): the
later files as the head start cuts them (``CHILD_SHARE``), handed over as they are (one pickle of the file list)
or as one block (:func:`dlscope.model.file_block`, then its pickle); for each, the pickle (bytes, buffers out of
band at protocol 5), the unpickle, and the merge's join (:func:`dlscope.model.joined_tables` of the first files
with what came over). Medians of ``--repeat`` runs.

    PYTHONPATH=src python bench/hand_over_cpu.py /work/main/bench/out/job64 --repeat 7
"""

from __future__ import annotations

import argparse
import gc
import pickle
import statistics
import time

from dlscope.importers import load_for_job
from dlscope.model import file_block, joined_tables
from dlscope.pipeline import head_start
from dlscope.pipeline.inputs import expand_inputs


def cpu(fn, *args, **kwargs):
    gc.collect()
    start = time.process_time()
    value = fn(*args, **kwargs)
    return value, time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("job")
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    paths = expand_inputs([args.job])
    first_later = head_start.later_start([p.stat().st_size for p in paths], 1 - head_start.CHILD_SHARE)
    files = [load_for_job(p) for p in paths]
    first, later = files[:first_later], files[first_later:]
    figures: dict[str, list[float]] = {}
    for _ in range(args.repeat):
        for how in ("files", "block"):
            sent, join = (later, 0.0) if how == "files" else cpu(lambda: [file_block(later)])
            payload, dump = cpu(pickle.dumps, (True, sent), protocol=pickle.HIGHEST_PROTOCOL)
            (_, came), load = cpu(pickle.loads, payload)
            _, merge_join = cpu(joined_tables, [*first, *came])
            buffers: list = []
            pickle.dumps(sent, protocol=5, buffer_callback=buffers.append)
            for name, value in (("block join (child)", join), ("pickle (child)", dump), ("unpickle (parent)", load),
                                ("merge's join (parent)", merge_join),
                                ("child + parent", join + dump + load + merge_join),
                                ("MiB", len(payload) / 2**20), ("buffers", len(buffers))):
                figures.setdefault(f"{how}: {name}", []).append(value)
    print(f"{len(paths)} files, the child's {len(later)}")
    for name, values in figures.items():
        print(f"{name:32s} median {statistics.median(values):8.4f}  ({' '.join(f'{v:.4f}' for v in values)})")


if __name__ == "__main__":
    main()
