"""Issue 15's cases, one by one, through the CLI: each ends in a valid database whose numbers match the raw
file, or in one line naming the input (or the output, for output problems) and exit code 2."""

from __future__ import annotations

import gzip
import json
import os
import pwd
import resource
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest
from conftest import data_file
from test_cli_errors import assert_one_line_error, run_cli
from trace_builder import KinetoTrace

TRACE = "hta_event_sync_a100.json.gz"  # 92 events: 4 kernels, a ProfilerStep, 8 GPUs in deviceProperties


def _doc() -> dict:
    return json.loads(gzip.decompress(data_file("kineto", TRACE).read_bytes()))


def _write(path: Path, doc) -> Path:
    path.write_text(json.dumps(doc))
    return path


def _summary(db: Path) -> dict:
    result = run_cli("summary", db, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _imported(trace: Path, out: Path, *extra) -> dict:
    result = run_cli("import", trace, "-o", out, "-q", *extra)
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip().splitlines() == [f"wrote {out}"], result.stderr  # no warning, no noise
    return _summary(out)


def _kernels_of(doc: dict) -> list[dict]:
    return [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "kernel"]


# ---------------------------------------------------------------- internal errors that were (exit 1)


def test_json_nested_1000_deep_in_args_is_one_line(tmp_path):
    doc = _doc()
    doc["traceEvents"][3]["args"]["deep"] = "@@"
    path = tmp_path / "deep.json"
    path.write_text(json.dumps(doc).replace('"@@"', "[" * 1000 + "]" * 1000))
    assert_one_line_error(run_cli("import", path, "-o", tmp_path / "o.sqlite"), str(path))


def test_device_properties_that_are_not_a_list_say_nothing(tmp_path):
    doc = _doc()
    doc["deviceProperties"] = 5
    summary = _imported(_write(tmp_path / "t.json", doc), tmp_path / "o.sqlite")
    devices = sorted({e["args"]["device"] for e in _kernels_of(doc)})
    assert [g["device"] for g in summary["profile"]["gpus"]] == devices  # the kernels' GPUs, unnamed
    assert all(g["name"] is None for g in summary["profile"]["gpus"])  # unknown, not a made-up name


def test_a_23_digit_profiler_step_is_dropped_and_counted(tmp_path):
    doc = _doc()
    steps = [e for e in doc["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")]
    assert len(steps) == 1
    steps[0]["name"] = "ProfilerStep#12345678901234567890123"
    summary = _imported(_write(tmp_path / "t.json", doc), tmp_path / "o.sqlite")
    assert summary["profile"]["dropped_events"] == [{"rank": 0, "table": "ranges",
                                                     "reason": "step_number_too_large", "count": 1}]
    assert summary["profile"]["kernel_count"] == len(_kernels_of(doc))


@pytest.mark.parametrize("rank", [2**63 - 1, 2**20])
def test_a_rank_no_job_has_is_one_line(tmp_path, rank):
    doc = _doc()
    doc["distributedInfo"] = {"rank": rank, "world_size": 8}
    path = _write(tmp_path / "t.json", doc)
    result = run_cli("import", path, "-o", tmp_path / "o.sqlite")
    assert_one_line_error(result, str(path))
    assert "rank" in result.stderr


def _nsys(tmp_path: Path, sql: str) -> Path:
    path = tmp_path / "export.sqlite"
    path.write_bytes(data_file("nsys_sqlite", "dlprof_pytorch_emit_nvtx_rtx2070s_nsys2022.1.sqlite").read_bytes())
    conn = sqlite3.connect(path)
    conn.executescript(sql)
    conn.commit()
    conn.close()
    return path


def _raw_count(path: Path, sql: str) -> int:
    with sqlite3.connect(path) as conn:
        return conn.execute(sql).fetchone()[0]


def test_nsys_kernels_of_zero_length_import(tmp_path):
    path = _nsys(tmp_path, 'UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "end" = start')
    summary = _imported(path, tmp_path / "o.sqlite")
    assert summary["profile"]["kernel_count"] == _raw_count(path, "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")
    assert summary["profile"]["kernel_time_ns"] == 0 and summary["profile"]["dropped_events"] == []


def test_nsys_kernels_ending_before_they_start_are_dropped_and_counted(tmp_path):
    path = _nsys(tmp_path, 'UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "end" = start - 10 WHERE rowid % 3 = 0')
    summary = _imported(path, tmp_path / "o.sqlite")
    bad = _raw_count(path, 'SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE "end" < start')
    total = _raw_count(path, "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")
    assert 0 < bad < total
    assert summary["profile"]["kernel_count"] == total - bad
    assert summary["profile"]["dropped_events"] == [{"rank": 0, "table": "kernels", "reason": "end_before_start",
                                                     "count": bad}]
    result = run_cli("summary", tmp_path / "o.sqlite")
    assert f"Dropped {bad:,} events" in result.stdout  # said on the terminal too


def test_nsys_kernels_without_an_end_column_are_one_line(tmp_path):
    path = _nsys(tmp_path, 'ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL DROP COLUMN "end"')
    result = run_cli("import", path, "-o", tmp_path / "o.sqlite")
    assert_one_line_error(result, str(path))
    assert "CUPTI_ACTIVITY_KIND_KERNEL" in result.stderr


def test_an_enum_id_stored_as_text_is_skipped(tmp_path):
    path = _nsys(tmp_path, """
        CREATE TABLE e2 (id TEXT, name TEXT, label TEXT);
        INSERT INTO e2 VALUES ('x0', 'CUDA_MEMCPY_KIND_HTOD', 'HtoD');
        DROP TABLE IF EXISTS ENUM_CUDA_MEMCPY_OPER; ALTER TABLE e2 RENAME TO ENUM_CUDA_MEMCPY_OPER""")
    summary = _imported(path, tmp_path / "o.sqlite")
    assert summary["profile"]["memcpy_count"] == _raw_count(path, "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY")


def test_invalid_utf8_in_the_string_table_imports(tmp_path):
    path = _nsys(tmp_path, "UPDATE StringIds SET value = CAST(X'C328FF' || CAST(value AS BLOB) AS TEXT)")
    summary = _imported(path, tmp_path / "o.sqlite")
    assert summary["profile"]["kernel_count"] == _raw_count(path, "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")


# ---------------------------------------------------------------- silently wrong numbers (exit 0)


def test_negative_kernel_durations_are_dropped_never_stored(tmp_path):
    doc = _doc()
    kernels = _kernels_of(doc)
    kernels[0]["dur"], kernels[1]["dur"] = -5, -0.001
    summary = _imported(_write(tmp_path / "t.json", doc), tmp_path / "o.sqlite")
    assert summary["profile"]["kernel_count"] == len(kernels) - 2
    assert summary["profile"]["dropped_events"] == [{"rank": 0, "table": "kernels", "reason": "end_before_start",
                                                     "count": 2}]
    with sqlite3.connect(tmp_path / "o.sqlite") as conn:
        assert conn.execute('SELECT COUNT(*) FROM kernels WHERE "end" < start').fetchone()[0] == 0


@pytest.mark.parametrize("field", ["ts", "dur"])
def test_times_past_int64_are_one_line_naming_the_event(tmp_path, field):
    doc = _doc()
    kernel = _kernels_of(doc)[0]
    kernel[field] = 2**64
    path = _write(tmp_path / "t.json", doc)
    result = run_cli("import", path, "-o", tmp_path / "o.sqlite")
    assert_one_line_error(result, str(path))
    assert kernel["name"][:40] in result.stderr and "RuntimeWarning" not in result.stderr


def test_a_profiler_step_of_negative_duration_gives_no_negative_wall_clock(tmp_path):
    doc = _doc()
    step = next(e for e in doc["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#"))
    step["dur"] = -1000
    summary = _imported(_write(tmp_path / "t.json", doc), tmp_path / "o.sqlite")
    assert summary["aggregation"]["wall_clock_ns"] >= 0
    assert ({"rank": 0, "table": "ranges", "reason": "end_before_start", "count": 1}
            in summary["profile"]["dropped_events"])


@pytest.mark.parametrize("content", ['{"traceEvents": []}', "[]", '{"traceEvents": [{"ph": "M", "name": "x"}]}'])
def test_an_empty_trace_is_an_error_not_an_empty_database(tmp_path, content):
    path = tmp_path / "empty.json"
    path.write_text(content)
    result = run_cli("import", path, "-o", tmp_path / "o.sqlite")
    assert_one_line_error(result, str(path))
    assert "no events" in result.stderr and not (tmp_path / "o.sqlite").exists()


# ---------------------------------------------------------------- misleading messages


def test_a_gpu_listed_twice_blames_the_input_not_the_output(tmp_path):
    doc = _doc()
    doc["deviceProperties"].append(dict(doc["deviceProperties"][0]))
    path = _write(tmp_path / "t.json", doc)
    result = run_cli("import", path, "-o", tmp_path / "o.sqlite")
    assert_one_line_error(result, str(path))
    assert "o.sqlite" not in result.stderr and "GPU 0" in result.stderr


def test_a_pipe_is_read_once_as_a_stream(tmp_path):
    """``dlscope import <(zcat trace.json.gz)``: the path is /dev/fd/N, a pipe that can be read once."""
    read, write = os.pipe()
    data = gzip.decompress(data_file("kineto", TRACE).read_bytes())
    writer = threading.Thread(target=lambda: (os.write(write, data), os.close(write)))
    writer.start()
    out = tmp_path / "o.sqlite"
    result = subprocess.run([sys.executable, "-m", "dlscope", "import", f"/dev/fd/{read}", "-o", str(out), "-q"],
                            pass_fds=(read,), capture_output=True, text=True, timeout=300, check=False)
    writer.join()
    os.close(read)
    assert result.returncode == 0, result.stderr
    summary = _summary(out)
    assert summary["profile"]["kernel_count"] == len(_kernels_of(json.loads(data)))
    assert list(tmp_path.iterdir()) == [out]


def test_a_fifo_is_read_once_and_its_copy_removed(tmp_path):
    fifo = tmp_path / "trace.fifo"
    os.mkfifo(fifo)
    data = data_file("kineto", TRACE).read_bytes()  # gzip through a FIFO: detected from the content

    def feed():
        with open(fifo, "wb") as f:
            f.write(data)

    writer = threading.Thread(target=feed)
    writer.start()
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    out = tmp_path / "o.sqlite"
    result = subprocess.run([sys.executable, "-m", "dlscope", "import", str(fifo), "-o", str(out), "-q"],
                            env={**os.environ, "TMPDIR": str(scratch)}, capture_output=True, text=True, timeout=300,
                            check=False)
    writer.join()
    assert result.returncode == 0, result.stderr
    assert _summary(out)["profile"]["kernel_count"] == len(_kernels_of(_doc()))
    assert list(scratch.iterdir()) == []  # the copy went with the run
    with sqlite3.connect(out) as conn:
        assert conn.execute("SELECT path FROM sources").fetchone()[0] == str(fifo)  # the name the user gave


def test_json_after_more_than_4_kb_of_whitespace_is_recognised(tmp_path):
    path = tmp_path / "ws.json"
    path.write_text(" \n\t" * 3000 + json.dumps(_doc()))
    assert _imported(path, tmp_path / "o.sqlite")["profile"]["kernel_count"] == len(_kernels_of(_doc()))


# ---------------------------------------------------------------- output hazards


def _tiny(tmp_path: Path) -> Path:
    return _write(tmp_path / "t.json", _doc())


@pytest.mark.parametrize("kind", ["directory", "fifo", "socket"])
def test_an_output_that_is_not_a_regular_file_is_refused_even_with_force(tmp_path, kind):
    """Made here, in the test's folder (a FIFO and a socket stand for device nodes; no real device is used)."""
    out = tmp_path / f"out.{kind}"
    if kind == "directory":
        out.mkdir()
    elif kind == "fifo":
        os.mkfifo(out)
    else:
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(out))
        sock.close()
    before = out.lstat()
    result = run_cli("import", _tiny(tmp_path), "-o", out, "--force")
    assert_one_line_error(result, str(out))
    after = out.lstat()
    assert (after.st_mode, after.st_ino) == (before.st_mode, before.st_ino)  # untouched, not replaced


def test_the_output_is_never_one_of_the_inputs(tmp_path):
    trace = _tiny(tmp_path)
    original = trace.read_bytes()
    link = tmp_path / "alias.sqlite"
    link.symlink_to(trace)
    for out in (trace, link):
        assert_one_line_error(run_cli("import", trace, "-o", out, "--force"), str(out))
    assert trace.read_bytes() == original


def _as_nobody():
    """preexec_fn: become the unprivileged user, so permissions apply to the child even when tests run as root."""
    nobody = pwd.getpwnam("nobody")
    os.setgid(nobody.pw_gid)
    os.setuid(nobody.pw_uid)


def test_an_unwritable_output_folder_is_one_line_naming_the_output():
    """Needs a user permissions apply to: the test's files go in a folder of their own under the system's
    temporary folder (removed at the end), readable by that user."""
    root_run = os.geteuid() == 0
    with tempfile.TemporaryDirectory(prefix="dlscope-perm-") as folder:
        base = Path(folder)
        base.chmod(0o755)
        trace = _tiny(base)
        trace.chmod(0o644)
        locked = base / "locked"
        locked.mkdir(mode=0o555)
        kw = {"preexec_fn": _as_nobody} if root_run else {}
        try:
            probe = subprocess.run([sys.executable, "-c", "import dlscope"], capture_output=True, **kw,
                                   check=False).returncode
        except PermissionError:
            probe = -1
        if probe != 0:
            pytest.skip("this interpreter or dlscope cannot run as the user nobody here (as root, permissions "
                        "would not apply)")
        result = subprocess.run([sys.executable, "-m", "dlscope", "import", str(trace), "-o",
                                 str(locked / "o.sqlite")], capture_output=True, text=True, timeout=300, **kw,
                                check=False)
        assert_one_line_error(result, str(locked / "o.sqlite"))
        assert "not writable" in result.stderr and list(locked.iterdir()) == []


def test_a_disk_that_fills_during_the_last_writes_is_one_line_and_leaves_nothing(tmp_path):
    """RLIMIT_FSIZE stands for a full disk: a write past it fails (EFBIG), as on a full disk (ENOSPC)."""
    trace = data_file("kineto", "hta_a100_nccl_rank0of2_3steps.json.gz")
    full = tmp_path / "full.sqlite"
    assert run_cli("import", trace, "-o", full, "-q").returncode == 0
    limit = full.stat().st_size - 16384  # the last page or so cannot be written
    out = tmp_path / "out" / "run.sqlite"
    out.parent.mkdir()

    def small_disk():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    result = subprocess.run([sys.executable, "-m", "dlscope", "import", str(trace), "-o", str(out), "-q"],
                            preexec_fn=small_disk, capture_output=True, text=True, timeout=300, check=False)
    assert_one_line_error(result, str(out))
    assert "writing the database failed" in result.stderr
    assert list(out.parent.iterdir()) == []


# ---------------------------------------------------------------- --max-memory is a bound


def _bomb(path: Path, inflated: int) -> Path:
    """A gzip of a few MB that inflates to ``inflated`` bytes of JSON text, mostly blanks inside the event
    array: members of 16 MiB of spaces each (a gzip file may hold many members)."""
    block = gzip.compress(b" " * 2**24, compresslevel=9)
    with open(path, "wb") as f:
        f.write(gzip.compress(b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 2},'))
        f.writelines(block for _ in range(inflated // 2**24))
        f.write(gzip.compress(b'{"ph": "X", "cat": "kernel", "name": "k", "ts": 5, "dur": 2}]}'))
    return path


@pytest.mark.slow
def test_a_gzip_bomb_under_max_memory_stays_under_it(tmp_path):
    """2.4 GB of JSON from a 2.4 MB file under --max-memory 1GB: refused while it is inflated, and no process
    of the import ever held more than the budget."""
    bomb = _bomb(tmp_path / "bomb.json.gz", 2_400_000_000)
    assert bomb.stat().st_size < 5 * 2**20
    out = tmp_path / "o.sqlite"
    measure = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
               "print(r.returncode); print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); "
               "sys.stderr.write(r.stderr)")
    result = subprocess.run([sys.executable, "-c", measure, sys.executable, "-m", "dlscope", "import", str(bomb),
                             "-o", str(out), "--max-memory", "1GB"], capture_output=True, text=True, timeout=600,
                            check=False)
    code, peak_kib = (int(x) for x in result.stdout.split())
    assert peak_kib * 1024 < 10**9, f"peak {peak_kib / 1024:.0f} MiB under --max-memory 1GB"
    assert code == 2 and len(result.stderr.strip().splitlines()) == 1 and str(bomb) in result.stderr, result.stderr
    assert "--max-memory" in result.stderr and not out.exists()


def test_a_small_bomb_without_a_budget_streams_instead_of_failing(tmp_path):
    """With no --max-memory the text is still counted: past a share of the machine's memory the file is
    streamed; this one (blanks between two kernels) imports with both kernels."""
    from dlscope.importers.kineto import load_kineto

    bomb = _bomb(tmp_path / "bomb.json.gz", 2**25)
    profile = load_kineto(bomb, max_memory=3 * 2**24)  # a budget whose in-memory share the text exceeds
    assert len(profile.kernels) == 2


def test_absurd_op_shapes_import_with_those_ops_unmodelled(tmp_path):
    """Shapes whose FLOPs pass int64 (2^40-sized dimensions) or are negative crashed MFU with an internal
    OverflowError; such a call now has no model, and the run imports."""
    from test_graph_replay_figures import TC_GEMM

    t = KinetoTrace()
    big = 2 ** 40
    for step in range(2):
        b = 1000.0 * step
        t.step(step + 1, b, b + 1000)
        t.op("autograd::engine::evaluate_function: MmBackward0", b + 10, b + 200)
        t.op("aten::mm", b + 20, b + 60, **{"Input Dims": [[big, big], [big, big]], "Input type": ["float"] * 2})
        t.launch(b + 30, b + 40, TC_GEMM, b + 300, b + 400)
        t.op("aten::mm", b + 400, b + 450, **{"Input Dims": [[-8, 4], [4, 4]], "Input type": ["float"] * 2})
        t.launch(b + 410, b + 420, TC_GEMM, b + 500, b + 600)
    res = run_cli("import", t.write(tmp_path / "absurd.json"), "-o", tmp_path / "absurd.sqlite", "-q")
    assert res.returncode == 0, res.stderr
    with sqlite3.connect(tmp_path / "absurd.sqlite") as conn:
        rows = conn.execute("SELECT model_flops, roofline_flops FROM agg_ops").fetchall()
    assert rows and all(not flops and nested is None for flops, nested in rows)
