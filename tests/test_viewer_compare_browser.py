"""The Compare view in headless Chromium on two real ResNet-50 V100 runs (dataloader workers 0 vs 4): the page
shows what `dlscope diff` reports, the breakdown's dataloader drop, and new/vanished rows. Screenshots land in
test-artifacts/."""

from __future__ import annotations

import sqlite3
import subprocess
import sys

import pytest
from conftest import data_file
from test_viewer_browser import Server, page, ready, shot  # noqa: F401  (page is a fixture)
from test_viewer_compare import XSS, make_pair

pytestmark = [pytest.mark.browser, pytest.mark.filterwarnings("ignore::DeprecationWarning")]


@pytest.fixture(scope="module")
def resnet(import_db):
    base = import_db(data_file("kineto", "tbplugin_resnet50_v100_workers0.pt.trace.json.gz"))
    new = import_db(data_file("kineto", "tbplugin_resnet50_v100_workers4.pt.trace.json.gz"))
    s = Server([base, new])
    s.dbs = (base, new)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def scripted(tmp_path_factory):
    s = Server(list(make_pair(tmp_path_factory.mktemp("cmpx"))))
    yield s
    s.stop()


def per_iteration(db, column):
    conn = sqlite3.connect(db)
    try:
        value, iters = conn.execute(f"SELECT {column}, iterations_profiled FROM aggregations "
                                    "ORDER BY agg_id DESC LIMIT 1").fetchone()
    finally:
        conn.close()
    return value / iters


def test_compare_shows_what_dlscope_diff_reports(resnet, page):
    out = subprocess.run([sys.executable, "-m", "dlscope", "diff", *map(str, resnet.dbs)], capture_output=True,
                         text=True, check=True).stdout
    lines = [line.strip() for line in out.splitlines()]
    verdict = next(line for line in lines if line.startswith("Average iteration time"))
    dataloader = next(line.split(" ", 1)[1] for line in lines
                      if "Dataloader time" in line and line[:2].strip(". ").isdigit())
    ready(page, f"{resnet.base}/dashboard")
    assert "Compare Runs" in page.locator("#nav-view option").all_inner_texts()
    page.select_option("#nav-view", "compare")
    page.wait_for_url("**/compare*")
    page.wait_for_selector("body[data-ready='1']")
    page.wait_for_load_state("networkidle")
    assert page.get_by_test_id("verdict").inner_text() == verdict  # e.g. "... 177.59 ms → 141.09 ms: 20.6% faster"
    assert "faster" in verdict
    assert dataloader in page.get_by_test_id("key-changes").inner_text()
    # the average iteration time, exact on hover, against the stored aggregations
    row = page.locator("[data-testid='metrics'] tr[data-metric='avg_iteration_time']")
    for side, db in zip(("base", "new"), resnet.dbs):
        exact = per_iteration(db, "wall_clock_ns")
        assert row.locator(f"td.{side} span").get_attribute("title") == f"{round(exact):,} ns"
    assert row.locator(".delta").get_attribute("class") == "delta better"
    # the dataloader category drop
    dl = page.locator("[data-testid='breakdown'] tr[data-category='dataloader']")
    base_dl, new_dl = (per_iteration(db, "dataloader_ns") for db in resnet.dbs)
    assert base_dl > 20 * new_dl > 0
    assert dl.locator("td.base span").get_attribute("title") == f"{round(base_dl):,} ns"
    assert dl.locator("td.new span").get_attribute("title") == f"{round(new_dl):,} ns"
    assert dl.locator(".delta").get_attribute("class") == "delta better"
    assert dl.locator(".delta").inner_text().startswith("−")
    # tables: the single-process dataloader op vanished, the multi-process one is new
    page.wait_for_selector("section[data-prefix='ops'] .tabulator-row")
    assert page.locator("section[data-prefix='types'] .tabulator-row.row-vanished").count() >= 1
    assert ("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
            in page.get_by_test_id("only-in-base").inner_text())
    assert ("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"
            in page.get_by_test_id("only-in-new").inner_text())
    shot(page, "compare-resnet-workers0-vs-4")
    page.locator("section[data-prefix='ops'] .tabulator-col[tabulator-field='status'] input").press_sequentially("new")
    page.wait_for_function("location.search.includes('ops.f.status=new')")
    page.wait_for_load_state("networkidle")
    status = page.locator("section[data-prefix='ops'] .tabulator-cell[tabulator-field='status']").all_inner_texts()
    assert status and set(status) == {"new"}
    page.get_by_role("button", name="Swap").click()
    page.wait_for_selector("body[data-ready='1']")
    assert "slower" in page.get_by_test_id("verdict").inner_text()
    assert "base=1" in page.url and "ops.f.status" not in page.url
    assert page.errors == []


def test_script_names_stay_text(scripted, page):
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    ready(page, f"{scripted.base}/compare")
    page.wait_for_selector("section[data-prefix='kernels'] .tabulator-row")
    names = page.locator("section[data-prefix='kernels'] .tabulator-cell[tabulator-field='kernel_name']"
                         ).all_inner_texts()
    assert XSS in names
    assert page.locator("section[data-prefix='kernels'] .tabulator-row.row-new").count() == 1
    assert XSS in page.get_by_test_id("only-in-new").inner_text()
    assert XSS in page.get_by_test_id("key-changes").inner_text() or XSS in page.inner_text("main")
    shot(page, "compare-script-names")
    assert dialogs == [] and page.errors == []
