"""The replay child prices the findings in groups of ranks as their rules end (ForkedCall's value in parts,
aggregate_ranks' ``evaluated`` hook): the stored rows equal those of the one-send path's (the replay in the importing
process), an import failing after some groups were sent leaves no file and no child, and each aggregation's kernel
rows get their own path's time (all aggregations matched at once)."""

from __future__ import annotations

import os
import sqlite3
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from conftest import data_file
from process_watch import children, wait_gone

import dlscope.pipeline.build as build_module
import dlscope.whatif.stored as stored
from dlscope.errors import DlscopeError
from dlscope.pipeline import build_database
from dlscope.processes import ForkedCall, fork_pays

pytestmark = [pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc"),
              pytest.mark.skipif(not fork_pays(), reason="the replay runs beside only where a fork pays")]


# ------------------------------------------------------------------------------------ ForkedCall's value in parts


def _parts_as_they_come(inbox, flag):
    parts = inbox.parts()
    first = next(parts)
    Path(flag).touch()  # the parent sends the rest only now
    return [first, *parts]


def test_a_child_takes_each_part_before_the_parent_sends_the_last():
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        flag = Path(folder) / "first came"
        call = ForkedCall(_parts_as_they_come, str(flag), inbox=True)
        call.send_part([1, 2])
        deadline = time.monotonic() + 30
        while not flag.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert flag.exists()
        call.send_part({"b": 3})
        call.send("end")
        assert call.result() == [[1, 2], {"b": 3}, "end"]
        with pytest.raises(RuntimeError, match="sent its value already"):
            call.send(1)


def _all_parts(inbox):
    return list(inbox.parts())


def test_a_child_whose_parent_stops_before_the_last_part_ends_with_an_error_instead_of_waiting():
    call = ForkedCall(_all_parts, inbox=True)
    call.send_part(list(range(100_000)))  # more than a pipe holds at once
    with pytest.raises(EOFError, match="stopped sending"):
        call.result()


def _one_value(inbox):
    return inbox()


def test_a_child_waiting_for_one_value_is_not_given_a_part_of_it():
    call = ForkedCall(_one_value, inbox=True)
    call.send_part(1)
    call.send(2)
    with pytest.raises(EOFError, match="in parts"):
        call.result()


# ------------------------------------------------------------------------------------ the import


def _stored(path) -> dict[str, list[tuple]]:
    """The replay's figures as stored: each finding's simulated saving, each aggregation's combined saving and note,
    the critical path per rank and category, and the op nodes' and kernels' time on the path."""
    with sqlite3.connect(path) as conn:
        return {
            "findings": conn.execute("SELECT agg_id, rule, est_saving_ns, simulated_saving_ns FROM findings "
                                     "ORDER BY rowid").fetchall(),
            "aggregations": conn.execute("SELECT agg_id, rank, findings_combined_saving_ns, critical_path_note "
                                         "FROM aggregations ORDER BY agg_id").fetchall(),
            "path": conn.execute("SELECT * FROM agg_critical_path ORDER BY rowid").fetchall(),
            "ops": conn.execute("SELECT agg_id, node_id, critical_path_ns FROM agg_ops ORDER BY rowid").fetchall(),
            "kernels": conn.execute("SELECT agg_id, kernel_name, critical_path_ns FROM agg_kernels "
                                    "ORDER BY rowid").fetchall()}


def _noting_groups(monkeypatch, folder: Path) -> None:
    """``Replay.figures`` notes, in the process it runs in, how many aggregations each call priced."""
    figures = stored.Replay.figures

    def noted(self, requests):
        with open(folder / str(os.getpid()), "a") as f:
            f.write(f"{len(requests)}\n")
        return figures(self, requests)

    folder.mkdir()
    monkeypatch.setattr(stored.Replay, "figures", noted)


def test_findings_priced_in_groups_beside_the_rules_store_the_rows_of_one_pricing_here(tmp_path, monkeypatch):
    """A real 8-rank job, its findings sent in groups of 3 ranks (3 + 3 + 2) to the child as the rules end: the
    findings' simulated savings, the combined savings, the critical path and the op nodes' and kernels' time on it
    equal those of the import whose replay prices all 8 at once in the importing process."""
    job = data_file("kineto", "param_dlrm_8rank_v100")
    monkeypatch.setattr(stored, "GROUP_RANKS", 3)
    monkeypatch.setattr(build_module, "BESIDE_SECONDS_PER_ROW", 0.0)  # the replay beside, whatever the rows
    _noting_groups(monkeypatch, tmp_path / "beside")
    beside = _stored(build_database([job], tmp_path / "beside.sqlite", progress=False))
    (pid, groups), = [(int(p.name), p.read_text().split()) for p in (tmp_path / "beside").iterdir()]
    assert pid != os.getpid() and [int(n) for n in groups] == [3, 3, 2]

    monkeypatch.setattr(build_module, "BESIDE_SECONDS_PER_ROW", 1.0)  # the replay here, once for all ranks
    _noting_groups(monkeypatch, tmp_path / "here")
    here = _stored(build_database([job], tmp_path / "here.sqlite", progress=False))
    assert [(int(p.name), p.read_text().split()) for p in (tmp_path / "here").iterdir()] == [(os.getpid(), ["8"])]
    assert len(beside["aggregations"]) == 8 and {note for *_, note in beside["aggregations"]} == {None}
    assert any(s is not None for *_, s in beside["findings"]) and len(beside["path"]) > 8
    for table in beside:
        assert beside[table] == here[table], table


def test_an_import_failing_after_some_groups_were_priced_leaves_no_file_and_no_child(tmp_path, monkeypatch):
    """The rules fail on the 6th of 8 ranks, after the child was sent (and priced) two groups: the import fails,
    the child is killed, not awaited, and no database and no temporary file are left."""
    from dlscope.pipeline import per_rank

    job = data_file("kineto", "param_dlrm_8rank_v100")
    monkeypatch.setattr(stored, "GROUP_RANKS", 2)
    monkeypatch.setattr(build_module, "BESIDE_SECONDS_PER_ROW", 0.0)
    _noting_groups(monkeypatch, tmp_path / "priced")
    evaluate, ranks_done = per_rank.evaluate, []

    def failing(*args):
        if len(ranks_done) == 5:
            deadline = time.monotonic() + 30  # the child has priced the first two groups
            while time.monotonic() < deadline and not any(
                    len(p.read_text().split()) >= 2 for p in (tmp_path / "priced").iterdir()):
                time.sleep(0.02)
            raise DlscopeError("a rule failed")
        ranks_done.append(1)
        return evaluate(*args)

    monkeypatch.setattr(per_rank, "evaluate", failing)
    out = tmp_path / "out"
    out.mkdir()
    before = children()
    with pytest.raises(DlscopeError, match="a rule failed"):
        build_database([job], out / "job.sqlite", progress=False)
    (child, groups), = [(int(p.name), p.read_text().split()) for p in (tmp_path / "priced").iterdir()]
    assert child != os.getpid() and groups == ["2", "2"]
    assert wait_gone([child]) == [] and children() <= before
    assert list(out.iterdir()) == []


# ------------------------------------------------------------------------------------ apply's kernel rows


def _agg(kernel_names: list) -> SimpleNamespace:
    return SimpleNamespace(ops=pd.DataFrame({"node_id": pd.Series([], dtype="int64")}),
                           kernels=pd.DataFrame({"kernel_name": pd.array(kernel_names, dtype="string[pyarrow]")}),
                           critical_path=None, row={})


def test_each_aggregations_kernel_rows_get_the_time_its_own_path_spent_in_their_name():
    """Hand-made: the same name has different times in two ranks' paths; a name on one rank's path only is 0 in the
    other; a missing name and a name never on any path are 0; a rank without a critical path (a note) and one
    without kernel rows sit between them and shift nothing."""
    aggs = [_agg(["gemm", "relu", "copy", None]), _agg(["relu"]), _agg([]), _agg(["copy", "gemm", "add"])]
    figures = [stored.Figures(kernel_names=np.asarray(["relu", "gemm"], object), kernel_ns=np.asarray([7, 100])),
               stored.Figures(note="no path here"),
               stored.Figures(kernel_names=np.asarray(["relu"], object), kernel_ns=np.asarray([5])),
               stored.Figures(kernel_names=np.asarray(["gemm", "copy", "relu"], object),
                              kernel_ns=np.asarray([300, 40, 9]))]
    stored.apply(aggs, [[], [], [], []], figures)
    assert aggs[0].kernels["critical_path_ns"].tolist() == [100, 7, 0, 0]
    assert aggs[1].kernels["critical_path_ns"].tolist() == [None]
    assert aggs[1].row["critical_path_note"] == "no path here"
    assert len(aggs[2].kernels) == 0
    assert aggs[3].kernels["critical_path_ns"].tolist() == [40, 300, 0]
    assert aggs[3].kernels["critical_path_ns"].dtype == np.int64
