"""Symptoms name their causes: ``gpu_gaps`` measures what the host did during the GPU's idle gaps (data loading,
CUDA API calls, ops, Python between ops, on the thread that launched the kernel after each gap), and it and
``gpu_underutilized`` point to the finding that owns the cause (``dataloader_bottleneck``, ``host_bound``) where
that rule fired, instead of repeating its advice; where it did not, they give the advice themselves.

Oracles: a hand-made trace worked by hand, and the raw JSON of real captures (gaps from the raw kernels and copies
in the stored iteration windows, the split from the raw events of the launching thread)."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest
from conftest import data_file, requires_shared
from experts_helpers import findings, stored_findings
from raw_kineto import KERNEL_CATS, LAUNCH_CATS, MEMOP_CATS, events
from test_host_bound import LOADER, _covered, _merged, _op
from trace_builder import KinetoTrace

from dlscope.pipeline import build_database

H200 = Path(__file__).parent / "data" / "h200"
US = 1000


def _gap_trace() -> KinetoTrace:
    """3 steps of 10,000 µs. Step i (b = 10,000 i): kernel A launched at b + 100 runs [b + 120, b + 1120); the GPU
    then idles 4,000 µs until kernel B, [b + 5120, b + 9500), launched by a call on [b + 5000, b + 5110) inside an
    aten::mm on [b + 4000, b + 5110); a DataLoader op runs on [b + 1500, b + 3500). The idles after B (500 µs to the
    step's end, 120 µs into the next) are under the rule's 1 ms. Per gap: 2,000 µs loading data, 110 in the launch
    call, 1,000 in the op around it, 890 outside any op."""
    def loader_then_mm(t: KinetoTrace, b: float) -> None:
        t.op(LOADER, b + 1500, b + 3500)
        t.op("aten::mm", b + 4000, b + 5110)
        t.launch(b + 5000, b + 5110, "ampere_sgemm_128x64_nn", b + 5120, b + 9500)
    return _steps_after_a(loader_then_mm)


def _steps_after_a(then) -> KinetoTrace:
    """3 steps of 10,000 µs, each opening with kernel A (launched at b + 100 under an aten::relu, run on
    [b + 120, b + 1120)), then ``then(trace, b)``."""
    t = KinetoTrace()
    for i in range(3):
        b = 10_000.0 * i
        t.step(i + 1, b, b + 10_000)
        t.op("aten::relu", b + 90, b + 115)
        t.launch(b + 100, b + 110, "vectorized_elementwise_kernel", b + 120, b + 1120)
        then(t, b)
    return t


@pytest.fixture(scope="module")
def gap_db(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("gaps")
    return build_database([_gap_trace().write(folder / "gaps.json")], folder / "gaps.sqlite", progress=False)


def test_the_gaps_host_time_is_split_as_worked_by_hand(gap_db):
    got = findings(gap_db)
    f = got["gpu_gaps"]
    assert f["est_saving_ns"] == 3 * 4_000 * US and f["evidence"]["gap_count"] == 3
    assert f["evidence"]["host_split_ns"] == {"queued": 0, "dataloader": 3 * 2_000 * US, "cuda_api": 3 * 110 * US,
                                              "cpu_op": 3 * 1_000 * US, "cpu_other": 3 * 890 * US, "unknown": 0}
    assert ("Meanwhile the host was 50% loading data, 25% in framework ops, 22% between ops (Python, the framework's "
            "dispatch), 3% in CUDA API calls.") in f["problem"]


def test_gaps_point_to_the_data_loading_finding_where_it_fired(gap_db, tmp_path):
    got = findings(gap_db)
    assert "dataloader_bottleneck" in got                       # 6 of 30 ms loading data
    f = got["gpu_gaps"]
    assert f["recommendation"].startswith("50% of the gaps' time the host was loading data: the "
                                          "dataloader_bottleneck finding says what to change and what it saves.")
    assert f["evidence"]["see_findings"] == ["dataloader_bottleneck"]
    assert "num_workers" not in f["recommendation"]              # said once, by the finding that prices it
    silent = tmp_path / "rules.json"
    silent.write_text('{"dataloader_bottleneck": {"enabled": false}}')
    alone = findings(gap_db, silent)
    assert "dataloader_bottleneck" not in alone
    assert alone["gpu_gaps"]["recommendation"].startswith(
        "The largest part of the gaps' time is data loading. Load batches in parallel with the step: "
        "DataLoader(num_workers=N>0")
    assert "see_findings" not in alone["gpu_gaps"]["evidence"]


def test_a_gap_before_a_kernel_queued_earlier_is_not_the_host_s(tmp_path):
    """After kernel A (stream 7, [b + 120, b + 1120)), kernel B, launched at b + 200 on stream 8, starts only at
    b + 4120 (it waited for something on the GPU side): 3 × 3,000 µs in which the host cannot be the cause, whatever
    it did. (The idle after B up to the next step's kernel A is the host's: A is launched inside it.)"""
    def queued_b(t: KinetoTrace, b: float) -> None:
        t.op("aten::mm", b + 190, b + 215)
        t.launch(b + 200, b + 210, "ampere_sgemm_128x64_nn", b + 4120, b + 4620, stream=8)
    db = build_database([_steps_after_a(queued_b).write(tmp_path / "queued.json")], tmp_path / "queued.sqlite",
                        progress=False)
    f = findings(db)["gpu_gaps"]
    split = f["evidence"]["host_split_ns"]
    assert split["queued"] == 3 * 3_000 * US
    assert "For " in f["problem"] and "the next kernel had been launched before the gap began" in f["problem"]
    if max(split, key=lambda part: split[part]) == "queued":
        assert f["recommendation"].startswith("The largest part of the gaps' time the GPU had its next kernel queued")
        assert "see_findings" not in f["evidence"]


def raw_gaps(path: Path, windows: list[tuple[int, int]], min_gap: int) -> dict:
    """The GPU gaps of a capture by the rule's definition, from its raw JSON: per device, the stretches of at least
    ``min_gap`` inside each window covered by no kernel, copy or memset; per gap: queued where the device's next
    kernel was launched before the gap began, else what the host did meanwhile: data loading (a DataLoader op on
    any thread), else, on the thread of that kernel's launch call, a CUDA runtime/driver call, else a cpu_op, else
    neither (no next kernel, or none with a call: unknown)."""
    evs = events(path)
    calls = {e.args.get("correlation"): e for e in evs if e.cat in LAUNCH_CATS}
    busy: dict = {}
    kernels: dict = {}
    for e in evs:
        if e.cat in KERNEL_CATS | MEMOP_CATS:
            busy.setdefault(e.args.get("device"), []).append((e.start, e.end))
        if e.cat in KERNEL_CATS:
            kernels.setdefault(e.args.get("device"), []).append(e)
    loading = _merged((e.start, e.end) for e in evs if (_op(e) or e.cat == "user_annotation")
                      and "dataloader" in e.name.lower())  # torch 2 records the batch fetch as a user annotation
    promoted = _annotations_standing_for_ops(evs)
    split = dict.fromkeys(("queued", "dataloader", "cuda_api", "cpu_op", "cpu_other", "unknown"), 0)
    total, threads = 0, {}
    for device, spans in busy.items():
        merged = _merged(spans)
        after = sorted(kernels.get(device, []), key=lambda k: k.start)
        for lo, hi in windows:
            edges = [lo] + [x for s, e in merged if e > lo and s < hi for x in (max(s, lo), min(e, hi))] + [hi]
            for s, e in zip(edges[::2], edges[1::2]):
                if e - s < min_gap:
                    continue
                total += e - s
                nxt = next((k for k in after if k.start >= e), None)
                call = calls.get(nxt.args.get("correlation")) if nxt is not None else None
                if call is not None and call.start < s:   # launched before the gap: it waited for something else
                    split["queued"] += e - s
                    continue
                in_loading = _covered(loading, s, e)
                split["dataloader"] += in_loading
                if call is None:
                    split["unknown"] += (e - s) - in_loading
                    continue
                th = (call.pid, call.tid)
                if th not in threads:
                    api = [(x.start, x.end) for x in evs if x.cat in LAUNCH_CATS and (x.pid, x.tid) == th]
                    ops = [(x.start, x.end) for x in evs if (_op(x) or x.index in promoted) and (x.pid, x.tid) == th]
                    threads[th] = (_merged(loading + api), _merged(loading + api + ops))
                with_api, with_ops = threads[th]
                in_api, in_ops = _covered(with_api, s, e), _covered(with_ops, s, e)
                split["cuda_api"] += in_api - in_loading
                split["cpu_op"] += in_ops - in_api
                split["cpu_other"] += (e - s) - in_ops
    return {"total": total, "devices": len(busy), "split": split}


STEP_LIKE = re.compile(r"^(ProfilerStep#\d+|(train[_ ]?|training[_ ]?|eval[_ ]?)?(step|iter|iteration|batch)"
                       r"([ _#:=-]*\d+)?)$")


def _annotations_standing_for_ops(evs) -> set[int]:
    """The indexes of the user annotations that count as ops (PRODUCT.md's op, as the importer promotes them): on a
    thread, the innermost annotation (not a step) around a call that launched GPU work where no cpu_op is open."""
    launched = {e.args.get("correlation") for e in evs if e.cat in KERNEL_CATS | MEMOP_CATS}
    by_thread: dict = {}
    for e in evs:
        if _op(e) or (e.cat == "user_annotation" and not STEP_LIKE.match(e.name)) or e.cat in LAUNCH_CATS:
            by_thread.setdefault((e.pid, e.tid), []).append(e)
    out = set()
    for thread in by_thread.values():
        ops = [e for e in thread if _op(e)]
        notes = [e for e in thread if e.cat == "user_annotation"]
        for call in (e for e in thread if e.cat in LAUNCH_CATS and e.args.get("correlation") in launched):
            if any(o.start <= call.start < o.end for o in ops):
                continue
            around = [a for a in notes if a.start <= call.start < a.end]
            if around:
                out.add(min(around, key=lambda a: (a.end - a.start, -a.start)).index)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("trace", [H200 / "amp_eager_w0.pt.trace.json.gz", H200 / "fp32_eager_w0.pt.trace.json.gz",
                                   "hta_a100_80gb_rank0of16_5steps.json.gz", "hta_a100_nccl_rank0of2_3steps.json.gz",
                                   "tbplugin_resnet50_v100_workers0.pt.trace.json.gz", "hta_triton_a100.json.gz"],
                         ids=lambda t: Path(str(t)).name.split(".")[0])
def test_the_gaps_and_their_host_split_match_the_raw_json(tmp_path, trace):
    path = trace if isinstance(trace, Path) else data_file("kineto", trace)
    db = build_database([path], tmp_path / "t.sqlite", progress=False)
    with sqlite3.connect(db) as conn:
        windows = conn.execute("SELECT start, \"end\" FROM agg_iterations WHERE agg_id = 1 AND profiled = 1 "
                               "ORDER BY iteration").fetchall()
    f = findings(db)["gpu_gaps"]
    raw = raw_gaps(path, windows, 1_000 * US)
    assert f["est_saving_ns"] == raw["total"] // raw["devices"]
    assert f["evidence"]["host_split_ns"] == raw["split"]
    top = max(raw["split"], key=lambda part: raw["split"][part])
    if top == "dataloader":
        assert "dataloader_bottleneck" in f["recommendation"] or "data loading" in f["recommendation"]
    elif top == "queued":
        assert f["recommendation"].startswith("The largest part of the gaps' time the GPU had its next kernel queued")
    elif top != "unknown":
        assert "host_bound" in f["recommendation"] or "waited for its next launch" in f["recommendation"]


@pytest.mark.parametrize("name, cause", [("amp_eager_w0", "dataloader_bottleneck"), ("fp32_eager_w4", "host_bound")])
def test_underutilization_points_to_the_finding_that_owns_its_largest_share(tmp_path, name, cause):
    """The share named is the stored breakdown's largest non-GPU category (checked against the raw JSON by the
    breakdown's own tests); the advice is given once, by the cause's finding, or here where that rule is off."""
    db = build_database([H200 / f"{name}.pt.trace.json.gz"], tmp_path / "t.sqlite", progress=False)
    got = findings(db)
    assert cause in got
    f = got["gpu_underutilized"]
    assert f"the {cause} finding says what to change and what it saves" in f["recommendation"]
    assert f["evidence"]["see_findings"] == [cause]
    assert "CUDA graphs" not in f["recommendation"] and "DataLoader workers" not in f["recommendation"]
    off = tmp_path / "rules.json"
    off.write_text(f'{{"{cause}": {{"enabled": false}}, "launch_bound": {{"enabled": false}}}}')
    alone = findings(db, off)["gpu_underutilized"]
    assert "finding says what to change" not in alone["recommendation"]
    assert ("DataLoader workers" if cause == "dataloader_bottleneck" else "CUDA graphs") in alone["recommendation"]


@requires_shared
@pytest.mark.slow
def test_python_outside_ops_points_to_the_host_bound_finding(tmp_path):
    """HTA's sampled 128-rank job (two ranks): the largest non-GPU category is *Other* (Python outside any op), the
    time host_bound counts as "between ops": where host_bound fired, gpu_underutilized points to it."""
    db = build_database([data_file("kineto", "hta_128rank_sampled")], tmp_path / "job.sqlite", progress=False)
    with sqlite3.connect(db) as conn:
        aggs = [r[0] for r in conn.execute("SELECT agg_id FROM aggregations ORDER BY agg_id")]
    assert len(aggs) == 2
    for agg_id in aggs:
        got = stored_findings(db, agg_id)
        f = got["gpu_underutilized"]
        assert f["evidence"]["dominant_category"] == "other" and "host_bound" in got
        assert f["evidence"]["see_findings"] == ["host_bound"]
        assert "(Python between ops and steps) while the GPU waits: the host_bound finding says" in f["recommendation"]
