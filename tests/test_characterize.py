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
from dlscope.roofline.characterize import (
    add_chains,
    characterize,
    copy_bytes,
    cpu_cache_levels,
    elementwise_flops,
    fma_chains,
    matmul_flops,
    reread_bytes,
)

SMALL = {"matmul_n": 192, "repeats": 5, "dram_bytes": 16 << 20, "threads": 1}


def test_work_per_call_is_counted_by_hand():
    assert matmul_flops(3) == 54                    # 27 multiply-adds
    assert copy_bytes(1 << 20) == 2 << 20           # read once, written once
    assert reread_bytes(24576, 10) == 245760        # a 24 KiB working set read 10 times
    assert elementwise_flops(3, fma=True) == 3 * 8 * 32 * 2 and elementwise_flops(3, fma=False) == 3 * 8 * 32


def test_the_elementwise_kernels_do_the_operations_they_are_counted_for():
    """8 chains y_i = x + i, each through 32 dependent y·0.999 + 0.001 (or y + 0.001), summed: the closed forms
    y·a³² + b·(1 − a³²)/(1 − a) and y + 32·b."""
    torch = pytest.importorskip("torch")
    x = torch.tensor([0.5, 2.0], dtype=torch.float64)
    a, b = 0.999, 0.001
    fma = sum((x + i) * a**32 + b * (1 - a**32) / (1 - a) for i in range(8))
    add = sum(x + i + 32 * b for i in range(8))
    assert torch.allclose(fma_chains(x), fma, rtol=1e-12) and torch.allclose(add_chains(x), add, rtol=1e-12)


def test_cpu_cache_levels_come_from_sysfs(tmp_path):
    """The data and unified caches of CPU 0 by level, instruction caches left out (this machine's layout)."""
    for index, (level, kind, size) in enumerate([(1, "Data", "48K"), (1, "Instruction", "32K"),
                                                 (2, "Unified", "2048K"), (3, "Unified", "266240K")]):
        d = tmp_path / f"index{index}"
        d.mkdir()
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
    assert cpu_cache_levels(str(tmp_path)) == {"l1": 48 * 1024, "l2": 2048 * 1024, "l3": 266240 * 1024}


def test_cli_writes_a_spec_the_roofline_loads(tmp_path):
    out = tmp_path / "machine.json"
    result = CliRunner().invoke(cli, ["characterize", "-o", str(out), "--device", "cpu", "--matmul-n", "192",
                                      "--repeats", "3", "--threads", "1", "--no-elementwise"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    entry = json.loads(out.read_text())
    assert entry["measured"]["device"] == "cpu" and entry["measured"]["threads"] == 1
    assert "fp16_flops" in entry["measured"]["skipped"]
    levels = cpu_cache_levels()
    for level in ("l1", "l2"):                     # a working set of half of each level, from the OS
        if level in levels:
            how = entry["measured"]["how"][f"{level}_bandwidth_bytes_per_s"]
            assert f"a {levels[level] // 2}-byte working set" in how["kernel"]
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
    for level in ("l1", "l2", "dram"):            # the hierarchical roofline draws the measured roofs
        if f"{level}_bandwidth_bytes_per_s" in entry:
            assert report["ceilings"]["bytes_per_s"][level] == pytest.approx(entry[f"{level}_bandwidth_bytes_per_s"])


@pytest.mark.slow
def test_elementwise_fma_no_fma_and_half_precision_roofs_reach_the_spec(tmp_path):
    """The compiled elementwise kernels on the CPU: FP32/FP64 no-FMA and FP16/BF16 rates land in the spec, and the
    roofline reads them back (no-FMA ceilings, the half-precision CUDA-core roof)."""
    entry = characterize("cpu", **SMALL, elementwise_n=1 << 12)
    for field in ("fp32_no_fma_flops", "fp64_no_fma_flops", "fp16_flops", "bf16_flops"):
        assert entry[field] > 0, entry["measured"]["skipped"]
        how = entry["measured"]["how"][field]
        assert how["flops_per_call"] == elementwise_flops(1 << 12, fma=field.endswith("16_flops"))
    assert set(entry["measured"]["elementwise_fma_flops"]) == {"fp32", "fp64"}
    out = tmp_path / "machine.json"
    out.write_text(json.dumps(entry))
    ceilings = load_spec_file(out)
    assert ceilings.no_fma == {"fp32": entry["fp32_no_fma_flops"], "fp64": entry["fp64_no_fma_flops"]}
    assert ceilings.peak("fp16", False) == ("fp16", entry["fp16_flops"])
    assert ceilings.peak("bf16", False) == ("bf16", entry["bf16_flops"])


def test_two_runs_agree_within_a_factor_of_two():
    first, second = characterize("cpu", **SMALL, elementwise=False), characterize("cpu", **SMALL, elementwise=False)
    for field in ("fp32_flops", "fp64_flops", "dram_bandwidth_bytes_per_s"):
        assert first[field] > 0 and second[field] > 0
        assert 0.5 < first[field] / second[field] < 2.0, (field, first[field], second[field])


def test_half_precision_math_stays_in_half_on_a_gpu_and_the_switch_is_restored():
    """Inductor's Triton code upcasts FP16/BF16 math to FP32 unless told not to; the GPU run tells it, for the
    elementwise kernels only."""
    torch = pytest.importorskip("torch")
    from dlscope.roofline.characterize import _half_math

    config = pytest.importorskip("torch._inductor.config")
    before = config.triton.codegen_upcast_to_fp32
    with _half_math(torch, True) as kept:
        assert kept and config.triton.codegen_upcast_to_fp32 is False
    assert config.triton.codegen_upcast_to_fp32 == before
    with _half_math(torch, False) as kept:
        assert not kept and config.triton.codegen_upcast_to_fp32 == before


def test_a_cache_level_measured_below_device_memory_is_left_out_with_the_reason():
    """An H200's L1 and L2 timed by torch's reduction came out at 2.8 TB/s, under its 4.2 TB/s HBM: such a figure
    times arithmetic, not the cache, so it is no roof; a level above device memory stays."""
    from dlscope.roofline.characterize import plausible_bandwidth

    figures = {"l1_bandwidth_bytes_per_s": 2.78e12, "l2_bandwidth_bytes_per_s": 8.7e12,
               "l3_bandwidth_bytes_per_s": 4.16e12, "dram_bandwidth_bytes_per_s": 4.16e12}
    skipped: dict[str, str] = {}
    plausible_bandwidth(figures, skipped)
    assert figures == {"l2_bandwidth_bytes_per_s": 8.7e12, "dram_bandwidth_bytes_per_s": 4.16e12}
    assert set(skipped) == {"l1_bandwidth_bytes_per_s", "l3_bandwidth_bytes_per_s"}
    assert "2780.0 GB/s, not above the device memory's 4160.0 GB/s" in skipped["l1_bandwidth_bytes_per_s"]
