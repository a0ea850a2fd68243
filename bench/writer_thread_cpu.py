"""The raw tables' writer's own CPU in a whole import: each ``store.writer.write_raw_file`` call's thread CPU
(``time.thread_time`` of the thread it runs on: the import's writer thread) and wall, with the tables it wrote. An
import that writes the tables the analysis keeps as parsed during the analysis shows two calls.

    PYTHONPATH=TREE/src python bench/writer_thread_cpu.py TRACE [-o OUT.sqlite]
"""

from __future__ import annotations

import runpy
import sys
import time

from dlscope.store import writer


def main() -> None:
    trace = sys.argv[1]
    out = sys.argv[sys.argv.index("-o") + 1] if "-o" in sys.argv else "/tmp/writer_thread_cpu.sqlite"
    write_raw_file = writer.write_raw_file

    def timed(*args, **kwargs):
        cpu, wall = time.thread_time(), time.perf_counter()
        try:
            return write_raw_file(*args, **kwargs)
        finally:  # printed here: the command ends with os._exit, past any atexit
            print(f"writer call: thread CPU {time.thread_time() - cpu:.3f} s, wall {time.perf_counter() - wall:.3f} s, "
                  f"tables {','.join(sorted(args[1]))}", file=sys.stderr, flush=True)

    writer.write_raw_file = timed
    sys.argv = ["dlscope", "import", trace, "-o", out, "--force", "-q"]
    runpy.run_module("dlscope", run_name="__main__")


if __name__ == "__main__":
    main()
