"""A CUDA-graph capture's n/a figures in the viewer's dashboard, in a real browser: the H200 FP32 transformer
captured with its forward and backward graphed (docs/gpu-sessions.md, fourth session) shows why Tensor Core kernel
efficiency and MFU are n/a, with the replayed kernel time read from its raw JSON (tests/test_graph_replay_figures.py),
and what the Model Summary's "using them" counts hold."""

from __future__ import annotations

import pytest
from test_graph_replay_figures import H200, _raw
from test_viewer_browser import Server, page, ready  # noqa: F401  (page: the browser page fixture)
from test_viewer_job_browser import kv

from dlscope.format import fmt_ns
from dlscope.pipeline import build_database

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

TRACE = H200 / "lm_fp32_graphs_b16.pt.trace.json.gz"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    served = Server([build_database([TRACE], tmp_path_factory.mktemp("graphs") / "graphs.sqlite", progress=False)])
    yield served
    served.stop()


def test_the_dashboard_says_why_a_graph_capture_s_figures_are_na(server, page):  # noqa: F811
    raw = _raw(TRACE)
    ready(page, f"{server.base}/dashboard")
    shown = kv(page, "p-summary")
    efficiency = " ".join(shown["Tensor Core Kernel Efficiency (%)"].split())
    assert efficiency.startswith("n/a (no Tensor Core-eligible op ran kernels: the matrix products ran replayed "
                                 "from CUDA graphs")
    share = f"{100 * raw['replayed_time'] / raw['time']:.1f}%"
    assert f"{fmt_ns(raw['replayed_time'])} of the {fmt_ns(raw['time'])} of kernel time ({share}) was replayed" \
        in efficiency
    assert f"{fmt_ns(raw['replayed_tc_time'])} on Tensor Cores" in efficiency
    mfu = " ".join(next(v for k, v in shown.items() if k.startswith("MFU (%)")).split())
    assert mfu.startswith("n/a (no op with a FLOP model ran: ") and "which record no input shapes" in mfu
    assert "is unknown" not in page.locator(".p-summary").inner_text()
    assert page.get_by_test_id("model-note").inner_text() == (
        "The 2 using them are CUDA graph replays (GraphedBackward, Graphed): the eligible ops they replay are not in "
        "the trace.")
    assert page.errors == []
