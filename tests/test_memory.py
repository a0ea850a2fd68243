"""Memory over time: the peaks per device and iteration, the op at each peak and the allocations live then equal
an independent reading of the raw allocator events (read here with the standard library), on a real V100
training trace, on a real CPU capture with --profile-memory, and on hand-made traces; the near-capacity
finding names the op at the peak."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from decimal import Decimal
from itertools import pairwise
from pathlib import Path

import pytest
from conftest import REPO, data_file
from raw_kineto import OP_CATS, _Innermost, events, is_step_marker, ns
from trace_builder import PID, TID, KinetoTrace

from dlscope.cli import main
from dlscope.present.summary import summary_dict

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
V100 = ("kineto", "hta_v100_rank1of2_5steps.json.gz")


def raw_samples(path: Path, device_type: int) -> list[dict]:
    """The [memory] instants of one allocator (1: CUDA, 0: CPU), in file order, with exact ns times."""
    with gzip.open(path, "rt") if path.suffix == ".gz" else open(path) as f:
        doc = json.load(f, parse_float=Decimal)
    out = []
    for e in doc["traceEvents"]:
        if e.get("ph") == "i" and e.get("name") == "[memory]" and e["args"].get("Device Type") == device_type:
            out.append({"ts": ns(e["ts"]), "pid": e["pid"], "tid": e["tid"], **e["args"]})
    return sorted(out, key=lambda s: s["ts"])  # stable: file order at one instant


def step_windows(path: Path) -> list[tuple[int, int, int]]:
    """(N, start, next step's start) of each ProfilerStep#N but the last."""
    steps = sorted((e.start, int(e.name.split("#")[1])) for e in events(path) if e.name.startswith("ProfilerStep#"))
    return [(n, s, nxt) for (s, n), (nxt, _) in pairwise(steps)]


def first_max(samples: list[dict], key: str) -> dict:
    best = None
    for s in samples:
        if best is None or s[key] > best[key]:
            best = s
    return best


def innermost_op(path: Path, sample: dict) -> str | None:
    ops = _Innermost([e for e in events(path) if e.cat in OP_CATS and not is_step_marker(e.name)])
    op = ops.at((sample["pid"], sample["tid"]), sample["ts"])
    return op.name if op else None


def live_after(samples: list[dict], peak: dict) -> tuple[int, int, int]:
    """(count, bytes, the largest) of the blocks whose last event up to and including ``peak`` allocated them."""
    last = {}
    for s in samples[: samples.index(peak) + 1]:
        last[s["Addr"]] = s["Bytes"]
    live = [b for b in last.values() if b > 0]
    return len(live), sum(live), max(live)


@pytest.mark.parametrize("stored_timeline", [True, False], ids=["ops from the stored timeline", "ops from rows"])
def test_peaks_per_iteration_equal_the_raw_maximum_on_a_real_v100_trace(import_db, tmp_path, stored_timeline):
    trace = data_file(*V100)
    db = import_db(trace)
    if not stored_timeline:  # a database without the timeline's arrays: the ops are read from op_instances
        db = Path(shutil.copy(db, tmp_path / "rows.sqlite"))
        with sqlite3.connect(db) as conn:
            assert conn.execute("DELETE FROM timeline_arrays").rowcount > 0
    memory = summary_dict(db)["memory"]
    gpu = next(d for d in memory["devices"] if d["device"] >= 0)
    raw = [s for s in raw_samples(trace, 1) if s["Device Id"] == gpu["device"]]
    ours = {i["iteration"]: i for i in gpu["iterations"]}
    windows = step_windows(trace)
    assert len(windows) >= 4
    for n, lo, hi in windows:
        inside = [s for s in raw if lo <= s["ts"] < hi]
        assert ours[n]["peak_allocated_bytes"] == max(s["Total Allocated"] for s in inside), n
        assert ours[n]["peak_reserved_bytes"] == max(s["Total Reserved"] for s in inside), n
    profiled = [s for s in raw if s["ts"] >= windows[0][1]]
    peak = first_max(profiled, "Total Allocated")
    assert gpu["peak_allocated_bytes"] == peak["Total Allocated"]
    assert gpu["peak_allocated_ts"] == peak["ts"]
    assert gpu["peak_reserved_bytes"] == max(s["Total Reserved"] for s in profiled)
    assert gpu["peak_allocated_op"] == innermost_op(trace, peak) is not None
    enclosing = [e for e in events(trace) if e.cat in OP_CATS and not is_step_marker(e.name)
                 and (e.pid, e.tid) == (peak["pid"], peak["tid"]) and e.start <= peak["ts"] < e.end]
    outermost = min(enclosing, key=lambda e: (e.start, -e.end, e.index))
    assert gpu["peak_allocated_op_node"] == outermost.name != gpu["peak_allocated_op"]
    count, total, biggest = live_after(raw, peak)
    assert (gpu["live_at_peak"]["count"], gpu["live_at_peak"]["bytes"]) == (count, total)
    assert gpu["live_at_peak"]["largest"][0]["bytes"] == biggest
    for block in gpu["live_at_peak"]["largest"]:  # the op that allocated each listed block
        (sample,) = {(s["pid"], s["tid"], s["ts"]): s for s in raw
                     if s["ts"] == block["ts"] and s["Bytes"] == block["bytes"]}.values()
        assert block["op"] == innermost_op(trace, sample)
    assert gpu["capacity_bytes"] == 34089730048  # Tesla V100-SXM2-32GB's totalGlobalMem in the trace


@pytest.mark.slow
def test_a_real_cpu_capture_with_profile_memory_records_the_cpu_allocator(tmp_path):
    """`dlscope profile --profile-memory` on the example MLP (CPU): the CPU allocator's samples are device -1,
    and its peak is the raw trace's largest Total Allocated within the profiled steps."""
    pytest.importorskip("torch")
    import dlscope

    db = tmp_path / "mlp.sqlite"
    src = str(Path(dlscope.__file__).resolve().parents[1])  # this dlscope, in the child too
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "dlscope", "profile", "--profile-memory", "--keep-trace", "-o",
                           str(db), "--", sys.executable, str(REPO / "examples" / "mlp.py")],
                          check=False, capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    (trace,) = tmp_path.glob("*.pt.trace.json*")
    raw = raw_samples(trace, 0)
    assert raw and {s["Device Id"] for s in raw} == {-1}
    summary = summary_dict(db)
    assert summary["capture"]["profile_memory"] is True
    (cpu,) = summary["memory"]["devices"]
    assert cpu["device"] == -1 and cpu["capacity_bytes"] is None
    lo = min(s for _, s, _ in step_windows(trace))
    profiled = [s for s in raw if s["ts"] >= lo]
    peak = first_max(profiled, "Total Allocated")
    assert cpu["peak_allocated_bytes"] == peak["Total Allocated"] > 0
    assert cpu["peak_allocated_op"] == innermost_op(trace, peak)


def _near_capacity_trace(tmp_path: Path, peak_bytes: int) -> Path:
    """One GPU of 80 GiB; three steps, each an op `big_matmul` allocating ``peak_bytes`` minus 1 GiB on top of
    1 GiB, launching a kernel, and one cudaMalloc of 40 µs in step 2."""
    t = KinetoTrace()
    gib = 2**30
    for n in range(3):
        base = 1000 * n
        t.step(n, base, base + 900)
        t.op("big_matmul", base + 100, base + 500)
        for ts, delta, total, addr in ((base + 150, gib, gib, 1), (base + 200, peak_bytes - gib, peak_bytes, 2),
                                       (base + 400, -(peak_bytes - gib), gib, 2), (base + 450, -gib, 0, 1)):
            t.events.append({"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": PID,
                             "tid": TID, "ts": ts, "args": {"Device Type": 1, "Device Id": 0, "Addr": addr,
                                                            "Bytes": delta, "Total Allocated": total,
                                                            "Total Reserved": peak_bytes}})
        t.launch(base + 300, base + 310, "ampere_sgemm_128x64_nn", base + 320, base + 480)
    t.events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaMalloc", "pid": PID, "tid": TID,
                     "ts": 2160, "dur": 40, "args": {"correlation": 999}})
    return t.write(tmp_path / "near.json")


def test_near_capacity_names_the_op_at_the_peak(tmp_path):
    capacity = 85899345920  # the builder's A100-SXM4-80GB
    peak = int(0.95 * capacity)
    db = tmp_path / "near.sqlite"
    assert main(["import", str(_near_capacity_trace(tmp_path, peak)), "-o", str(db), "-q"]) == 0
    summary = summary_dict(db)
    (gpu,) = summary["memory"]["devices"]
    assert (gpu["peak_allocated_bytes"], gpu["peak_reserved_bytes"]) == (peak, peak)
    assert gpu["peak_allocated_op"] == "big_matmul"
    assert gpu["live_at_peak"]["count"] == 2 and gpu["live_at_peak"]["bytes"] == peak
    assert [i["peak_allocated_bytes"] for i in gpu["iterations"]] == [peak] * len(gpu["iterations"])
    (finding,) = [f for f in summary["findings"] if f["rule"] == "gpu_memory_near_capacity"]
    assert "big_matmul" in finding["problem"] and "95.0%" in finding["problem"]
    assert finding["est_saving_ns"] == 40_000  # the cudaMalloc: 40 µs
    assert finding["evidence"]["peak_op"] == "big_matmul"


def test_no_near_capacity_finding_below_the_threshold(tmp_path):
    db = tmp_path / "low.sqlite"
    assert main(["import", str(_near_capacity_trace(tmp_path, int(0.85 * 85899345920))), "-o", str(db), "-q"]) == 0
    summary = summary_dict(db)
    assert summary["memory"]["devices"][0]["peak_allocated_bytes"] == int(0.85 * 85899345920)
    assert not [f for f in summary["findings"] if f["rule"] == "gpu_memory_near_capacity"]


def test_a_profile_without_allocator_samples_has_no_memory_section(import_db):
    assert summary_dict(import_db(data_file("kineto", "hta_a100_nccl_rank0of2_3steps.json.gz")))["memory"] is None


def test_deltas_only_traces_sum_the_deltas(tmp_path):
    """2021 Kineto records only Bytes: allocated is their running sum from the trace's start, reserved unknown."""
    t = KinetoTrace()
    t.step(1, 0, 100)
    t.op("a", 10, 90)
    for ts, delta in ((20, 100), (30, 50), (40, -100), (50, 400), (60, -400)):
        t.events.append({"ph": "i", "s": "t", "name": "[memory]", "pid": PID, "tid": TID, "ts": ts,
                         "args": {"Device Type": 1, "Device Id": 0, "Bytes": delta}})
    t.launch(70, 71, "k", 72, 80)
    db = tmp_path / "d.sqlite"
    assert main(["import", str(t.write(tmp_path / "d.json")), "-o", str(db), "-q"]) == 0
    (gpu,) = summary_dict(db)["memory"]["devices"]
    assert gpu["basis"] == "deltas"
    assert gpu["peak_allocated_bytes"] == 450  # 100 + 50 − 100 + 400, at ts 50
    assert gpu["peak_allocated_ts"] == 50_000 and gpu["peak_reserved_bytes"] is None
    assert gpu["peak_allocated_op"] == "a"


def test_the_viewer_charts_memory_without_losing_a_peak(import_db):
    """The Iterations view's JSON twin carries each device's series, thinned to at most 4,000 points but still
    reaching the raw trace's peak, and the same peaks as the summary."""
    from starlette.testclient import TestClient

    from dlscope.viewer.app import create_app

    trace = data_file(*V100)
    db = import_db(trace)
    with TestClient(create_app([db]), base_url="http://127.0.0.1:8000") as client:
        res = client.get("/iterations", params={"_format": "json"})
    assert res.status_code == 200
    mem = res.json()["memory"]
    assert mem["peaks"] == summary_dict(db)["memory"]["devices"]
    gpu = next(s for s in mem["series"] if s["device"] >= 0)
    raw = [s for s in raw_samples(trace, 1) if s["Device Id"] == gpu["device"]]
    assert len(raw) > 4000 >= len(gpu["offset_ns"]) == len(gpu["allocated"])
    assert max(gpu["allocated"]) == max(s["Total Allocated"] for s in raw)
    assert max(r for r in gpu["reserved"] if r is not None) == max(s["Total Reserved"] for s in raw)


def test_nsys_cuda_memory_usage_events_become_allocator_samples(tmp_path):
    """A real nsys export with CUDA memory-usage rows added (what --cuda-memory-usage=true records): one
    allocation per cudaMalloc call, at its end, and frees at the cudaFree calls; the samples carry the calling
    thread, and the peak is the running sum's maximum computed here."""
    path = tmp_path / "saxpy.sqlite"
    shutil.copy(data_file("nsys_sqlite", "pipit_saxpy_mpi_nvtx_a100_nsys2022.2.sqlite"), path)
    conn = sqlite3.connect(path)
    calls = conn.execute("SELECT r.\"end\", r.globalTid, r.correlationId, s.value FROM CUPTI_ACTIVITY_KIND_RUNTIME r "
                         "JOIN StringIds s ON s.id = r.nameId WHERE s.value IN ('cudaMalloc', 'cudaFree') "
                         "ORDER BY r.\"end\"").fetchall()
    (gpid,) = conn.execute("SELECT DISTINCT globalPid FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
    live, rows, running, peak = [], [], 0, 0
    for k, (end, _, corr, name) in enumerate(calls):
        if name == "cudaMalloc":
            size = (k + 1) * 2**20
            live.append((0x1000 + k, size))
            rows.append((end, gpid, 0, 0, 0x1000 + k, 0, size, 1, 0, None, corr))
            running += size
        else:
            addr, size = live.pop(0)
            rows.append((end, gpid, 0, 0, addr, 0, size, 1, 1, None, corr))
            running -= size
        peak = max(peak, running)
    conn.executemany("INSERT INTO CUDA_GPU_MEMORY_USAGE_EVENTS VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    conn.commit()
    conn.close()
    db = tmp_path / "saxpy_db.sqlite"
    assert main(["import", str(path), "-o", str(db), "-q"]) == 0
    got = sqlite3.connect(db).execute("SELECT ts, bytes_delta, tid FROM memory ORDER BY ts").fetchall()
    assert [(ts, d) for ts, d, _ in got] == [(r[0], r[6] if r[8] == 0 else -r[6]) for r in rows]
    assert [tid for *_, tid in got] == [gtid & 0xFFFFFF for _, gtid, _, _ in calls]
    (gpu,) = summary_dict(db)["memory"]["devices"]
    assert gpu["basis"] == "deltas" and gpu["peak_allocated_bytes"] == peak
