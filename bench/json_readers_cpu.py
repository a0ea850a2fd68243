"""CPU seconds for a trace's events to become columns: dlscope's own parse beside the native JSON readers on PyPI.

Is the import's parse (msgspec decoding events typed by phase, then Python building the columns) slower than a
columnar reader written in C++ or Rust would be? Each reader runs in a fresh process on the same events and is
given the fields the tables need; the figure is that process's CPU seconds (all its threads) and wall for the read
alone, its imports left out, the minimum of ``--repeat`` runs.

- ``dlscope``: ``kineto_columns`` on one process (``Reading(processes=1)``): the whole parse into the raw tables,
  times exact to the ns, every table's column built;
- ``pyarrow.json``: Arrow's reader with an explicit schema, times as ``decimal128(38, 3)`` (exact), ``pid``/``tid``
  left out: Arrow refuses a column that holds both numbers and strings (Kineto's ``"pid": "Spans"``);
- ``duckdb``: ``read_ndjson`` with the columns typed, times as text (exact), into a table (without the memcpy's
  ``bytes``: DuckDB's struct keys ignore case, and the allocator's ``Bytes`` is there);
- ``polars``: ``read_ndjson`` with a schema, times as text (exact).

The native readers read newline-delimited JSON only (one event a line), so they get the events rewritten that way
beforehand (not timed: a real import would pay for it too). DuckDB and Polars are not dlscope's dependencies: give
an interpreter that has them with ``--other-python`` (e.g. a venv with ``pip install duckdb polars pyarrow``).

    python bench/json_readers_cpu.py TRACE.json [--repeat 3] [--other-python /tmp/pv/bin/python]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

#: the ``args`` keys the tables read (events.Args), typed as Kineto writes them
ARGS_INT = ("External id", "correlation", "device", "stream", "Sequence number", "registers per thread",
            "shared memory", "est. achieved occupancy %", "bytes", "Bytes", "Total Allocated", "Total Reserved",
            "Addr", "Device Type", "Device Id")
ARGS_FLOAT = ("blocks per SM", "warps per SM")
ARGS_GRID = ("grid", "block")

TIMED = """
import json, resource, sys, time
def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
{setup}
c, w = cpu(), time.perf_counter()
rows = read(sys.argv[1])
print(json.dumps({{"cpu_s": cpu() - c, "wall_s": time.perf_counter() - w, "rows": rows}}))
"""

DLSCOPE = """
from pathlib import Path
from dlscope.importers.kineto import Reading, kineto_columns
def read(path):
    return sum(kineto_columns(Path(path), reading=Reading(processes=1)).rows.values())
"""

PYARROW = """
import pyarrow as pa, pyarrow.json as pj
ARGS = pa.struct([*((k, pa.int64()) for k in {ints}), *((k, pa.float64()) for k in {floats}),
                  *((k, pa.list_(pa.int64())) for k in {grids})])
SCHEMA = pa.schema([("ph", pa.string()), ("cat", pa.string()), ("name", pa.string()),
                    ("ts", pa.decimal128(38, 3)), ("dur", pa.decimal128(38, 3)), ("args", ARGS)])
def read(path):
    return pj.read_json(path, parse_options=pj.ParseOptions(explicit_schema=SCHEMA,
                        unexpected_field_behavior="ignore")).num_rows
"""

DUCKDB = """
import duckdb
ARGS = ", ".join([*(f'"{{k}}" BIGINT' for k in {ints} if k != "bytes"), *(f'"{{k}}" DOUBLE' for k in {floats}),
                  *(f'"{{k}}" BIGINT[]' for k in {grids})])
COLUMNS = {{"ph": "VARCHAR", "cat": "VARCHAR", "name": "VARCHAR", "pid": "VARCHAR", "tid": "VARCHAR",
           "ts": "VARCHAR", "dur": "VARCHAR", "args": f"STRUCT({{ARGS}})"}}
def read(path):
    con = duckdb.connect()
    con.execute(f"CREATE TABLE events AS SELECT * FROM read_ndjson(?, columns={{COLUMNS!r}})", [path])
    return con.execute("SELECT count(*) FROM events").fetchone()[0]
"""

POLARS = """
import polars as pl
ARGS = pl.Struct({{**{{k: pl.Int64 for k in {ints}}}, **{{k: pl.Float64 for k in {floats}}},
                  **{{k: pl.List(pl.Int64) for k in {grids}}}}})
SCHEMA = {{"ph": pl.String, "cat": pl.String, "name": pl.String, "pid": pl.String, "tid": pl.String,
          "ts": pl.String, "dur": pl.String, "args": ARGS}}
def read(path):
    return pl.read_ndjson(path, schema=SCHEMA).height
"""


def ndjson(trace: Path, out: Path) -> int:
    """The trace's events, one a line (what pyarrow.json and Polars read); returns the event count."""
    events = json.loads(trace.read_bytes())["traceEvents"]
    with out.open("w") as f:
        for event in events:
            f.write(json.dumps(event))
            f.write("\n")
    return len(events)


def timed(python: str, setup: str, path: Path) -> dict[str, float] | str:
    fields = {"ints": repr(ARGS_INT), "floats": repr(ARGS_FLOAT), "grids": repr(ARGS_GRID)}
    script = TIMED.format(setup=setup.format(**fields))
    done = subprocess.run([python, "-c", script, str(path)], capture_output=True, text=True)
    if done.returncode:
        return done.stderr.strip().splitlines()[-1]
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--other-python", default=sys.executable,
                        help="an interpreter with duckdb and polars (and pyarrow) installed")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dlscope-readers-") as tmp:
        lines = Path(tmp) / "events.ndjson"
        events = ndjson(args.trace, lines)
        print(f"{args.trace.name}: {events:,} events, {args.trace.stat().st_size / 1e6:.0f} MB of JSON")
        readers = {"dlscope (msgspec + columns)": (sys.executable, DLSCOPE, args.trace),
                   "pyarrow.json": (sys.executable, PYARROW, lines),
                   "duckdb read_ndjson": (args.other_python, DUCKDB, lines),
                   "polars read_ndjson": (args.other_python, POLARS, lines)}
        runs: dict[str, list] = {name: [] for name in readers}
        for _ in range(args.repeat):  # in turn, so drift on a shared machine touches every reader alike
            for name, (python, setup, path) in readers.items():
                runs[name].append(timed(python, setup, path))
        for name, results in runs.items():
            measured = [r for r in results if isinstance(r, dict)]
            if not measured:
                print(f"{name:28s} not run: {results[0]}")
                continue
            print(f"{name:28s} CPU {min(r['cpu_s'] for r in measured):5.2f} s   "
                  f"wall {min(r['wall_s'] for r in measured):5.2f} s   "
                  f"(CPU of each run: {', '.join(format(r['cpu_s'], '.2f') for r in measured)})")


if __name__ == "__main__":
    main()
