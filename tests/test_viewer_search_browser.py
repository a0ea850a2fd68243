"""The All Kernels page's searches in Chromium: the total it shows and the names it lists are what a pass over
the raw rows finds (the hostile-name database of test_viewer_search, searched through the name index)."""

from __future__ import annotations

import pytest
from test_viewer_browser import Server, cell_texts, page, ready  # noqa: F401 - fixtures and helpers
from test_viewer_search import _contains, _raw_kernels, db_path  # noqa: F401 - the hostile-name database

pytestmark = [pytest.mark.browser, pytest.mark.filterwarnings("ignore::DeprecationWarning")]


@pytest.fixture(scope="module")
def search_server(db_path):
    s = Server([db_path])
    yield s
    s.stop()


def _shown_total(pg) -> int:
    text = pg.locator("section[data-prefix='kernels'] .tabulator-page-counter").inner_text()
    return int(text.split(" of ")[1].split()[0].replace(",", ""))


@pytest.mark.parametrize("field,needle", [("kernel_name", "ÜBERGRÖSSE"), ("kernel_name", "übergröße"),
                                          ("op_name", "50%_"), ("kernel_name", "ge")])
def test_a_name_search_shows_the_raw_rows_total(search_server, db_path, page, field, needle):
    raw = _raw_kernels(db_path)
    column = "name" if field == "kernel_name" else "op_name"
    expected = [r for r in raw if _contains(needle, r[column])]
    ready(page, f"{search_server.base}/kernels")
    page.locator(f"section[data-prefix='kernels'] .tabulator-col[tabulator-field='{field}'] input"
                 ).press_sequentially(needle)
    page.wait_for_function(f"location.search.includes('kernels.f.{field}=')")
    page.wait_for_load_state("networkidle")
    if expected:
        page.wait_for_selector("section[data-prefix='kernels'] .tabulator-row")
        assert _shown_total(page) == len(expected)
        assert all(needle.lower() in t.lower() for t in cell_texts(page, "kernels", field))
    else:
        assert page.locator("section[data-prefix='kernels'] .tabulator-row").count() == 0
    assert page.errors == []
