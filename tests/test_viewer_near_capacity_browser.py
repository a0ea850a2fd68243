"""The dashboard in headless Chromium shows a near-capacity risk finding as such: the problem names the op at the
peak and the headroom in bytes (4 GiB, hand-computed), and the saving line says there is none and why."""

from __future__ import annotations

import sqlite3

import pytest
from test_memory_near_capacity import HEADROOM, PEAK, imported
from test_viewer_browser import Server, page, ready  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.browser, pytest.mark.filterwarnings("ignore::DeprecationWarning")]


def test_the_dashboard_shows_a_risk_finding_without_a_saving(tmp_path, page):
    db = imported(tmp_path, PEAK, malloc=False)
    (reason,) = sqlite3.connect(db).execute("SELECT not_priced FROM findings WHERE rule = "
                                            "'gpu_memory_near_capacity'").fetchone()
    s = Server([db])
    try:
        ready(page, f"{s.base}/dashboard")
        row = page.locator("table.experts tr", has_text="gpu_memory_near_capacity")
        assert f"{HEADROOM:,} bytes" in row.inner_text() and "aten::mm (in aten::linear)" in row.inner_text()
        assert row.locator("[data-testid=finding-not-priced]").inner_text() == f"No time saving: {reason}"
        assert "Estimated saving" not in row.inner_text()
        assert page.errors == []
    finally:
        s.stop()
