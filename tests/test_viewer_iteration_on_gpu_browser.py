"""The iterations timed on the GPU in the viewer's dashboard, in a real browser: an H200 FP32 CUDA-graph capture
whose CPU queues iterations ahead shows them (checked against its raw JSON, tests/raw_kineto.py); an eager capture
of the same GPU shows none."""

from __future__ import annotations

import statistics

import pytest
from test_iteration_on_gpu import AMP_EAGER, raw_on_gpu
from test_viewer_browser import Server, page, ready  # noqa: F401  (page: the browser page fixture)

from dlscope.pipeline import build_database

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

try:
    from playwright.sync_api import expect
except ImportError:  # pragma: no cover - the browser fixture skips these tests
    expect = None


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    from test_gpu_behind_cpu import LM_GRAPHS

    out = tmp_path_factory.mktemp("on_gpu")
    graphs = Server([build_database([LM_GRAPHS], out / "graphs.sqlite", progress=False)])
    eager = Server([build_database([AMP_EAGER], out / "eager.sqlite", progress=False)])
    yield graphs, eager
    graphs.stop()
    eager.stop()


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.3f}"


def test_the_dashboard_times_a_queued_gpus_iterations_on_the_gpu(servers, page):  # noqa: F811
    from test_gpu_behind_cpu import LM_GRAPHS

    numbers, gpu, lag = raw_on_gpu(LM_GRAPHS)
    median = round(statistics.median(gpu))
    slowest = numbers[gpu.index(max(gpu))]
    ready(page, f"{servers[0].base}/dashboard")
    shown = page.get_by_test_id("iteration-on-gpu")
    expect(shown).to_have_text(f"{_ms(min(gpu))} / {_ms(median)} / {_ms(max(gpu))} (iteration {slowest})")
    assert [int(shown.get_attribute(f"data-{k}")) for k in ("min", "median", "max", "slowest")] == [
        min(gpu), median, max(gpu), slowest]
    expect(page.get_by_test_id("gpu-lag")).to_have_text(_ms(lag))
    expect(page.locator(".p-summary")).to_contain_text("Iteration Time on the GPU (ms): min / median / max")
    assert page.errors == []


def test_the_dashboard_of_an_eager_capture_shows_no_times_on_the_gpu(servers, page):  # noqa: F811
    ready(page, f"{servers[1].base}/dashboard")
    expect(page.locator(".p-summary")).to_contain_text("Average Iteration Time (ms)")
    expect(page.get_by_test_id("iteration-on-gpu")).to_have_count(0)
    expect(page.get_by_test_id("gpu-lag")).to_have_count(0)
    assert page.errors == []
