"""Child processes die with their parent, a thread's end is not a parent's death, dead runs' temporary files
are told from live ones, and the capture API never forks the user's process."""

from __future__ import annotations

import mmap
import os
import subprocess
import sys
import textwrap
import time

import pytest
from conftest import data_file
from process_watch import alive, wait_gone


def _python(code: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE, text=True, **kw)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("how", ["forked_call", "fork_pool", "spawn_pool", "pool_from_a_thread"])
def test_children_die_when_their_parent_is_killed(how):
    """``kill -9`` of dlscope (no cleanup runs) must take every helper with it."""
    parent = _python(f"""
        import os, sys, threading, time
        from dlscope import processes
        how = {how!r}
        if how == "forked_call":
            call = processes.ForkedCall(time.sleep, 600)
            pids = [call.pid]
        else:
            box = {{}}
            def start():
                pool = processes.worker_pool(2, "spawn" if how == "spawn_pool" else "fork")
                box["futures"] = [pool.submit(time.sleep, 600) for _ in range(2)]
                box["pool"] = pool
            if how == "pool_from_a_thread":
                t = threading.Thread(target=start)
                t.start()
                t.join()  # the thread that started the workers has ended: they must live on
            else:
                start()
            while len(box["pool"]._processes) < 2:
                time.sleep(0.05)
            time.sleep(1.0 if how == "pool_from_a_thread" else 0.2)
            pids = list(box["pool"]._processes)
            assert all(processes.is_child() is False for _ in pids)
        print(" ".join(map(str, pids)), flush=True)
        time.sleep(600)
    """)
    try:
        children = [int(p) for p in parent.stdout.readline().split()]
        assert children and all(alive(p) for p in children), \
            "the children did not start (or a thread's end killed them)"
        parent.kill()
        parent.wait()
        assert wait_gone(children) == [], "children outlived their killed parent"
    finally:
        parent.kill()


def test_a_failing_parent_kills_its_forked_child_instead_of_waiting():
    from dlscope.processes import ForkedCall

    call = ForkedCall(time.sleep, 600)
    pid = call.pid
    started = time.monotonic()
    call.kill()
    assert time.monotonic() - started < 5 and not alive(pid)


def test_a_forked_call_returns_its_value_or_raises_its_error():
    from dlscope.errors import InputError
    from dlscope.processes import ForkedCall

    assert ForkedCall(sum, [1, 2, 3]).result() == 6
    with pytest.raises(InputError, match="x.json: bad"):
        ForkedCall(_raise_input_error).result()


def _arrays(n):
    import numpy as np
    import pyarrow as pa

    values = np.arange(n, dtype=np.int64) * 7 - 3
    return {"ints": values, "odd": values[1::3], "bytes": np.frombuffer(b"abc", dtype=np.uint8),
            "text": pa.array([f"w{i % 5}" for i in range(n)]).dictionary_encode(), "small": [1, "two"]}


def test_a_forked_calls_arrays_come_back_out_of_band_equal_writable_and_aligned():
    """Large results travel as protocol-5 buffers read into one map in the parent (processes._read_pickled)."""
    import numpy as np

    from dlscope.processes import BUFFER_ALIGN, ForkedCall

    came = ForkedCall(_arrays, 100_003).result()
    expected = _arrays(100_003)
    assert np.array_equal(came["ints"], expected["ints"]) and np.array_equal(came["odd"], expected["odd"])
    assert came["bytes"].tobytes() == b"abc" and came["small"] == [1, "two"]
    assert came["text"].to_pylist() == expected["text"].to_pylist()
    assert came["ints"].flags.writeable and came["ints"].ctypes.data % BUFFER_ALIGN == 0
    base = came["ints"]
    while isinstance(base, np.ndarray):
        base = base.base
    assert isinstance(base, memoryview) and isinstance(base.obj, mmap.mmap)  # read into the map, not unpickled
    came["ints"][0] = 42  # the parent's own copy
    assert came["ints"][0] == 42


def test_a_child_killed_while_it_sends_its_result_fails_the_call():
    from dlscope.processes import ChildFailed, ForkedCall

    call = ForkedCall(_send_then_die)
    with pytest.raises(ChildFailed):
        call.result()


def _send_then_die():
    import numpy as np

    from dlscope import processes

    def cut_short(fd, pickled):  # the frame's head and the pickle, then the child dies before its buffers
        payload, buffers = pickled
        head = b"".join(n.to_bytes(8, "little") for n in (len(payload), len(buffers),
                                                           *(b.raw().nbytes for b in buffers)))
        os.write(fd, head + payload)
        os._exit(9)

    processes._write_all = cut_short  # this child's own module: what sends its result
    return np.zeros(1 << 16)


def _raise_input_error():
    from dlscope.errors import InputError

    raise InputError("x.json", "bad")


def test_temporary_files_of_dead_runs_are_removed_and_live_ones_kept(tmp_path):
    from dlscope.processes import owned_name, remove_dead, run_tag

    dead = subprocess.run([sys.executable, "-c",
                           "from dlscope.processes import owned_name; print(owned_name('.x.sqlite', '.tmp'))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    mine = owned_name(".x.sqlite", ".tmp")
    pid, start = run_tag().split("-")[1:3]
    reused = f".y.sqlite.dlscope-{pid}-{int(start) + 1}-abcd.tmp"  # this pid, another process's start time
    folder_of_dead = dead.replace(".x.sqlite", "dlscope-import").replace(".tmp", "")
    unrelated = ".z.sqlite.tmp"
    for name in (dead, mine, reused, unrelated):
        (tmp_path / name).write_text("x")
    (tmp_path / folder_of_dead).mkdir()
    (tmp_path / folder_of_dead / "ops.arrow").write_text("x")
    gone = remove_dead(tmp_path)
    assert {p.name for p in gone} == {dead, reused, folder_of_dead}
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([mine, unrelated])


@pytest.mark.slow
def test_the_capture_api_imports_without_forking_the_users_process(tmp_path):
    """dlscope.profile() runs in the user's (multi-threaded) training process: its import of the trace must
    not fork it, so os.fork is made to fail there."""
    pytest.importorskip("torch")
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""
        import os, sys, threading
        def no_fork():
            raise AssertionError("dlscope forked the user's process")
        os.fork = no_fork
        import torch, dlscope
        model, opt = torch.nn.Linear(32, 32), None
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        busy = threading.Thread(target=lambda: [torch.randn(64, 64) @ torch.randn(64, 64) for _ in range(200)])
        busy.start()  # a second thread, as in a real training process
        with dlscope.profile(sys.argv[1], steps=2, wait=0, warmup=1, summary=False):
            for _ in range(5):
                loss = model(torch.randn(16, 32)).sum()
                loss.backward()
                opt.step()
                opt.zero_grad()
        busy.join()
        print("ok")
    """))
    db = tmp_path / "run.sqlite"
    result = subprocess.run([sys.executable, str(script), str(db)], capture_output=True, text=True, timeout=300,
                            check=False)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr
    import sqlite3

    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT COUNT(*) FROM ops").fetchone()[0] > 0


def test_a_multi_file_import_inside_the_capture_api_uses_no_process_pool(tmp_path, monkeypatch):
    """embedded(): a job of several files, which would use worker processes, is read in this process."""
    from dlscope import processes
    from dlscope.pipeline import build_database

    files = [data_file("kineto", "param_dlrm_8rank_v100", f"worker{r}.pt.trace.json.gz") for r in range(3)]

    def no_fork():
        raise AssertionError("forked inside embedded()")

    monkeypatch.setattr(os, "fork", no_fork)
    with processes.embedded():
        build_database(files, tmp_path / "job.sqlite", progress=False, workers=3)
    assert (tmp_path / "job.sqlite").exists() and not [p for p in tmp_path.iterdir() if p.suffix == ".tmp"]
