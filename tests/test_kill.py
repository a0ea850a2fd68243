"""``kill -9`` at several moments of an import (the parse, the analysis, the write) and of ``aggregate``: no
process survives, no temporary file outlives the next run, and a database is either the old one or the new
one, whole. Also SIGTERM (a clean exit), and a plain trace truncated while it is read (one line, exit 2).

The moments are found by watching the process, not by sleeping: the parse is when the forked piece decoder
runs, the write when the temporary database exists, the analysis in between; aggregate's transaction is
when SQLite's rollback journal exists.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import data_file
from process_watch import descendants, wait_gone

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")]


IMPORT = """
import os
import sys
import dlscope.pipeline.build as build
from dlscope.importers.kineto import Reading
from dlscope.pipeline import build_database
if os.environ.get("FORKED_WRITER"):  # the ranks made to outweigh the rows: the writer forked, not a thread
    build.BESIDE_SECONDS_PER_ROW = 0.0
# two processes for the parse (the forked decoder), whatever the machine: the moment to kill is when it runs
build_database(sys.argv[1:-1], sys.argv[-1], progress=False, force=True,
               reading=Reading(processes=2, piece_bytes=2**20), workers=int(__import__('os').environ['WORKERS']))
"""


@pytest.fixture(scope="module")
def big_trace(tmp_path_factory) -> Path:
    """The 216k-event V100 trace as plain JSON (47 MB): a parse of about a second on two processes."""
    folder = tmp_path_factory.mktemp("big")
    path = folder / "rank1.json"
    path.write_bytes(gzip.decompress(data_file("kineto", "hta_v100_rank1of2_5steps.json.gz").read_bytes()))
    return path


def _start(args: list[str], tmp: Path, workers: int = 1, forked_writer: bool = False) -> subprocess.Popen:
    env = {**os.environ, "TMPDIR": str(tmp), "WORKERS": str(workers), "FORKED_WRITER": "1" if forked_writer else ""}
    return subprocess.Popen([sys.executable, "-c", IMPORT, *args], env=env, stderr=subprocess.PIPE, text=True)


def _temp_db(out: Path) -> list[Path]:
    return [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.") and p.name.endswith(".tmp")]


def _watch(proc: subprocess.Popen, out: Path, moment: str, deadline: float = 120) -> tuple[set[int], str]:
    """Poll until ``moment`` ("parse", "analysis", "write": the writer thread's, "forked write") and return the
    helpers seen and the moment hit."""
    seen: set[int] = set()
    decoder_seen = False
    end = time.monotonic() + deadline
    while time.monotonic() < end and proc.poll() is None:
        kids = descendants(proc.pid)
        seen |= kids
        writing = bool(_temp_db(out))
        if moment == "parse" and kids and not writing:
            return seen, "parse"
        if not writing and kids:
            decoder_seen = True
        if moment == "analysis" and decoder_seen and not kids and not writing:
            return seen, "analysis"
        if moment == "write" and writing:
            return seen, "write"
        if moment == "forked write" and writing and kids:
            return seen, "forked write"
        time.sleep(0.005)
    return seen, "missed"


@pytest.mark.parametrize("moment", ["parse", "analysis", "write", "forked write"])
def test_kill_9_during_an_import_leaves_no_process_and_no_file_the_next_run_keeps(big_trace, tmp_path, moment):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    out = tmp_path / "out" / "run.sqlite"
    out.parent.mkdir()
    for _attempt in range(3):  # the analysis is short: a fast machine may slip past it; try again
        proc = _start([str(big_trace), str(out)], tmp, forked_writer=moment == "forked write")
        helpers, hit = _watch(proc, out, moment)
        proc.kill()
        proc.wait()
        helpers |= descendants(proc.pid)
        if hit == moment:
            break
    assert hit == moment, f"never caught the import in its {moment}"
    assert wait_gone(sorted(helpers)) == [], f"helpers outlived the killed import ({moment})"
    assert not out.exists()
    # the next run in the same folders removes what the killed one left (its temporary database) and leaves
    # only its own output
    tiny = data_file("kineto", "hta_event_sync_a100.json.gz")
    second = subprocess.run([sys.executable, "-m", "dlscope", "import", str(tiny), "-o",
                             str(out.parent / "next.sqlite"),
                             "-q"], env={**os.environ, "TMPDIR": str(tmp)}, capture_output=True, text=True,
                            timeout=300, check=False)
    assert second.returncode == 0, second.stderr
    assert sorted(p.name for p in out.parent.iterdir()) == ["next.sqlite"]
    assert list(tmp.iterdir()) == []


def test_kill_9_of_a_job_on_worker_processes_leaves_nothing(tmp_path):
    """A job of several files on a forked pool: the workers and their Arrow files in TMPDIR go too."""
    files = [data_file("kineto", name) for name in ("hta_v100_rank1of2_5steps.json.gz",
                                                    "hta_trace_diff_control_a100_rank3of8.json.gz")]
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    out = tmp_path / "job.sqlite"
    proc = _start([*map(str, files), str(out)], tmp, workers=2)
    helpers: set[int] = set()
    end = time.monotonic() + 120
    while time.monotonic() < end and proc.poll() is None and len(helpers) < 2:
        helpers |= descendants(proc.pid)
        time.sleep(0.01)
    assert len(helpers) >= 2, "the workers never started"
    assert any(p.name.startswith("dlscope-import.") for p in tmp.iterdir())
    proc.kill()
    proc.wait()
    assert wait_gone(sorted(helpers | descendants(proc.pid))) == []
    from dlscope.processes import remove_dead

    remove_dead(tmp)  # what the next import does where it writes its Arrow files
    assert list(tmp.iterdir()) == []


def test_sigterm_ends_an_import_cleanly(big_trace, tmp_path):
    """SIGTERM unwinds: temporary database removed, helpers stopped, exit 143, before any later run."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    out = tmp_path / "run.sqlite"
    proc = subprocess.Popen([sys.executable, "-m", "dlscope", "import", str(big_trace), "-o", str(out), "-q"],
                            env={**os.environ, "TMPDIR": str(tmp)}, stderr=subprocess.PIPE, text=True)
    helpers, hit = _watch(proc, out, "write")
    proc.send_signal(signal.SIGTERM)
    proc.wait(60)
    assert hit == "write"
    assert proc.returncode == 143
    assert wait_gone(sorted(helpers)) == []
    assert list(tmp_path.iterdir()) == [tmp] and list(tmp.iterdir()) == []


def test_a_plain_trace_truncated_while_it_is_read_is_one_line_exit_2(big_trace, tmp_path):
    """The file is memory-mapped; truncating it under the reader used to end in a silent SIGBUS (exit -7)."""
    trace = tmp_path / "moving.json"
    shutil.copyfile(big_trace, trace)
    out = tmp_path / "run.sqlite"
    proc = subprocess.Popen([sys.executable, "-m", "dlscope", "import", str(trace), "-o", str(out), "-q"],
                            stderr=subprocess.PIPE, text=True)
    end = time.monotonic() + 120
    mapped = False
    while time.monotonic() < end and proc.poll() is None and not mapped:
        try:
            with open(f"/proc/{proc.pid}/maps") as f:
                mapped = str(trace) in f.read()
        except OSError:
            break
        time.sleep(0.002)
    assert mapped, "never saw the trace mapped"
    os.truncate(trace, 4096)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and str(trace) in lines[0] and "changed while it was read" in lines[0], err
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["moving.json"]


# ------------------------------------------------------------------------------------------ aggregate


def _state(db: Path) -> dict:
    with sqlite3.connect(db) as conn:
        aggs = [r[0] for r in conn.execute("SELECT agg_id FROM aggregations ORDER BY agg_id")]
        return {"aggs": aggs,
                "findings": dict(conn.execute("SELECT agg_id, COUNT(*) FROM findings GROUP BY agg_id").fetchall()),
                "ranks": dict(conn.execute("SELECT agg_id, COUNT(*) FROM agg_ranks GROUP BY agg_id").fetchall()),
                "iterations": dict(conn.execute(
                    "SELECT agg_id, COUNT(*) FROM agg_iterations GROUP BY agg_id").fetchall())}


@pytest.fixture(scope="module")
def job_db(tmp_path_factory) -> Path:
    from dlscope.pipeline import build_database

    folder = tmp_path_factory.mktemp("agg")
    files = [data_file("kineto", "param_dlrm_8rank_v100", f"worker{r}.pt.trace.json.gz") for r in range(8)]
    return build_database(files, folder / "job.sqlite", progress=False, workers=1)


AGGREGATE = ["aggregate", "--key-node", "ProfilerStep#10"]


def test_kill_9_during_aggregate_leaves_the_old_aggregations_or_all_the_new_ones(job_db, tmp_path):
    """The aggregation, its findings and per-rank figures are one transaction: killed at any moment, the
    database reads (no hot journal left for a read-only opener) and holds none or all of the new rows."""
    done = tmp_path / "done.sqlite"
    shutil.copyfile(job_db, done)
    subprocess.run([sys.executable, "-m", "dlscope", *AGGREGATE[:1], str(done), *AGGREGATE[1:]], check=True,
                   capture_output=True, timeout=300)
    before, after = _state(job_db), _state(done)
    new = [a for a in after["aggs"] if a not in before["aggs"]]
    assert len(new) == 8  # one per rank
    caught_in_transaction = 0
    for delay in (None, 0.5, 1.0, 1.5, 2.5):
        db = tmp_path / f"killed-{delay}.sqlite"
        shutil.copyfile(job_db, db)
        proc = subprocess.Popen([sys.executable, "-m", "dlscope", *AGGREGATE[:1], str(db), *AGGREGATE[1:]],
                                stderr=subprocess.PIPE)
        journal = Path(f"{db}-journal")
        start = time.monotonic()
        while proc.poll() is None and time.monotonic() - start < 120:
            if (delay is None and journal.exists()) or (delay is not None and time.monotonic() - start >= delay):
                break
            time.sleep(0.001)
        caught_in_transaction += journal.exists()
        proc.kill()
        proc.wait()
        summary = subprocess.run([sys.executable, "-m", "dlscope", "summary", str(db), "--json"], capture_output=True,
                                 text=True, timeout=300, check=False)
        assert summary.returncode == 0, summary.stderr  # readable by a read-only opener
        state = _state(db)
        assert state in (before, after), f"a half aggregation after a kill at {delay}: {state}"
        assert not journal.exists()  # rolled back, or removed when it held nothing yet
    assert caught_in_transaction >= 1, "no kill landed inside the transaction"


@pytest.mark.parametrize("how", ["sigterm_after", "sigterm_during", "kill_during"])
def test_the_viewer_s_reaggregation_worker_ends_with_the_viewer(job_db, tmp_path, how):
    """The re-aggregation worker (spawned) and multiprocessing's resource tracker went on after the viewer:
    stopped (SIGTERM) after or during a re-aggregation, or killed during one, the viewer leaves no process."""
    import socket
    import urllib.request

    db = tmp_path / "view.sqlite"
    shutil.copyfile(job_db, db)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    viewer = subprocess.Popen([sys.executable, "-m", "dlscope", "view", str(db), "-p", str(port)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{base}/api/meta", timeout=2).read()
                break
            except OSError:
                assert time.monotonic() < deadline and viewer.poll() is None, "the viewer did not start"
                time.sleep(0.2)
        request = urllib.request.Request(f"{base}/api/aggregate", data=b'{"iter_start": 10, "iter_stop": 10}',
                                         method="POST", headers={"Origin": base,  # the viewer's own page
                                                                 "Content-Type": "application/json"})
        job = json.loads(urllib.request.urlopen(request, timeout=30).read())
        while how == "sigterm_after" and job["state"] == "underway":
            assert time.monotonic() < deadline + 240, "the re-aggregation did not finish"
            time.sleep(0.2)
            job = json.loads(urllib.request.urlopen(f"{base}/api/jobs/{job['id']}", timeout=10).read())
        helpers = descendants(viewer.pid)
        while how != "sigterm_after" and len(helpers) < 2:  # the worker and the resource tracker are up
            helpers |= descendants(viewer.pid)
            time.sleep(0.01)
        assert job["state"] == ("success" if how == "sigterm_after" else "underway"), job
        assert helpers, "no worker process was seen"
        viewer.send_signal(signal.SIGKILL if how == "kill_during" else signal.SIGTERM)
        viewer.wait(120)
        assert wait_gone(sorted(helpers)) == [], "the worker or the resource tracker outlived the viewer"
    finally:
        viewer.kill()
        viewer.wait()


def test_an_empty_journal_left_by_a_writer_killed_before_its_header_is_removed_by_the_next_reader(import_db,
                                                                                                   tmp_path):
    """A writer killed right after it created its rollback journal leaves an empty one: not hot, nothing to roll
    back, but debris; the next opener removes it and reads the database."""
    db = tmp_path / "r.sqlite"
    shutil.copyfile(import_db(data_file("kineto", "hta_event_sync_a100.json.gz")), db)
    journal = Path(f"{db}-journal")
    journal.write_bytes(b"")
    summary = subprocess.run([sys.executable, "-m", "dlscope", "summary", str(db), "--json"], capture_output=True,
                             text=True, timeout=120, check=False)
    assert summary.returncode == 0, summary.stderr
    assert not journal.exists()
