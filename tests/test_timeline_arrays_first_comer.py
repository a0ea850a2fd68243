"""The Timeline arrays are built by whichever of the two is free first: the forked raw-table writer after its
indexes, or the importing process once its aggregations are done (waiting for the replay or the writer). Either
way the database stores the arrays the viewer builds from its rows, built once; a failure building them in the
importing process leaves no database and no temporary file behind."""

from __future__ import annotations

import os
import time

import pytest
from conftest import data_file
from test_viewer_timeline_stored import assert_same, stored_rows

from dlscope.pipeline import build, build_database
from dlscope.processes import FirstComer, ForkedCall
from dlscope.viewer.profile_db import ProfileDB
from dlscope.viewer.timeline import load_rank, rank_from_rows, ranks

TRACE = ("kineto", "hta_a100_nccl_rank0of2_3steps.json.gz")


def first_here(first: bool, monkeypatch) -> None:
    """Make the importing process (``first``) or the writer come to the arrays first: the other one's ``take``
    waits until they are taken."""
    parent, real = os.getpid(), FirstComer.take

    def take(self) -> bool:
        if (os.getpid() == parent) != first:
            deadline = time.monotonic() + 60
            while not self._taken.value and time.monotonic() < deadline:
                time.sleep(0.005)
        return real(self)

    monkeypatch.setattr(FirstComer, "take", take)


def builders(monkeypatch, log) -> None:
    """Append the id of each process that builds the arrays to ``log`` (the writer is forked after this)."""
    real = build.timeline_arrays

    def logged(*args, **kwargs):
        with open(log, "a") as f:
            f.write(f"{os.getpid()}\n")
        return real(*args, **kwargs)

    monkeypatch.setattr(build, "timeline_arrays", logged)


@pytest.mark.parametrize("here", [True, False], ids=["importing_process_first", "writer_first"])
def test_the_arrays_are_built_once_by_the_first_comer_and_equal_the_rows(tmp_path, monkeypatch, here):
    trace, log = data_file(*TRACE), tmp_path / "builders.txt"
    first_here(here, monkeypatch)
    builders(monkeypatch, log)
    db = build_database([trace], tmp_path / "out.sqlite", progress=False)
    built_by = log.read_text().split()
    assert len(built_by) == 1 and (built_by[0] == str(os.getpid())) == here
    assert stored_rows(db) > 0
    pdb = ProfileDB(db)
    for rank in ranks(pdb):
        rows = rank_from_rows(pdb, rank)
        assert sum(len(t.ids) for t in rows.tracks.values()) > 0
        assert_same(load_rank(pdb, rank), rows)


def test_a_failure_building_them_in_the_importing_process_leaves_nothing_behind(tmp_path, monkeypatch):
    trace, out = data_file(*TRACE), tmp_path / "out" / "profile.sqlite"
    out.parent.mkdir()
    first_here(True, monkeypatch)

    def fails(*args, **kwargs):
        raise MemoryError("no room for the timeline arrays")

    monkeypatch.setattr(build, "timeline_arrays", fails)
    with pytest.raises(MemoryError, match="timeline arrays"):
        build_database([trace], out, progress=False)
    assert list(out.parent.iterdir()) == []


def test_only_the_first_of_a_process_and_its_forked_child_takes_the_work():
    taken_first = FirstComer(lambda: None)
    child = ForkedCall(taken_first.take)
    assert child.result() is True and taken_first.take() is False
    taken_here = FirstComer(lambda: None)
    assert taken_here.take() is True
    assert ForkedCall(taken_here.take).result() is False and taken_here.take() is False
