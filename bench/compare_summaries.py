"""The summary JSON of profile databases, from two dlscope trees, compared: a change to the summary's code must
leave every figure as it was. Each tree runs in its own interpreter (PYTHONPATH=TREE/src); per database it
dumps ``summary_dict`` of the current run and, for a job, of every rank in it.

    python bench/compare_summaries.py --before /work/ref2/src --after src DB1.sqlite DB2.sqlite ...

Prints one line per database (identical / DIFFERENT and the first differing key) and exits 1 when any differs.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

DUMP = r"""
import json, sqlite3, sys
from dlscope.present.summary import summary_dict
out = {}
for db in sys.argv[2:]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        ranks = sorted({r for (r,) in conn.execute("SELECT rank FROM aggregations")})
    finally:
        conn.close()
    entry = {"default": summary_dict(db)}
    if len(ranks) > 1:
        entry.update({f"rank {r}": summary_dict(db, rank=r) for r in ranks})
    out[db] = entry
with open(sys.argv[1], "w") as f:
    json.dump(out, f, sort_keys=True)
"""


def dump(src: str, dbs: list[str], path: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(Path(src).resolve())}
    subprocess.run([sys.executable, "-c", DUMP, path, *dbs], check=True, env=env)
    with open(path) as f:
        return json.load(f)


def first_difference(a, b, where: str = "") -> str | None:
    """The path of the first value that differs (``memory.devices[1].peak_allocated_op``), else None."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                return f"{where}.{k} (only in {'after' if k not in a else 'before'})"
            found = first_difference(a[k], b[k], f"{where}.{k}")
            if found:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{where} (length {len(a)} vs {len(b)})"
        for i, (x, y) in enumerate(zip(a, b)):
            found = first_difference(x, y, f"{where}[{i}]")
            if found:
                return found
        return None
    same = a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))
    return None if same and type(a) is type(b) else f"{where} ({a!r} vs {b!r})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="the src folder of the tree before the change")
    parser.add_argument("--after", default="src", help="the src folder of the tree after it [src]")
    parser.add_argument("databases", nargs="+")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        before = dump(args.before, args.databases, os.path.join(tmp, "before.json"))
        after = dump(args.after, args.databases, os.path.join(tmp, "after.json"))
    bad = 0
    for db in args.databases:
        diff = first_difference(before[db], after[db])
        memory = before[db]["default"].get("memory")
        devices = len(memory["devices"]) if memory else 0
        print(f"{Path(db).name}: {'identical' if diff is None else 'DIFFERENT at ' + diff} "
              f"({len(before[db])} summaries, memory devices {devices})")
        bad += diff is not None
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
