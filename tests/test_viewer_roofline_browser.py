"""The Roofline view in headless Chromium on databases imported from real traces: an H100 inference (known GPU,
roofs drawn) and a legacy trace without a GPU name (the unknown-GPU message), plus script-like names.
Screenshots land in test-artifacts/."""

from __future__ import annotations

import json
import sqlite3
from importlib import resources

import pytest
from conftest import data_file
from test_viewer_browser import Server, page, ready, shot  # noqa: F401  (page is a fixture)
from test_viewer_fixtures import make_profile_db
from test_viewer_roofline import XSS, add_roofline_rows

from dlscope.roofline import roofline_report

pytestmark = [pytest.mark.browser, pytest.mark.filterwarnings("ignore::DeprecationWarning")]


@pytest.fixture(scope="module")
def h100(import_db):
    db = import_db(data_file("kineto", "tracelens_h100_vit_nsfw_infer.json.gz"))
    s = Server([db])
    s.db = db
    yield s
    s.stop()


@pytest.fixture(scope="module")
def legacy(import_db):
    s = Server([import_db(data_file("kineto", "hta_legacy_format_inference_rank1.json.gz"))])
    yield s
    s.stop()


@pytest.fixture(scope="module")
def scripted(tmp_path_factory):
    s = Server([add_roofline_rows(make_profile_db(tmp_path_factory.mktemp("roofx") / "x.sqlite"))])
    yield s
    s.stop()


def summary_cell(pg, testid):
    return pg.locator(f"[data-testid='roofline-summary'] tr[data-testid='{testid}'] td")


def test_h100_roofline_draws_roofs_ops_and_summary(h100, page):
    conn = sqlite3.connect(h100.db)
    report = roofline_report(conn, conn.execute("SELECT MAX(agg_id) FROM aggregations").fetchone()[0])
    op_gpu = conn.execute("SELECT SUM(gpu_time_ns) FROM agg_ops WHERE agg_id = ? AND gpu_time_ns > 0",
                          (report["agg_id"],)).fetchone()[0]
    conn.close()
    ready(page, f"{h100.base}/dashboard")
    assert "Roofline" in page.locator("#nav-view option").all_inner_texts()
    page.select_option("#nav-view", "roofline")
    page.wait_for_url("**/roofline*")
    page.wait_for_selector("body[data-ready='1']")
    page.wait_for_load_state("networkidle")
    chart = page.get_by_test_id("roofline-chart")
    roofs = json.loads(chart.get_attribute("data-roofs"))
    assert "DRAM bandwidth 3.35 TB/s" in roofs
    # the published L1/L2 roofs of the data file (read here with json.load), drawn as "<level> bandwidth <x> TB/s"
    spec = next(g for g in json.loads(resources.files("dlscope.data").joinpath("gpu_specs.json").read_text())["gpus"]
                if "NVIDIA H100 80GB HBM3" in g["name_strings"])
    for level in ("L1", "L2"):
        (shown,) = [r for r in roofs if r.startswith(f"{level} bandwidth ")]
        value, unit = shown.split()[2:4]
        assert unit == "TB/s" and float(value) == pytest.approx(
            spec[f"{level.lower()}_bandwidth_bytes_per_s"] / 1e12, abs=0.005 + 1e-9), shown   # shown to 2 decimals
        # the summary lists the roof too, its title the source the data file gives
        cell = summary_cell(page, f"{level.lower()}-bandwidth").locator("span")
        assert cell.inner_text() == f"{value} TB/s"
        assert cell.get_attribute("title") == spec["field_sources"][f"{level.lower()}_bandwidth_bytes_per_s"]
    assert any(r.startswith("FP16 / BF16 Tensor peak 989.4 TFLOP/s") for r in roofs)
    assert any("FP32" in r for r in roofs) and any("FP64 peak 34 TFLOP/s" in r for r in roofs), roofs
    placed = [o for o in report["ops"] if o["arithmetic_intensity"] and o["achieved_flops_per_s"]]
    assert int(chart.get_attribute("data-points")) == len(placed) > 0  # aten::cat moves data: no FLOPs
    assert "aten::cat" in page.get_by_test_id("off-chart").inner_text()
    assert page.get_by_test_id("ceilings-error").count() == 0
    assert "NVIDIA H100" in summary_cell(page, "gpu").inner_text()
    memory = sum(o["gpu_time_ns"] for o in report["ops"] if o["bound"] == "memory")
    assert summary_cell(page, "memory-bound").locator("span").get_attribute("title") == f"{memory:,} ns"
    assert summary_cell(page, "modelled").locator("span").get_attribute("title") == f"{op_gpu:,} ns"  # all modelled
    n_ops = len(report["ops"])
    assert summary_cell(page, "op-count").inner_text() == str(n_ops)
    page.wait_for_selector("section[data-prefix='ops'] .tabulator-row")
    names = page.locator("section[data-prefix='ops'] .tabulator-cell[tabulator-field='op_name']").all_inner_texts()
    biggest = max(report["ops"], key=lambda o: o["gpu_time_ns"])
    assert names[0] == biggest["op_name"] and len(names) == min(10, n_ops)
    assert f"of {n_ops} entries" in page.locator("section[data-prefix='ops'] .tabulator-page-counter").inner_text()
    # hover the biggest dot: its name and numbers, as text
    tip = page.evaluate("""() => { const c = document.querySelector("[data-testid='roofline-chart']").chart;
        const s = c.getOption().series; const i = s.findIndex((x) => x.name === 'Memory-bound ops');
        const d = s[i].data; let best = 0;
        d.forEach((p, j) => { if (p.op.gpu_time_ns > d[best].op.gpu_time_ns) best = j; });
        c.dispatchAction({ type: 'showTip', seriesIndex: i, dataIndex: best }); return true; }""")
    assert tip
    tooltip = page.locator("[data-testid='roofline-chart'] > div").filter(has_text="Arithmetic intensity")
    tooltip.wait_for()
    text = tooltip.inner_text()
    top_memory = max((o for o in report["ops"] if o["bound"] == "memory" and o["arithmetic_intensity"]
                      and o["achieved_flops_per_s"]), key=lambda o: o["gpu_time_ns"])
    assert top_memory["op_name"] in text and "GPU time" in text and f"{top_memory['gpu_time_ns']:,} ns" in text
    shot(page, "roofline-h100")
    page.locator("section[data-prefix='ops'] .tabulator-col[tabulator-field='bound'] input").press_sequentially("math")
    page.wait_for_function("location.search.includes('ops.f.bound=math')")
    page.wait_for_load_state("networkidle")
    bounds = page.locator("section[data-prefix='ops'] .tabulator-cell[tabulator-field='bound']").all_inner_texts()
    assert bounds and set(bounds) == {"math"}
    assert page.errors == []


def test_legacy_trace_says_the_gpu_is_unknown(legacy, page):
    ready(page, f"{legacy.base}/roofline")
    note = page.get_by_test_id("ceilings-error")
    assert "--gpu-spec" in note.inner_text() and "dlscope view DB --gpu-spec FILE" in note.inner_text()
    assert "nothing to place" in page.get_by_test_id("roofline-empty").inner_text()
    shot(page, "roofline-legacy-unknown-gpu")
    assert page.errors == []


def test_script_names_stay_text(scripted, page):
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    ready(page, f"{scripted.base}/roofline")
    page.wait_for_selector("section[data-prefix='kernels'] .tabulator-row")
    assert page.locator("section[data-prefix='kernels'] .tabulator-cell[tabulator-field='kernel_name']"
                        ).first.inner_text() == XSS
    op_types = page.locator("section[data-prefix='ops'] .tabulator-cell[tabulator-field='op_type']").all_inner_texts()
    assert XSS in op_types
    page.evaluate("""() => { const c = document.querySelector("[data-testid='roofline-chart']").chart;
        const i = c.getOption().series.findIndex((x) => x.name.startsWith('Kernels'));
        c.dispatchAction({ type: 'showTip', seriesIndex: i, dataIndex: 0 }); }""")
    tooltip = page.locator("[data-testid='roofline-chart'] > div").filter(has_text="Nsight Compute kernel")
    assert XSS in tooltip.inner_text()
    shot(page, "roofline-script-names")
    assert dialogs == [] and page.errors == []


def test_unknown_gpu_still_plots_the_ops(tmp_path, page):
    s = Server([add_roofline_rows(make_profile_db(tmp_path / "u.sqlite"), gpu_name=None)])
    try:
        ready(page, f"{s.base}/roofline")
        assert "--gpu-spec" in page.get_by_test_id("ceilings-error").inner_text()
        chart = page.get_by_test_id("roofline-chart")
        assert json.loads(chart.get_attribute("data-roofs")) == [] and int(chart.get_attribute("data-points")) >= 2
        names = page.evaluate("() => document.querySelector(\"[data-testid='roofline-chart']\")"
                              ".chart.getOption().series.map((x) => x.name)")
        assert "Ops (no roofs: GPU unknown)" in names
        shot(page, "roofline-unknown-gpu-ops")
        assert page.errors == []
    finally:
        s.stop()


@pytest.fixture(scope="module")
def h200_training(import_db):
    from test_roofline_nested import H200

    s = Server([import_db(H200 / "fp32_eager_w0.pt.trace.json.gz")])
    yield s
    s.stop()


def test_backward_nodes_show_the_flops_of_the_convolutions_beneath_them(h200_training, page):
    """The H200 FP32 training step's ConvolutionBackward0 autograd nodes, placed by the convolution gradients
    beneath them: their GFLOP cells add up to the raw JSON's aten::convolution_backward FLOPs (computed in the test
    from Input Dims and Concrete Inputs), each cell shown to 3 decimals."""
    from test_roofline_nested import H200, _convolution_backward_oracle

    flops, _, _ = _convolution_backward_oracle(H200 / "fp32_eager_w0.pt.trace.json.gz")
    ready(page, f"{h200_training.base}/roofline")
    page.wait_for_selector("section[data-prefix='ops'] .tabulator-row")
    page.locator("section[data-prefix='ops'] .tabulator-col[tabulator-field='op_name'] input").press_sequentially(
        "ConvolutionBackward0")
    page.wait_for_function("location.search.includes('ops.f.op_name=')")
    page.wait_for_load_state("networkidle")
    names = page.locator("section[data-prefix='ops'] .tabulator-cell[tabulator-field='op_name']").all_inner_texts()
    cells = page.locator("section[data-prefix='ops'] .tabulator-cell[tabulator-field='gflops']").all_inner_texts()
    assert names and all(n.endswith(": ConvolutionBackward0") for n in names) and len(cells) == len(names)
    shown = sum(float(c.replace(",", "")) for c in cells)
    assert shown == pytest.approx(flops / 1e9, abs=0.0005 * len(cells) + 1e-9)
    assert page.errors == []
