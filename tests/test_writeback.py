"""The new database's write-out begun beside the import's last writes, where the rename will replace a file."""

from __future__ import annotations

import os
import sqlite3
import threading

import pytest
from conftest import data_file

from dlscope.pipeline import build_database
from dlscope.store import writer

needs_linux_call = pytest.mark.skipif(writer._sync_file_range() is None, reason="no sync_file_range here")


def _open_in(folder) -> list[str]:
    """The files in ``folder`` this process has a descriptor of."""
    named = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            named.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:  # (the listing's own descriptor)
            pass
    return [n for n in named if n.startswith(str(folder))]


def _recorded(monkeypatch) -> list[tuple[str, int, int, int, int]]:
    """Each sync_file_range call: the file its descriptor names, offset, length, flags and the call's result."""
    calls: list = []
    real = writer._sync_file_range()
    assert real is not None

    def recording(fd: int, offset: int, length: int, flags: int) -> int:
        result = real(fd, offset, length, flags)
        calls.append((os.readlink(f"/proc/self/fd/{fd}"), offset, length, flags, result))
        return result
    monkeypatch.setattr(writer, "_sync_file_range", lambda: recording)
    return calls


def _writeback_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "dlscope-writeback"]


@needs_linux_call
def test_an_import_over_an_existing_database_begins_the_new_files_write_out_before_the_rename(tmp_path, monkeypatch):
    trace = data_file("kineto", "hta_a100_nccl_rank0of2_3steps.json.gz")
    out = tmp_path / "out.sqlite"
    out.write_bytes(b"the previous run's file")
    calls = _recorded(monkeypatch)
    build_database([trace], out, force=True, progress=False)
    assert len(calls) == 1
    named, offset, length, flags, result = calls[0]
    # the temporary file of this run (the whole file, write-out begun only), next to the output, renamed since
    assert os.path.dirname(named) == str(tmp_path) and os.path.basename(named).startswith(".out.sqlite")
    assert (offset, length, flags, result) == (0, 0, 2, 0)
    assert not os.path.exists(named.removesuffix(" (deleted)"))
    assert _open_in(tmp_path) == [] and not _writeback_threads()  # its descriptor closed, its thread ended
    with sqlite3.connect(out) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert conn.execute("SELECT COUNT(*) FROM kernels").fetchone()[0] > 2_000


@needs_linux_call
def test_a_new_output_name_begins_no_write_out(tmp_path, monkeypatch):
    calls = _recorded(monkeypatch)
    with writer.atomic_database(tmp_path / "new.sqlite", force=True) as db:
        db.connect()
    assert calls == [] and (tmp_path / "new.sqlite").exists()


@needs_linux_call
def test_a_failure_after_the_write_out_began_leaves_the_old_file_and_nothing_open(tmp_path, monkeypatch):
    out = tmp_path / "out.sqlite"
    out.write_bytes(b"the previous run's file")
    calls = _recorded(monkeypatch)
    with pytest.raises(RuntimeError, match="failed late"):
        with writer.atomic_database(out, force=True) as db:
            db.connect().execute("CREATE TABLE late (x)")
            raise RuntimeError("failed late")
    assert len(calls) == 1 and calls[0][-1] == 0
    assert out.read_bytes() == b"the previous run's file"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.sqlite"]
    assert _open_in(tmp_path) == [] and not _writeback_threads()


def test_without_sync_file_range_the_database_replaces_the_old_one_as_ever(tmp_path, monkeypatch):
    out = tmp_path / "out.sqlite"
    out.write_bytes(b"the previous run's file")
    monkeypatch.setattr(writer, "_sync_file_range", lambda: None)
    with writer.atomic_database(out, force=True) as db:
        db.connect().execute("CREATE TABLE late (x)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.sqlite"] and _open_in(tmp_path) == []
    conn = sqlite3.connect(out)
    assert conn.execute("SELECT name FROM sqlite_master WHERE name = 'late'").fetchone() == ("late",)
    conn.close()
