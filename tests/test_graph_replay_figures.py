"""Figures of CUDA-graph captures that PRODUCT.md's definitions leave n/a, and what they say instead of a wrong
reason (present/graph_replay.py): in a graphed capture the GEMMs and convolutions run replayed by
``cudaGraphLaunch`` under torch's ``Graphed`` op nodes, with no aten op (no op type, no shapes) above them. A real
H200 transformer capture printed "MFU n/a (0.00 GFLOP …; the GPU's dense peak at that precision is unknown)" and
"Tensor Core kernel efficiency n/a (no kernels of Tensor Core-eligible ops)" beside "0 eligible for Tensor
Cores, 2 using them". Oracles: the raw JSON of the real H200 captures read by the standard library, the hand
labels of their kernels (tests/data/h200/tensor_core_labels.json), and hand-made traces."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from raw_kineto import KERNEL_CATS, LAUNCH_CATS, events, is_step_marker
from trace_builder import KinetoTrace

from dlscope.compare.runs import load_run, metric_value
from dlscope.format import fmt_ns
from dlscope.pipeline import build_database
from dlscope.present.html_report import render_html_report
from dlscope.present.summary import render_summary, summary_dict
from dlscope.viewer.dashboard import dashboard_data
from dlscope.viewer.profile_db import ProfileDB

H200 = Path(__file__).parent / "data" / "h200"
GRAPH_LAUNCH = re.compile(r"^(?:cuda|cu|hip)GraphLaunch")


#: hand labels of the transformer capture's kernel families the labels file (made before it) lacks, with the
#: file's reasons: FFMA / SIMT SGEMMs run on CUDA cores; FP32 memory-efficient attention on Sm80+ is CUTLASS
#: TensorOp with 3xTF32 (the file labels its forward kernel so); fills and copies do no math
EXTRA_LABELS = ((re.compile(r"_ffma_|simt_sgemm|^memcpy128$|FillFunctor"), False),
                (re.compile(r"^fmha_cutlass[FB]_f32_.*_sm80\("), True))


def _tc_labels(names) -> dict[str, bool]:
    doc = json.loads((H200 / "tensor_core_labels.json").read_text())
    labels = {name: bool(v["tensor_core"]) for name, v in doc["labels"].items()}
    for name in set(names) - set(labels):
        labels[name] = next(tc for rx, tc in EXTRA_LABELS if rx.search(name))
    return labels


def _raw(path: Path) -> dict:
    """The kernels launched inside the profiled steps (by their launch call's start), from the raw JSON: count and
    time of all of them, and of those a graph launch ran (with the time of those the hand labels put on Tensor
    Cores)."""
    evs = events(path)
    steps = [e for e in evs if is_step_marker(e.name) and e.name.startswith("ProfilerStep#")]
    lo, hi = min(e.start for e in steps), max(e.end for e in steps)
    calls = {e.args.get("correlation"): e for e in evs if e.cat in LAUNCH_CATS}
    labels = _tc_labels(e.name for e in evs if e.cat in KERNEL_CATS)
    out = {"time": 0, "replayed": 0, "replayed_time": 0, "replayed_tc_time": 0}
    for k in (e for e in evs if e.cat in KERNEL_CATS):
        call = calls.get(k.args.get("correlation"))
        if call is None or not lo <= call.start < hi:
            continue
        out["time"] += k.end - k.start
        if GRAPH_LAUNCH.match(call.name):
            out["replayed"] += 1
            out["replayed_time"] += k.end - k.start
            out["replayed_tc_time"] += (k.end - k.start) * labels[k.name]
    return out


@pytest.fixture(scope="module")
def graphed(tmp_path_factory):
    made = {}

    def get(name: str) -> Path:
        if name not in made:
            trace = H200 / f"{name}.pt.trace.json.gz"
            made[name] = build_database([trace], tmp_path_factory.mktemp("g") / f"{name}.sqlite", progress=False)
        return made[name]
    return get


@pytest.mark.parametrize("name", ["fp32_graphs_w0", "lm_fp32_graphs_w0_r1", "lm_fp32_graphs_b16"])
def test_a_graph_capture_s_na_figures_say_the_matrix_products_were_replayed(graphed, name):
    raw = _raw(H200 / f"{name}.pt.trace.json.gz")
    assert raw["replayed"] and raw["replayed_tc_time"]                    # the raw JSON: GEMMs run by graph launches
    s = summary_dict(graphed(name))
    a = s["aggregation"]
    facts = a["graph_replay"]
    assert facts["kernel_count"] == raw["replayed"]
    assert facts["kernel_time_ns"] == raw["replayed_time"]
    assert facts["tc_kernel_time_ns"] == raw["replayed_tc_time"]
    assert raw["replayed_tc_time"] <= facts["matrix_kernel_time_ns"] <= raw["replayed_time"]
    assert a["kernel_time_ns"] == raw["time"]
    # the figures keep PRODUCT.md's definitions: no eligible op, no FLOPs invented for the replays
    assert a["tc_kernel_efficiency"] is None and a["mfu"]["mfu"] is None and a["mfu"]["model_flops"] == 0
    share = f"{100 * raw['replayed_time'] / raw['time']:.1f}%"
    assert a["tc_kernel_efficiency_note"].startswith("no Tensor Core-eligible op ran kernels: the matrix products "
                                                     "ran replayed from CUDA graphs")
    assert (f"{fmt_ns(raw['replayed_time'])} of the {fmt_ns(raw['time'])} of kernel time ({share}) was replayed"
            in a["tc_kernel_efficiency_note"])
    assert f"{fmt_ns(raw['replayed_tc_time'])} on Tensor Cores" in a["tc_kernel_efficiency_note"]
    assert a["mfu_note"].startswith("no op with a FLOP model ran: ")
    assert "replayed from CUDA graphs, which record no input shapes" in a["mfu_note"]
    m = a["model_summary"]
    assert (m["tc_eligible_op_nodes"], m["op_nodes_using_tc"]) == (0, 2)      # the independent counts stay
    assert a["model_summary_note"] == ("the 2 using them are CUDA graph replays (GraphedBackward, Graphed): the "
                                       "eligible ops they replay are not in the trace")
    text = " ".join(render_summary(s).split())
    assert "is unknown" not in text and "no kernels of Tensor Core-eligible ops" not in text
    assert f"MFU n/a ({' '.join(a['mfu_note'].split())})" in text
    assert f"Tensor Core kernel efficiency n/a ({' '.join(a['tc_kernel_efficiency_note'].split())})" in text
    assert f"2 using them; 0.0% of op GPU time in eligible op nodes; {a['model_summary_note']}" in text


def test_the_report_the_dashboard_and_diff_say_what_the_summary_says(graphed):
    db = graphed("lm_fp32_graphs_w0_r1")
    a = summary_dict(db)["aggregation"]
    notes = {k: a[k] for k in ("tc_kernel_efficiency_note", "mfu_note", "model_summary_note")}
    html = render_html_report(db)
    for note in notes.values():
        assert note and note.replace("'", "&#39;") in html
    assert "is unknown" not in html
    dash = dashboard_data(ProfileDB(db), None)
    assert {k: dash["notes"][k] for k in notes} == notes and dash["notes"]["mfu_lower_bound"] is False  # n/a
    run = load_run(db)                                    # dlscope diff / check say why a metric is n/a
    assert metric_value(run, "mfu", False) == (None, notes["mfu_note"])
    assert metric_value(run, "tc_kernel_efficiency", False) == (None, notes["tc_kernel_efficiency_note"])


def test_an_eager_capture_has_nothing_to_say_about_graphs(graphed):
    """The eager twin of the graphed CNN: the same model, its GEMMs launched one by one under their aten ops."""
    assert _raw(H200 / "fp32_eager_w0.pt.trace.json.gz")["replayed"] == 0
    a = summary_dict(graphed("fp32_eager_w0"))["aggregation"]
    assert a["graph_replay"] is None
    assert a["tc_kernel_efficiency"] is not None and a["tc_kernel_efficiency_note"] is None
    assert a["model_summary_note"] is None
    assert a["mfu"]["mfu"] is not None and a["mfu_note"] is None


#: hand-made kernels: an eager GEMM under aten::mm (shapes recorded) and graph-replayed ones under Graphed
TC_GEMM = "sm80_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x32_stage4_warpsize2x2x1_tensor16x8x16_kernel"
SGEMM = ("void cutlass::Kernel2<cutlass_80_simt_sgemm_128x64_8x5_nn_align1>"
         "(cutlass_80_simt_sgemm_128x64_8x5_nn_align1::Params)")


def _mixed(tmp_path, graph: bool = True) -> Path:
    """4 steps of 1 ms: aten::mm (64×64 by 64×64, FP16) runs a 20 µs Tensor Core GEMM; Graphed replays a 30 µs
    SIMT SGEMM and a 10 µs Tensor Core GEMM by one cudaGraphLaunch (or by two cudaLaunchKernel without
    ``graph``, the same kernels under the same op)."""
    t = KinetoTrace()
    for step in range(4):
        b = 1000.0 * step
        t.step(step + 1, b, b + 1000)
        t.op("aten::mm", b + 10, b + 60,
             **{"Input Dims": [[64, 64], [64, 64]], "Input type": ["c10::Half", "c10::Half"]})
        t.launch(b + 20, b + 30, TC_GEMM, b + 100, b + 120)
        t.op("Graphed", b + 200, b + 260)
        t.launch(b + 210, b + 230, SGEMM, b + 300, b + 330, graph=graph)
        t.launch(b + 210, b + 230, TC_GEMM, b + 340, b + 350, graph=graph)
    name = "mixed_graph" if graph else "mixed_eager"
    return build_database([t.write(tmp_path / f"{name}.json")], tmp_path / f"{name}.sqlite", progress=False)


def test_figures_beside_graph_replays_say_what_they_leave_out(tmp_path):
    """Efficiency is the eager GEMM's (20 µs on Tensor Cores of 20 µs: 100%), MFU counts aten::mm only; both say
    that 4 × 40 µs of matrix products ran replayed (4 × 10 µs on Tensor Cores) and are left out."""
    a = summary_dict(_mixed(tmp_path))["aggregation"]
    assert a["tc_kernel_efficiency"] == 1.0
    assert a["mfu"]["model_flops"] == 4 * 2 * 64 ** 3 and a["mfu"]["mfu"] is not None
    facts = a["graph_replay"]
    assert (facts["kernel_count"], facts["kernel_time_ns"], facts["tc_kernel_time_ns"]) == (8, 160_000, 40_000)
    assert (facts["matrix_kernel_count"], facts["matrix_kernel_time_ns"]) == (8, 160_000)
    assert a["tc_kernel_efficiency_note"] == (
        "of the eligible ops' kernels; left out are the kernels replayed from CUDA graphs (Graphed), whose "
        "capturing ops are not in the trace: 160.00 µs of the 240.00 µs of kernel time (66.7%) was replayed, "
        "160.00 µs of it matrix products, 40.00 µs on Tensor Cores")
    assert a["mfu_note"] == ("a lower bound: it counts the ops with a FLOP model only; 160.00 µs of matrix-product "
                             "kernels (8 kernels) ran replayed from CUDA graphs, which record no input shapes, so "
                             "their FLOPs are not counted")
    assert a["mfu_lower_bound"] is True and a["mfu_unmodelled"]["kernel_time_ns"] == 160_000
    assert (a["model_summary"]["tc_eligible_op_nodes"], a["model_summary"]["op_nodes_using_tc"]) == (1, 2)
    assert a["model_summary_note"] == ("1 of the 2 using them is a CUDA graph replay (Graphed): the eligible ops it "
                                   "replays are not in the trace")
    eager = summary_dict(_mixed(tmp_path, graph=False))["aggregation"]
    # without the graph launches the 160 µs still ran under the Graphed op node, which has no FLOP model
    assert eager["graph_replay"] is None and eager["mfu_lower_bound"] is True
    assert eager["mfu_note"] == ("a lower bound: it counts the ops with a FLOP model only; 160.00 µs of the 240.00 µs "
                                 "of matrix-product kernel time (66.7%, 8 kernels) ran under op nodes without a FLOP "
                                 "model (Graphed 160.00 µs), so their FLOPs are not counted")


def test_no_matrix_products_is_not_called_an_unknown_peak(tmp_path):
    """Shapes recorded, no GEMM at all, on an A100 whose peaks are known: MFU is n/a for want of matrix
    products, never for an unknown peak."""
    t = KinetoTrace()
    for step in range(3):
        b = 100.0 * step
        t.step(step + 1, b, b + 100)
        t.op("aten::add", b + 5, b + 30, **{"Input Dims": [[1024], [1024]], "Input type": ["float", "float"]})
        t.launch(b + 10, b + 15, "void at::native::vectorized_elementwise_kernel<4>", b + 20, b + 24)
    db = build_database([t.write(tmp_path / "add.json")], tmp_path / "add.sqlite", progress=False)
    s = summary_dict(db)
    assert s["aggregation"]["mfu"]["model_flops"] == 0
    assert s["aggregation"]["mfu_note"] == ("no matrix products (GEMM, convolution, attention) among the ops "
                                                "with recorded shapes")
    text = " ".join(render_summary(s).split())
    assert "MFU n/a (no matrix products (GEMM, convolution, attention) among the ops with recorded shapes)" in text
    assert "peak" not in text.split("MFU", 1)[1].split("Ops", 1)[0]
