"""Memory in the Timeline, in headless Chromium on a real trace with the allocator's totals: the peak of each
memory lane the page shows for an iteration is the raw trace's maximum in that window, and hovering the peak's
pixel shows that value and its time."""

from __future__ import annotations

import shutil

import pytest
from conftest import data_file, sql
from test_viewer_browser import Server, page, ready, shot  # noqa: F401 (fixtures)
from test_viewer_timeline_memory import TOTALS, raw_levels, raw_max

pytestmark = [pytest.mark.browser, pytest.mark.filterwarnings("ignore::DeprecationWarning")]


def js_bytes(v: int) -> str:
    """format.mjs's bytes(): binary units, at most one decimal, en-US grouping."""
    units, i, x = ["B", "KiB", "MiB", "GiB", "TiB"], 0, float(v)
    while abs(x) >= 1024 and i < len(units) - 1:
        x, i = x / 1024, i + 1
    text = f"{x:,.1f}" if i else f"{x:,.0f}"
    return f"{text.removesuffix('.0')} {units[i]}"


@pytest.fixture(scope="module")
def memory_server(import_db, tmp_path_factory):
    copy = tmp_path_factory.mktemp("memcopy") / "v100.sqlite"
    shutil.copy(import_db(data_file(*TOTALS)), copy)
    s = Server([copy])
    s.db = copy
    yield s
    s.stop()


def test_the_memory_peak_shown_in_the_timeline_is_the_raw_maximum(memory_server, page):
    levels = raw_levels(data_file(*TOTALS))
    its = sql(memory_server.db, 'SELECT iteration, start, "end" FROM agg_iterations WHERE agg_id = '
                                "(SELECT MAX(agg_id) FROM aggregations) AND profiled = 1 ORDER BY iteration")
    gpu = sorted({d for d, _ in levels if d >= 0})[0]
    hovered = 0
    for iteration, start, end in its[:2]:
        ready(page, f"{memory_server.base}/timeline?iteration={iteration}")
        page.wait_for_function("window.dlscopeTimeline && window.dlscopeTimeline.paints > 0")
        shown = {(int(li.get_attribute("data-device")), li.get_attribute("data-counter")):
                 int(li.get_attribute("data-bytes")) for li in page.locator("[data-testid=memory-peak-in-view]").all()}
        assert shown == {key: raw_max(values, start, end) for key, values in levels.items()
                         if raw_max(values, start, end) is not None}
        for counter in ("allocated", "reserved"):
            at = page.evaluate("([d, c]) => window.dlscopeTimeline.wherePeak(d, c)", [gpu, counter])
            if at is None:  # the peak is the value carried into the window, no sample of it inside
                continue
            box = page.locator("[data-testid=timeline-canvas]").bounding_box()
            page.mouse.move(box["x"] + at["x"], box["y"] + at["y"])
            tip = page.inner_text("[data-testid=timeline-tip]")
            assert f"GPU {gpu} {counter}" in tip and js_bytes(shown[(gpu, counter)]) in tip, tip
            hovered += 1
    shot(page, "timeline-memory")
    assert hovered > 0
    assert page.errors == []
