"""Are two profile databases the same result? Every table row for row, in stored order (ids included), the
indexes, and the summary JSON of every aggregation (the ``dlscope summary`` figures and the job's ranks).

    python bench/compare_databases.py BEFORE.sqlite AFTER.sqlite [--ignore-column TABLE.COLUMN ...]

Used to check that a speed-up changes nothing: dump the database of an input before the change, rebuild
it after, compare. Creation timestamps are left out (they differ by construction). Floats must be equal
bit for bit (NaN equals NaN). Exit 0 when identical; else 1, one line per difference (at most 5 per table).
"""

from __future__ import annotations

import argparse
import json
import math
import sqlite3
import sys
from pathlib import Path


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    return type(a) is type(b) and a == b


def _rows(conn: sqlite3.Connection, name: str) -> tuple[list[str], list[tuple]]:
    cols = [r[1] for r in conn.execute(f'PRAGMA table_info("{name}")') if r[1] != "created_at"]
    quoted = ", ".join('"' + c.replace('"', '""') + '"' for c in cols)
    try:
        rows = conn.execute(f'SELECT {quoted} FROM "{name}" ORDER BY rowid').fetchall()
    except sqlite3.OperationalError:  # a WITHOUT ROWID table (the FTS5 index's): stored in its key's order
        order = ", ".join(str(i + 1) for i in range(len(cols)))
        rows = conn.execute(f'SELECT {quoted} FROM "{name}" ORDER BY {order}').fetchall()
    if name == "dlscope_meta":
        rows = [r for r in rows if r[0] != "created_at"]
    return cols, rows


def table_differences(before: Path, after: Path, ignore: set[str]) -> list[str]:
    out: list[str] = []
    a, b = sqlite3.connect(before), sqlite3.connect(after)
    try:
        schema = "SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY type, name"
        if a.execute(schema).fetchall() != b.execute(schema).fetchall():
            out.append("schema or indexes differ")
        names = [r[0] for r in a.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        for name in names:
            cols_a, rows_a = _rows(a, name)
            cols_b, rows_b = _rows(b, name)
            if cols_a != cols_b:
                out.append(f"{name}: columns differ")
                continue
            if len(rows_a) != len(rows_b):
                out.append(f"{name}: {len(rows_a)} rows before, {len(rows_b)} after")
                continue
            keep = [i for i, c in enumerate(cols_a) if f"{name}.{c}" not in ignore]
            shown = 0
            for n, (ra, rb) in enumerate(zip(rows_a, rows_b)):
                bad = [cols_a[i] for i in keep if not _same(ra[i], rb[i])]
                if bad:
                    if shown < 5:
                        out.append(f"{name} row {n}: {', '.join(bad)}: "
                                   + "; ".join(f"{ra[cols_a.index(c)]!r} -> {rb[cols_a.index(c)]!r}" for c in bad[:3]))
                    shown += 1
            if shown > 5:
                out.append(f"{name}: {shown} rows differ in all")
    finally:
        a.close()
        b.close()
    return out


def summaries(db: Path) -> dict:
    """``summary_dict`` of every aggregation plus the job's per-rank rows (source paths left out)."""
    from dlscope.distributed import summary_ranks
    from dlscope.present.summary import summary_dict

    conn = sqlite3.connect(db)
    try:
        ids = [r[0] for r in conn.execute("SELECT agg_id FROM aggregations ORDER BY agg_id")]
        ranks = summary_ranks(conn)
    finally:
        conn.close()
    for r in ranks:
        r.pop("source_path", None)
    return {"aggregations": [summary_dict(db, agg_id=i) for i in ids], "ranks": ranks}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--ignore-column", action="append", default=[], metavar="TABLE.COLUMN")
    args = parser.parse_args()
    diffs = table_differences(args.before, args.after, set(args.ignore_column))
    s_before = json.dumps(summaries(args.before), sort_keys=True, default=str)
    s_after = json.dumps(summaries(args.after), sort_keys=True, default=str)
    if s_before != s_after:
        diffs.append("summary JSON differs")
    for line in diffs:
        print(line)
    print(f"{args.before.name} vs {args.after.name}: " + ("identical" if not diffs else f"{len(diffs)} differences"))
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
