"""The raw tables' writer alone (``store.writer.write_raw_file``), its CPU seconds by step, trees alternated.

Each tree runs in its own interpreter (``PYTHONPATH=TREE/src``): it parses and analyses the trace once, then
writes the raw tables ``--repeat`` times, each write in a child forked for it (a fresh page cache and heap, as
the import's writer thread starts on tables it has not touched): the child's CPU (user + sys, ``wait4``) and
the process-time of its steps (search keys, each table's ingest, the indexes, the names). Each tree's line is
the best of ``--repeat`` by total CPU; the trees run in turn ``--rounds`` times.

    python bench/raw_writer_cpu.py TRACE --tree /work/ref8/src --tree src [--repeat 5] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

STEPS = ("kernel_pairs", "search_keys", "ingest", "indexes", "raw_names", "add_names", "index_names")


def forked_write(writer, path: str, tables, spent: dict) -> tuple[int, os.struct_rusage, dict]:
    """``writer.write_raw_file`` in a forked child: its exit status, its resource usage (``wait4``) and the
    ``spent`` it recorded (sent back through a pipe)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        spent.clear()
        writer.write_raw_file(path, tables)
        os.write(write, json.dumps(spent).encode())
        os._exit(0)
    os.close(write)
    _, status, usage = os.wait4(pid, 0)
    with os.fdopen(read, "rb") as pipe:
        return status, usage, json.loads(pipe.read() or b"{}")


def child(trace: str, repeat: int) -> None:
    """In one tree's interpreter: analyse once, write ``repeat`` times in forked children, print JSON lines."""
    from dlscope.analyze.analysis import analyse
    from dlscope.pipeline import build
    from dlscope.pipeline.executors import load_profiles_parallel
    from dlscope.processes import release_free_memory
    from dlscope.store import writer

    profile = load_profiles_parallel([trace], None, None, None, lambda *a, **k: None, None)
    tables = build._raw_tables(analyse(profile, None))
    spent: dict[str, float] = {}

    def timed(key, fn):
        depth = [0]

        def call(*args, **kwargs):
            start = time.process_time()
            depth[0] += 1
            try:
                return fn(*args, **kwargs)
            finally:
                depth[0] -= 1
                if not depth[0]:
                    spent[key] = spent.get(key, 0.0) + time.process_time() - start
        return call

    for name in ("kernel_pairs", "search_keys", "raw_names", "add_names", "index_names"):
        setattr(writer, name, timed(name, getattr(writer, name)))
    writer._ArrowIngest.add = timed("ingest", writer._ArrowIngest.add)
    writer._ArrowIngest.execute_script = timed("indexes", writer._ArrowIngest.execute_script)
    path = os.path.join(tempfile.gettempdir(), f"raw_writer_cpu.{os.getpid()}.sqlite")
    for _ in range(repeat):
        if os.path.exists(path):
            os.unlink(path)
        release_free_memory()
        start = time.perf_counter()
        status, usage, steps = forked_write(writer, path, tables, spent)
        wall = time.perf_counter() - start
        if status:
            sys.exit(f"the writer failed ({status})")
        print(json.dumps({"cpu": usage.ru_utime + usage.ru_stime, "user": usage.ru_utime, "sys": usage.ru_stime,
                          "wall": wall, "bytes": os.path.getsize(path), **steps}), flush=True)
    os.unlink(path)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--tree", action="append", required=True, help="a tree's src folder (repeat: alternated)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.trace, args.repeat)
        return
    for round_ in range(args.rounds):
        for tree in args.tree:
            env = {**os.environ, "PYTHONPATH": os.path.abspath(tree)}
            out = subprocess.run([sys.executable, os.path.abspath(__file__), args.trace, "--tree", tree, "--child",
                                  "--repeat", str(args.repeat)], env=env, check=True, capture_output=True, text=True)
            runs = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
            best = min(runs, key=lambda r: r["cpu"])
            cpus = " ".join(f"{r['cpu']:.2f}" for r in runs)
            steps = " ".join(f"{s} {best[s]:.3f}" for s in STEPS if s in best)
            print(f"round {round_ + 1} {tree}: CPU best {best['cpu']:.3f} s (user {best['user']:.2f}, sys "
                  f"{best['sys']:.2f}, wall {best['wall']:.2f}; all: {cpus}); {steps}; {best['bytes'] / 2**20:.1f} MiB",
                  flush=True)


if __name__ == "__main__":
    main()
