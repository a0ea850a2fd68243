"""One large plain trace's later pieces decoded by a child forked as `dlscope import` starts
(dlscope.pipeline.head_start, dlscope.importers.kineto.pieces): the child maps and cuts the file itself, without
pandas; the reader takes it, and a failure on either side leaves no database and no process.

The cases that run the console command do so in a fresh interpreter (the head start only happens before pandas
loads), the two-process threshold lowered to the 54 MB of JSON of a real V100 trace (inflated to a plain file
in the test's folder)."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import sqlite3
import time
from collections import Counter
from pathlib import Path

import pytest
from conftest import data_file
from raw_kineto import KERNEL_CATS, ns
from spied_command import run_spied, spied_log

V100 = ("kineto", "hta_v100_rank1of2_5steps.json.gz")

# the command with the threshold lowered; the child records whether pandas was loaded in it and where its pieces
# start, the parent whether it took the child; at the end no child of this process may be left (os.wait)
SPIES = """
from dlscope.importers import streams
streams.SPLIT_MIN_BYTES = 0
from dlscope.pipeline import head_start
decode = head_start._decode_later

def spied_decode(*args):
    try:
        done = decode(*args)
    except BaseException as e:
        logged({"child_failed": type(e).__name__, "pandas": "pandas" in sys.modules, "pid": os.getpid()})
        raise
    logged({"child_from": done[0], "pieces": done[1], "pandas": "pandas" in sys.modules, "pid": os.getpid()})
    return done

head_start._decode_later = spied_decode
from dlscope.importers.kineto import pieces
take = pieces.take_started

def spied_take(*args):
    got = take(*args)
    logged({"taken": got is not None, "pandas": "pandas" in sys.modules})
    return got

pieces.take_started = spied_take
"""


@pytest.fixture(scope="module")
def plain_trace(tmp_path_factory) -> Path:
    """The V100 trace as plain JSON (the head start maps plain files only)."""
    path = tmp_path_factory.mktemp("plain") / "v100.json"
    with gzip.open(data_file(*V100)) as f, open(path, "wb") as out:
        shutil.copyfileobj(f, out)
    return path


def _command(log, *args):
    return run_spied(SPIES, log, *args)



def test_the_later_pieces_decoded_before_pandas_loads_give_the_raw_traces_kernels(plain_trace, tmp_path):
    """The child is forked before pandas loads and never loads it, decodes the later pieces (more than half of the
    text); the import takes them, and the database's kernels are the raw JSON's, name, start and duration."""
    db, log = tmp_path / "one.sqlite", tmp_path / "log"
    done = _command(log, "import", plain_trace, "-o", db, "-q")
    assert done.returncode == 0, done.stderr
    entries = spied_log(log)
    child, = [e for e in entries if "child_from" in e]
    taken, = [e for e in entries if "taken" in e]
    assert child["pandas"] is False and child["pid"] != os.getpid()
    assert child["pieces"] >= 10 and child["child_from"] < plain_trace.stat().st_size / 2  # the larger share
    assert taken == {"taken": True, "pandas": True} and entries[-1] == {"children_left": False}
    with open(plain_trace, "rb") as f:
        raw = [e for e in json.load(f)["traceEvents"] if e.get("cat") in KERNEL_CATS and e.get("ph") == "X"]
    conn = sqlite3.connect(db)
    stored = Counter(conn.execute("SELECT name, start, dur FROM kernels"))
    conn.close()
    assert len(raw) == 19370
    assert stored == Counter((e["name"], ns(e["ts"]), ns(e["dur"])) for e in raw)


def test_a_bad_later_piece_fails_the_import_in_one_line_and_leaves_no_file_or_process(plain_trace, tmp_path):
    """A trace cut mid-event near its end: the child's last piece does not decode; the import names the file in
    one line (exit 2), writes no database and leaves no child."""
    bad = tmp_path / "cut.json"
    text = plain_trace.read_bytes()
    bad.write_bytes(text[:len(text) - 5000])
    db, log = tmp_path / "cut.sqlite", tmp_path / "log"
    done = _command(log, "import", bad, "-o", db, "-q")
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and str(bad) in done.stderr and "Traceback" not in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cut.json", "log"]  # no database, no temporary file
    entries = spied_log(log)
    assert {"taken": True, "pandas": True} in entries and entries[-1] == {"children_left": False}
    assert [e["child_failed"] for e in entries if "child_failed" in e] == ["Unsplittable"]


def test_an_import_refused_after_the_fork_kills_the_child(plain_trace, tmp_path):
    """A bad request found after the fork (the output is a folder): one line, exit 2, the child killed."""
    out = tmp_path / "out"
    out.mkdir()
    log = tmp_path / "log"
    done = _command(log, "import", plain_trace, "-o", out, "-q")
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert not any("taken" in e for e in spied_log(log))
    assert spied_log(log)[-1] == {"children_left": False} and list(out.iterdir()) == []


def test_a_gzip_trace_starts_no_child(tmp_path):
    """Both processes would inflate the whole file: no head start, the reader forks its child as before."""
    log = tmp_path / "log"
    done = _command(log, "import", data_file(*V100), "-o", tmp_path / "gz.sqlite", "-q")
    assert done.returncode == 0, done.stderr
    entries = spied_log(log)
    assert not any("child_from" in e for e in entries)
    assert {"taken": False, "pandas": True} in entries and entries[-1] == {"children_left": False}


def _gone(pid: int) -> bool:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:  # reaped: killed and waited for
        return True
    return False


def test_a_child_started_for_a_file_since_rewritten_or_other_pieces_is_killed_not_taken(plain_trace, tmp_path):
    """take_started with the file changed since the fork (its modification time) or with other pieces: None;
    drop_started kills the child."""
    from dlscope.importers.kineto import PIECE_BYTES, pieces
    from dlscope.processes import ForkedCall

    copy = tmp_path / "copy.json"
    copy.write_bytes(b"{}")
    child = ForkedCall(time.sleep, 60)
    pieces.adopt_started(copy, PIECE_BYTES, 0.6, child)
    assert pieces.take_started(copy, PIECE_BYTES // 2) is None
    os.utime(copy, ns=(1, 1))
    assert pieces.take_started(copy, PIECE_BYTES) is None
    pid = child.pid
    pieces.drop_started()
    assert _gone(pid) and not pieces._STARTED


def test_a_started_child_whose_cuts_are_not_the_readers_fails_the_file_as_changed(plain_trace):
    """The child reports where its pieces start; a start other than the reader's own cut means the bytes it
    mapped were not these: one error naming the file, not a table joined from two different texts."""
    from dlscope.errors import InputError
    from dlscope.importers.kineto import PIECE_BYTES, Reading, kineto_columns, pieces
    from dlscope.processes import ForkedCall

    pieces.adopt_started(plain_trace, PIECE_BYTES, 0.6, ForkedCall(lambda: (17, 3, {}, 0, None)))
    with pytest.raises(InputError, match="changed while it was read"):
        kineto_columns(plain_trace, reading=Reading(processes=2))
    assert not pieces._STARTED


def test_the_child_of_a_file_in_another_format_decodes_nothing(tmp_path):
    """An nsys export or a TensorFlow trace is read by the parent alone: the started child returns None at once
    (and the import kills it once the files are read)."""
    from dlscope.pipeline import head_start

    tf = tmp_path / "tf.trace.json"
    with gzip.open(sorted(data_file("tf_trace").glob("*.trace.json.gz"))[0]) as f:
        tf.write_bytes(f.read())
    for path in (data_file("nsys_sqlite", "nvfuser_h200_nvtx_nsys2025.1.sqlite"), tf):
        assert head_start._decode_later(path, 4096, 0.6, 2**40) is None  # small pieces: a Chrome trace cuts
