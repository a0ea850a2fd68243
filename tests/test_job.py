"""A job is one thing: physical GPUs once with their rank, the job's wall clock and mean GPU utilization, the
ranks and the collective calls, in the summary JSON, the terminal and the HTML report; one process's profiler
cycles are not ranks. Oracles: the raw trace files (read with the standard library) and SQL on the database."""

from __future__ import annotations

import gzip
import json
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
from conftest import data_file, sql
from raw_kineto import KERNEL_CATS, MEMOP_CATS, events

from dlscope.errors import InputError
from dlscope.present.summary import render_summary, summary_dict

DLRM = ("kineto", "param_dlrm_8rank_v100")


def raw_doc(path: Path) -> dict:
    with gzip.open(path, "rt") as f:
        return json.load(f)


def dlrm_files() -> list[Path]:
    folder = data_file(*DLRM)
    return sorted(folder.glob("worker*.pt.trace.json.gz"), key=lambda p: int(re.search(r"\d+", p.name).group()))


@pytest.fixture(scope="module")
def dlrm(import_db):
    return import_db(data_file(*DLRM))


@pytest.fixture(scope="module")
def dlrm_summary(dlrm):
    return summary_dict(dlrm)


# -- physical GPUs ---------------------------------------------------------------------------------------------

def test_each_physical_gpu_once_with_the_rank_that_used_it(dlrm_summary):
    """Every rank's trace lists all 8 GPUs of the node; each rank ran kernels on one: 8 GPUs, not 64."""
    expected = {}
    listed = set()
    for path in dlrm_files():
        doc = raw_doc(path)
        rank = doc["distributedInfo"]["rank"]
        listed |= {d["id"] for d in doc["deviceProperties"]}
        used = {int(e.args.get("device", e.pid)) for e in events(path) if e.cat in KERNEL_CATS | MEMOP_CATS}
        for device in used:
            expected.setdefault(device, []).append(rank)
    gpus = dlrm_summary["profile"]["gpus"]
    assert len(gpus) == len(listed) == 8
    assert {g["device"]: g["ranks"] for g in gpus} == expected
    assert all(g["active"] and g["rank"] == g["ranks"][0] and g["host"] is None for g in gpus)
    assert dlrm_summary["profile"]["gpu_count"] == 8 and dlrm_summary["profile"]["idle_gpu_count"] == 0


def test_a_one_gpu_run_on_a_four_gpu_machine_counts_one_gpu(import_db):
    path = data_file("kineto", "tbplugin_resnet50_v100_workers0.pt.trace.json.gz")
    doc = raw_doc(path)
    used = {int(e.args.get("device", e.pid)) for e in events(path) if e.cat in KERNEL_CATS | MEMOP_CATS}
    listed = {d["id"] for d in doc["deviceProperties"]}
    s = summary_dict(import_db(path))
    assert s["profile"]["gpu_count"] == len(used) == 1
    assert s["profile"]["idle_gpu_count"] == len(listed - used) == 3
    assert {g["device"] for g in s["profile"]["gpus"] if not g["active"]} == listed - used
    text = render_summary(s)
    assert "3 more present, idle: GPU 1, GPU 2, GPU 3" in text


def test_ranks_of_one_host_that_used_the_same_device_index_are_not_merged(tmp_path, dlrm):
    """Two ranks with no host name both ran work on device 0: they cannot be told apart, so each is its own."""
    from dlscope.distributed.job import physical_gpus

    db = tmp_path / "collide.sqlite"
    shutil.copy(dlrm, db)
    conn = sqlite3.connect(db)
    conn.execute("UPDATE agg_gpus SET device = 0 WHERE rank = 1")
    conn.commit()
    gpus = physical_gpus(conn)
    conn.close()
    active = [g for g in gpus if g["active"]]
    assert sorted((g["device"], tuple(g["ranks"])) for g in active)[:2] == [(0, (0,)), (0, (1,))]
    assert not any(len(g["ranks"]) > 1 for g in gpus)


# -- the job's figures -----------------------------------------------------------------------------------------

def test_job_wall_clock_and_mean_gpu_utilization_from_the_database(dlrm, dlrm_summary):
    job = dlrm_summary["job"]
    run = sql(dlrm, "SELECT agg_id, rank, window_start, window_end FROM aggregations WHERE COALESCE(run_id, agg_id) = "
                    "(SELECT MAX(COALESCE(run_id, agg_id)) FROM aggregations) ORDER BY rank")
    assert job["ranks"] == len(run) == 8
    assert [(a["rank"], a["agg_id"]) for a in job["aggregations"]] == [(r[1], r[0]) for r in run]
    assert max(r[2] for r in run) < min(r[3] for r in run)  # the windows overlap: one clock
    assert job["wall_clock_method"] == "span"
    assert job["wall_clock_ns"] == max(r[3] for r in run) - min(r[2] for r in run)
    utils = [u for (u,) in sql(dlrm, "SELECT utilization FROM agg_gpus "
                                     f"WHERE agg_id IN ({','.join(str(r[0]) for r in run)})")]
    assert job["gpu_count"] == len(utils) == 8
    assert job["gpu_utilization"] == pytest.approx(statistics.fmean(utils), abs=1e-12)
    assert dlrm_summary["aggregation"]["rank"] == 0


def test_job_wall_clock_spans_the_first_step_start_to_the_last_activity_in_the_raw_files(dlrm_summary):
    """The same wall clock from the files: earliest ProfilerStep start, latest end of the step's activity
    (its CPU ops and the GPU work they launched) over the 8 ranks."""
    starts, ends = [], []
    for path in dlrm_files():
        evs = events(path)
        step = next(e for e in evs if e.name.startswith("ProfilerStep#"))
        starts.append(step.start)
        corr = {e.correlation for e in evs if e.cat in ("cuda_runtime", "cuda_driver")
                and step.start <= e.start < step.end}
        gpu_end = max((e.end for e in evs if e.cat in KERNEL_CATS | MEMOP_CATS and e.correlation in corr), default=0)
        cpu_end = max(e.end for e in evs if e.cat == "cpu_op" and step.start <= e.start < step.end)
        ends.append(max(step.end, cpu_end, gpu_end))
    assert dlrm_summary["job"]["wall_clock_ns"] == max(ends) - min(starts)


def test_ranks_list_is_the_current_run_and_collective_calls_match_the_raw_nccl_kernels(dlrm, dlrm_summary):
    ranks = dlrm_summary["ranks"]
    assert [r["rank"] for r in ranks] == list(range(8))
    stored = sql(dlrm, "SELECT rank, gpu_utilization, compute_ns, exposed_communication_ns, memcpy_ns, idle_ns, "
                       "avg_iteration_ns, straggler_score FROM agg_ranks WHERE agg_id IN "
                       f"({','.join(str(a['agg_id']) for a in dlrm_summary['job']['aggregations'])}) ORDER BY rank")
    assert [tuple(r[k] for k in ("rank", "gpu_utilization", "compute_ns", "exposed_communication_ns", "memcpy_ns",
                                 "idle_ns", "avg_iteration_ns", "straggler_score")) for r in ranks] == stored
    # each collective call: the k-th NCCL kernel of its kind on every rank, durations from the raw JSON
    per_call = defaultdict(list)
    for path in dlrm_files():
        rank = raw_doc(path)["distributedInfo"]["rank"]
        nccl = sorted((e for e in events(path) if e.cat in KERNEL_CATS and e.name.startswith("ncclKernel_")),
                      key=lambda e: e.start)
        count = defaultdict(int)
        for e in nccl:
            kind = re.match(r"ncclKernel_([A-Za-z]+)", e.name).group(1).lower()
            per_call[(kind, count[kind])].append((rank, e.end - e.start))
            count[kind] += 1
    calls = dlrm_summary["collectives"]
    assert dlrm_summary["job"]["collective_calls"] == len(calls) == len(per_call) == 8
    for c in calls:
        raw = per_call[(c["collective"], c["call_index"])]
        durs = [d for _, d in raw]
        assert c["ranks"] == len(raw) == 8
        assert (c["min_dur_ns"], c["max_dur_ns"]) == (min(durs), max(durs))
        assert c["max_lag_ns"] == max(durs) - min(durs)
        assert c["last_rank"] == min(raw, key=lambda x: (x[1], x[0]))[0]


def _union(intervals: list[tuple[int, int]]) -> int:
    """Length of the union of [start, end) intervals (a sort and one pass: the test's own)."""
    total, reach = 0, None
    for s, e in sorted(intervals):
        if reach is None or s > reach:
            total, reach = total + e - s, e
        elif e > reach:
            total, reach = total + e - reach, e
    return total


def test_each_rank_gpu_time_line_parts_match_its_raw_kernels_and_copies_in_its_window(dlrm, dlrm_summary):
    """compute, communication, exposed communication, copies and idle of every rank (made for all ranks at
    once): recomputed from the raw files, the rank's kernels and memory operations cut to its window."""
    ids = ",".join(str(a["agg_id"]) for a in dlrm_summary["job"]["aggregations"])
    window = {r: (lo, hi) for r, lo, hi in
              sql(dlrm, f"SELECT rank, window_start, window_end FROM aggregations WHERE agg_id IN ({ids})")}
    ranks = {r["rank"]: r for r in dlrm_summary["ranks"]}
    assert sorted(window) == sorted(ranks) == list(range(8))
    for path in dlrm_files():
        rank = raw_doc(path)["distributedInfo"]["rank"]
        lo, hi = window[rank]
        cut = {"compute": [], "comm": [], "copy": []}
        for e in events(path):
            if e.cat in KERNEL_CATS | MEMOP_CATS and min(e.end, hi) > max(e.start, lo):
                kind = "copy" if e.cat in MEMOP_CATS else "comm" if e.name.startswith("ncclKernel_") else "compute"
                cut[kind].append((max(e.start, lo), min(e.end, hi)))
        compute, kernels = _union(cut["compute"]), _union(cut["compute"] + cut["comm"])
        busy = _union(cut["compute"] + cut["comm"] + cut["copy"])
        r = ranks[rank]
        assert cut["comm"] and cut["copy"] and r["compute_ns"] == compute > 0
        assert (r["communication_ns"], r["exposed_communication_ns"], r["memcpy_ns"], r["idle_ns"]) == (
            _union(cut["comm"]), kernels - compute, busy - kernels, (hi - lo) - busy)


def test_summary_for_another_rank_and_a_rank_that_is_not_there(dlrm, dlrm_summary):
    agg3 = next(a["agg_id"] for a in dlrm_summary["job"]["aggregations"] if a["rank"] == 3)
    s3 = summary_dict(dlrm, rank=3)
    assert s3["aggregation"]["agg_id"] == agg3 and s3["aggregation"]["rank"] == 3
    assert s3["job"] == dlrm_summary["job"]      # the same job whichever rank is shown
    out = subprocess.run([sys.executable, "-m", "dlscope", "summary", str(dlrm), "--rank", "12"],
                         capture_output=True, text=True, check=False)
    assert out.returncode == 2 and "no rank 12" in out.stderr


def test_terminal_shows_the_job_then_which_rank(dlrm_summary):
    text = render_summary(dlrm_summary)
    assert "job of 8 ranks" in text.splitlines()[0]
    assert "8 × Tesla V100-SXM2-32GB" in text and text.count("Tesla V100-SXM2-32GB") == 1
    assert "Rank 0 of the job of 8 ranks" in text
    job = dlrm_summary["job"]
    assert f"{100 * job['gpu_utilization']:.1f}% (mean of 8 GPUs" in text
    assert text.index("Ranks (8)") < text.index("Rank 0 of the job")


def test_html_report_has_the_job_and_every_rank(dlrm, dlrm_summary, tmp_path):
    from html.parser import HTMLParser

    from dlscope.present.html_report import write_html_report

    page = write_html_report(dlrm, tmp_path).read_text()

    class Tables(HTMLParser):
        def __init__(self):
            super().__init__()
            self.tables, self.cur, self.cell = {}, None, None

        def handle_starttag(self, tag, attrs):
            attrs = dict(attrs)
            if tag == "table":
                self.cur = self.tables.setdefault(attrs.get("id"), [])
            elif tag == "tr" and self.cur is not None:
                self.cur.append([])
            elif tag in ("td", "th") and self.cur is not None:
                self.cell = []

        def handle_endtag(self, tag):
            if tag in ("td", "th") and self.cell is not None and self.cur:
                self.cur[-1].append("".join(self.cell).strip())
                self.cell = None
            elif tag == "table":
                self.cur = None

        def handle_data(self, data):
            if self.cell is not None:
                self.cell.append(data)

    t = Tables()
    t.feed(page)
    from dlscope.format import fmt_ns, fmt_pct

    assert "job of 8 ranks" in page and "Rank 0 of the job of 8 ranks" in page
    ranks = t.tables["ranks"][1:]
    assert [row[0] for row in ranks] == [str(r["rank"]) for r in dlrm_summary["ranks"]]
    for row, r in zip(ranks, dlrm_summary["ranks"]):
        assert row[1:8] == [fmt_pct(r["gpu_utilization"]), fmt_ns(r["compute_ns"]),
                            fmt_ns(r["exposed_communication_ns"]),
                            fmt_ns(r["memcpy_ns"]), fmt_ns(r["idle_ns"]), fmt_ns(r["wall_clock_ns"]),
                            fmt_ns(r["avg_iteration_ns"])]
    assert len(t.tables["job-gpus"]) - 1 == 8 and len(t.tables["collectives"]) - 1 == 8
    assert f"<div class=\"value\">{fmt_ns(dlrm_summary['job']['wall_clock_ns'])}</div>" in page


# -- profiler cycles of one process ----------------------------------------------------------------------------

def test_two_profiler_cycles_of_one_process_are_refused_not_made_two_ranks(tmp_path):
    from dlscope.pipeline import build_database

    trace = data_file("kineto", "hta_cpu_only_no_gpu.pt.trace.json.gz")
    folder = tmp_path / "traces"
    folder.mkdir()
    for stamp in ("1700000000000000001", "1700000000000000002"):   # dlscope.trace_handler's names
        shutil.copy(trace, folder / f"node7_4242.{stamp}.pt.trace.json.gz")
    with pytest.raises(InputError, match=r"2 profiler cycles of one process \(node7_4242\), not ranks"):
        build_database([folder], tmp_path / "cycles.sqlite", progress=False)
    assert not (tmp_path / "cycles.sqlite").exists()
    # two processes (two workers), one cycle each: a job of two ranks
    shutil.move(folder / "node7_4242.1700000000000000002.pt.trace.json.gz",
                folder / "node7_4243.1700000000000000002.pt.trace.json.gz")
    db = build_database([folder], tmp_path / "job.sqlite", progress=False)
    assert sql(db, "SELECT COUNT(DISTINCT rank) FROM sources")[0][0] == 2
