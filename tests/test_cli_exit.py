"""The console command ends an import without the interpreter's teardown (:func:`dlscope.cli.run`), and loses
nothing by it: the exit handlers run, stdout is complete, the database is whole, no temporary file is left;
any other outcome exits the normal way."""

from __future__ import annotations

import gzip
import json
import os
import sqlite3
import subprocess
import sys

from conftest import data_file

# a module-level object whose finalizer speaks only if the interpreter tears down, and an exit handler that
# must run either way; then the console command itself
RUN = """
import atexit, sys
class Teardown:
    def __del__(self):
        sys.stderr.write("torn down\\n")
kept = Teardown()
atexit.register(lambda: sys.stderr.write("exit handler ran\\n"))
from dlscope.cli import run
sys.argv[0] = "dlscope"
run()
"""


def _console(*args, stdin=None, tmp=None):
    env = {**os.environ, **({"TMPDIR": str(tmp)} if tmp else {})}
    return subprocess.run([sys.executable, "-c", RUN, *map(str, args)], stdin=stdin, capture_output=True,
                          env=env, timeout=300)


def test_an_import_ends_without_teardown_and_loses_nothing(tmp_path):
    trace = data_file("kineto", "hta_alexnet_a100_critical_path.json.gz")
    tmp, out = tmp_path / "tmp", tmp_path / "out"
    tmp.mkdir()
    out.mkdir()
    db = out / "profile.sqlite"
    with open(trace, "rb") as f:  # a pipe: read into a temporary copy that an exit handler removes
        piped = subprocess.Popen(["cat"], stdin=f, stdout=subprocess.PIPE)
        result = _console("import", "/dev/stdin", "-o", db, stdin=piped.stdout, tmp=tmp)
        piped.wait()
    stderr = result.stderr.decode()
    assert result.returncode == 0, stderr
    assert "exit handler ran" in stderr and "torn down" not in stderr  # handlers ran, the teardown did not
    assert os.listdir(tmp) == [] and os.listdir(out) == ["profile.sqlite"]  # no copy, journal or temporary left
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        stored = conn.execute("SELECT COUNT(*) FROM kernels").fetchone()[0]
    finally:
        conn.close()
    events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    kernels = sum(1 for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "Kernel"))
    assert stored == kernels > 0
    # stdout (a pipe: block-buffered) was flushed whole: the summary that `dlscope summary` prints of the database
    summary = subprocess.run([sys.executable, "-m", "dlscope", "summary", str(db)], capture_output=True,
                             timeout=120, check=True).stdout
    assert result.stdout == summary and len(summary) > 1000


def test_a_failed_import_and_other_commands_exit_the_normal_way(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"foo": 1}')
    failed = _console("import", bad, "-o", tmp_path / "x.sqlite")
    assert failed.returncode == 2
    assert "torn down" in failed.stderr.decode() and "exit handler ran" in failed.stderr.decode()
    helped = _console("--help")
    assert helped.returncode == 0 and b"import" in helped.stdout
    assert "torn down" in helped.stderr.decode()
