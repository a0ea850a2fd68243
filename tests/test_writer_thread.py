"""The raw tables' writer on a thread where an import's rows outweigh its ranks (no forked copy of the pages the
importing process rewrites), forked where the ranks outweigh the rows; a writer thread its caller gives up on
stops at its next step instead of writing on."""

from __future__ import annotations

import os
import sqlite3
import sys
import threading
from contextlib import closing

import pandas as pd
import pytest
from conftest import data_file
from raw_kineto import KERNEL_CATS, events

import dlscope.pipeline.build as build_module
from dlscope.pipeline import build_database
from dlscope.processes import GivenUp, ThreadCall, can_fork, stop_if_given_up
from dlscope.store import writer

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or not can_fork(),
                                reason="where dlscope may not fork, every writer is a thread anyway")

TRACE = ("kineto", "hta_a100_nccl_rank0of2_3steps.json.gz")


def _kernels(db) -> tuple[int, int]:
    with closing(sqlite3.connect(db)) as conn:
        return conn.execute("SELECT count(*), sum(dur) FROM kernels").fetchone()


def _counting_forks(monkeypatch, allowed: bool) -> list[int]:
    """``os.fork`` made to note each call in the importing process (and to fail the import if not ``allowed``)."""
    real, me, forks = os.fork, os.getpid(), []

    def fork():
        if os.getpid() == me:
            forks.append(1)
        if not allowed:
            raise AssertionError("the import forked")
        return real()

    monkeypatch.setattr(os, "fork", fork)
    return forks


def test_an_import_whose_rows_outweigh_its_ranks_writes_every_kernel_from_a_thread_without_forking(
        tmp_path, monkeypatch):
    """A real profile, its per-row cost raised so its rows outweigh its one rank: no process is forked, and every
    kernel of the raw JSON is stored with its time, the critical path computed."""
    path = data_file(*TRACE)
    monkeypatch.setattr(build_module, "BESIDE_SECONDS_PER_ROW", 1.0)
    forks = _counting_forks(monkeypatch, allowed=False)
    db = build_database([path], tmp_path / "t.sqlite", progress=False)
    kernels = [e for e in events(path) if e.cat in KERNEL_CATS]
    assert forks == [] and _kernels(db) == (len(kernels), sum(e.end - e.start for e in kernels))
    with closing(sqlite3.connect(db)) as conn:
        path_ns, = conn.execute("SELECT sum(time_ns) FROM agg_critical_path").fetchone()
        assert path_ns > 0 and (path_ns,) == conn.execute("SELECT wall_clock_ns FROM aggregations").fetchone()


def test_where_the_ranks_outweigh_the_rows_the_writer_is_still_forked(tmp_path, monkeypatch):
    path = data_file(*TRACE)
    monkeypatch.setattr(build_module, "BESIDE_SECONDS_PER_ROW", 0.0)
    forks = _counting_forks(monkeypatch, allowed=True)
    db = build_database([path], tmp_path / "t.sqlite", progress=False)
    kernels = [e for e in events(path) if e.cat in KERNEL_CATS]
    assert forks and _kernels(db) == (len(kernels), sum(e.end - e.start for e in kernels))


def test_a_writer_thread_given_up_stops_before_its_next_batch_and_commits_nothing(tmp_path, monkeypatch):
    """Given up after its first batch of two rows (of five): it raises GivenUp there, and the file holds no row."""
    monkeypatch.setattr(writer, "INGEST_ROWS", 2)
    gpus = pd.DataFrame({"rank": 0, "device": range(5), "name": [f"gpu{i}" for i in range(5)]})
    batches, first_taken, go_on = writer._unless_given_up, threading.Event(), threading.Event()

    def watched(items):
        for i, batch in enumerate(batches(items)):
            if i == 1:  # the second batch is asked for once the caller has given up
                first_taken.set()
                go_on.wait(5)
                stop_if_given_up()
            yield batch

    monkeypatch.setattr(writer, "_unless_given_up", watched)
    db = tmp_path / "t.sqlite"
    call = ThreadCall(writer.write_raw_file, str(db), {"gpus": gpus})
    assert first_taken.wait(5)
    call.given_up.set()
    go_on.set()
    with pytest.raises(GivenUp):
        call.result()
    with closing(sqlite3.connect(db)) as conn:
        assert conn.execute("SELECT count(*) FROM gpus").fetchone() == (0,)


def test_stop_if_given_up_does_nothing_outside_a_background_thread():
    stop_if_given_up()  # the main thread (a forked child is killed instead)
    seen: list[BaseException | None] = []

    def other():
        try:
            stop_if_given_up()
            seen.append(None)
        except GivenUp as e:
            seen.append(e)

    thread = threading.Thread(target=other)
    thread.start()
    thread.join()
    assert seen == [None]


def test_work_handed_to_a_running_thread_runs_after_its_work_there_and_its_caller_does_not_wait():
    interval = sys.getswitchinterval()
    release, order, threads = threading.Event(), [], []

    def first():
        assert release.wait(5)
        order.append("first")
        threads.append(threading.current_thread())
        return 1

    def second():
        order.append("second")
        threads.append(threading.current_thread())
        return 2

    call = ThreadCall(first)
    assert call.then(second)  # returns at once
    assert order == [] and call.is_alive()
    release.set()
    assert call.result() == 2 and order == ["first", "second"] and threads == [call, call]
    assert not call.then(second) and order == ["first", "second"]  # ended: nothing taken
    assert sys.getswitchinterval() == interval


def test_work_after_a_failure_is_dropped_and_the_failure_is_the_result():
    ran, release = [], threading.Event()

    def failing():
        assert release.wait(5)
        raise OSError("disk full")

    call = ThreadCall(failing)
    assert call.then(lambda: ran.append(1))
    release.set()
    with pytest.raises(OSError, match="disk full"):
        call.result()
    assert ran == [] and not call.then(lambda: ran.append(2)) and ran == []


def test_killing_a_thread_stops_its_work_and_drops_what_was_handed_after_it():
    """Stopped between its steps, so the caller's kill does not wait for its work; what was queued never runs."""
    started, seen = threading.Event(), []

    def working():
        started.set()
        for _ in range(500):  # ~5 s unless given up
            stop_if_given_up()
            threading.Event().wait(0.01)
        seen.append("finished")

    call = ThreadCall(working)
    assert call.then(lambda: seen.append("second"))
    assert started.wait(5)
    call.kill()
    assert not call.is_alive() and seen == [] and isinstance(call.error, GivenUp)
