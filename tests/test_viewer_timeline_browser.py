"""The Timeline view in headless Chromium on a real imported trace: the kernels it says it shows are the raw trace's
kernels of that window, an iteration bar, a finding's evidence range and a table row each open it at the right
place, a click on a kernel shows its details, zoom narrows the window, and trace names stay text."""

from __future__ import annotations

import json

import pytest
from conftest import data_file, sql
from raw_kineto import KERNEL_CATS, events
from test_viewer_browser import Server, page, ready, real_db, real_server, shot, tiny_server  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.browser, pytest.mark.filterwarnings("ignore::DeprecationWarning")]
TRACE = ("kineto", "hta_a100_nccl_rank0of2_3steps.json.gz")


def iterations(db):
    return sql(db, 'SELECT iteration, start, "end" FROM agg_iterations WHERE agg_id = '
                   "(SELECT MAX(agg_id) FROM aggregations) AND profiled = 1 ORDER BY iteration")


def raw_kernels(start: int, end: int) -> int:
    return sum(1 for e in events(data_file(*TRACE)) if e.cat in KERNEL_CATS and e.start < end and e.end > start)


def kernels_in_view(pg) -> int:
    return int(pg.get_attribute("[data-testid=kernels-in-view]", "data-kernels"))


def window_of(pg) -> tuple[int, int]:
    w = pg.evaluate("window.dlscopeTimeline.window()")
    return int(w["start"]), int(w["end"])


def test_timeline_shows_the_raw_kernels_of_an_iteration(real_server, page):
    for iteration, start, end in iterations(real_server.db):
        ready(page, f"{real_server.base}/timeline?iteration={iteration}")
        assert window_of(page) == (start, end)
        assert kernels_in_view(page) == raw_kernels(start, end) > 0
        assert "kernels in view" in page.inner_text("[data-testid=timeline-status]")
    shot(page, "timeline-iteration")
    assert page.errors == []


def test_an_iteration_bar_opens_the_timeline_there(real_server, page):
    ready(page, f"{real_server.base}/iterations")
    iteration, start, end = iterations(real_server.db)[1]
    point = page.evaluate("""([it, half]) => {
        const c = document.querySelector('.chart.tall').chart;
        const [x, y] = c.convertToPixel({ gridIndex: 0 }, [String(it), half]);
        const r = c.getDom().getBoundingClientRect();
        return { x: r.left + x, y: r.top + y };
    }""", [iteration, (end - start) // 2])
    page.mouse.click(point["x"], point["y"])
    page.wait_for_url("**/timeline?**")
    page.wait_for_selector("body[data-ready='1']")
    page.wait_for_function("window.dlscopeTimeline && window.dlscopeTimeline.paints > 0")
    assert window_of(page) == (start, end)
    assert kernels_in_view(page) == raw_kernels(start, end)
    assert page.errors == []


def test_a_finding_opens_its_evidence_range(real_server, page):
    rows = sql(real_server.db, "SELECT evidence_json FROM findings WHERE agg_id = "
                               "(SELECT MAX(agg_id) FROM aggregations) ORDER BY finding_id")
    evidence = [json.loads(e) for (e,) in rows]
    first = next(e["time_ranges"][0] for e in evidence if e.get("time_ranges"))
    ready(page, f"{real_server.base}/dashboard")
    page.locator("[data-testid=finding-timeline]").first.click()
    page.wait_for_url("**/timeline?**")
    page.wait_for_function("window.dlscopeTimeline && window.dlscopeTimeline.paints > 0")
    assert window_of(page) == (first[0], first[1])
    in_sql = sql(real_server.db, 'SELECT COUNT(*) FROM kernels WHERE rank = 0 AND start < ? AND "end" > ?',
                 (first[1], first[0]))[0][0]
    assert kernels_in_view(page) == in_sql == raw_kernels(*first)
    assert page.errors == []


def test_a_kernel_row_opens_the_timeline_and_a_click_shows_its_details(real_server, page):
    ready(page, f"{real_server.base}/kernels")
    page.wait_for_selector("[data-testid=row-timeline]")
    href = page.get_attribute("[data-testid=row-timeline] >> nth=0", "href")
    kernel = int(href.split("kernel=")[1].split("&")[0])
    page.locator("[data-testid=row-timeline]").first.click()
    page.wait_for_url("**/timeline?**")
    page.wait_for_function("window.dlscopeTimeline && window.dlscopeTimeline.paints > 0")
    ks, ke = sql(real_server.db, 'SELECT start, "end" FROM kernels WHERE kernel_id = ?', (kernel,))[0]
    start, end = window_of(page)
    assert start < ks and ke < end
    at = page.evaluate("(id) => window.dlscopeTimeline.where('kernel', id)", kernel)
    box = page.locator("[data-testid=timeline-canvas]").bounding_box()
    page.mouse.click(box["x"] + at["x"], box["y"] + at["y"])
    page.wait_for_selector("[data-testid=timeline-details]")
    details = page.inner_text("[data-testid=timeline-details]")
    assert f"Kernel {kernel}" in details and "grid" in details and "tensor core" in details
    shot(page, "timeline-details")
    # one zoom step halves the window around its middle and refetches it
    page.evaluate("window.dlscopeTimeline.zoom(0.5)")
    z0, z1 = window_of(page)
    assert abs((z1 - z0) - (end - start) / 2) <= 2
    assert kernels_in_view(page) == raw_kernels(z0, z1)
    assert page.errors == []


def test_trace_names_stay_text_on_the_timeline(tiny_server, page):
    ready(page, f"{tiny_server.base}/timeline")
    page.wait_for_function("window.dlscopeTimeline && window.dlscopeTimeline.paints > 0")
    box = page.locator("[data-testid=timeline-canvas]").bounding_box()
    for y in range(0, int(box["height"]), 8):   # hover every row: the tooltip is text
        page.mouse.move(box["x"] + box["width"] / 2, box["y"] + y)
    assert page.evaluate("window.__pwned") is None
    assert page.errors == []


def test_a_range_of_iterations_and_the_keyboard(real_server, page):
    its = iterations(real_server.db)
    ready(page, f"{real_server.base}/timeline")
    page.wait_for_function("window.dlscopeTimeline && window.dlscopeTimeline.paints > 0")
    paints = page.evaluate("window.dlscopeTimeline.paints")
    page.select_option("[data-testid=iteration-from]", label=f"iteration {its[0][0]}")
    page.wait_for_function(f"window.dlscopeTimeline.paints > {paints}")
    paints = page.evaluate("window.dlscopeTimeline.paints")
    page.select_option("[data-testid=iteration-to]", label=f"iteration {its[-1][0]}")
    page.wait_for_function(f"window.dlscopeTimeline.paints > {paints}")
    assert window_of(page) == (its[0][1], its[-1][2])
    assert kernels_in_view(page) == raw_kernels(its[0][1], its[-1][2])
    start, end = window_of(page)
    paints = page.evaluate("window.dlscopeTimeline.paints")
    page.focus("[data-testid=timeline-canvas]")
    page.keyboard.press("w")
    page.wait_for_function(f"window.dlscopeTimeline.paints > {paints}")
    z0, z1 = window_of(page)
    assert abs((z1 - z0) - 0.8 * (end - start)) <= 2 and z0 > start and z1 < end
    assert page.errors == []


def test_a_dashboard_iteration_bar_opens_the_timeline_there(real_server, page):
    ready(page, f"{real_server.base}/dashboard")
    iteration, start, end = iterations(real_server.db)[0]
    point = page.evaluate("""([it, half]) => {
        const c = document.querySelector('.p-iters .chart').chart;
        c.getDom().scrollIntoView({ block: "center" });  // the panels above may push it below the fold
        const [x, y] = c.convertToPixel({ gridIndex: 0 }, [String(it), half]);
        const r = c.getDom().getBoundingClientRect();
        return { x: r.left + x, y: r.top + y };
    }""", [iteration, (end - start) // 2])
    page.mouse.click(point["x"], point["y"])
    page.wait_for_url("**/timeline?**")
    page.wait_for_function("window.dlscopeTimeline && window.dlscopeTimeline.paints > 0")
    assert window_of(page) == (start, end)
    assert page.errors == []
