"""A forked call's exception that pickles but cannot be rebuilt in the parent (ADBC's errors want a keyword-only
``status_code``) comes back as its own one-line text, not as the TypeError of rebuilding it."""

from __future__ import annotations

import adbc_driver_manager
import pytest

from dlscope.errors import DlscopeError
from dlscope.processes import ChildFailed, ForkedCall
from dlscope.store import writer


def _disk_full(*_args):
    raise adbc_driver_manager.OperationalError("database or disk is full",
                                               status_code=adbc_driver_manager.AdbcStatusCode.IO)


def test_an_exception_the_parent_cannot_rebuild_comes_back_as_its_text():
    """As its one-line text; or as itself where tblib's pickling support is installed (Dask's ``distributed``
    installs it when imported, as in a test process that imported it before), which rebuilds any exception."""
    with pytest.raises(Exception) as failed:  # noqa: PT011 - which of the two is checked below
        ForkedCall(_disk_full).result()
    if isinstance(failed.value, ChildFailed):
        assert str(failed.value) == "OperationalError: database or disk is full"
    else:
        assert type(failed.value) is adbc_driver_manager.OperationalError
        assert str(failed.value).startswith("database or disk is full")


def test_an_exception_the_parent_can_rebuild_comes_back_as_itself():
    def full(*_args):
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError) as failed:
        ForkedCall(full).result()
    assert failed.value.errno == 28


def test_a_background_writer_stopped_by_a_full_disk_says_so(tmp_path, monkeypatch):
    """The aggregation writer's ingest failing as ADBC fails on a full disk: one line naming the database and
    SQLite's words, no file left."""
    from test_store_writer import _two_rank_aggs

    monkeypatch.setattr(writer, "BESIDE_AGG_ROWS", 0)
    monkeypatch.setattr(writer, "_ingest_agg_table", _disk_full)
    with pytest.raises(DlscopeError) as failed:
        with writer.atomic_database(tmp_path / "a.sqlite", force=False) as db:
            db.write_raw({})
            pending = db.write_agg_tables_beside(_two_rank_aggs(), writer.BEFORE_REPLAY)
            pending()
    text = str(failed.value)
    assert text.startswith(f"{tmp_path / 'a.sqlite'}: writing the database failed") and "\n" not in text
    assert "database or disk is full" in text and "TypeError" not in text
    assert list(tmp_path.iterdir()) == []
