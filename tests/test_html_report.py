"""The one-file HTML report: self-contained (no request to any server), charts drawn as inline SVG, names from
traces escaped; checked in headless Chromium with the network blocked. Screenshots land in test-artifacts/."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import REPO, data_file
from test_compare_traces import XSS, new_trace, no_steps_trace

from dlscope.errors import InputError
from dlscope.present.html_report import render_html_report, write_html_report

ARTIFACTS = REPO / "test-artifacts"
CHART_IDS = ("chart-breakdown", "chart-iterations", "chart-top_ops", "chart-top_kernels", "chart-gpus")

@pytest.fixture(scope="module")
def xss_db(tmp_path_factory, import_db):
    return import_db(new_trace(tmp_path_factory.mktemp("xss") / "xss.json", kernel_name=XSS))


@pytest.fixture(scope="module")
def xss_report(xss_db, tmp_path_factory):
    return write_html_report(xss_db, tmp_path_factory.mktemp("report"))


def test_report_is_one_self_contained_file(xss_report):
    html = xss_report.read_text()
    assert xss_report.name == "report.html" and len(list(xss_report.parent.iterdir())) == 1
    assert not re.search(r"""<(script|link|iframe|img|object|embed)\b""", html, re.I)
    assert not re.search(r"""(src|href)\s*=\s*["'](?!#)""", html, re.I)   # only in-page #fragment links (SVG <use>)
    assert "@import" not in html and not re.search(r"url\((?!#)", html)   # clip-path="url(#id)" stays in the page
    # the only URLs are XML namespace names inside the SVG and the expert rules' documentation links, shown as
    # text in a finding's recommendation (rules.json "link"): none is fetched
    from dlscope.experts.config import load_config

    docs = {c["link"] for c in load_config().values() if isinstance(c, dict) and c.get("link")}
    assert set(re.findall(r"https?://[^\s\"'<>]+", html)) <= {"http://www.w3.org/2000/svg",
                                                              "http://www.w3.org/1999/xlink"} | docs


def test_names_from_traces_are_escaped_in_tables_and_charts(xss_report):
    html = xss_report.read_text()
    assert XSS not in html and "<script" not in html.lower()
    escaped = "&lt;script&gt;alert(1)&lt;/script&gt;"
    assert html.count(escaped) >= 2   # the kernels table and the top-kernels chart's axis label
    chart = re.search(r'id="chart-top_kernels".*?</figure>', html, re.S).group(0)
    assert escaped in chart


def test_dashboard_numbers_match_the_hand_made_trace(xss_report):
    html = xss_report.read_text()
    assert "2.40 ms" in html                      # wall clock: 3 steps of 800 µs
    assert "800.00 µs" in html                    # average iteration
    assert "70.0%" in html                        # GPU busy 560 µs per 800 µs iteration
    assert "87.0%" in html                        # TC efficiency 400 / (400 + 60)
    for cid in CHART_IDS:
        assert f'id="{cid}"' in html


def test_model_summary_card_counts_op_nodes_by_hand(xss_report):
    """conv2d, relu and addmm are the op nodes; conv2d and addmm are eligible; only conv2d runs a Tensor Core
    kernel; eligible GPU time (400 + 60) of all op GPU time (400 + 100 + 60) per step is 82.1%."""
    card = re.search(r'id="model-summary">(.*?)</div></div>', xss_report.read_text(), re.S).group(1)
    text = " ".join(re.sub(r"<[^>]+>", " ", card).split())
    assert text == ("Op nodes 3 2 eligible for Tensor Cores, 1 using them; "
                    "82.1% of op GPU time in eligible op nodes")


def test_report_without_iterations_says_so_and_shows_the_finding(tmp_path, import_db):
    html = render_html_report(import_db(no_steps_trace(tmp_path / "n.json")))
    assert "No iterations were found" in html and "amp_not_enabled" in html   # its FP32 sgemm, read from the name
    assert 'id="chart-iterations"' not in html and 'id="chart-breakdown"' in html


def test_bad_database_is_an_input_error(tmp_path):
    with pytest.raises(InputError):
        write_html_report(tmp_path / "missing.sqlite", tmp_path)


def _open_offline(browser, path: Path, shot: str):
    """Open the report with every non-file request blocked; returns (page, blocked requests, dialogs)."""
    context = browser.new_context(offline=True, viewport={"width": 1280, "height": 900})
    page = context.new_page()
    blocked, dialogs = [], []

    def route(r):
        if r.request.url.startswith("file://"):
            r.continue_()
        else:
            blocked.append(r.request.url)
            r.abort()

    page.route("**/*", route)
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(path.resolve().as_uri())
    page.wait_for_load_state("load")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / shot), full_page=True)
    return context, page, blocked, dialogs


def _drawn(page, cid: str) -> int:
    """Drawn marks (paths, rects, lines) inside the chart's SVG that have a visible size."""
    return page.evaluate("""(cid) => {
        const svg = document.querySelector('#' + cid + ' svg');
        if (!svg) return -1;
        return [...svg.querySelectorAll('path, rect, line, polygon')]
            .filter(e => { const b = e.getBBox(); return b.width > 0 || b.height > 0; }).length;
    }""", cid)


@pytest.mark.browser
def test_report_renders_its_charts_offline_in_chromium(browser, xss_report):
    context, page, blocked, dialogs = _open_offline(browser, xss_report, "html_report_handmade.png")
    try:
        assert blocked == [] and dialogs == []
        for cid in CHART_IDS:
            assert _drawn(page, cid) > 3, cid
            box = page.locator(f"#{cid} svg").bounding_box()
            assert box and box["width"] > 150 and box["height"] > 80, cid
        # the XSS kernel name is text on the page, in the table and in the chart
        assert page.locator("#top-kernels td.name", has_text=XSS).count() == 1
        assert page.locator("#chart-top_kernels svg text", has_text="<script>").count() >= 1
        assert page.evaluate("document.querySelectorAll('script').length") == 0
    finally:
        context.close()


@pytest.mark.browser
def test_real_resnet50_report_in_chromium(browser, import_db, tmp_path):
    db = import_db(data_file("kineto", "tbplugin_resnet50_v100_workers0.pt.trace.json.gz"))
    path = write_html_report(db, tmp_path)
    context, page, blocked, dialogs = _open_offline(browser, path, "html_report_resnet50.png")
    try:
        assert blocked == [] and dialogs == []
        assert page.locator("#dashboard").inner_text().count("177.59 ms") == 1
        for cid in CHART_IDS:
            assert _drawn(page, cid) > 3, cid
        assert _drawn(page, "chart-iterations") >= 6 * 3   # six iterations, stacked categories
        assert page.locator("#top-ops tbody tr").count() == 20
        assert page.locator("#iterations tbody tr").count() == 6
    finally:
        context.close()
