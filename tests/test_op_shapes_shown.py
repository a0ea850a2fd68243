"""Op nodes of one name differ by their input shapes (a transformer's three aten::linear layers): where a name repeats
in the summary's Top 10 GPU ops, its roofline lines, the HTML report's top ops and the dashboard's Top 10, each row
shows its shapes; a name that appears once is left as it is. Oracle: the shapes written into a hand-made trace."""

from __future__ import annotations

import json

import pytest
from conftest import data_file, requires_shared
from raw_kineto import events
from test_graph_replay_figures import TC_GEMM
from test_viewer_browser import Server, page, ready  # noqa: F401  (page: the browser page fixture)
from trace_builder import KinetoTrace

from dlscope.format import fmt_shapes
from dlscope.pipeline import build_database
from dlscope.present.html_report import render_html_report
from dlscope.present.summary import render_summary, summary_dict

RELU = "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::relu_kernel>(int)"


@pytest.mark.parametrize("stored, shown", [
    ("[[888,2880],[640,2880],[640]]", "888×2880, 640×2880, 640"),
    ("[[888,2880],[]]", "888×2880"),              # an empty list: a scalar or an absent tensor
    ('[[8,4],[4],"x",[]]', "8×4, 4"),
    ("", ""), ("not json", ""), ('{"a": 1}', ""),
])
def test_shapes_read_as_tensors(stored, shown):
    assert fmt_shapes(stored) == shown


def _two_linears(tmp_path):
    """2 steps: aten::mm 64×32 by 32×64 (a 300 µs GEMM), aten::mm 64×32 by 32×16 (200 µs), aten::relu (50 µs)."""
    t = KinetoTrace()
    for step in range(2):
        b = 1000.0 * step
        t.step(step + 1, b, b + 1000)
        for at, (n, dur) in ((10, (64, 300)), (30, (16, 200))):
            t.op("aten::mm", b + at, b + at + 10,
                 **{"Input Dims": [[64, 32], [32, n]], "Input type": ["c10::Half"] * 2})
            t.launch(b + at + 1, b + at + 5, TC_GEMM, b + 100 + 10 * at, b + 100 + 10 * at + dur)
        t.op("aten::relu", b + 50, b + 60, **{"Input Dims": [[64, 64]], "Input type": ["c10::Half"]})
        t.launch(b + 51, b + 55, RELU, b + 700, b + 750)
    return build_database([t.write(tmp_path / "two.json")], tmp_path / "two.sqlite", progress=False)


def test_repeated_names_show_their_shapes_in_the_summary_and_the_report(tmp_path):
    db = _two_linears(tmp_path)
    s = summary_dict(db)
    assert [(o["op_name"], o["input_shapes"]) for o in s["aggregation"]["top_gpu_ops"]] == [
        ("aten::mm", "[[64,32],[32,64]]"), ("aten::mm", "[[64,32],[32,16]]"), ("aten::relu", "[[64,64]]")]
    text = render_summary(s)
    assert "64×32, 32×64" in text and "64×32, 32×16" in text and "64×64" not in text   # relu's name is unique
    assert "aten::mm (64×32, 32×64): " in text and "aten::mm (64×32, 32×16): " in text   # the roofline's lines
    assert "aten::relu: " in text
    html = render_html_report(db)
    shown = [f'<div class="muted shapes">{shapes}</div>' for shapes in ("64×32, 32×64", "64×32, 32×16", "64×64")]
    assert shown[0] in html and shown[1] in html and shown[2] not in html


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_the_dashboard_tells_op_nodes_of_one_name_apart(tmp_path, page):  # noqa: F811
    served = Server([_two_linears(tmp_path)])
    try:
        ready(page, f"{served.base}/dashboard")
        rows = page.locator(".p-top tbody tr")
        assert rows.count() == 3
        assert [rows.nth(i).get_by_test_id("top-op-shapes").all_inner_texts() for i in range(3)] == [
            ["64×32, 32×64"], ["64×32, 32×16"], []]
        assert page.errors == []
    finally:
        served.stop()


@requires_shared
@pytest.mark.slow
def test_the_b200_linear_layers_are_told_apart_by_their_raw_shapes(tmp_path):
    """The B200 vLLM rank's Top 10 holds three aten::linear nodes and two vllm::all_reduce nodes: each row's shapes
    are the raw JSON's "Input Dims" of calls of that name, distinct within the name, and the summary prints them
    (tensors only, "×"-joined, worked out here from the raw lists)."""
    path = data_file("kineto", "tracelens_b200_llm_serving_rank0of8.json.gz")
    raw: dict[str, set] = {}
    for e in events(path):
        if e.cat == "cpu_op" and "Input Dims" in e.args:
            raw.setdefault(e.name, set()).add(json.dumps(e.args["Input Dims"], separators=(",", ":")))
    s = summary_dict(build_database([path], tmp_path / "b200.sqlite", progress=False))
    top = s["aggregation"]["top_gpu_ops"]
    names = [o["op_name"] for o in top]
    repeated = [o for o in top if names.count(o["op_name"]) > 1]
    assert sorted({o["op_name"] for o in repeated}) == ["aten::linear", "vllm::all_reduce"]
    text = " ".join(render_summary(s).split())
    for name in ("aten::linear", "vllm::all_reduce"):
        mine = [o["input_shapes"] for o in repeated if o["op_name"] == name]
        assert len(set(mine)) == len(mine) and set(mine) <= raw[name]
        for shapes in mine:
            shown = ", ".join("×".join(str(d) for d in dims) for dims in json.loads(shapes) if dims)
            assert shown in text
