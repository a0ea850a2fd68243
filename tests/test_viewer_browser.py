"""The viewer in a real browser (Playwright driving Debian's Chromium): every view on a real profile, drill-downs,
sort, search, paging, exports, clipboard, re-aggregation, and trace names that stay text. Screenshots land in
test-artifacts/ (git-ignored)."""

from __future__ import annotations

import csv
import io
import json
import shutil
import socket
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from conftest import REPO, data_file
from test_viewer_fixtures import XSS_KERNEL, make_profile_db

ARTIFACTS = REPO / "test-artifacts"
pytestmark = [pytest.mark.browser, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

try:
    from playwright.sync_api import expect
except ImportError:  # pragma: no cover - the browser fixture skips these tests
    expect = None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


FAKE_AGGREGATE = '''
def aggregate(db_path, iter_start, iter_stop, key_node):
    import sqlite3, time
    time.sleep(1.0)
    conn = sqlite3.connect(db_path)
    conn.execute("INSERT INTO aggregations (agg_id, rank, iter_start, iter_stop, key_node, wall_clock_ns) "
                 "SELECT agg_id + 1, rank, ?, ?, ?, wall_clock_ns FROM aggregations WHERE agg_id = 1",
                 (iter_start, iter_stop, key_node))
    conn.commit()
    conn.close()
    return [2]
'''


class Server:
    def __init__(self, dbs: list[Path], fake_aggregate: bool = False):
        self.port = _free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        code = (FAKE_AGGREGATE if fake_aggregate else "aggregate = None\n") + (
            f"from dlscope.viewer.cli_view import serve\nserve({[str(d) for d in dbs]!r}, port={self.port}, "
            f"aggregate=aggregate)\n")
        self.proc = subprocess.Popen([sys.executable, "-W", "ignore", "-c", code], cwd=REPO,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        import httpx
        for _ in range(150):
            try:
                httpx.get(self.base + "/api/meta", timeout=1)
                return
            except httpx.HTTPError:
                time.sleep(0.1)
        self.proc.kill()
        raise RuntimeError(self.proc.stdout.read().decode())

    def stop(self):
        self.proc.terminate()
        self.proc.wait(10)


@pytest.fixture(scope="module")
def real_db(tmp_path_factory):
    """A database imported from a real A100 NCCL training trace (3 ProfilerSteps, Tensor Core GEMMs)."""
    trace = data_file("kineto", "hta_a100_nccl_rank0of2_3steps.json.gz")
    from dlscope.pipeline import build_database
    return build_database([trace], tmp_path_factory.mktemp("real") / "a100.sqlite", progress=False)


@pytest.fixture(scope="module")
def real_server(real_db, tmp_path_factory):
    copy = tmp_path_factory.mktemp("realcopy") / "a100.sqlite"
    shutil.copy(real_db, copy)
    s = Server([copy])
    s.db = copy
    yield s
    s.stop()


@pytest.fixture(scope="module")
def tiny_server(tmp_path_factory):
    db = make_profile_db(tmp_path_factory.mktemp("tiny") / "tiny.sqlite")
    s = Server([db], fake_aggregate=True)
    yield s
    s.stop()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1500, "height": 1000}, accept_downloads=True)
    pg = context.new_page()
    pg.errors = []
    pg.on("pageerror", lambda e: pg.errors.append(str(e)))
    yield pg
    context.close()


def ready(pg, url):
    pg.goto(url)
    pg.wait_for_selector("body[data-ready='1']", timeout=15_000)
    pg.wait_for_load_state("networkidle")


def shot(pg, name):
    ARTIFACTS.mkdir(exist_ok=True)
    pg.screenshot(path=str(ARTIFACTS / f"viewer-{name}.png"), full_page=True)


def cell_texts(pg, prefix, field):
    return pg.locator(f"section[data-prefix='{prefix}'] .tabulator-row "
                      f".tabulator-cell[tabulator-field='{field}']").all_inner_texts()


VIEWS = ["dashboard", "op-types", "group-ops", "ops-kernels", "kernels-by-iteration", "kernels-by-op", "iterations",
         "gpus", "kernels"]


def test_every_view_renders_a_real_profile(real_server, page):
    for view in VIEWS:
        ready(page, f"{real_server.base}/{view}")
        assert page.locator("#content .panel").count() >= 1, view
        shot(page, f"real-{view}")
    assert page.errors == []


def test_dashboard_numbers_match_dlscope_summary(real_server, page):
    out = subprocess.run([sys.executable, "-m", "dlscope", "summary", str(real_server.db), "--json"],
                         capture_output=True, text=True, check=True)
    a = json.loads(out.stdout)["aggregation"]
    ready(page, f"{real_server.base}/dashboard")
    summary = dict(zip(page.locator(".p-summary table.kv th .label").all_inner_texts(),
                       page.locator(".p-summary table.kv td").all_inner_texts()))
    assert summary["Wall Clock Time (s)"] == f"{a['wall_clock_ns'] / 1e9:.3f}"
    assert summary["GPU Utilization (%)"] == f"{a['gpu_utilization'] * 100:.1f}"
    assert summary["Tensor Core Kernel Efficiency (%)"] == f"{a['tc_kernel_efficiency'] * 100:.1f}"
    assert summary["Average Iteration Time (ms)"] == f"{a['avg_iteration_ns'] / 1e6:.3f}"
    assert summary["Profiled Iterations"] == str(a["iterations_profiled"])
    assert (summary["Start Iteration"], summary["Stop Iteration"]) == (str(a["iter_start"]), str(a["iter_stop"]))
    exact = page.locator(".p-summary table.kv td span").first.get_attribute("title")
    assert exact == f"{a['wall_clock_ns']:,} ns"
    top = page.locator(".p-top tbody tr").first.locator("td").nth(1).inner_text()
    assert top == a["top_gpu_ops"][0]["op_name"]
    page.get_by_role("button", name="Show Kernel Details").click()
    expect(page.locator("#details")).to_contain_text("Kernels Using TC")
    assert "details=kernels" in page.url
    page.get_by_role("button", name="Close").click()
    expect(page.locator("#details")).to_be_hidden()


def test_dashboard_model_summary_and_savings_match_the_summary_json(real_server, page):
    out = subprocess.run([sys.executable, "-m", "dlscope", "summary", str(real_server.db), "--json"],
                         capture_output=True, text=True, check=True)
    s = json.loads(out.stdout)
    m = s["aggregation"]["model_summary"]
    ready(page, f"{real_server.base}/dashboard")
    model = dict(zip(page.locator(".p-model table.kv th .label").all_inner_texts(),
                     page.locator(".p-model table.kv td").all_inner_texts()))
    assert model == {"Op Nodes": str(m["op_nodes"]), "TC Eligible Op Nodes": str(m["tc_eligible_op_nodes"]),
                     "Op Nodes Using TC": str(m["op_nodes_using_tc"]),
                     "GPU Time in TC Eligible Op Nodes (%)": f"{m['tc_eligible_gpu_time_pct']:.1f}"}
    savings = page.locator(".p-experts .saving").all_inner_texts()
    with_pct = [f for f in s["findings"] if f["est_saving_pct"] is not None]
    assert with_pct and len(savings) == len(s["findings"])
    for text, f in zip(savings, s["findings"]):
        assert text.endswith(f"({f['est_saving_pct']:.1f} %)"), (text, f["est_saving_pct"])  # a percentage, once


def test_ops_drill_down_sort_search_and_page(real_server, page):
    ready(page, f"{real_server.base}/ops-kernels")
    page.locator("section[data-prefix='ops'] .tabulator-row").first.click(position={"x": 12, "y": 8})
    expect(page.locator("section[data-prefix='kernels'] .tabulator-row").first).to_be_visible()
    assert "node=" in page.url
    page.locator("section[data-prefix='ops'] .tabulator-col[tabulator-field='calls'] .tabulator-col-title").click()
    page.wait_for_function("location.search.includes('ops.sort=calls')")
    page.wait_for_load_state("networkidle")
    calls = [int(t.replace(",", "")) for t in cell_texts(page, "ops", "calls")]
    assert calls == sorted(calls, reverse=True) and len(calls) == 10
    page.locator("section[data-prefix='ops'] .tabulator-col[tabulator-field='op_name'] input"
                 ).press_sequentially("aten::")
    page.wait_for_function("location.search.includes('ops.f.op_name=')")
    page.wait_for_load_state("networkidle")
    assert all("aten::" in n for n in cell_texts(page, "ops", "op_name"))
    page.locator("section[data-prefix='ops'] .tabulator-page[data-page='next']").click()
    page.wait_for_function("location.search.includes('ops.page=2')")
    shared = page.url
    ready(page, shared)  # the URL alone restores the state
    assert page.locator("section[data-prefix='ops'] .tabulator-page.active").inner_text() == "2"
    assert page.locator("section[data-prefix='ops'] .tabulator-col[tabulator-field='op_name'] input"
                        ).input_value() == "aten::"
    page.locator("section[data-prefix='ops'] .tabulator-footer select").select_option("25")
    page.wait_for_function("location.search.includes('ops.size=25')")
    shot(page, "ops-kernels-drill")
    assert page.errors == []


def test_kernels_by_iteration_and_by_op(real_server, page):
    ready(page, f"{real_server.base}/kernels-by-iteration")
    page.locator("section[data-prefix='iters'] .tabulator-row").first.click(position={"x": 12, "y": 8})
    page.wait_for_function("location.search.includes('iteration=')")
    page.wait_for_selector("section[data-prefix='kernels'] .tabulator-row")
    assert "Showing 1 to 10 of" in page.locator("section[data-prefix='kernels'] .tabulator-page-counter").inner_text()
    durs = page.locator("section[data-prefix='kernels'] .tabulator-cell[tabulator-field='dur'] span").evaluate_all(
        "els => els.map(e => Number(e.title.replace(/[^0-9]/g, '')))")
    assert durs == sorted(durs, reverse=True)
    ready(page, f"{real_server.base}/kernels-by-op")
    page.locator("section[data-prefix='iters'] .tabulator-row").first.click(position={"x": 12, "y": 8})
    page.wait_for_selector("section[data-prefix='ops'] .tabulator-row")
    page.wait_for_load_state("networkidle")
    page.locator("section[data-prefix='ops'] .tabulator-row").first.click(position={"x": 12, "y": 8})
    page.wait_for_function("location.search.includes('node=')")
    page.wait_for_selector("section[data-prefix='kernels'] .tabulator-row")
    shot(page, "kernels-by-op-selected")
    assert page.errors == []


def test_exports_and_clipboard(real_server, page, browser):
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=real_server.base)
    ready(page, f"{real_server.base}/op-types")
    total = int(page.locator("section[data-prefix='types'] .tabulator-page-counter").inner_text()
                .split(" of ")[1].split()[0].replace(",", ""))
    with page.expect_download() as dl:
        page.locator("section[data-prefix='types'] a[data-export='csv']").click()
    rows = list(csv.reader(io.StringIO(Path(dl.value.path()).read_text())))
    assert rows[0] == ["hta_a100_nccl_rank0of2_3steps — Op Types"]   # the profile name heads every export
    assert len(rows) == total + 2 and rows[1][0] == "Op Type"
    with page.expect_download() as dl:
        page.locator("section[data-prefix='types'] a[data-export='xlsx']").click()
    assert zipfile.ZipFile(dl.value.path()).testzip() is None
    with page.expect_download() as dl:
        page.locator("section[data-prefix='types'] a[data-export='json']").click()
    assert len(json.loads(Path(dl.value.path()).read_text())["rows"]) == total
    page.get_by_role("button", name="Clipboard").click()
    expect(page.locator("section[data-prefix='types'] .count-note")).to_contain_text("Copied")
    text = page.evaluate("navigator.clipboard.readText()")
    assert text.splitlines()[0] == "hta_a100_nccl_rank0of2_3steps — Op Types"
    assert len(text.strip().splitlines()) == total + 2


def test_expert_system_drill_down_and_names_stay_text(tiny_server, page):
    ready(page, f"{tiny_server.base}/dashboard")
    page.locator(".p-experts a.drill").first.click()
    page.wait_for_selector("section[data-prefix='ops'] .tabulator-row")
    assert cell_texts(page, "ops", "op_name") == ["aten::linear"]
    shot(page, "finding-drill")
    ready(page, f"{tiny_server.base}/kernels?kernels.f.kernel_name=script")
    page.wait_for_selector("section[data-prefix='kernels'] .tabulator-row")
    assert set(cell_texts(page, "kernels", "kernel_name")) == {XSS_KERNEL}
    assert page.evaluate("window.__pwned") is None
    ready(page, f"{tiny_server.base}/ops-kernels")
    assert page.evaluate("window.__pwned") is None
    assert page.errors == []


def test_group_ops_expand_and_collapse(tiny_server, page):
    ready(page, f"{tiny_server.base}/group-ops")
    page.wait_for_selector("section[data-prefix='groups'] .tabulator-row")
    assert page.locator("section[data-prefix='groups'] .tabulator-row").count() == 8
    page.get_by_role("button", name="Collapse All").click()
    page.wait_for_function("document.querySelectorAll(\"section[data-prefix='groups'] .tabulator-row\").length === 1")
    page.locator("section[data-prefix='groups'] .tree-toggle").first.click()
    page.wait_for_function("document.querySelectorAll(\"section[data-prefix='groups'] .tabulator-row\").length === 2")
    page.locator("section[data-prefix='groups'] .tabulator-row").nth(1).click(position={"x": 12, "y": 8})
    expect(page.get_by_test_id("group-selection")).to_contain_text("Group Name Selected: /model/")
    page.get_by_role("button", name="Expand All").click()
    page.wait_for_function("document.querySelectorAll(\"section[data-prefix='groups'] .tabulator-row\").length === 8")
    shot(page, "group-ops")


def test_reaggregate_shows_underway_then_success(tiny_server, page):
    ready(page, f"{tiny_server.base}/iterations")
    page.get_by_label("Select Iter Start").fill("2")
    page.get_by_test_id("reaggregate").click()
    page.get_by_test_id("confirm-reaggregate").click()
    expect(page.get_by_test_id("job-underway")).to_be_visible()
    shot(page, "reaggregate-underway")
    expect(page.get_by_test_id("job-success")).to_be_visible(timeout=15_000)
    page.get_by_text("Reload to see it").click()
    page.wait_for_selector("body[data-ready='1']")
    expect(page.locator("#nav-agg-wrap")).to_be_visible()
    assert page.locator("#nav-agg option").count() == 2
    shot(page, "reaggregate-done")


def test_real_reaggregation_with_the_pipeline(real_server, page):
    ready(page, f"{real_server.base}/iterations")
    page.get_by_label("Select Iter Stop").fill("5")
    page.get_by_test_id("reaggregate").click()
    page.get_by_test_id("confirm-reaggregate").click()
    expect(page.get_by_test_id("job-success")).to_be_visible(timeout=60_000)
    import sqlite3
    rows = sqlite3.connect(real_server.db).execute("SELECT iter_stop FROM aggregations ORDER BY agg_id").fetchall()
    assert rows[-1] == (5,)


def test_bad_url_parameter_page(tiny_server, page):
    page.goto(f"{tiny_server.base}/ops-kernels?ops.sort=nope")
    assert "Bad parameters found in URL" in page.content() and "ops.sort" in page.inner_text("main")
