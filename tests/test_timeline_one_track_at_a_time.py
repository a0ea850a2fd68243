"""What the import's writer stores of a rank's Timeline (``analyze.timeline.stored_arrays``) is made one track at
a time: each kind's matrix is let go before the next kind's track is built (the writer, a forked child beside
the aggregation and the critical path, held every track at once before). The bytes are those of the viewer's
``RankTimeline.build(...).to_arrays()`` over the same matrices read back from the database's rows (the rows
themselves are checked against the stored arrays in test_viewer_timeline_stored.py)."""

from __future__ import annotations

import gc
import itertools
import sqlite3
import weakref

import numpy as np
from conftest import data_file

from dlscope.analyze import timeline
from dlscope.analyze.timeline import COLUMNS, KINDS, MEMORY_COLUMNS, RankTimeline, select_sql, stored_arrays


def matrices_from_rows(db, rank: int) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Each kind's matrix (owning its data: a view's base would outlive it) and the allocator samples, straight
    from the database with SQL."""
    with sqlite3.connect(db) as conn:
        m = {kind: np.fromiter(itertools.chain.from_iterable(conn.execute(select_sql(kind), (rank,))),
                               np.int64).reshape(-1, len(cols)).copy() for kind, (_, cols) in COLUMNS.items()}
        memory = np.fromiter(itertools.chain.from_iterable(conn.execute(
            "SELECT COALESCE(device, -1), ts, COALESCE(bytes_delta, 0), COALESCE(total_allocated, -1), "
            "COALESCE(total_reserved, -1) FROM memory WHERE rank = ? ORDER BY rowid", (rank,))), np.int64)
    return m, memory.reshape(-1, len(MEMORY_COLUMNS))


def test_each_kinds_matrix_is_let_go_before_the_next_track_is_built(import_db, monkeypatch):
    db = import_db(data_file("kineto", "hta_v100_rank1of2_5steps.json.gz"))
    rank = sqlite3.connect(db).execute("SELECT MIN(rank) FROM kernels").fetchone()[0]
    m, memory = matrices_from_rows(db, rank)
    assert all(len(m[kind]) for kind in ("op", "runtime", "kernel"))
    expected = RankTimeline.build(rank, {k: v.copy() for k, v in m.items()}, memory.copy()).to_arrays()
    alive = {kind: weakref.ref(matrix) for kind, matrix in m.items()}
    seen = []
    built = timeline._track_arrays

    def track_arrays(kind, *args, **kwargs):  # (a kind's events sorted, their arrays not yet made)
        gc.collect()
        seen.append((kind, sorted(k for k, ref in alive.items() if ref() is not None)))
        return built(kind, *args, **kwargs)

    monkeypatch.setattr(timeline, "_track_arrays", track_arrays)
    stored = stored_arrays(m, memory)
    del memory
    # the kinds in the stored order; when a kind's track is built, only it and the kinds after it are held
    assert [kind for kind, _ in seen] == ["range", "op", "runtime", "kernel", "memop"]
    for i, (kind, held) in enumerate(seen):
        assert held == sorted(k for k, _ in seen[i:]), kind
    assert m == {}
    assert list(stored) == list(expected)
    assert all(stored[name] == expected[name] for name in expected)
    assert {name.split(".")[0] for name in stored} >= set(KINDS)
