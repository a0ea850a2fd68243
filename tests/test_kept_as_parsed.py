"""The tables an import writes while it analyses (``analysis.KEPT_AS_PARSED``: GPUs, allocator samples,
collective arguments) are ones the analysis never changes, the database is the one written in a single part
after the analysis, and an import that fails in the analysis leaves no file."""

from __future__ import annotations

import sqlite3
import subprocess
import sys

import pytest
from conftest import data_file

from dlscope.analyze.analysis import KEPT_AS_PARSED, analyse
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


def test_the_command_line_says_so_in_one_line(tmp_path):
    result = subprocess.run([sys.executable, "-m", "dlscope", "import", str(data_file(*QWEN)), "-o",
                             str(tmp_path / "r.sqlite"), "--iter-start", "999", "-q"], capture_output=True, text=True)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert list(tmp_path.iterdir()) == []
