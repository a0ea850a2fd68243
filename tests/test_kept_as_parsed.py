"""The tables an import writes while it analyses (``analysis.KEPT_AS_PARSED``: GPUs, allocator samples,
collective arguments) are ones the analysis never changes, and those it hands over part-way through
(``FINAL_BEFORE_OPS``) it changes no more; the database is the one written in a single part after the analysis,
and an import that fails in the analysis leaves no file."""

from __future__ import annotations

import sqlite3
import subprocess
import sys

import pytest
from conftest import data_file

from dlscope.analyze.analysis import FINAL_BEFORE_OPS, KEPT_AS_PARSED, analyse
from dlscope.errors import DlscopeError
from dlscope.pipeline import build
from dlscope.pipeline.executors import load_profiles_parallel
from dlscope.store import writer

QWEN = ("kineto", "tracelens_h100_qwen1.5_0.5b_infer.json.gz")  # 2,450 allocator samples
NCCL = ("kineto", "hta_a100_nccl_rank0of2_3steps.json.gz")  # collective arguments


@pytest.mark.parametrize("trace", [QWEN, NCCL])
def test_the_analysis_leaves_the_tables_kept_as_parsed_as_they_were(trace):
    profile = load_profiles_parallel([data_file(*trace)], None, None, None, lambda *a, **k: None, None)
    before = {name: profile.table(name) for name in KEPT_AS_PARSED}
    copies = {name: frame.copy(deep=True) for name, frame in before.items()}
    assert sum(len(f) for f in before.values()) > 0
    an = analyse(profile, None)
    for name in KEPT_AS_PARSED:
        assert an.profile.table(name) is before[name], name  # the very frame the import wrote early
        assert list(before[name].columns) == list(copies[name].columns), name
        assert before[name].equals(copies[name]), name


@pytest.mark.parametrize("trace", [QWEN, NCCL])
def test_the_analysis_changes_the_tables_it_hands_over_no_more(trace):
    profile = load_profiles_parallel([data_file(*trace)], None, None, None, lambda *a, **k: None, None)
    handed: dict = {}
    calls: list[list[str]] = []

    def final(tables):
        assert not set(tables) & set(handed)  # each once
        calls.append(sorted(tables))
        handed.update({name: (frame, frame.copy(deep=True)) for name, frame in tables.items()})

    an = analyse(profile, None, final)
    assert calls == [["api_calls", "memops", "ranges", "syncs"], ["kernels"]]  # the kernels once their waves are in
    assert sorted(handed) == sorted(FINAL_BEFORE_OPS) and len(handed["kernels"][0]) > 0
    for name, (frame, copy) in handed.items():
        assert an.profile.table(name) is frame, name  # the very frame the analysis ends with
        assert list(frame.columns) == list(copy.columns), name
        assert frame.equals(copy), name
    assert {"iteration", "waves", "uses_tc"} <= set(handed["kernels"][1].columns)
    assert (handed["kernels"][1]["iteration"] >= 0).any()


def _tables(path) -> dict[str, list]:
    conn = sqlite3.connect(path)
    try:
        names = [t for (t,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT IN ('dlscope_meta', 'aggregations') "
            "AND name NOT LIKE 'search_names_trigram%'")]
        return {t: conn.execute(f'SELECT * FROM "{t}" ORDER BY rowid').fetchall() for t in names}
    finally:
        conn.close()


@pytest.fixture
def written(monkeypatch):
    """The tables of each ``NewDatabase.write_raw`` call of an import, in order."""
    calls = []
    write_raw = writer.NewDatabase.write_raw

    def recorded(self, tables, *args, **kwargs):
        calls.append(sorted(tables))
        return write_raw(self, tables, *args, **kwargs)

    monkeypatch.setattr(writer.NewDatabase, "write_raw", recorded)
    return calls


def _indexes(path) -> list[tuple]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT name, tbl_name, sql FROM sqlite_master WHERE type = 'index' "
                            "ORDER BY name").fetchall()
    finally:
        conn.close()


@pytest.mark.parametrize("trace", [QWEN, NCCL])
def test_a_database_written_partly_during_the_analysis_equals_one_written_after_it(trace, tmp_path, monkeypatch,
                                                                                   written):
    monkeypatch.setattr(build, "EARLY_ROWS", 1)  # these traces are small: written early all the same
    early = build.build_database([data_file(*trace)], tmp_path / "early.sqlite", progress=False)
    assert len(written) == 2 and set(written[0]) <= set(KEPT_AS_PARSED) and not set(written[0]) & set(written[1])
    assert {"memory", "comm_args"} & set(written[0])
    monkeypatch.setattr(build, "KEPT_AS_PARSED", ())  # everything after the analysis, in one part
    after = build.build_database([data_file(*trace)], tmp_path / "after.sqlite", progress=False)
    assert len(written) == 3
    assert _tables(early) == _tables(after)


@pytest.mark.parametrize("trace", [QWEN, NCCL])
def test_a_database_written_in_four_parts_on_writer_threads_equals_one_written_after_the_analysis(
        trace, tmp_path, monkeypatch, written):
    """The kept tables as the analysis starts, the tables it finishes part-way as it hands them over (each part
    with its own indexes, the kernels' search keys paired with the ops' names written later), the rest after it,
    each part after the one before on a writer thread: the same rows, indexes and searched names as one part
    written after the analysis."""
    monkeypatch.setattr(build, "EARLY_ROWS", 1)  # these traces are small: written early all the same
    monkeypatch.setattr(build, "BESIDE_SECONDS_PER_ROW", 1.0)  # their rows outweigh their rank: writer threads
    parts = build.build_database([data_file(*trace)], tmp_path / "parts.sqlite", progress=False)
    assert len(written) == 4 and set(written[0]) <= set(KEPT_AS_PARSED)
    assert written[1:3] == [["api_calls", "memops", "ranges", "syncs"], ["kernels"]] and "ops" in written[3]
    assert len(sum(written, [])) == len(set(sum(written, [])))  # each table in one part
    monkeypatch.setattr(build, "KEPT_AS_PARSED", ())
    monkeypatch.setattr(build, "_hand_over_pays", lambda *_: False)  # everything after the analysis, in one part
    whole = build.build_database([data_file(*trace)], tmp_path / "whole.sqlite", progress=False)
    assert len(written) == 5
    assert _tables(parts) == _tables(whole)
    assert _indexes(parts) == _indexes(whole) and len(_indexes(whole)) > 20
    conn = sqlite3.connect(parts)
    try:  # every kernel's search key is its pair's (found by the op names written in the last part)
        assert conn.execute("SELECT count(*) FROM kernels k LEFT JOIN search_kernel_pairs p "
                            "ON p.search_key = k.search_key WHERE p.kernel_name IS NOT k.name").fetchone() == (0,)
    finally:
        conn.close()


def test_kept_tables_under_early_rows_wait_for_the_analysis(tmp_path, written):
    path = build.build_database([data_file(*QWEN)], tmp_path / "r.sqlite", progress=False)
    conn = sqlite3.connect(path)
    rows = sum(conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in KEPT_AS_PARSED)
    conn.close()
    assert 0 < rows < build.EARLY_ROWS and len(written) == 1


def test_an_import_failing_in_the_analysis_after_the_early_write_leaves_no_file(tmp_path, monkeypatch, written):
    """A range past the profile's iterations fails once the analysis has found them, after the kept tables
    went in: a DlscopeError naming it (the CLI prints it as one line, exit 2), nothing left in the folder."""
    monkeypatch.setattr(build, "EARLY_ROWS", 1)
    with pytest.raises(DlscopeError, match="999"):
        build.build_database([data_file(*QWEN)], tmp_path / "r.sqlite", progress=False, iter_start=999)
    assert written == [["gpus", "memory"]]  # no collectives in this trace: no comm_args rows
    assert list(tmp_path.iterdir()) == []


def test_an_import_failing_after_the_analysis_handed_tables_over_leaves_no_file(tmp_path, monkeypatch, written):
    monkeypatch.setattr(build, "EARLY_ROWS", 1)
    monkeypatch.setattr(build, "BESIDE_SECONDS_PER_ROW", 1.0)
    with pytest.raises(DlscopeError, match="999"):
        build.build_database([data_file(*QWEN)], tmp_path / "r.sqlite", progress=False, iter_start=999)
    assert written == [["gpus", "memory"], ["api_calls", "memops", "ranges", "syncs"], ["kernels"]]
    assert list(tmp_path.iterdir()) == []


def test_the_command_line_says_so_in_one_line(tmp_path):
    result = subprocess.run([sys.executable, "-m", "dlscope", "import", str(data_file(*QWEN)), "-o",
                             str(tmp_path / "r.sqlite"), "--iter-start", "999", "-q"], capture_output=True, text=True)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert list(tmp_path.iterdir()) == []
