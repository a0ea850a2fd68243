"""`dlscope characterize` on the CPU (no GPU in CI): it writes a spec the roofline loads, with positive figures
that a second run repeats within a factor of 2. No assertion of absolute speed."""

from __future__ import annotations

import json
import sqlite3

import pytest
from click.testing import CliRunner
from conftest import data_file

from dlscope.cli import cli
from dlscope.roofline import read_ncu_csv, roofline_report, write_ncu_kernels
from dlscope.roofline.ceilings import load_spec_file
from dlscope.roofline.characterize import characterize, copy_bytes, matmul_flops

SMALL = {"matmul_n": 192, "repeats": 5, "dram_bytes": 16 << 20, "threads": 1}


def test_work_per_call_is_counted_by_hand():
    assert matmul_flops(3) == 54                    # 27 multiply-adds
    assert copy_bytes(1 << 20) == 2 << 20           # read once, written once


def test_cli_writes_a_spec_the_roofline_loads(tmp_path):
    out = tmp_path / "machine.json"
    result = CliRunner().invoke(cli, ["characterize", "-o", str(out), "--device", "cpu", "--matmul-n", "192",
                                      "--repeats", "3", "--threads", "1"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    entry = json.loads(out.read_text())
    assert entry["measured"]["device"] == "cpu" and entry["measured"]["threads"] == 1
    assert "l1_bandwidth_bytes_per_s" in entry["measured"]["skipped"]
    ceilings = load_spec_file(out)
    assert set(ceilings.flops) >= {"fp32", "fp64"} and "dram" in ceilings.bandwidth
    for rate in [*ceilings.flops.values(), *ceilings.bandwidth.values()]:
        assert rate > 0
    how = entry["measured"]["how"]["fp32_flops"]
    assert how["flops_per_call"] == 2 * 192**3 and how["calls"] >= 3
    # the spec drives a roofline: the V100 counters' FP32 CUDA-core kernels get a bound against it
    conn = sqlite3.connect(tmp_path / "n.sqlite")
    write_ncu_kernels(conn, read_ncu_csv(data_file("ncu_csv", "wangzy_gemm_roofline_metrics_v100.csv")))
    report = roofline_report(conn, None, gpu_spec_path=out)
    assert report["ceilings"]["matched_by"] == "spec file"
    assert report["ceilings"]["flops_per_s"]["fp32"] == pytest.approx(entry["fp32_flops"])


def test_two_runs_agree_within_a_factor_of_two():
    first, second = characterize("cpu", **SMALL), characterize("cpu", **SMALL)
    for field in ("fp32_flops", "fp64_flops", "dram_bandwidth_bytes_per_s"):
        assert first[field] > 0 and second[field] > 0
        assert 0.5 < first[field] / second[field] < 2.0, (field, first[field], second[field])
