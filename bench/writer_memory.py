"""The forked raw-table writer alone (``store.writer.write_raw_file`` in a child forked after the analysis, as an
import forks it), for a few sizes of its SQLite page cache (``writer.INGEST_CACHE_KIB``, which also bounds each
index build's in-memory sort): the child's CPU seconds (its ingest and its index builds apart), wall seconds,
its peak private memory and the peak summed PSS it adds to the importing process's (sampled every 10 ms; the
parent read first, so a child that has just ended is never counted twice).

    PYTHONPATH=TREE/src python bench/writer_memory.py TRACE [--cache-mib 256,16] [--repeat 3] [--kernels-times N]

``--kernels-times N``: write only the trace's kernels, repeated N times (new ids), to see the index builds of a
larger table.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np
import pandas as pd
from measure import pss_bytes

from dlscope.analyze.analysis import analyse
from dlscope.pipeline import build
from dlscope.pipeline.executors import load_profiles_parallel
from dlscope.processes import release_free_memory
from dlscope.store import writer

MiB = 2**20


def private_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            fields = {line.split(":")[0]: int(line.split()[1]) for line in f if line.rstrip().endswith("kB")}
    except (OSError, ValueError):
        return 0
    return (fields.get("Private_Clean", 0) + fields.get("Private_Dirty", 0)) * 1024


def timed_stages() -> dict[str, float]:
    """The child's CPU in its ingest and its index builds (wrapped methods of the ingest)."""
    spent = {"ingest": 0.0, "indexes": 0.0}
    add, script = writer._ArrowIngest.add, writer._ArrowIngest.execute_script

    depth = [0]

    def timed(key, fn):
        def call(self, *args):  # the outermost call only ("ops" adds op_nodes and op_instances)
            start = time.process_time()
            depth[0] += 1
            try:
                return fn(self, *args)
            finally:
                depth[0] -= 1
                if not depth[0]:
                    spent[key] += time.process_time() - start
        return call

    writer._ArrowIngest.add = timed("ingest", add)
    writer._ArrowIngest.execute_script = timed("indexes", script)
    return spent


def one_write(tables: dict[str, pd.DataFrame], cache_mib: int, spent: dict[str, float]) -> str:
    writer.INGEST_CACHE_KIB = cache_mib * 1024  # the child forked below inherits it
    path = os.path.join(tempfile.gettempdir(), f"writer_memory.{os.getpid()}.sqlite")
    if os.path.exists(path):
        os.unlink(path)
    release_free_memory()
    before = pss_bytes(os.getpid())
    read, write = os.pipe()
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        spent["ingest"] = spent["indexes"] = 0.0
        writer.write_raw_file(path, tables)
        os.write(write, f"{spent['ingest']:.3f} {spent['indexes']:.3f}".encode())
        os._exit(0)
    os.close(write)
    added = private = 0
    while True:
        done, _, usage = os.wait4(pid, os.WNOHANG)
        if done:
            break
        mine, theirs, own = pss_bytes(os.getpid()), pss_bytes(pid), private_bytes(pid)
        if pss_bytes(pid):  # still there: both read while it ran
            added, private = max(added, mine + theirs - before), max(private, own)
        time.sleep(0.01)
    wall = time.perf_counter() - start
    ingest, indexes = os.read(read, 100).decode().split()
    os.close(read)
    os.unlink(path)
    return (f"cache {cache_mib:4d} MiB: wall {wall:5.2f} s, CPU {usage.ru_utime + usage.ru_stime:5.2f} s "
            f"(ingest {ingest}, indexes {indexes}), private peak {private / MiB:4.0f} MiB, "
            f"summed PSS +{added / MiB:4.0f} MiB")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--cache-mib", default="256,16", help="page cache sizes to compare, MiB, comma-separated")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--kernels-times", type=int, default=0)
    args = ap.parse_args()
    profile = load_profiles_parallel([args.trace], None, None, None, lambda *a, **k: None, None)
    tables = build._raw_tables(analyse(profile, None))
    if args.kernels_times:
        many = pd.concat([tables["kernels"]] * args.kernels_times, ignore_index=True)
        tables = {"kernels": many.assign(kernel_id=np.arange(len(many)))}
    spent = timed_stages()
    for _ in range(args.repeat):
        for cache in (int(c) for c in args.cache_mib.split(",")):
            print(one_write(tables, cache, spent), flush=True)


if __name__ == "__main__":
    main()
