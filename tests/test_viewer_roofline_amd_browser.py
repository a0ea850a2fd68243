"""The Roofline view in headless Chromium on the real MI300X trace: the data file's MI300X roofs are drawn and
named (an AMD GPU used to get the unknown-GPU message). Screenshot in test-artifacts/."""

from __future__ import annotations

import json
import re

import pytest
from conftest import REPO, data_file
from test_viewer_browser import Server, page, ready, shot  # noqa: F401  (page is a fixture)

pytestmark = [pytest.mark.browser, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

UNITS = {"GB/s": 1e9, "TB/s": 1e12, "GFLOP/s": 1e9, "TFLOP/s": 1e12, "PFLOP/s": 1e15}


@pytest.fixture(scope="module")
def mi300x(import_db):
    s = Server([import_db(data_file("kineto", "tracelens_mi300x_xdit_sd35_infer.json.gz"))])
    yield s
    s.stop()


def _value(roofs: list[str], prefix: str) -> float:
    """The number of the roof label that starts with ``prefix`` ('DRAM bandwidth 5.3 TB/s' -> 5.3e12)."""
    label = next(r for r in roofs if r.startswith(prefix))
    number, unit = re.search(r"([\d,.]+) ([GTP](?:FLOP|B)/s)", label).groups()
    return float(number.replace(",", "")) * UNITS[unit]


def test_mi300x_roofline_draws_the_data_files_roofs(mi300x, page):
    entry = next(g for g in json.loads((REPO / "src/dlscope/data/gpu_specs.json").read_text())["gpus"]
                 if "AMD Instinct MI300X" in g["name_strings"])
    ready(page, f"{mi300x.base}/roofline")
    chart = page.get_by_test_id("roofline-chart")
    roofs = json.loads(chart.get_attribute("data-roofs"))
    assert page.get_by_test_id("ceilings-error").count() == 0
    assert _value(roofs, "DRAM bandwidth") == pytest.approx(entry["dram_bandwidth_bytes_per_s"], rel=0.01)
    # AMD calls its matrix units Matrix Cores: no roof of an AMD GPU is named after NVIDIA's Tensor Cores
    assert _value(roofs, "FP16 / BF16 Matrix Core peak") == pytest.approx(entry["bf16_tensor_flops_dense"], rel=0.01)
    assert not any("Tensor" in r for r in roofs)
    assert _value(roofs, "FP8") == pytest.approx(entry["fp8_tensor_flops_dense"], rel=0.01)
    assert int(chart.get_attribute("data-points")) > 0
    gpu = page.locator("[data-testid='roofline-summary'] tr[data-testid='gpu'] td").inner_text()
    assert "AMD Instinct MI300X" in gpu
    roof_cells = page.locator("section[data-prefix='ops'] .tabulator-cell[tabulator-field='ceiling']").all_inner_texts()
    assert any("Matrix Core" in c for c in roof_cells) and not any("Tensor" in c for c in roof_cells)
    shot(page, "roofline-mi300x")
