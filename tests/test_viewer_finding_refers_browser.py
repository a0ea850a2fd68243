"""A symptom's finding links to the finding that owns its cause, in the viewer's dashboard, in a real browser: on
the hand-worked gap trace (tests/test_gap_causes.py) gpu_gaps' recommendation says 50 % of the gaps' time was data
loading and links to the dataloader_bottleneck finding's row, which gives the DataLoader advice."""

from __future__ import annotations

import pytest
from test_gap_causes import _gap_trace
from test_viewer_browser import Server, page, ready  # noqa: F401  (page: the browser page fixture)

from dlscope.pipeline import build_database

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.filterwarnings("ignore::DeprecationWarning")]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("refers")
    served = Server([build_database([_gap_trace().write(folder / "gaps.json")], folder / "gaps.sqlite",
                                    progress=False)])
    yield served
    served.stop()


def test_the_gaps_finding_links_to_the_data_loading_finding(server, page):  # noqa: F811
    ready(page, f"{server.base}/dashboard")
    gaps = page.locator("#finding-gpu_gaps")
    assert "50% of the gaps' time the host was loading data" in gaps.inner_text()
    link = gaps.get_by_test_id("see-finding")
    assert link.inner_text() == "→ dataloader_bottleneck"
    page.evaluate("document.querySelector('.p-experts').dataset.mark = 'before'")
    # a table's URL tweak first (the dashboard's details toggle does this), as the app makes it
    page.evaluate("import('/static/js/state.mjs').then((m) => m.update({details: 'kernels'}))")
    link.click()
    assert page.url.endswith("?details=kernels#finding-dataloader_bottleneck")
    # an in-page jump: the dashboard is not rendered again (the panel marked before the click is still there)
    assert page.locator(".p-experts[data-mark='before']").count() == 1
    target = page.locator(".experts tr:target")
    assert target.count() == 1 and "DataLoader(num_workers=N>0" in target.inner_text()
    assert page.locator("#finding-dataloader_bottleneck").get_by_test_id("see-finding").count() == 0
    assert page.errors == []
