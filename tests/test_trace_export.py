"""`dlscope export`: the Chrome trace is valid JSON that imports back to the same kernels (count and exact ns),
checked against the database and against the raw trace read here; iteration windows, ranks, hostile names and
errors."""

from __future__ import annotations

import gzip
import json
import sqlite3
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest
from conftest import data_file
from raw_kineto import KERNEL_CATS, LAUNCH_CATS, events, ns
from trace_builder import KinetoTrace

from dlscope.cli import main
from dlscope.present.trace_export import _us

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
NCCL = ("kineto", "hta_a100_nccl_rank0of2_3steps.json.gz")


def load(path: Path) -> dict:
    with gzip.open(path, "rt") if path.suffix == ".gz" else open(path) as f:
        return json.load(f, parse_float=Decimal)


def one(db: Path, sql: str, params=()):
    conn = sqlite3.connect(db)
    try:
        return conn.execute(sql, params).fetchone()
    finally:
        conn.close()


def kernels_in(doc: dict) -> tuple[int, int]:
    """(count, total ns) of the kernel events of an exported file, from its text (exact decimals)."""
    found = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "kernel"]
    return len(found), sum(ns(e["dur"]) for e in found)


def test_microseconds_are_written_exactly_from_ns():
    got = _us(np.array([0, 1, 999, 1000, 1_234_567, -1, -1500, 4458676416788066, 2**62], dtype=np.int64))
    assert got.tolist() == ["0.000", "0.001", "0.999", "1.000", "1234.567", "-0.001", "-1.500",
                            "4458676416788.066", "4611686018427387.904"]


def test_a_real_profile_round_trips_to_the_same_kernels(import_db, tmp_path):
    trace = data_file(*NCCL)
    raw = [e for e in events(trace) if e.cat in KERNEL_CATS]
    raw_count, raw_ns = len(raw), sum(e.end - e.start for e in raw)
    db = import_db(trace)
    assert one(db, "SELECT COUNT(*), SUM(dur) FROM kernels") == (raw_count, raw_ns)

    out = tmp_path / "trace.json.gz"
    assert main(["export", str(db), "-o", str(out)]) == 0
    doc = load(out)
    assert kernels_in(doc) == (raw_count, raw_ns)
    back = tmp_path / "back.sqlite"
    assert main(["import", str(out), "-o", str(back), "-q"]) == 0
    assert one(back, "SELECT COUNT(*), SUM(dur) FROM kernels") == (raw_count, raw_ns)
    # the analysis sees the same profile: kernels attributed to ops, iterations, the aggregation's figures
    figures = ("SELECT kernel_count, kernel_time_ns, wall_clock_ns, gpu_busy_ns, op_nodes, iterations_profiled "
               "FROM aggregations")
    assert one(back, figures) == one(db, figures)
    assert one(back, "SELECT COUNT(*) FROM kernels WHERE op_id >= 0") == one(db, "SELECT COUNT(*) FROM kernels "
                                                                                 "WHERE op_id >= 0")

    # the rank is a process, its threads and streams are named, every flow has both ends
    names = {(e["name"], e["tid"]): e["args"] for e in doc["traceEvents"] if e.get("ph") == "M"}
    assert names[("process_name", 0)] == {"name": "rank 0"}
    assert {e["pid"] for e in doc["traceEvents"]} == {1}  # rank 0 is pid 1: Perfetto reserves pid 0
    streams = {(e["args"]["device"], e["args"]["stream"]) for e in doc["traceEvents"] if e.get("cat") == "kernel"}
    thread_names = {a["name"] for (n, _), a in names.items() if n == "thread_name"}
    assert {f"GPU {d} stream {s}" for d, s in streams} <= thread_names
    starts = {e["id"] for e in doc["traceEvents"] if e.get("ph") == "s"}
    ends = {e["id"] for e in doc["traceEvents"] if e.get("ph") == "f"}
    assert starts == ends and len(starts) >= raw_count


def test_an_iteration_window_holds_the_kernels_launched_in_it(import_db, tmp_path):
    """Iterations 4..5 of the trace: ProfilerStep#4's start to ProfilerStep#6's; a kernel belongs to the
    iteration its launch is in (the raw launch found by correlation here)."""
    trace = data_file(*NCCL)
    raw = events(trace)
    steps = {e.name: e.start for e in raw if e.name.startswith("ProfilerStep#")}
    lo, hi = steps["ProfilerStep#4"], steps["ProfilerStep#6"]
    launch = {e.correlation: e.start for e in raw if e.cat in LAUNCH_CATS}
    kernels = [e for e in raw if e.cat in KERNEL_CATS and lo <= launch[e.correlation] < hi]
    assert kernels

    out = tmp_path / "window.json"
    assert main(["export", str(import_db(trace)), "--iterations", "4:5", "-o", str(out)]) == 0
    doc = load(out)
    assert kernels_in(doc) == (len(kernels), sum(e.end - e.start for e in kernels))
    assert doc["dlscope"]["iterations"] == {"0": [4, 5]}
    steps_out = sorted(e["name"] for e in doc["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#"))
    assert steps_out == ["ProfilerStep#4", "ProfilerStep#5"]


def test_errors_are_one_line_and_exit_2(import_db, tmp_path, capsys):
    db = str(import_db(data_file(*NCCL)))
    out = str(tmp_path / "x.json")
    for args, words in ((["--iterations", "0:2"], "no iterations 0..2 (its iterations: 4..6)"),
                        (["--iterations", "5:4"], "4 is before 5"), (["--iterations", "a:b"], "not an iteration"),
                        (["--rank", "7"], "no rank 7")):
        assert main(["export", db, "-o", out, *args]) == 2
        err = capsys.readouterr().err
        assert words in err and err.count("\n") == 1, err
    assert not Path(out).exists()
    Path(out).write_text("keep")
    assert main(["export", db, "-o", out]) == 2
    assert "already exists (use --force" in capsys.readouterr().err and Path(out).read_text() == "keep"
    assert main(["export", db, "-o", out, "--force"]) == 0
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary file left


HOSTILE = ['say "hi"\n\tnow', "</script><script>alert(1)</script>", "back\\slash \u2028 ünï \x01", "{\"a\": [1,"]


def test_hostile_names_stay_valid_json_and_come_back_exactly(tmp_path):
    t = KinetoTrace()
    t.step(1, 0, 100)
    for i, name in enumerate(HOSTILE):
        base = 10 + 20 * i
        t.op(name, base, base + 10, **{"Input Dims": [[2, 3]]})
        t.launch(base + 1, base + 2, name, base + 3, base + 4.5)
    db = tmp_path / "h.sqlite"
    assert main(["import", str(t.write(tmp_path / "h.json")), "-o", str(db), "-q"]) == 0
    out = tmp_path / "export.json"
    assert main(["export", str(db), "-o", str(out)]) == 0
    doc = json.loads(out.read_text(encoding="utf-8"))  # the standard library's strict parser
    by_cat = {}
    for e in doc["traceEvents"]:
        by_cat.setdefault(e.get("cat"), []).append(e)
    assert sorted(e["name"] for e in by_cat["kernel"]) == sorted(HOSTILE)
    assert sorted(e["name"] for e in by_cat["cpu_op"]) == sorted(HOSTILE)
    assert {json.dumps(e["args"]["Input Dims"]) for e in by_cat["cpu_op"]} == {"[[2, 3]]"}
    assert [ns(e["dur"]) for e in by_cat["kernel"]] == [1500] * len(HOSTILE)
    assert all(e["args"]["op"] in HOSTILE for e in by_cat["kernel"])  # the launching op, by name


def test_the_viewer_downloads_the_same_trace_over_http(import_db, tmp_path):
    from starlette.testclient import TestClient

    from dlscope.viewer.app import create_app

    db = import_db(data_file(*NCCL))
    cli_out = tmp_path / "cli.json"
    assert main(["export", str(db), "--iterations", "4:5", "-o", str(cli_out)]) == 0
    with TestClient(create_app([db]), base_url="http://127.0.0.1:8000") as client:
        res = client.get("/api/trace.json", params={"iterations": "4:5"})
        assert res.status_code == 200
        assert res.headers["content-disposition"].startswith("attachment;")
        assert ".trace.json" in res.headers["content-disposition"]
        doc = json.loads(res.content, parse_float=Decimal)
        assert kernels_in(doc) == kernels_in(load(cli_out))
        assert doc["traceEvents"] == load(cli_out)["traceEvents"]

        bad = client.get("/api/trace.json", params={"iterations": "0:1"})
        assert bad.status_code == 400 and "its iterations: 4..6" in bad.json()["error"]
        assert bad.json()["parameter"] == "iterations"
        bad = client.get("/api/trace.json", params={"rank": "3"})
        assert bad.status_code == 400 and bad.json()["parameter"] == "rank" and "no rank 3" in bad.json()["error"]
        bad = client.get("/api/trace.json", params={"iterations": "x"})
        assert bad.status_code == 400 and bad.json()["parameter"] == "iterations"
        # a page of another site cannot read it through DNS rebinding: its Host is refused
        assert client.get("/api/trace.json", headers={"Host": "evil.example"}).status_code == 400


def test_perfetto_protobuf_nests_per_track_and_holds_the_raw_kernels(import_db, tmp_path):
    """Read back with the perfetto package's own Trace message: every track's begin/end events form a stack
    (each end closes the slice begun last on it), and the kernel slices are the raw trace's, to the ns."""
    pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")
    trace = data_file(*NCCL)
    raw = [e for e in events(trace) if e.cat in KERNEL_CATS]
    out = tmp_path / "t.pftrace"
    assert main(["export", str(import_db(trace)), "--format", "perfetto", "-o", str(out)]) == 0
    doc = pb.Trace()
    doc.ParseFromString(out.read_bytes())
    threads = {p.track_descriptor.uuid: p.track_descriptor for p in doc.packet if p.HasField("track_descriptor")}
    assert {d.process.process_name for d in threads.values() if d.HasField("process")} == {"rank 0"}
    stacks: dict[int, list] = {}
    kernels, flows, ends = [], set(), set()
    events_in_order = sorted((p for p in doc.packet if p.HasField("track_event")), key=lambda p: p.timestamp)
    for p in events_in_order:  # Perfetto sorts by time, keeping the file's order at one instant
        e = p.track_event
        if e.type == pb.TrackEvent.TYPE_SLICE_BEGIN:
            stacks.setdefault(e.track_uuid, []).append((p.timestamp, list(e.categories), e.name))
            flows.update(e.flow_ids)
            ends.update(e.terminating_flow_ids)
        elif e.type == pb.TrackEvent.TYPE_SLICE_END:
            start, cats, name = stacks[e.track_uuid].pop()
            assert start <= p.timestamp
            if cats == ["kernel"]:
                kernels.append((name, p.timestamp - start))
    assert all(not s for s in stacks.values())
    assert sorted(kernels) == sorted((e.name, e.end - e.start) for e in raw)
    assert ends and ends <= flows
    assert all(threads[t].thread.thread_name for t in stacks)


def test_allocator_samples_round_trip_with_their_peaks(import_db, tmp_path):
    """A real trace with [memory] events (V100, 5 steps): the export carries every sample (instants on the
    allocating thread, with Addr) and a counter per device, and the re-import finds the same peaks, the same
    op at each and the same live allocations."""
    from dlscope.present.summary import summary_dict

    db = import_db(data_file("kineto", "hta_v100_rank1of2_5steps.json.gz"))
    out = tmp_path / "mem.json.gz"
    assert main(["export", str(db), "-o", str(out)]) == 0
    doc = load(out)
    instants = [e for e in doc["traceEvents"] if e.get("name") == "[memory]"]
    assert len(instants) == one(db, "SELECT COUNT(*) FROM memory")[0]
    counters = [e for e in doc["traceEvents"] if e.get("ph") == "C"]
    assert max(int(e["args"]["allocated"]) for e in counters) == one(db, "SELECT MAX(total_allocated) FROM memory")[0]
    back = tmp_path / "mem.sqlite"
    assert main(["import", str(out), "-o", str(back), "-q"]) == 0
    def peaks(path):  # op ids are row numbers, which a re-import numbers in its own order
        return [{k: v for k, v in d.items() if k not in ("peak_allocated_op_id", "peak_allocated_node_op_id")}
                for d in summary_dict(path)["memory"]["devices"]]

    assert peaks(back) == peaks(db)


def test_a_job_exports_each_rank_as_a_process_and_one_rank_re_imports_as_itself(import_db, tmp_path):
    """Two ranks of a real 8-rank DLRM job: each rank is a process (pid rank + 1) holding that rank's kernels
    (as the raw file of that worker has them), threads are unique over the file; --rank 1 re-imports as rank 1."""
    files = [data_file("kineto", "param_dlrm_8rank_v100", f"worker{r}.pt.trace.json.gz") for r in (0, 1)]
    db = import_db(*files)
    out = tmp_path / "job.json"
    assert main(["export", str(db), "-o", str(out)]) == 0
    doc = load(out)
    procs = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "process_name"}
    assert procs == {1: "rank 0", 2: "rank 1"}
    for rank, path in enumerate(files):
        raw = [e for e in events(path) if e.cat in KERNEL_CATS]
        mine = [e for e in doc["traceEvents"] if e.get("cat") == "kernel" and e["pid"] == rank + 1]
        assert (len(mine), sum(ns(e["dur"]) for e in mine)) == (len(raw), sum(e.end - e.start for e in raw))
    owners = {}
    for e in doc["traceEvents"]:
        if e.get("ph") == "X":
            assert owners.setdefault(e["tid"], e["pid"]) == e["pid"]  # a thread id belongs to one rank
    one_rank = tmp_path / "rank1.json"
    assert main(["export", str(db), "--rank", "1", "-o", str(one_rank)]) == 0
    assert load(one_rank)["distributedInfo"]["rank"] == 1
    back = tmp_path / "rank1.sqlite"
    assert main(["import", str(one_rank), "-o", str(back), "-q"]) == 0
    assert one(back, "SELECT DISTINCT rank FROM kernels") == (1,)
    assert one(back, "SELECT COUNT(*), SUM(dur) FROM kernels") == one(db, "SELECT COUNT(*), SUM(dur) FROM kernels "
                                                                          "WHERE rank = 1")
