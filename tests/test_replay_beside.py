"""The import's critical path replayed in a forked child beside the aggregations (whatif.stored.annotated_beside):
it stores the hand-computed path, a child that raises or dies leaves the database written with the note saying
why, and an import that fails or is interrupted meanwhile kills the child and leaves no file behind."""

from __future__ import annotations

import os
import signal
import sqlite3
import sys
import time
from pathlib import Path

import pytest
from process_watch import alive, children, wait_gone
from test_critical_path_stored import US, _db, _stored
from test_whatif_handmade import _sync_trace

import dlscope.pipeline.build as build_module
import dlscope.whatif.stored as stored
from dlscope.errors import DlscopeError
from dlscope.pipeline import build_database
from dlscope.processes import ChildFailed, FirstComer, ForkedCall, fork_pays

pytestmark = [pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc"),
              pytest.mark.skipif(not fork_pays(), reason="the replay runs beside only where a fork pays")]


def _build_noting_its_pid(monkeypatch, folder: Path, then=None) -> None:
    """``whatif.stored.build`` writes the pid of the process it runs in to ``folder`` (the forked child
    inherits the patch), then does ``then()`` (if given) instead of building."""
    real = stored.build

    def build(job):
        (folder / str(os.getpid())).touch()
        return then() if then is not None else real(job)

    folder.mkdir()
    monkeypatch.setattr(stored, "build", build)


def test_the_replay_runs_in_a_child_and_stores_the_hand_computed_path(tmp_path, monkeypatch):
    _build_noting_its_pid(monkeypatch, tmp_path / "pids")
    before = children()
    db = _db(tmp_path, _sync_trace())
    (pid,) = [int(p.name) for p in (tmp_path / "pids").iterdir()]
    assert pid != os.getpid() and not alive(pid) and children() <= before
    s = _stored(db, 1)  # test_critical_path_stored works these out by hand
    assert s["ops"] == {"aten::mm": 120 * US, "aten::relu": 40 * US, "aten::add": 20 * US}
    assert s["kernels"] == {"volta_sgemm_128x64_nn": 100 * US, "relu_kernel": 40 * US}
    assert {c: ns for _, c, ns in s["path"]} == {"kernel": 140 * US, "cpu_op": 24 * US, "cpu_other": 18 * US,
                                                 "launch": 16 * US, "sync": 2 * US}
    assert s["row"][1] is None


def test_the_child_prices_the_findings_while_the_importing_process_writes_its_tables(tmp_path, monkeypatch):
    """The findings are sent as soon as the rules are done: the child is pricing them (``Replay.figures``) while
    the importing process writes the aggregation tables, not after; the stored path is the hand-computed one."""
    from dlscope.store import writer

    priced = tmp_path / "pricing"
    figures, write = stored.Replay.figures, writer.NewDatabase.write_agg_tables

    def noted_figures(self, requests):  # in the child
        priced.touch()
        return figures(self, requests)

    seen = []

    def waiting_write(self, *args, **kwargs):  # in the importing process: has the child begun pricing?
        deadline = time.monotonic() + 20
        while not priced.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        seen.append(priced.exists())
        return write(self, *args, **kwargs)

    importing = os.getpid()

    class WriterFirst(FirstComer):  # the writer builds the timeline arrays, so this process writes the tables
        def take(self) -> bool:      # (which process comes first is a race; here the one it tests is forced)
            return False if os.getpid() == importing else super().take()

    monkeypatch.setattr(stored.Replay, "figures", noted_figures)
    monkeypatch.setattr(writer.NewDatabase, "write_agg_tables", waiting_write)
    monkeypatch.setattr(build_module, "FirstComer", WriterFirst)
    _build_noting_its_pid(monkeypatch, tmp_path / "pids")
    s = _stored(_db(tmp_path, _sync_trace()), 1)
    (pid,) = [int(p.name) for p in (tmp_path / "pids").iterdir()]
    assert pid != os.getpid() and seen == [True]
    assert s["ops"] == {"aten::mm": 120 * US, "aten::relu": 40 * US, "aten::add": 20 * US}
    assert s["row"][1] is None


def test_under_a_memory_budget_the_replay_runs_in_the_importing_process(tmp_path, monkeypatch):
    """A budget is estimated for one analysis at a time: no second process builds a graph beside it."""
    _build_noting_its_pid(monkeypatch, tmp_path / "pids")
    trace = _sync_trace().write(tmp_path / "t.json")
    build_database([trace], tmp_path / "t.sqlite", progress=False, max_memory="2GB")
    assert [int(p.name) for p in (tmp_path / "pids").iterdir()] == [os.getpid()]
    assert _stored(tmp_path / "t.sqlite", 1)["row"][1] is None


def test_where_the_rows_outweigh_the_ranks_the_replay_runs_in_the_importing_process(tmp_path, monkeypatch):
    """An import of large ranks ends with the forked writer: a third process would only slow it, so the replay
    stays here (the rule's per-row cost raised so this small trace's rows outweigh its one rank), same path."""
    monkeypatch.setattr(build_module, "BESIDE_SECONDS_PER_ROW", 1.0)
    _build_noting_its_pid(monkeypatch, tmp_path / "pids")
    db = _db(tmp_path, _sync_trace())
    assert [int(p.name) for p in (tmp_path / "pids").iterdir()] == [os.getpid()]
    assert _stored(db, 1)["kernels"] == {"volta_sgemm_128x64_nn": 100 * US, "relu_kernel": 40 * US}


def test_a_replay_child_that_dies_leaves_the_database_written_with_the_note(tmp_path, monkeypatch):
    """Killed (out of memory, say): the import still writes every other figure; the critical path's note says
    what became of the child."""
    _build_noting_its_pid(monkeypatch, tmp_path / "pids", then=lambda: os.kill(os.getpid(), signal.SIGKILL))
    before = children()
    db = _db(tmp_path, _sync_trace())
    (pid,) = [int(p.name) for p in (tmp_path / "pids").iterdir()]
    assert pid != os.getpid() and wait_gone([pid]) == [] and children() <= before
    s = _stored(db, 1)
    assert s["row"][1] == "the critical path could not be computed (its process killed by signal SIGKILL)"
    assert set(s["ops"].values()) == {None} and set(s["kernels"].values()) == {None} and s["path"] == []
    assert {ns for _, ns in s["findings"]} == {None} and s["row"][0] is None
    conn = sqlite3.connect(db)
    try:  # the rest of the aggregation is there
        assert conn.execute("SELECT wall_clock_ns FROM aggregations").fetchone()[0] > 0
    finally:
        conn.close()


def test_a_replay_child_that_fails_outside_its_own_guards_still_leaves_the_database_with_the_note(tmp_path,
                                                                                                monkeypatch):
    def fails(self, enough):
        raise RuntimeError("an unexpected failure")

    monkeypatch.setattr(stored.Replay, "plan_ahead", fails)  # the forked child inherits it
    s = _stored(_db(tmp_path, _sync_trace()), 1)
    assert s["row"][1] == "the critical path could not be computed (RuntimeError: an unexpected failure)"
    assert set(s["ops"].values()) == {None} and s["path"] == [] and {ns for _, ns in s["findings"]} == {None}


@pytest.mark.parametrize("failure", [DlscopeError("the rules failed"), KeyboardInterrupt()])
def test_an_import_failing_while_the_replay_runs_kills_it_and_leaves_no_file(tmp_path, monkeypatch, failure):
    """The aggregations fail (or Ctrl-C) while the child is still replaying: the child is killed, not awaited;
    no database and no temporary file are left."""
    from dlscope.pipeline import build as pipeline

    pids = tmp_path / "pids"
    _build_noting_its_pid(monkeypatch, pids, then=lambda: time.sleep(600))

    def aggregate_ranks(*args, **kwargs):
        deadline = time.monotonic() + 30
        while not any(pids.iterdir()) and time.monotonic() < deadline:  # the child is replaying
            time.sleep(0.02)
        raise failure

    monkeypatch.setattr(pipeline, "aggregate_ranks", aggregate_ranks)
    out = tmp_path / "out"
    out.mkdir()
    trace = _sync_trace().write(tmp_path / "t.json")
    before = children()
    started = time.monotonic()
    with pytest.raises(type(failure)):
        build_database([trace], out / "t.sqlite", progress=False)
    (pid,) = [int(p.name) for p in pids.iterdir()]
    assert time.monotonic() - started < 20
    assert wait_gone([pid]) == [] and children() <= before
    assert list(out.iterdir()) == []


# ------------------------------------------------------------------------------------ ForkedCall's inbox


def _add_what_is_sent(receive, x):
    return receive() + x


def test_a_forked_call_gets_the_value_sent_after_it_started():
    call = ForkedCall(_add_what_is_sent, 2, inbox=True)
    call.send(40)
    assert call.result() == 42
    with pytest.raises(RuntimeError, match="sent its value already"):
        call.send(1)


def _ready_before_and_after(inbox, flag):
    before = inbox.ready()
    Path(flag).touch()  # the parent sends only now
    deadline = time.monotonic() + 30
    while not inbox.ready() and time.monotonic() < deadline:
        time.sleep(0.01)
    return before, inbox.ready(), inbox()


def test_a_child_can_tell_without_waiting_whether_its_value_has_come(tmp_path):
    flag = tmp_path / "checked"
    call = ForkedCall(_ready_before_and_after, str(flag), inbox=True)
    deadline = time.monotonic() + 30
    while not flag.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    call.send("hello")
    assert call.result() == (False, True, "hello")


def test_a_forked_call_sent_nothing_ends_with_an_error_instead_of_waiting():
    call = ForkedCall(_add_what_is_sent, 2, inbox=True)
    with pytest.raises(EOFError, match="sent nothing"):
        call.result()


def test_a_value_sent_to_a_child_that_died_is_no_error_and_its_result_says_what_happened():
    call = ForkedCall(_die, inbox=True)
    pid = call.pid
    assert wait_gone([pid]) == []
    call.send(list(range(100_000)))  # more than a pipe holds: the write must not block on a dead reader
    with pytest.raises(ChildFailed, match="killed by signal SIGKILL"):
        call.result()


def _die(receive):
    os.kill(os.getpid(), signal.SIGKILL)
