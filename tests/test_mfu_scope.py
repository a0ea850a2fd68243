"""MFU says when it is a lower bound: matrix products that ran under op nodes without a FLOP model (a custom op such
as vLLM's fused MoE, a ``torch.compile``'d function, a backward node of a trace without shapes) are not counted, and
the summary, its JSON, the HTML report and the dashboard say how much of the matrix-product kernel time that is
(``present.graph_replay.unmodelled_matrix_work``). Oracles: a hand-made trace, and the raw JSON of a B200 vLLM
serving trace whose MoE and attention kernels (trtllm-gen ``bmm_*`` GEMMs, ``fmha*`` attention, identified by hand
from their names) ran under custom ops."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from conftest import data_file, requires_shared
from raw_kineto import activity_by_op_node, events
from test_graph_replay_figures import TC_GEMM
from test_viewer_browser import Server, page, ready  # noqa: F401  (page: the browser page fixture)
from trace_builder import KinetoTrace

from dlscope.format import fmt_pct
from dlscope.pipeline import build_database
from dlscope.present.html_report import render_html_report
from dlscope.present.summary import render_summary, summary_dict

US = 1000
ELEMENTWISE = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::Half> >(int)"


def _mm_steps(tmp_path: Path, name: str, steps: int, then=None) -> Path:
    """``steps`` steps of 1 ms, each an aten::mm (64×64 by 64×64, FP16, shapes recorded) running a 100 µs Tensor
    Core GEMM, then ``then(trace, step_start)``; imported."""
    t = KinetoTrace()
    for step in range(steps):
        b = 1000.0 * step
        t.step(step + 1, b, b + 1000)
        t.op("aten::mm", b + 10, b + 60, **{"Input Dims": [[64, 64], [64, 64]], "Input type": ["c10::Half"] * 2})
        t.launch(b + 20, b + 30, TC_GEMM, b + 100, b + 200)
        if then is not None:
            then(t, b)
    return build_database([t.write(tmp_path / f"{name}.json")], tmp_path / f"{name}.sqlite", progress=False)


def _custom_op_trace(tmp_path: Path) -> Path:
    """4 steps of 1 ms: aten::mm (64×64 by 64×64, FP16, shapes recorded) runs a 100 µs Tensor Core GEMM; a custom
    op my_ext::fused_moe (no FLOP model) runs a 300 µs Tensor Core GEMM and a 50 µs elementwise kernel. Matrix
    products: 4 × 400 µs, of which 4 × 300 µs are not counted (75.0 %)."""
    def custom(t: KinetoTrace, b: float) -> None:
        t.op("my_ext::fused_moe", b + 200, b + 260)
        t.launch(b + 210, b + 220, TC_GEMM, b + 300, b + 600)
        t.launch(b + 230, b + 240, ELEMENTWISE, b + 600, b + 650)
    return _mm_steps(tmp_path, "custom", 4, custom)


def test_matrix_products_under_a_custom_op_make_mfu_a_lower_bound(tmp_path):
    db = _custom_op_trace(tmp_path)
    a = summary_dict(db)["aggregation"]
    assert a["mfu"]["model_flops"] == 4 * 2 * 64 ** 3 and a["mfu"]["mfu"] is not None
    assert a["mfu_unmodelled"] == {"kernel_time_ns": 4 * 300 * US, "kernel_count": 4,
                                   "matrix_kernel_time_ns": 4 * 400 * US,
                                   "op_nodes": [["my_ext::fused_moe", 4 * 300 * US]]}
    assert a["mfu_lower_bound"] is True
    assert a["mfu_note"] == ("a lower bound: it counts the ops with a FLOP model only; 1.20 ms of the 1.60 ms of "
                             "matrix-product kernel time (75.0%, 4 kernels) ran under op nodes without a FLOP model "
                             "(my_ext::fused_moe 1.20 ms), so their FLOPs are not counted")
    line = " ".join(render_summary(summary_dict(db)).split())
    assert f"MFU ≥ {100 * a['mfu']['mfu']:.1f}% (" in line and "a lower bound: it counts" in line
    assert f'<div class="value">&ge; {fmt_pct(a["mfu"]["mfu"])}</div>' in render_html_report(db)


def test_a_graph_replayed_outside_any_op_makes_mfu_a_lower_bound_too(tmp_path):
    """A bare ``g.replay()`` with no op around it: its 4 × 30 µs Tensor Core GEMM has no op node, so only the graph
    facts know it; the note and the "≥" agree."""
    def bare_replay(t: KinetoTrace, b: float) -> None:
        t.launch(b + 300, b + 320, TC_GEMM, b + 400, b + 430, graph=True)
    db = _mm_steps(tmp_path, "bare", 4, bare_replay)
    a = summary_dict(db)["aggregation"]
    assert a["mfu"]["mfu"] is not None and a["graph_replay"]["matrix_kernel_time_ns"] == 4 * 30 * US
    assert a["mfu_lower_bound"] is True and a["mfu_note"].startswith("a lower bound: it counts the ops with a FLOP "
                                                                     "model only; 120.00 µs of matrix-product kernels")
    assert f"MFU ≥ {100 * a['mfu']['mfu']:.1f}%" in " ".join(render_summary(summary_dict(db)).split())


def test_a_run_whose_products_all_have_a_model_is_not_a_lower_bound(tmp_path):
    a = summary_dict(_mm_steps(tmp_path, "mm", 2))["aggregation"]
    assert a["mfu"]["mfu"] is not None and a["mfu_unmodelled"] is None and a["mfu_lower_bound"] is False
    assert a["mfu_note"] is None


@requires_shared
@pytest.mark.slow
def test_the_b200_moe_serving_trace_counts_its_linear_layers_only(tmp_path):
    """vLLM on a B200: the MoE's trtllm-gen GEMMs (bmm_MxE4m3_MxE2m1…, bmm_Bfloat16_MxE2m1…) run under
    vllm::moe_forward and the FP8 attention (fmhaSm100aKernel_QkvE4m3…) under vllm::unified_attention_with_output,
    custom ops without a FLOP model; the aten::linear layers' nvjet GEMMs are counted."""
    path = data_file("kineto", "tracelens_b200_llm_serving_rank0of8.json.gz")
    by_name: dict[str, list] = {}
    index = {e.index: e for e in events(path)}
    for node, activity in activity_by_op_node(path).items():
        by_name.setdefault(index[node].name, []).extend(activity)
    left = {name: sum(k.end - k.start for k in by_name[name] if k.name.startswith(("bmm_", "fmha")))
            for name in ("vllm::moe_forward", "vllm::unified_attention_with_output")}
    counted = sum(k.end - k.start for k in by_name["aten::linear"] if k.name.startswith("nvjet"))
    a = summary_dict(build_database([path], tmp_path / "b200.sqlite", progress=False))["aggregation"]
    work = a["mfu_unmodelled"]
    assert work["kernel_time_ns"] == sum(left.values())
    assert work["matrix_kernel_time_ns"] == sum(left.values()) + counted
    assert work["op_nodes"] == sorted(([n, t] for n, t in left.items()), key=lambda x: -x[1])
    assert a["mfu_lower_bound"] is True and a["mfu_note"].startswith("a lower bound: it counts the ops with a FLOP "
                                                                     "model only; ")


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_the_dashboard_marks_a_lower_bound_mfu(tmp_path, page):  # noqa: F811
    db = _custom_op_trace(tmp_path)
    a = summary_dict(db)["aggregation"]
    served = Server([db])
    try:
        ready(page, f"{served.base}/dashboard")
        shown = page.get_by_test_id("mfu-na")
        assert shown.inner_text() == f"≥ {100 * a['mfu']['mfu']:.1f}"
        assert shown.get_attribute("title") == a["mfu_note"]
        assert page.errors == []
    finally:
        served.stop()


def test_diff_marks_a_lower_bound_mfu(tmp_path):
    """``dlscope diff`` shows MFU as the summary does: "≥" on the side that leaves matrix products out."""
    from dlscope.compare import compare
    from dlscope.compare.render import render_markdown, write_diff

    whole = _mm_steps(tmp_path, "mm", 2)
    d = compare(whole, _custom_op_trace(tmp_path))
    mfu = next(m for m in d["metrics"] if m["metric"] == "mfu")
    assert mfu["lower_bound"] == {"base": False, "new": True}
    row = next(line for line in render_markdown(d).splitlines() if line.startswith("| MFU"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert not cells[1].startswith("≥") and cells[2].startswith("≥ ")
    write_diff(d, tmp_path, ["csv"])
    with open(tmp_path / "diff_metrics.csv", newline="") as f:
        row = next(r for r in csv.DictReader(f) if r["metric"] == "mfu")
    assert (row["base_lower_bound"], row["new_lower_bound"]) == ("False", "True")
