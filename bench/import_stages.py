#!/usr/bin/env python3
"""Time the import's raw write stage (ingest, search keys and tables, indexes, the timeline arrays) of one trace in
one process, best of 3: the tree on PYTHONPATH decides which code runs (before and after a change).

    PYTHONPATH=TREE/src python bench/import_stages.py TRACE.json [OUT.sqlite]
"""

import inspect
import os
import sys
import time

from dlscope import processes
from dlscope.analyze.analysis import analyse
from dlscope.pipeline import build
from dlscope.pipeline.executors import load_profiles_parallel
from dlscope.store import writer

an = analyse(load_profiles_parallel([sys.argv[1]]), None)
tables = build._raw_tables(an)
#: the timeline arrays' work as write_raw_file takes it: a FirstComer (branch h22tail on), a callable before
timelines = getattr(processes, "FirstComer", lambda work: work)
new = "timelines" in inspect.signature(writer.write_raw_file).parameters
out = sys.argv[2] if len(sys.argv) > 2 else "import_stages.sqlite"
res = []
for _ in range(3):
    if os.path.exists(out):
        os.remove(out)
    t0, c0 = time.perf_counter(), time.process_time()
    if new:
        writer.write_raw_file(out, tables, timelines=timelines(lambda: build.timeline_arrays(an)))
    else:
        writer.write_raw_file(out, tables)
        build.timeline_arrays(an)
    res.append((time.perf_counter() - t0, time.process_time() - c0))
os.remove(out)
print("new" if new else "base", "best wall {:.3f} s, its CPU {:.3f} s".format(*min(res)), [round(w, 3) for w, _ in res])
