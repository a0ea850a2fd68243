"""Published L1/L2 roofs of gpu_specs.json: each cites the file it was read from (at a commit) and the variant it was
measured on, derived figures follow their stated formula, and real traces of those GPUs get the roofs. Oracles: the
data file read here with json.load, the published plateau values read by hand from the cited files, hand arithmetic,
and the device name read straight from each trace's raw JSON."""

from __future__ import annotations

import csv
import gzip
import json
import re
import sqlite3
from importlib import resources

import pytest
from conftest import data_file

from dlscope.roofline import roofline_report, write_ncu_kernels
from dlscope.roofline.ncu import read_ncu_csv

LEVEL_FIELDS = ("l1_bandwidth_bytes_per_s", "l2_bandwidth_bytes_per_s")
# a file at a commit on GitHub: https://github.com/<owner>/<repo>/blob/<40 hex>/<path>
CITED_FILE = re.compile(r"https://github\.com/[\w.-]+/[\w.-]+/blob/[0-9a-f]{40}/[\w./-]+\.txt")
MEASURED_ON = re.compile(r"measured on an? ([A-Z][\w]*(?: [A-Z0-9][\w]*)*)")


def specs() -> dict[str, dict]:
    text = resources.files("dlscope.data").joinpath("gpu_specs.json").read_text()
    return {g["id"]: g for g in json.loads(text)["gpus"]}


def with_cache_roofs() -> list[dict]:
    return [g for g in specs().values() if any(g.get(f) for f in LEVEL_FIELDS)]


def test_every_cache_roof_cites_a_file_at_a_commit_and_the_variant_measured():
    entries = with_cache_roofs()
    assert {g["id"] for g in entries} >= {"v100-sxm2", "a100-sxm4-80gb", "a100-pcie-80gb", "a100-sxm4-40gb",
                                          "a100-pg509-200", "h100-pcie", "h100-sxm5", "h200-sxm"}
    for g in entries:
        if not g.get("l1_bandwidth_bytes_per_s"):                  # an L2 roof alone says why there is no L1
            assert "No L1 roof" in g["field_sources"]["l2_bandwidth_bytes_per_s"], g["id"]
        for field in [f for f in LEVEL_FIELDS if g.get(f) or f.startswith("l2")]:
            value, source = g.get(field), (g.get("field_sources") or {}).get(field, "")
            assert value, (g["id"], field)
            assert CITED_FILE.search(source), (g["id"], field, source)
            variant = MEASURED_ON.search(source)
            assert variant, (g["id"], field, source)
            # the figure the source states is the field's value (GB/s, as printed in the cited file or the formula)
            stated = [float(x.replace(",", "")) for x in re.findall(r"([\d,]+(?:\.\d+)?) GB/s", source)]
            assert any(abs(x - value / 1e9) <= 0.05 for x in stated), (g["id"], field, stated)
            if source.startswith("measured on"):
                # measured on this very product: every token of the variant is in the entry's name, so a PCIe
                # measurement never sits on an SXM entry as if measured there
                name = g["name"].lower()
                assert all(tok.lower() in name for tok in variant.group(1).split()), (g["id"], variant.group(1))
            else:
                assert source.startswith("derived"), (g["id"], field, source)
                assert "not measured on" in source or "x 132 SMs" in source, (g["id"], field)
                assert field in g["uncertain_fields"], (g["id"], field)   # not confirmed on this product
        # a cache is faster than the level below it
        assert (g.get("l1_bandwidth_bytes_per_s") or float("inf")) > g["l2_bandwidth_bytes_per_s"] \
            > g["dram_bandwidth_bytes_per_s"]


def test_the_published_plateaus_read_by_hand_from_the_cited_files():
    """Medians of the 'Eff. bw' column over the stated data-set ranges, worked out by hand from te42kyfo/gpu-benches
    (gpu-l2-cache: 15 sets of 8192-23552 kB; cuda-cache: 31 per-SM sets of 8-128 kB), and ERT's memroofs row."""
    s = specs()
    assert s["a100-sxm4-80gb"]["l2_bandwidth_bytes_per_s"] == 5405.0e9     # 8th of 15 sorted: 5264.0 ... 5447.7
    assert s["a100-sxm4-80gb"]["l1_bandwidth_bytes_per_s"] == 19104.5e9    # 16th of 31 sorted: 18707.5 ... 19299.3
    assert s["h100-pcie"]["l2_bandwidth_bytes_per_s"] == 6953.9e9          # 6874.1 ... 7034.2
    assert s["h100-pcie"]["l1_bandwidth_bytes_per_s"] == 25218.0e9         # 24929.4 ... 25251.5
    assert s["h200-sxm"]["l2_bandwidth_bytes_per_s"] == 9885.0e9           # 9716.0 ... 10251.9
    # xxrjun/gpu-benches gpu-l2-cache/gb200.txt, the 15 sets of 8192-23552 kB, sorted:
    gb200 = sorted([20270.3, 20130.2, 20022.1, 19855.7, 19874.6, 19618.4, 19556.4, 19393.4, 19356.7, 19278.7,
                    19162.8, 19100.3, 18989.0, 18870.1, 18795.1])
    assert s["b200"]["l2_bandwidth_bytes_per_s"] == gb200[7] * 1e9 == 19393.4e9
    assert s["v100-sxm2"]["l1_bandwidth_bytes_per_s"] == 14336e9           # memroofs 14336 2996.77 828.758
    assert s["v100-sxm2"]["l2_bandwidth_bytes_per_s"] == 2996.77e9
    # 126 B/cycle/SM: the H100 PCIe L1 plateau over 114 SMs at its 1755 MHz boost, near the 128 the H200 file shows
    assert 25218.0e9 / 114 / 1.755e9 == pytest.approx(126.05, abs=0.01)


def test_derived_roofs_follow_their_formula_and_premise():
    s = specs()
    # GH100 L1: 128 B/cycle/SM (gpu-strides on an H200 at 1980 MHz) x 132 SMs x 1.98 GHz = 33,454,080,000,000 B/s
    for gid in ("h100-sxm5", "h200-sxm"):
        assert s[gid]["l1_bandwidth_bytes_per_s"] == 33_454_080_000_000
        assert (s[gid]["sm_count"], s[gid]["boost_clock_hz"]) == (132, 1.98e9)
    # H100 SXM5 L2 = the H200 measurement: the premise is the same SM count, clock and L2 size
    h100, h200 = s["h100-sxm5"], s["h200-sxm"]
    assert h100["l2_bandwidth_bytes_per_s"] == h200["l2_bandwidth_bytes_per_s"]
    assert [h100[k] for k in ("sm_count", "boost_clock_hz", "l2_bytes")] == \
           [h200[k] for k in ("sm_count", "boost_clock_hz", "l2_bytes")]
    # the alternative the source states: the PCIe plateau scaled by SMs x clock, 6953.9 x 261360 / 200070
    assert "9084 GB/s" in h100["field_sources"]["l2_bandwidth_bytes_per_s"]
    assert round(6953.9 * (132 * 1980) / (114 * 1755)) == 9084
    # A100 40 GB boards = the A100 80 GB measurement: same GA100 SMs, clock and L2
    for gid in ("a100-sxm4-40gb", "a100-pcie-40gb", "a100-pg509-200"):
        for key in (*LEVEL_FIELDS, "sm_count", "boost_clock_hz", "l2_bytes"):
            assert s[gid][key] == s["a100-sxm4-80gb"][key], (gid, key)


def test_gpus_without_a_published_measurement_have_no_cache_roofs():
    s = specs()
    for gid in ("t4", "a10", "a30", "l4", "l40s", "rtx-3090", "rtx-4090"):
        assert not any(s[gid].get(f) for f in LEVEL_FIELDS), gid
    # the B200's L2 is a GB200 measurement (derived, uncertain); no L1 measurement was trustworthy
    assert not s["b200"].get("l1_bandwidth_bytes_per_s")
    assert "l2_bandwidth_bytes_per_s" in s["b200"]["uncertain_fields"]


def _one_kernel_csv(path, device: str, fadd: int, l1: int, l2: int, dram: int, time_ns: int):
    """A long-layout ncu CSV with one FP32 kernel (ADD instructions only: 1 FLOP each)."""
    header = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size",
              "Grid Size", "Device", "CC", "Section Name", "Metric Name", "Metric Unit", "Metric Value"]
    metrics = {"device__attribute_display_name": ("", device), "gpu__time_duration.sum": ("nsecond", time_ns),
               **{f"sm__sass_thread_inst_executed_op_{p}{op}_pred_on.sum": ("inst", 0)
                  for p in "dfh" for op in ("add", "mul", "fma")},
               "sm__sass_thread_inst_executed_op_fadd_pred_on.sum": ("inst", fadd),
               "l1tex__t_bytes.sum": ("byte", l1), "lts__t_bytes.sum": ("byte", l2), "dram__bytes.sum": ("byte", dram)}
    rows = [header] + [["0", "42", "bench", "host", "stream_sum_kernel", "1", "7", "(1024, 1, 1)", "(114, 1, 1)", "0",
                        "9.0", "Command line profiler metrics", m, u, f"{v:,}" if isinstance(v, int) else v]
                       for m, (u, v) in metrics.items()]
    with path.open("w", newline="") as f:
        csv.writer(f, quoting=csv.QUOTE_ALL).writerows(rows)
    return path


def test_a_kernel_at_half_the_l2_roof_of_an_h100_pcie(tmp_path):
    """6,953,900,000 bytes through L2 take 1 ms at the H100 PCIe's 6953.9 GB/s; the kernel takes 2 ms, so it runs
    at 50 % of its L2 roof. With 1e9 FLOPs: L2 roof = 1e9 FLOP / 1 ms = 1e12 FLOP/s, achieved 5e11 FLOP/s; the L1
    roof (the same bytes at 25,218 GB/s) is 3.63e12 and the DRAM roof (1 MB: AI 1000) far above the 51 TFLOP/s
    FP32 peak, so L2 limits."""
    csv_path = _one_kernel_csv(tmp_path / "k.csv", "NVIDIA H100 PCIe", fadd=1_000_000_000, l1=6_953_900_000,
                               l2=6_953_900_000, dram=1_000_000, time_ns=2_000_000)
    conn = sqlite3.connect(tmp_path / "k.sqlite")
    write_ncu_kernels(conn, read_ncu_csv(csv_path))
    report = roofline_report(conn, None)
    assert report["ceilings"]["gpu_id"] == "h100-pcie"
    (k,) = report["kernels"]
    assert k["flops"] == 1e9 and k["precision"] == "fp32"
    assert k["achieved_flops_per_s"] == pytest.approx(5e11, rel=1e-12)
    assert k["limiting_level"] == "l2"
    assert k["pct_of_ceiling"] == pytest.approx(50.0, rel=1e-12)
    assert k["bound_l2"] == "memory" and k["bound_dram"] == "math"   # ridge 51.2e12 / 2e12 = 25.6 < AI_dram 1000


@pytest.mark.parametrize("trace", ["tracelens_h100_bert_small_infer.json.gz", "hta_alexnet_a100_critical_path.json.gz",
                                   "tracelens_b200_llm_serving_rank0of8.json.gz"])
def test_real_traces_get_the_cache_roofs_of_the_data_file(import_db, trace, tmp_path):
    path = data_file("kineto", trace)
    with gzip.open(path) as f:
        device = json.load(f)["deviceProperties"][0]["name"]          # the GPU as the trace names it
    (entry,) = [g for g in specs().values() if device in g.get("name_strings", [])]
    conn = sqlite3.connect(import_db(path))
    try:
        agg_id = conn.execute("SELECT MAX(agg_id) FROM aggregations").fetchone()[0]
        report = roofline_report(conn, agg_id)
    finally:
        conn.close()
    c = report["ceilings"]
    assert c["gpu_id"] == entry["id"] and c["bytes_per_s"]["dram"] == entry["dram_bandwidth_bytes_per_s"]
    levels = {f[:2] for f in LEVEL_FIELDS if entry.get(f)}
    assert set(c["bytes_per_s"]) == levels | {"dram"}
    for level in levels:
        field = f"{level}_bandwidth_bytes_per_s"
        assert c["bytes_per_s"][level] == entry[field]
        assert c["sources"][level] == entry["field_sources"][field]
    if entry["id"] == "b200":
        assert levels == {"l2"}                                       # a GB200 measurement; no L1 roof
    from dlscope.roofline.chart import write_roofline_chart

    _, svg = write_roofline_chart(report, tmp_path / "roofline")
    text = svg.read_text()
    for level, label in [(lv, lv.upper()) for lv in sorted(levels)]:
        assert f"{label} {entry[f'{level}_bandwidth_bytes_per_s'] / 1e9:,.0f} GB/s" in text
