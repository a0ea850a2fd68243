"""A mid-sized job's later files read by a child forked as `dlscope import` starts (dlscope.pipeline.head_start),
before the parent loads pandas and the pipeline: the child reads them without pandas, the import takes its
files, and a failure on either side leaves no database and no process.

Each case runs the console command in a fresh interpreter (the head start only happens before pandas loads),
with the job's threshold lowered to the DLRM 8-rank job's few MiB."""

from __future__ import annotations

import gzip
import json
import os
import sqlite3
import subprocess
import sys
from collections import Counter

from conftest import data_file
from spied_command import run_spied, spied_log

DLRM = ("kineto", "param_dlrm_8rank_v100")

# the command with the threshold lowered; the child records what it read and whether pandas was loaded in it,
# the parent what it took; at the end, no child of this process may be left (os.wait: none to wait for)
SPIES = """
from dlscope.pipeline import head_start
head_start.FORKED_HALF_MIN_BYTES = 0
read, take, handed_over = head_start._read, head_start.take, head_start._handed_over

def spied_read(paths, reading):
    files = read(paths, reading)
    logged({"child": [str(p) for p in paths], "pandas": "pandas" in sys.modules, "pid": os.getpid()})
    return files

def spied_take(paths, reading):
    got = take(paths, reading)
    logged({"taken": got is not None, "pandas": "pandas" in sys.modules})
    return got

def spied_handed_over(paths, reading):
    files = handed_over(paths, reading)
    logged({"handed_over": [type(f).__name__ for f in files],
            "block_files": [len(f.metas) for f in files if type(f).__name__ == "FileBlock"],
            "pandas": "pandas" in sys.modules})
    return files

head_start._read, head_start.take, head_start._handed_over = spied_read, spied_take, spied_handed_over
"""


def _command(log, *args):
    return run_spied(SPIES, log, *args)


def _raw_kernels(path) -> Counter:
    with gzip.open(path) as f:
        raw = json.load(f)
    return Counter(e["name"] for e in raw["traceEvents"] if e.get("cat") in ("kernel", "Kernel") and e.get("ph") == "X")


def test_the_later_files_read_before_pandas_loads_give_each_rank_its_raw_kernels(tmp_path):
    """The child is forked before pandas loads, never loads it, reads the later files (more than half of the
    bytes) and hands them over as one block; the import takes them, and every rank's kernels in the database
    are those of its raw trace."""
    folder = data_file(*DLRM)
    files = sorted(folder.iterdir(), key=lambda p: int(p.name.split(".")[0].removeprefix("worker")))
    db, log = tmp_path / "job.sqlite", tmp_path / "log"
    done = _command(log, "import", folder, "-o", db, "-q")
    assert done.returncode == 0, done.stderr
    entries = spied_log(log)
    child, = [e for e in entries if "child" in e]
    taken, = [e for e in entries if "taken" in e]
    end = entries[-1]
    assert child["pandas"] is False and child["pid"] != os.getpid()
    later = len(child["child"])
    assert child["child"] == [str(p) for p in files[len(files) - later:]]
    sizes = [p.stat().st_size for p in files]
    assert sum(sizes[len(files) - later:]) > sum(sizes) / 2 and later < len(files)  # the larger share
    handed, = [e for e in entries if "handed_over" in e]
    assert handed == {"handed_over": ["FileBlock"], "block_files": [later], "pandas": False}  # one block, no pandas
    assert taken == {"taken": True, "pandas": True} and end == {"children_left": False}
    conn = sqlite3.connect(db)
    for path in files:
        rank, = conn.execute("SELECT rank FROM sources WHERE path = ?", (str(path),)).fetchone()
        stored = Counter(name for name, in conn.execute("SELECT name FROM kernels WHERE rank = ?", (rank,)))
        assert stored == _raw_kernels(path), path.name
    conn.close()


def test_a_bad_later_file_fails_the_import_naming_it_and_leaves_no_file_or_process(tmp_path):
    """The child's first bad file is the import's one-line error (exit 2): no database, no child left."""
    folder = tmp_path / "job"
    folder.mkdir()
    files = sorted(data_file(*DLRM).iterdir())
    for path in files:
        (folder / path.name).write_bytes(path.read_bytes())
    bad = folder / files[-1].name
    bad.write_bytes(gzip.compress(gzip.decompress(bad.read_bytes())[:-5000]))  # cut mid-event
    db, log = tmp_path / "job.sqlite", tmp_path / "log"
    done = _command(log, "import", folder, "-o", db, "-q")
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and bad.name in done.stderr and "Traceback" not in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job", "log"]  # no database, no temporary file
    assert spied_log(log)[-1] == {"children_left": False}
    assert {"taken": True, "pandas": True} in spied_log(log)


def test_an_import_that_fails_before_taking_the_child_kills_it(tmp_path):
    """A bad request found after the fork (the output is a folder): one line, exit 2, the child killed."""
    out = tmp_path / "out"
    out.mkdir()
    log = tmp_path / "log"
    done = _command(log, "import", data_file(*DLRM), "-o", out, "-q")
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert not any(r.get("taken") for r in spied_log(log))
    assert spied_log(log)[-1] == {"children_left": False} and list(out.iterdir()) == []


def test_a_file_that_needs_pandas_loads_it_in_the_child_and_reads_as_its_raw_json(tmp_path):
    """Python frames need pandas: the child reads the files before without it, then loads it and reads that
    file again; its frames are the raw trace's python_function events."""
    plain = sorted(data_file(*DLRM).iterdir())[0]
    frames = data_file("kineto", "tracelens_h100_bert_small_infer.json.gz")
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from dlscope.pipeline import head_start\n"
        "first = head_start._read([Path(sys.argv[1])], None)\n"
        "before = 'pandas' in sys.modules\n"
        "both = head_start._read([Path(sys.argv[1]), Path(sys.argv[2])], None)\n"
        "names = both[1].columns['python_frames']['name']\n"
        "print(before, 'pandas' in sys.modules, both[1].rows['python_frames'], first[0].rows['kernels'],"
        " both[0].rows['kernels'])\n"
        "for name in names.to_pylist() if hasattr(names, 'to_pylist') else list(names):\n"
        "    print(name)\n")
    done = subprocess.run([sys.executable, "-c", code, str(plain), str(frames)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    head, *names = done.stdout.splitlines()
    before, after, rows, kernels_alone, kernels_then = head.split()
    with gzip.open(frames) as f:
        raw = [e for e in json.load(f)["traceEvents"] if e.get("cat") == "python_function" and e.get("ph") == "X"]
    assert (before, after) == ("False", "True")
    assert int(rows) == len(raw) and Counter(names) == Counter(e["name"] for e in raw)
    assert int(kernels_alone) == int(kernels_then) == sum(_raw_kernels(plain).values())


def test_the_cut_gives_the_first_process_its_share_of_the_bytes_rounded_up_to_a_whole_file():
    """Hand-computed: four files of 10 bytes weigh 11 each (44); a 28% share is 12.32, reached within the second
    file, so the child reads the last two; one file each side at the extremes."""
    from dlscope.pipeline.head_start import later_start

    assert later_start([10, 10, 10, 10], 0.28) == 2
    assert later_start([10, 10, 10, 10], 0.5) == 2
    assert later_start([10, 10, 10, 10], 0.51) == 3
    assert later_start([100, 1, 1], 0.0) == 1 and later_start([1, 1, 100], 1.0) == 2


def test_a_child_started_for_other_files_is_killed_not_taken(tmp_path):
    """take() with files other than the child's (counters among them, say): None, and the child is gone."""
    from dlscope.pipeline import head_start
    from dlscope.processes import ForkedCall

    child = ForkedCall(__import__("time").sleep, 60)
    pid = child.pid
    head_start._STARTED.append(head_start._Started([tmp_path / "a", tmp_path / "b"], None, 1, child))
    assert head_start.take([tmp_path / "a", tmp_path / "c"], None) is None
    assert not head_start._STARTED
    try:
        os.waitpid(pid, os.WNOHANG)
        alive = True
    except ChildProcessError:  # reaped: killed and waited for
        alive = False
    assert not alive
