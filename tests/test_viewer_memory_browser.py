"""The Iterations page in a real browser: the Memory panel draws each device's allocated / reserved bytes with
the peaks named, and "Download trace (Perfetto)" downloads the profiled iterations as a Chrome trace."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import data_file
from test_viewer_browser import Server, page, ready, shot  # noqa: F401  (page is a fixture)

pytestmark = [pytest.mark.browser, pytest.mark.filterwarnings("ignore::DeprecationWarning")]


@pytest.fixture(scope="module")
def v100_server(import_db):
    s = Server([import_db(data_file("kineto", "hta_v100_rank1of2_5steps.json.gz"))])
    yield s
    s.stop()


def test_memory_panel_and_trace_download(v100_server, page):
    ready(page, f"{v100_server.base}/iterations")
    peaks = page.locator("[data-testid=memory-peak]").all_inner_texts()
    assert any(p.startswith("GPU 1: peak allocated 6.2 GiB in iteration 2 during aten::empty") for p in peaks), peaks
    assert page.locator("[data-testid=memory-chart] canvas").bounding_box()["height"] > 200  # drawn, not folded
    drawn = page.evaluate("document.querySelector('[data-testid=memory-chart]').chart.getOption().series"
                          ".map(s => [s.name, Math.max(...s.data.map(p => p[1] ?? 0))])")
    assert ["GPU 1 allocated", 6629508096] in drawn and ["GPU 1 reserved", 12782141440] in drawn
    shot(page, "iterations-memory")
    with page.expect_download() as info:
        page.click("[data-testid=download-trace]")
    download = info.value
    assert download.suggested_filename.endswith("-iterations-2-6.trace.json")
    doc = json.loads(Path(download.path()).read_text())
    assert doc["dlscope"]["iterations"] == {"1": [2, 6]}
    assert sum(1 for e in doc["traceEvents"] if e.get("cat") == "kernel") > 0
    assert not page.errors
