"""The near-capacity finding on hand-made traces: whenever the allocator's peak is at least 90 % of the GPU's
memory it names the op and the op node running at the peak and the headroom in bytes. With allocator driver
calls in the profiled iterations it is priced by their time; without, it is a risk finding that says it has no
time saving (stored as NULL with the reason, shown as such), never a 0 ns saving or nothing at all."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from trace_builder import PID, TID, KinetoTrace

from dlscope.cli import main
from dlscope.experts import Finding, priced, unpriced_risk
from dlscope.experts.report import write_expert_report
from dlscope.present.html_report import render_html_report
from dlscope.present.summary import render_summary, summary_dict

GIB = 2**30
CAPACITY = 80 * GIB          # the builder's A100-SXM4-80GB: 85,899,345,920 bytes
PEAK = 76 * GIB              # 95 % of it
HEADROOM = CAPACITY - PEAK   # 4 GiB = 4,294,967,296 bytes


def near_capacity_trace(tmp_path: Path, peak: int, malloc: bool) -> Path:
    """Three steps, each an op node `aten::linear` whose `aten::mm` allocates 1 GiB, then up to ``peak``, then frees
    both; the caching allocator holds ``peak`` reserved throughout; ``malloc``: one cudaMalloc of 40 µs in step 2."""
    t = KinetoTrace()
    for n in range(3):
        base = 1000 * n
        t.step(n, base, base + 900)
        t.op("aten::linear", base + 100, base + 500)
        t.op("aten::mm", base + 120, base + 480)
        for ts, delta, total, addr in ((base + 150, GIB, GIB, 1), (base + 200, peak - GIB, peak, 2),
                                       (base + 400, -(peak - GIB), GIB, 2), (base + 450, -GIB, 0, 1)):
            t.events.append({"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": PID,
                             "tid": TID, "ts": ts, "args": {"Device Type": 1, "Device Id": 0, "Addr": addr,
                                                            "Bytes": delta, "Total Allocated": total,
                                                            "Total Reserved": peak}})
        t.launch(base + 300, base + 310, "ampere_sgemm_128x64_nn", base + 320, base + 480)
    if malloc:
        t.events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaMalloc", "pid": PID, "tid": TID,
                         "ts": 2160, "dur": 40, "args": {"correlation": 999}})
    return t.write(tmp_path / "near.json")


def imported(tmp_path: Path, peak: int, malloc: bool) -> Path:
    db = tmp_path / "near.sqlite"
    assert main(["import", str(near_capacity_trace(tmp_path, peak, malloc)), "-o", str(db), "-q"]) == 0
    return db


def near(summary: dict) -> list[dict]:
    return [f for f in summary["findings"] if f["rule"] == "gpu_memory_near_capacity"]


def test_near_capacity_without_allocator_calls_is_a_risk_finding_naming_the_op_and_the_headroom(tmp_path):
    db = imported(tmp_path, PEAK, malloc=False)
    summary = summary_dict(db)
    (f,) = near(summary)
    assert f["est_saving_ns"] is None and f["est_saving_pct"] is None
    assert f["not_priced"].startswith("a risk, not time lost") and "4.00 GiB of headroom" in f["not_priced"]
    assert f["severity"] == "medium"   # rules.json: unpriced_severity
    assert "aten::mm (in aten::linear)" in f["problem"] and "95.0%" in f["problem"]
    assert "4,294,967,296 bytes (4.00 GiB) of headroom" in f["problem"]
    assert "no driver calls" in f["problem"]
    ev = f["evidence"]
    assert (ev["headroom_bytes"], ev["peak_bytes"], ev["capacity_bytes"]) == (HEADROOM, PEAK, CAPACITY)
    assert (ev["peak_op"], ev["peak_op_node"]) == ("aten::mm", "aten::linear")
    # the reserved peak (constant) is first reached in step 0, whose window runs to step 1's start (1000 µs)
    assert ev["iterations"] == [0] and ev["time_ranges"] == [[0, 1_000_000]]
    with sqlite3.connect(db) as conn:
        (linear,) = conn.execute("SELECT node_id FROM agg_ops WHERE op_name = 'aten::linear'").fetchone()
    assert ev["node_ids"] == [linear]
    # stored as NULL with its reason, never as 0
    with sqlite3.connect(db) as conn:
        stored = conn.execute("SELECT est_saving_ns, not_priced FROM findings WHERE rule = ?",
                              ("gpu_memory_near_capacity",)).fetchall()
    assert stored == [(None, f["not_priced"])]
    # the terminal summary and the expert report say there is no saving and why
    assert "not priced:" in render_summary(summary)  # the table folds the reason over lines
    written = write_expert_report(sqlite3.connect(db), 1, tmp_path / "r", ["md", "json"])
    md = next(p for p in written if p.suffix == ".md").read_text()
    assert "**Estimated saving:** none: a risk, not time lost" in md
    records = json.loads(next(p for p in written if p.suffix == ".json").read_text())
    (rec,) = [r for r in records if r["rule"] == "gpu_memory_near_capacity"]
    assert rec["est_saving_ns"] is None and rec["not_priced"] == f["not_priced"]
    assert f"(no time saving: {f['not_priced']})" in render_html_report(db)


def test_near_capacity_with_allocator_calls_is_priced_by_their_time(tmp_path):
    (f,) = near(summary_dict(imported(tmp_path, PEAK, malloc=True)))
    assert f["est_saving_ns"] == 40_000 and f["not_priced"] is None   # the cudaMalloc: 40 µs
    assert "4,294,967,296 bytes (4.00 GiB) of headroom" in f["problem"]
    assert "1 allocator calls (cudaMalloc) took 40" in f["problem"]


def test_below_the_threshold_there_is_no_near_capacity_finding(tmp_path):
    assert not near(summary_dict(imported(tmp_path, 68 * GIB, malloc=False)))   # 85 %


def test_only_a_finding_that_says_why_it_has_no_saving_is_kept_without_one():
    def finding(saving, why=None):
        return Finding("r", "p", "r", saving, {}, not_priced=why)
    assert priced(finding(5)) and not unpriced_risk(finding(5))
    for saving in (None, 0, float("nan")):
        assert not priced(finding(saving)) and not unpriced_risk(finding(saving))
        assert not priced(finding(saving, "   ")) and not unpriced_risk(finding(saving, "   "))
        assert unpriced_risk(finding(saving, "a risk"))
    thresholds = {"high_pct": 10, "medium_pct": 3}
    d = finding(None, "a risk").to_dict(100, thresholds, 5)
    assert (d["est_saving_ns"], d["est_saving_pct"], d["not_priced"], d["severity"]) == (None, None, "a risk", "low")
    d = finding(7, "ignored: it has a saving").to_dict(100, thresholds, 5)
    assert (d["est_saving_ns"], d["est_saving_pct"], d["not_priced"]) == (7, 7.0, None)


def test_host_allocations_between_the_gpu_samples_change_nothing(tmp_path):
    """CPU allocator samples (device -1, larger than the GPU's peak) interleaved with the GPU ones: the rule
    reads the GPU samples by position, not from a filtered copy; the finding is the one hand-computed above."""
    path = near_capacity_trace(tmp_path, PEAK, malloc=False)
    trace = json.loads(path.read_text())
    for n in range(3):
        for ts, delta, total in ((1000 * n + 160, 100 * GIB, 100 * GIB), (1000 * n + 420, -100 * GIB, 0)):
            trace["traceEvents"].append({"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]",
                                         "pid": PID, "tid": TID, "ts": ts,
                                         "args": {"Device Type": 0, "Device Id": -1, "Addr": 7, "Bytes": delta,
                                                  "Total Allocated": total, "Total Reserved": total}})
    path.write_text(json.dumps(trace))
    db = tmp_path / "host.sqlite"
    assert main(["import", str(path), "-o", str(db), "-q"]) == 0
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT COUNT(*) FROM memory WHERE device < 0").fetchone() == (6,)
    (f,) = near(summary_dict(db))
    ev = f["evidence"]
    assert (ev["headroom_bytes"], ev["peak_bytes"], ev["capacity_bytes"]) == (HEADROOM, PEAK, CAPACITY)
    assert (ev["peak_op"], ev["peak_op_node"]) == ("aten::mm", "aten::linear")
    assert ev["iterations"] == [0] and "95.0%" in f["problem"]
