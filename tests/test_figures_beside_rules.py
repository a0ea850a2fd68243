"""The job's per-rank figures and collectives are made once, by whichever comes to them first: the aggregation writer
beside the rules, once its tables are in (it would otherwise wait for the replay's column), or the importing process
after its rules. Either way the database stores what an import without that writer stores, and the raw files'
kernels and copies give every rank's figures."""

from __future__ import annotations

import os
import sqlite3
import time

import pytest
from conftest import data_file
from raw_kineto import KERNEL_CATS, MEMOP_CATS, events
from test_job import DLRM, _union, dlrm_files, raw_doc
from test_store_writer import _children

from dlscope.distributed.figures import rank_figures
from dlscope.errors import DlscopeError
from dlscope.pipeline import build, build_database
from dlscope.processes import FirstComer
from dlscope.store import writer


def _figures_first(in_writer: bool, monkeypatch) -> None:
    """Make the aggregation writer (``in_writer``) or the importing process come to the figures first: the other
    one's ``take`` of the figures waits until they are taken (other claims as they are)."""
    parent, real = os.getpid(), FirstComer.take

    def take(self) -> bool:
        if getattr(self.work, "func", None) is logged and (os.getpid() == parent) == in_writer:
            deadline = time.monotonic() + 60
            while not self._taken.value and time.monotonic() < deadline:
                time.sleep(0.005)
        return real(self)

    monkeypatch.setattr(FirstComer, "take", take)


def logged(*args):
    """rank_figures, noting the process that makes them in $FIGURES_LOG."""
    with open(os.environ["FIGURES_LOG"], "a") as f:
        f.write(f"{os.getpid()}\n")
    return rank_figures(*args)


def _stored(path) -> dict[str, list[tuple]]:
    with sqlite3.connect(path) as conn:
        return {table: conn.execute(f'SELECT * FROM "{table}" ORDER BY rowid').fetchall()
                for table in ("agg_ranks", "collectives")}


@pytest.fixture(scope="module")
def without_writer(tmp_path_factory):
    """The DLRM job imported with its aggregation tables written after the replay (no writer beside the rules):
    the importing process makes the figures."""
    out = tmp_path_factory.mktemp("plain") / "plain.sqlite"
    build_database([data_file(*DLRM)], out, progress=False)
    return out


@pytest.mark.parametrize("in_writer", [True, False], ids=["aggregation_writer_first", "importing_process_first"])
def test_the_figures_are_made_once_by_the_first_comer_and_equal_those_made_without_a_writer_beside(
        tmp_path, monkeypatch, without_writer, in_writer):
    log = tmp_path / "figures.txt"
    monkeypatch.setenv("FIGURES_LOG", str(log))
    monkeypatch.setattr(writer, "BESIDE_AGG_ROWS", 0)  # the 8-rank job's aggregation tables beside its rules
    monkeypatch.setattr(build, "rank_figures", logged)
    _figures_first(in_writer, monkeypatch)
    beside = build_database([data_file(*DLRM)], tmp_path / "beside.sqlite", progress=False)
    made_by = log.read_text().split()
    assert len(made_by) == 1 and (made_by[0] != str(os.getpid())) == in_writer
    stored = _stored(beside)
    assert len(stored["agg_ranks"]) == 8 and len(stored["collectives"]) > 0
    assert stored == _stored(without_writer)


def test_figures_made_by_the_aggregation_writer_are_the_raw_files_kernels_and_copies(tmp_path, monkeypatch):
    """compute, communication, exposed communication, copies and idle of every rank, made in the writer beside the
    rules: recomputed from the raw files, the rank's kernels and copies cut to its aggregation's window."""
    log = tmp_path / "figures.txt"
    monkeypatch.setenv("FIGURES_LOG", str(log))
    monkeypatch.setattr(writer, "BESIDE_AGG_ROWS", 0)
    monkeypatch.setattr(build, "rank_figures", logged)
    _figures_first(True, monkeypatch)
    db = build_database([data_file(*DLRM)], tmp_path / "beside.sqlite", progress=False)
    assert log.read_text().split() != [str(os.getpid())]
    with sqlite3.connect(db) as conn:
        stored = {rank: (lo, hi, compute, comm, exposed, copies, idle) for rank, lo, hi, compute, comm, exposed, copies,
                  idle in conn.execute("SELECT r.rank, a.window_start, a.window_end, r.compute_ns, r.communication_ns, "
                                       "r.exposed_communication_ns, r.memcpy_ns, r.idle_ns FROM agg_ranks r "
                                       "JOIN aggregations a USING (agg_id)")}
    assert sorted(stored) == list(range(8))
    for path in dlrm_files():
        rank = raw_doc(path)["distributedInfo"]["rank"]
        lo, hi, *figures = stored[rank]
        cut: dict[str, list] = {"compute": [], "comm": [], "copy": []}
        for e in events(path):
            if e.cat in KERNEL_CATS | MEMOP_CATS and min(e.end, hi) > max(e.start, lo):
                kind = "copy" if e.cat in MEMOP_CATS else "comm" if e.name.startswith("ncclKernel_") else "compute"
                cut[kind].append((max(e.start, lo), min(e.end, hi)))
        compute, kernels = _union(cut["compute"]), _union(cut["compute"] + cut["comm"])
        busy = _union(cut["compute"] + cut["comm"] + cut["copy"])
        assert cut["comm"] and cut["copy"] and compute > 0
        assert figures == [compute, _union(cut["comm"]), kernels - compute, busy - kernels, (hi - lo) - busy]


def test_figures_failing_in_the_aggregation_writer_leave_no_file_and_no_child(tmp_path, monkeypatch):
    """The writer taking the figures and failing on them: one line naming the database, nothing left behind."""
    def failing(*_args):
        raise ValueError("no figures")

    monkeypatch.setattr(writer, "BESIDE_AGG_ROWS", 0)
    monkeypatch.setattr(build, "rank_figures", failing)
    parent, real = os.getpid(), FirstComer.take

    def take(self) -> bool:  # the importing process waits until the writer took the figures
        if getattr(self.work, "func", None) is failing and os.getpid() == parent:
            deadline = time.monotonic() + 60
            while not self._taken.value and time.monotonic() < deadline:
                time.sleep(0.005)
        return real(self)

    monkeypatch.setattr(FirstComer, "take", take)
    (tmp_path / "out").mkdir()
    before = _children()
    with pytest.raises(DlscopeError) as failed:
        build_database([data_file(*DLRM)], tmp_path / "out" / "a.sqlite", progress=False)
    text = str(failed.value)
    assert text.startswith(f"{tmp_path / 'out' / 'a.sqlite'}: writing the database failed") and "\n" not in text
    assert "no figures" in text
    assert list((tmp_path / "out").iterdir()) == []
    assert _children() <= before
