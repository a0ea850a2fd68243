"""Bad input gets one line naming the file and the problem, exit code 2, and no output left behind."""

from __future__ import annotations

import gzip
import json
import os
import sqlite3
import subprocess
import sys

import pytest
from conftest import data_file
from trace_builder import KinetoTrace


def run_cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "dlscope", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=120)


def assert_one_line_error(result, name):
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert name in lines[0]
    assert "Traceback" not in result.stderr


def bad_inputs(tmp):
    real = data_file("kineto", "hta_triton_a100.json.gz").read_bytes()
    (tmp / "truncated.json.gz").write_bytes(real[: len(real) // 2])
    full = gzip.decompress(real)
    (tmp / "truncated.json").write_bytes(full[: len(full) // 2])
    (tmp / "not_a_trace.json").write_text('{"foo": 1}')
    (tmp / "numbers.json").write_text("[1, 2, 3]")
    (tmp / "empty.json").write_text("")
    (tmp / "random.bin").write_bytes(os.urandom(512))
    conn = sqlite3.connect(tmp / "other.sqlite")
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()
    nsys = data_file("nsys_sqlite", "dlprof_pytorch_emit_nvtx_rtx2070s_nsys2022.1.sqlite").read_bytes()
    (tmp / "cut.sqlite").write_bytes(nsys[:8192])
    return ["truncated.json.gz", "truncated.json", "not_a_trace.json", "numbers.json", "empty.json", "random.bin",
            "other.sqlite", "cut.sqlite", "missing.json"]


def test_every_bad_input_fails_with_one_line_and_leaves_no_output(tmp_path):
    for name in bad_inputs(tmp_path):
        out = tmp_path / "out" / f"{name}.sqlite"
        out.parent.mkdir(exist_ok=True)
        result = run_cli("import", tmp_path / name, "-o", out)
        assert_one_line_error(result, name)
        assert not out.exists()
        assert os.listdir(out.parent) == [], f"{name} left {os.listdir(out.parent)}"


def test_a_directory_instead_of_a_trace_is_refused(tmp_path):
    result = run_cli("import", tmp_path, "-o", tmp_path / "x.sqlite")
    assert_one_line_error(result, str(tmp_path))


def test_existing_output_is_kept_without_force(tmp_path):
    trace = KinetoTrace()
    trace.op("aten::mm", 0, 10)
    path = trace.write(tmp_path / "t.json")
    out = tmp_path / "run.sqlite"
    out.write_text("precious")
    result = run_cli("import", path, "-o", out)
    assert_one_line_error(result, "run.sqlite")
    assert out.read_text() == "precious"
    assert run_cli("import", path, "-o", out, "--force", "-q").returncode == 0
    assert out.read_bytes().startswith(b"SQLite format 3")


def test_summary_of_a_file_that_is_not_a_dlscope_database_is_refused(tmp_path):
    for name, content in (("plain.txt", b"hello"), ("nodb.sqlite", None)):
        path = tmp_path / name
        if content is None:
            sqlite3.connect(path).execute("CREATE TABLE t (x)").connection.commit()
        else:
            path.write_bytes(content)
        assert_one_line_error(run_cli("summary", path), name)
    assert_one_line_error(run_cli("summary", tmp_path / "absent.sqlite"), "absent.sqlite")


def test_a_newer_database_is_refused_with_a_clear_message(tmp_path):
    trace = KinetoTrace()
    trace.op("aten::mm", 0, 10)
    db = tmp_path / "run.sqlite"
    assert run_cli("import", trace.write(tmp_path / "t.json"), "-o", db, "-q").returncode == 0
    conn = sqlite3.connect(db)
    conn.execute("UPDATE dlscope_meta SET value = '999' WHERE key = 'schema_version'")
    conn.commit()
    result = run_cli("summary", db)
    assert_one_line_error(result, "run.sqlite")
    assert "newer" in result.stderr


def test_iteration_range_outside_the_profile_is_a_one_line_error(tmp_path):
    trace = KinetoTrace()
    trace.step(1, 0, 10)
    trace.op("aten::mm", 1, 5)
    result = run_cli("import", trace.write(tmp_path / "t.json"), "-o", tmp_path / "r.sqlite", "--iter-start", "5")
    assert result.returncode == 2 and "no iterations" in result.stderr
    assert not (tmp_path / "r.sqlite").exists()


def test_hostile_names_reach_reports_as_data(tmp_path):
    trace = KinetoTrace()
    trace.step(1, 0, 100)
    evil = "<script>alert(1)</script>|'); DROP TABLE ops;--"
    trace.op(evil, 10, 50)
    trace.launch(20, 21, evil, 30, 60)
    db = tmp_path / "r.sqlite"
    assert run_cli("import", trace.write(tmp_path / "t.json"), "-o", db, "-q").returncode == 0
    result = run_cli("report", db, "--reports", "kernel,detail", "--formats", "csv,md,json", "-o", tmp_path / "rep")
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "rep" / "kernel.json").read_text())[0]["kernel_name"] == evil
    md = (tmp_path / "rep" / "detail.md").read_text()
    assert "\\|'); DROP TABLE ops;--" in md
    assert sqlite3.connect(db).execute("SELECT COUNT(*) FROM ops").fetchone()[0] == 1


def test_bad_gpu_spec_fails_before_any_report_is_written(tmp_path):
    trace = KinetoTrace()
    trace.step(1, 0, 10)
    trace.op("aten::mm", 1, 5)
    db = tmp_path / "r.sqlite"
    assert run_cli("import", trace.write(tmp_path / "t.json"), "-o", db, "-q").returncode == 0
    (tmp_path / "spec.json").write_text("[1]")
    result = run_cli("report", db, "--reports", "roofline", "--formats", "json", "--gpu-spec",
                     tmp_path / "spec.json", "-o", tmp_path / "rep")
    assert_one_line_error(result, "spec.json")
    assert not (tmp_path / "rep").exists()


@pytest.mark.parametrize("forked", [True, False])
def test_a_failure_in_the_background_writer_is_one_line_and_leaves_no_file(tmp_path, forked):
    from contextlib import nullcontext

    import pandas as pd

    from dlscope.errors import DlscopeError
    from dlscope.processes import embedded
    from dlscope.store import writer

    out = tmp_path / "run.sqlite"
    bad = pd.DataFrame({"kernel_id": [0], "name": [{"not": "a string"}]})  # Arrow cannot store a dict as TEXT
    with pytest.raises(DlscopeError) as info, nullcontext() if forked else embedded():
        with writer.atomic_database(out, force=False) as db:
            db.write_raw({"kernels": bad})
            db.connect()
    message = str(info.value)
    assert message.startswith(f"{out}: writing the database failed (") and "\n" not in message
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_the_thread_writer_builds_the_same_database_as_the_forked_one(tmp_path):
    from dlscope.pipeline import build_database
    from dlscope.processes import embedded

    trace = data_file("kineto", "hta_a100_nccl_rank0of2_3steps.json.gz")
    forked = build_database([trace], tmp_path / "forked.sqlite", progress=False)
    with embedded():  # as inside dlscope.profile(): no fork, the writer is a thread
        threaded = build_database([trace], tmp_path / "threaded.sqlite", progress=False)
    tables = {}
    for db in (forked, threaded):
        conn = sqlite3.connect(db)
        tables[db.name] = {t: conn.execute(f'SELECT * FROM "{t}"').fetchall() for (t,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT IN ('dlscope_meta', 'aggregations')")}
        conn.close()
    assert tables["forked.sqlite"] == tables["threaded.sqlite"]
