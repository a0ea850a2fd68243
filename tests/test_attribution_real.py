"""Every kernel and memory operation of every real Kineto trace is charged to the op that launched it, as an
independent reading of the raw JSON finds it (tests/raw_kineto.py: PRODUCT.md's definition written out)."""

from __future__ import annotations

import sqlite3

import pytest
import raw_kineto
from conftest import data_files

KINETO = data_files("kineto", "**/*.json.gz")


def _dlscope_owners(db) -> dict[tuple, tuple | None]:
    """(correlation, device, start) of each kernel/memop -> (tid, op name, op start) of its launching op."""
    conn = sqlite3.connect(db)
    rows = conn.execute(
        "SELECT a.correlation, a.device, a.start, o.tid, o.name, o.start FROM "
        "(SELECT correlation, device, start, op_id FROM kernels UNION ALL "
        " SELECT correlation, device, start, op_id FROM memops) a LEFT JOIN ops o ON o.op_id = a.op_id").fetchall()
    conn.close()
    return {(c, d, s): (None if name is None else (str(tid), name, start)) for c, d, s, tid, name, start in rows}


@pytest.mark.parametrize("path", KINETO, ids=lambda p: p.name)
def test_every_gpu_activity_is_charged_to_the_op_enclosing_its_launch(path, import_db):
    owners = raw_kineto.launching_ops(path)
    if not owners:
        pytest.skip(f"{path.name}: no GPU activity with a launch call in the trace")
    by_index = {e.index: e for e in raw_kineto.events(path)}
    got = _dlscope_owners(import_db(path))
    wrong, checked = [], 0
    for index, owner in owners.items():
        e = by_index[index]
        device = e.args.get("device", e.pid)
        key = (e.correlation, device, e.start)
        assert key in got, f"{e.name} (correlation {e.correlation}) is not in the database"
        expected = None if owner is None else (str(owner.tid), owner.name, owner.start)  # tids may be strings
        checked += 1
        if got[key] != expected:
            wrong.append((e.name[:60], expected, got[key]))
    assert checked == len(owners)
    assert not wrong, f"{len(wrong)} of {checked} GPU activities charged to the wrong op, e.g. {wrong[:3]}"
