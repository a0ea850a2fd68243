"""An import takes Arrow's buffers from malloc (pyarrow's system pool), not from the default pool (mimalloc,
which kept ~27 MiB resident for a few MiB of buffers on the benchmark trace): the pool is the system one while
the import runs, the caller's again after it (also after a failure), and the database is the one the default
pool gives, row for row."""

from __future__ import annotations

import contextlib
import sqlite3

import pyarrow as pa
import pytest
from conftest import data_file

from dlscope.errors import DlscopeError
from dlscope.pipeline import build, build_database

TRACE = ("kineto", "hta_a100_nccl_rank0of2_3steps.json.gz")


def pools_seen(monkeypatch) -> list[str]:
    """The default pool's backend each time the analysis starts (after the parse, before the writers)."""
    seen: list[str] = []
    real = build.analyse

    def analyse(*args, **kwargs):
        seen.append(pa.default_memory_pool().backend_name)
        return real(*args, **kwargs)

    monkeypatch.setattr(build, "analyse", analyse)
    return seen


def stored(db) -> dict[str, list[tuple]]:
    """Every table's rows in stored order (creation times left out), read with sqlite3."""
    conn = sqlite3.connect(db)
    try:
        out = {}
        for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name").fetchall():
            cols = [r[1] for r in conn.execute(f'PRAGMA table_info("{name}")') if r[1] != "created_at"]
            quoted = ", ".join(f'"{c}"' for c in cols)
            try:
                rows = conn.execute(f'SELECT {quoted} FROM "{name}" ORDER BY rowid').fetchall()
            except sqlite3.OperationalError:  # a WITHOUT ROWID table of the FTS5 index: in its key's order
                rows = conn.execute(f'SELECT {quoted} FROM "{name}" ORDER BY '
                                    + ", ".join(str(i + 1) for i in range(len(cols)))).fetchall()
            out[name] = [r for r in rows if name != "dlscope_meta" or r[0] != "created_at"]
        return out
    finally:
        conn.close()


def test_the_import_takes_arrow_buffers_from_malloc_and_gives_the_pool_back(tmp_path, monkeypatch):
    before = pa.default_memory_pool().backend_name
    assert before != "system"  # pyarrow's default (mimalloc or jemalloc): else this test proves nothing
    seen = pools_seen(monkeypatch)
    build_database([data_file(*TRACE)], tmp_path / "out.sqlite", progress=False)
    assert seen == ["system"]
    assert pa.default_memory_pool().backend_name == before


def test_a_failing_import_gives_the_pool_back_and_leaves_no_file(tmp_path, monkeypatch):
    before = pa.default_memory_pool().backend_name
    seen = pools_seen(monkeypatch)
    with pytest.raises(DlscopeError, match="iteration"):
        build_database([data_file(*TRACE)], tmp_path / "out.sqlite", progress=False, iter_start=10**6)
    assert seen == ["system"]
    assert pa.default_memory_pool().backend_name == before
    assert list(tmp_path.iterdir()) == []


def test_the_database_is_the_one_the_default_pool_writes(tmp_path, monkeypatch):
    trace = data_file(*TRACE)
    with_malloc = build_database([trace], tmp_path / "malloc.sqlite", progress=False)
    monkeypatch.setattr(build, "arrow_from_malloc", contextlib.nullcontext)
    seen = pools_seen(monkeypatch)
    with_default = build_database([trace], tmp_path / "default.sqlite", progress=False)
    assert seen == [pa.default_memory_pool().backend_name] and seen != ["system"]
    a, b = stored(with_malloc), stored(with_default)
    assert a.keys() == b.keys() and sum(len(rows) for rows in a.values()) > 1000
    for name in a:
        assert a[name] == b[name], name
