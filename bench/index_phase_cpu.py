"""The raw writer's index builds against the other ways of getting the same indexes, CPU seconds per table and index.

Parses and analyses the trace once, then writes the raw tables (``store.writer.write_raw_file``) once per variant
and round, each write in a child forked for it (``raw_writer_cpu.py``'s way: a fresh heap, the child's CPU from
``wait4``), the variants alternated. A variant is one of:

- ``after``: as dlscope writes: every table ingested, then every CREATE INDEX;
- ``early:NAME,NAME``: those indexes created with the tables, before any row, so SQLite keeps them up to date
  row by row during the ingest (``early:sorted``: every index whose key the rows arrive in, or nearly:
  kernels by iteration, op, root op, start and device, op instances by iteration and frame, memops, API
  calls and ranges by iteration or start; ``early:all``: every index);
- ``interleaved``: each table's indexes built right after its own ingest (its last pages still in the cache);
- ``page:BYTES``: the file's page size (``schema.PAGE_SIZE``) changed.

Per variant: the write's CPU (best of the rounds and all of them), each table's ingest and each index build
(process time in the child, best of the rounds), and the file's size. An index's cost is its build under
``after`` and its table's ingest growth under ``early``.

    PYTHONPATH=src python bench/index_phase_cpu.py TRACE [--rounds 4] [--variant after --variant early:sorted ...]
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from raw_writer_cpu import forked_write  # noqa: E402 - a bench script beside this one

#: indexes whose keys the benchmark trace's rows arrive in, or nearly (a handful of steps back per 100k rows)
SORTED = ("kernels_iteration", "kernels_op", "kernels_root_op", "kernels_start", "kernels_device",
          "op_instances_iteration", "op_instances_frame", "memops_iteration", "api_calls_iteration", "ranges_start")


def _statements() -> dict[str, tuple[str, str]]:
    """Every raw-writer index: name -> (table, CREATE INDEX statement), in the writer's order."""
    from dlscope.store import schema

    return {m.group(1): (m.group(2), m.group(0))
            for m in re.finditer(r"CREATE INDEX (\w+) ON (\w+) [^;]+", schema.INDEXES + schema.SEARCH_INDEXES)}


def _configure(variant: str, writer, schema, statements: dict[str, tuple[str, str]], plain_add) -> None:
    """Set the writer's module globals (and its ingest's ``add``) for one variant, from the schema's own."""
    writer.DDL, writer.SEARCH_DDL, writer.PAGE_SIZE = schema.DDL, schema.SEARCH_DDL, schema.PAGE_SIZE
    writer.INDEXES, writer.SEARCH_INDEXES = schema.INDEXES, schema.SEARCH_INDEXES
    writer._ArrowIngest.add = plain_add
    kind, _, arg = variant.partition(":")
    if kind == "after":
        return
    if kind == "page":
        writer.PAGE_SIZE = int(arg)
        return
    if kind == "early":
        early = set(statements) if arg == "all" else set(SORTED) if arg == "sorted" else set(arg.split(","))
        unknown = early - set(statements)
        if unknown:
            sys.exit(f"no such index: {', '.join(sorted(unknown))}")
        keyed = [statements[n][1] for n in statements if n in early and "search_key" in statements[n][1]]
        writer.DDL = schema.DDL + "".join(statements[n][1] + ";\n" for n in statements
                                          if n in early and "search_key" not in statements[n][1])
        writer.SEARCH_DDL = schema.SEARCH_DDL + "".join(s + ";\n" for s in keyed)  # after the search_key column
    elif kind == "interleaved":
        early = {n for n, (table, _) in statements.items() if not table.startswith("agg_")}

        def add(self, name, frame):
            plain_add(self, name, frame)
            for _, (table, sql) in statements.items():
                if table == name and name != "ops":
                    self.execute_script(sql)
        writer._ArrowIngest.add = add
    else:
        sys.exit(f"unknown variant {variant!r}")
    writer.INDEXES = "".join(sql + ";\n" for n, (_, sql) in statements.items() if n not in early
                             and "search_key" not in sql)
    writer.SEARCH_INDEXES = "".join(sql + ";\n" for n, (_, sql) in statements.items() if n not in early
                                    and "search_key" in sql)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--variant", action="append", help="after, early:NAMES|sorted|all, interleaved, page:BYTES")
    args = ap.parse_args()
    variants = args.variant or ["after", "early:sorted", "interleaved"]

    from dlscope.analyze.analysis import analyse
    from dlscope.pipeline import build
    from dlscope.pipeline.executors import load_profiles_parallel
    from dlscope.processes import release_free_memory
    from dlscope.store import schema, writer

    profile = load_profiles_parallel([args.trace], None, None, None, lambda *a, **k: None, None)
    tables = build._raw_tables(analyse(profile, None))
    statements = _statements()
    spent: dict[str, float] = {}
    plain_add, plain_execute = writer._ArrowIngest.add, writer._ArrowIngest._execute

    def timed_add(self, name, frame):
        start = time.process_time()
        plain_add(self, name, frame)
        if name != "ops":  # (its two tables timed on their own)
            spent["ingest " + name] = time.process_time() - start

    def timed_execute(self, statement):
        start = time.process_time()
        plain_execute(self, statement)
        made = re.match(r"\s*CREATE INDEX (\w+)", statement)
        if made:
            spent["index " + made.group(1)] = time.process_time() - start

    writer._ArrowIngest._execute = timed_execute
    path = os.path.join(tempfile.gettempdir(), f"index_phase_cpu.{os.getpid()}.sqlite")
    runs: dict[str, list[dict]] = {v: [] for v in variants}
    try:
        for _ in range(args.rounds):
            for variant in variants:
                _configure(variant, writer, schema, statements, timed_add)
                if os.path.exists(path):
                    os.unlink(path)
                release_free_memory()
                status, usage, steps = forked_write(writer, path, tables, spent)
                if status:
                    sys.exit(f"the writer failed under {variant} ({status})")
                runs[variant].append({"cpu": usage.ru_utime + usage.ru_stime, "bytes": os.path.getsize(path),
                                      **steps})
    finally:
        if os.path.exists(path):
            os.unlink(path)
    for variant, done in runs.items():
        keys = sorted({k for r in done for k in r if " " in k})
        best = {k: min(r.get(k, 0.0) for r in done) for k in keys}
        ingest = {k[7:]: v for k, v in best.items() if k.startswith("ingest ") and v >= 0.005}
        built = {k[6:]: v for k, v in best.items() if k.startswith("index ") and v >= 0.003}
        cpus = " ".join(f"{r['cpu']:.3f}" for r in done)
        print(f"{variant}: CPU best {min(r['cpu'] for r in done):.3f} s (all: {cpus}); "
              f"{done[0]['bytes'] / 2**20:.1f} MiB")
        print("  ingest " + " ".join(f"{k} {v:.3f}" for k, v in ingest.items())
              + f"; sum {sum(ingest.values()):.3f} s")
        total = sum(v for k, v in best.items() if k.startswith("index "))
        print("  index builds " + " ".join(f"{k} {v:.3f}" for k, v in built.items()) + f"; sum {total:.3f} s",
              flush=True)


if __name__ == "__main__":
    main()
