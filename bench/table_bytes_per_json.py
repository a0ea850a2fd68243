#!/usr/bin/env python3
"""Imported tables per byte of Kineto JSON over the real traces of ../shared/data (the bounds
``pipeline.budget.LEAST_TABLE_BYTES_PER_JSON_BYTE`` / ``MOST_TABLE_BYTES_PER_JSON_BYTE`` must enclose).

    PYTHONPATH=TREE/src python bench/table_bytes_per_json.py
"""

from pathlib import Path

from dlscope.importers import sniff
from dlscope.importers.kineto import estimated_json_size
from dlscope.model import TABLES
from dlscope.pipeline.executors import import_file

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "kineto"

ratios = []
for path in sorted(p for p in DATA.rglob("*") if p.is_file() and p.name.endswith((".json", ".json.gz"))):
    if sniff(path) != "kineto":
        continue
    profile = import_file(str(path))
    tables = sum(int(profile.table(t).memory_usage(deep=True).sum()) for t in TABLES)
    json_bytes = estimated_json_size(path)
    ratios.append((tables / json_bytes, path.relative_to(DATA), tables, json_bytes))
for ratio, name, tables, json_bytes in sorted(ratios):
    print(f"{ratio:6.3f}  {tables / 2**20:8.1f} MiB tables / {json_bytes / 2**20:8.1f} MiB JSON  {name}")
print(f"min {min(r[0] for r in ratios):.3f}, max {max(r[0] for r in ratios):.3f} over {len(ratios)} traces")
