"""The stored critical path and simulated savings in the viewer, in a real browser: the dashboard's combined
saving and each finding's simulated saving are the summary JSON's, and the ops and kernels tables sort by the
time on the critical path (checked against the database)."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys

import httpx
import pytest
from conftest import data_file, requires_shared
from test_viewer_browser import Server, cell_texts, page, ready

pytestmark = [pytest.mark.browser, pytest.mark.filterwarnings("ignore::DeprecationWarning"), requires_shared]

try:
    from playwright.sync_api import expect
except ImportError:  # pragma: no cover - the browser fixture skips these tests
    expect = None


@pytest.fixture(scope="module")
def resnet_server(import_db, tmp_path_factory):
    """ResNet-50 with 0 DataLoader workers: four findings priced by replay (docs/whatif.md)."""
    db = tmp_path_factory.mktemp("crit") / "w0.sqlite"
    shutil.copy(import_db(data_file("kineto", "tbplugin_resnet50_v100_workers0.pt.trace.json.gz")), db)
    s = Server([db])
    s.db = db
    yield s
    s.stop()


def _summary(db) -> dict:
    out = subprocess.run([sys.executable, "-m", "dlscope", "summary", str(db), "--json"], capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout)


def test_the_dashboard_shows_the_summarys_combined_and_simulated_savings(resnet_server, page):
    s = _summary(resnet_server.db)
    combined = s["aggregation"]["findings_combined_saving_ns"]
    assert combined == 794_302_730  # docs/whatif.md's replay of ResNet-50 workers0's findings together
    ready(page, f"{resnet_server.base}/dashboard")
    shown = page.locator(".p-experts .combined-saving")
    expect(shown).to_have_text("Combined saving (simulated, overlaps counted once): 794.3 ms")  # the viewer's units
    assert int(shown.get_attribute("data-ns")) == combined
    simulated = [int(x) for x in page.locator(".p-experts .simulated").evaluate_all(
        "els => els.map(e => e.dataset.ns)")]
    assert simulated == [f["simulated_saving_ns"] for f in s["findings"] if f["simulated_saving_ns"] is not None]
    assert page.errors == []


def test_ops_and_kernels_tables_sort_by_time_on_the_critical_path(resnet_server, page):
    conn = sqlite3.connect(resnet_server.db)
    try:
        top_op = conn.execute("SELECT op_name, critical_path_ns FROM agg_ops ORDER BY critical_path_ns DESC, "
                              "node_id DESC LIMIT 1").fetchone()
        top_kernel = conn.execute("SELECT kernel_name, critical_path_ns FROM agg_kernels "
                                  "ORDER BY critical_path_ns DESC LIMIT 1").fetchone()
    finally:
        conn.close()
    rows = httpx.get(f"{resnet_server.base}/api/table/ops", params={"sort": "critical_path_ns", "agg": 1}).json()
    assert (rows["rows"][0]["op_name"], rows["rows"][0]["critical_path_ns"]) == top_op
    rows = httpx.get(f"{resnet_server.base}/api/table/kernel_summary",
                     params={"sort": "critical_path_ns", "agg": 1}).json()
    assert (rows["rows"][0]["kernel_name"], rows["rows"][0]["critical_path_ns"]) == top_kernel
    ready(page, f"{resnet_server.base}/ops-kernels")
    header = page.locator("section[data-prefix='ops'] .tabulator-col[tabulator-field='critical_path_ns']")
    expect(header).to_contain_text("Critical Path")
    header.locator(".tabulator-col-title").click()
    page.wait_for_function("location.search.includes('ops.sort=critical_path_ns')")
    page.wait_for_load_state("networkidle")
    names = cell_texts(page, "ops", "op_name")
    assert names[0] == top_op[0]
    assert page.errors == []
