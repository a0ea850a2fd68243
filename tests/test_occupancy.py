"""Occupancy, waves and the tail effect (docs/metrics.md, "Occupancy, waves and the tail effect").

Hand-made launches whose blocks per SM, waves and tail are computed by hand from the CUDA Programming Guide's
limits, and every kernel of the real Kineto traces against the occupancy CUPTI's calculator gave Kineto
(read from the raw JSON here, never through the importer).
"""

from __future__ import annotations

import gzip
import json
import sqlite3

import numpy as np
import pytest
from conftest import data_file
from experts_helpers import findings
from trace_builder import KinetoTrace

from dlscope.analyze.occupancy import block_limits, kernel_waves, tail_ns
from dlscope.importers import load
from dlscope.pipeline import build_database
from dlscope.viewer.profile_db import ProfileDB
from dlscope.viewer.views import table_page

US = 1000


@pytest.mark.parametrize("cc, threads, registers, shared, active, limiter", [
    # A100 (8.0): 8 warps a block -> 64 / 8 = 8 by warps; 32 regs x 32 = 1,024 a warp -> 16,384 / 1,024 = 16
    # warps a partition x 4 = 64 warps -> 8 blocks (a tie, warps named first)
    ("8.0", 256, 32, 0, 8, "warps"),
    # 128 regs: 4,096 a warp -> 4 warps a partition, 16 an SM -> 2 blocks of 8 warps
    ("8.0", 256, 128, 0, 2, "registers"),
    # 100 KiB + 1 KiB reserved = 103,424 B (a multiple of 128) -> 167,936 // 103,424 = 1
    ("8.0", 128, 40, 100 * 1024, 1, "shared_memory"),
    # one-warp blocks: 64 by warps, 16 regs -> 512 a warp -> 32 warps a partition -> 128; 32 block slots
    ("8.0", 32, 16, 0, 32, "blocks"),
    # V100 (7.0): 40 regs -> 1,280 a warp -> 12 warps a partition, 48 an SM -> 6 blocks; 16 KiB -> 96 / 16 = 6
    ("7.0", 256, 40, 16 * 1024, 6, "registers"),
    # H100 (9.0): 200 KiB + 1 KiB = 205,824 B of 233,472 -> 1 block (registers would allow 3, see below)
    ("9.0", 128, 168, 200 * 1024, 1, "shared_memory"),
])
def test_active_blocks_per_sm_is_the_scarcest_resource(cc, threads, registers, shared, active, limiter):
    limits = block_limits(np.array([threads]), np.array([registers]), np.array([shared]), cc)
    got = {k: int(v[0]) for k, v in limits.items()}
    assert min(got.values()) == active
    assert min(got, key=lambda k: (got[k], list(got).index(k))) == limiter


def test_h100_register_limit_by_hand():
    # 168 regs x 32 = 5,376 -> 5,376 (a multiple of 256) a warp; 16,384 // 5,376 = 3 warps a partition, 12 an SM
    # -> 12 // 4 warps = 3 blocks; shared memory allows 233,472 // 205,824 = 1
    limits = block_limits(np.array([128]), np.array([168]), np.array([200 * 1024]), "9.0")
    assert int(limits["registers"][0]) == 3 and int(limits["shared_memory"][0]) == 1


def test_unknown_compute_capability_or_launch_is_unknown(tmp_path):
    assert block_limits(np.array([128]), np.array([32]), np.array([0]), "3.5") is None
    t = KinetoTrace()
    t.step(1, 0, 100)
    t.op("aten::add", 10, 20)
    t.launch(11, 12, "k", 30, 40, grid=[10, 1, 1], block=[128, 1, 1])  # no registers recorded
    profile = load(t.write(tmp_path / "t.json"))
    w = kernel_waves(profile.kernels, profile.gpus)
    assert w["active_blocks_per_sm"].tolist() == [-1] and np.isnan(w["waves"]).all()


def _launch(t: KinetoTrace, base: float, grid: int, dur_us: float) -> None:
    t.op("aten::sum", base + 10, base + 20)
    t.launch(base + 11, base + 12, "reduce_kernel", base + 30, base + 30 + dur_us, grid=[grid, 1, 1],
             block=[256, 1, 1], **{"registers per thread": 32, "shared memory": 0})


def test_waves_last_wave_fill_and_tail_effect_finding(tmp_path):
    """A100: 108 SMs x 8 blocks (256 threads, 32 registers) = 864 slots a wave. A grid of 1,000 blocks runs
    1,000 / 864 waves, the last 136 / 864 full; over 1,000 µs its tail is 1,000,000 x (1,728 - 1,000) / 1,728
    = 421,296.3 ns -> 421,296. Two steps of 2,000 µs: 842,592 ns of 4,000,000 (21 %)."""
    t = KinetoTrace()
    for i, base in enumerate((0, 2000)):
        t.step(i + 1, base, base + 2000)
        _launch(t, base, 1000, 1000)
    db = build_database([t.write(tmp_path / "t.json")], tmp_path / "t.sqlite", progress=False)
    conn = sqlite3.connect(db)
    rows = conn.execute("SELECT active_blocks_per_sm, waves, last_wave_fill, occupancy FROM kernels").fetchall()
    conn.close()
    assert rows == [(8, pytest.approx(1000 / 864), pytest.approx(136 / 864), pytest.approx(64 / 64))] * 2
    row = table_page(ProfileDB(db), "kernels", {}, {})["rows"][0]  # the viewer's Kernels view
    assert (row["active_blocks_per_sm"], row["waves"]) == (8, pytest.approx(1000 / 864))
    got = findings(db)["tail_effect"]
    assert got["est_saving_ns"] == 2 * 421_296
    launch = got["evidence"]["launches"][0]
    assert (launch["active_blocks_per_sm"], launch["limiter"], launch["blocks_per_wave"], launch["calls"]) == \
        (8, "warps", 864, 2)
    # the last wave: one wave lasts 1,000 µs / 2 = 500 µs, ending with the kernel at 1,030 µs
    assert got["evidence"]["time_ranges"][0] in ([530 * US, 1030 * US], [2530 * US, 3030 * US])


@pytest.mark.parametrize("grid", [864, 1728, 500])
def test_whole_waves_and_a_single_partial_wave_have_no_tail(tmp_path, grid):
    t = KinetoTrace()
    t.step(1, 0, 2000)
    _launch(t, 0, grid, 1000)
    db = build_database([t.write(tmp_path / "t.json")], tmp_path / "t.sqlite", progress=False)
    assert "tail_effect" not in findings(db)


def test_tail_ns_by_hand():
    # 3 waves of 100 slots for 201 blocks: 99 empty of 300 -> 900 x 99 / 300 = 297; 1.5 waves -> half of the
    # second wave empty: 1,000 x 50 / 200 = 250; whole waves, a single wave and unknown slots cost nothing
    got = tail_ns(np.array([900, 1000, 1000, 1000, 1000]), np.array([201, 150, 200, 80, 150]),
                  np.array([100, 100, 100, 100, 0]))
    assert got.tolist() == [297, 250, 0, 0, 0]


REAL = ["hta_a100_nccl_rank0of2_3steps.json.gz", "hta_v100_rank1of2_5steps.json.gz",
        "tracelens_h100_qwen1.5_0.5b_infer.json.gz", "deepseek_h800_train_ep64_rank0.json.gz",
        "tracelens_b200_llm_serving_rank0of8.json.gz", "hta_a100_80gb_rank0of16_5steps.json.gz"]


@pytest.mark.parametrize("name", REAL)
def test_active_blocks_reproduce_kinetos_recorded_occupancy(name):
    """Kineto writes "est. achieved occupancy %" = round(100 x min(active blocks, grid blocks / SMs) x block
    threads / max threads per SM) in float32, from CUPTI's occupancy calculator told the default 48 KiB
    per-block shared memory limit (so kernels that opted into more get 0 % there: left out). Recomputed from
    dlscope's active blocks per SM, it equals the recorded value for every other kernel."""
    path = data_file("kineto", name)
    with gzip.open(path) as f:
        raw = json.load(f)
    props = {int(p["id"]): p for p in raw["deviceProperties"]}
    kernels = sorted((e for e in raw["traceEvents"] if e.get("cat") == "kernel"),
                     key=lambda e: (e["args"]["correlation"], float(e["ts"])))  # a few correlations repeat
    events = [e["args"] for e in kernels]
    corr = np.array([a["correlation"] for a in events])
    sms = np.array([props[a["device"]]["numSms"] for a in events], dtype=np.int64)
    max_threads = np.array([props[a["device"]]["maxThreadsPerMultiprocessor"] for a in events], dtype=np.float32)
    blocks = np.array([np.prod(a["grid"]) for a in events], dtype=np.int64)
    threads = np.array([np.prod(a["block"]) for a in events], dtype=np.int64)
    shared = np.array([a["shared memory"] for a in events])
    recorded = np.array([a["est. achieved occupancy %"] for a in events])

    profile = load(path)
    k = profile.kernels.assign(**kernel_waves(profile.kernels, profile.gpus)).sort_values(["correlation", "start"])
    assert k["correlation"].tolist() == corr.tolist()
    active = k["active_blocks_per_sm"].to_numpy()
    assert (active >= 1).all()  # every kernel that ran fits, opted-in shared memory included
    per_sm = blocks.astype(np.float32) / sms.astype(np.float32)
    est = np.floor(0.5 + (np.minimum(active.astype(np.float32), per_sm) * threads.astype(np.float32)
                          / max_threads).astype(np.float64) * 100.0)
    default_limit = shared <= 48 * 1024
    assert default_limit.sum() > 0.5 * len(events)
    assert (est[default_limit] == recorded[default_limit]).all()
    # waves x slots is the grid; Kineto's blocks per SM (kept as recorded) is grid blocks / SMs
    np.testing.assert_allclose(k["waves"].to_numpy() * sms * active, blocks, rtol=1e-12)
    np.testing.assert_allclose(k["blocks_per_sm"].to_numpy(), [a["blocks per SM"] for a in events], rtol=0)
    assert k["est_occupancy_pct"].tolist() == recorded.tolist()


def test_recorded_occupancy_is_stored(import_db):
    path = data_file("kineto", "hta_a100_nccl_rank0of2_3steps.json.gz")
    with gzip.open(path) as f:
        raw = [e["args"] for e in json.load(f)["traceEvents"] if e.get("cat") == "kernel"]
    conn = sqlite3.connect(import_db(path))
    rows = conn.execute("SELECT correlation, blocks_per_sm, warps_per_sm, est_occupancy_pct FROM kernels "
                        "ORDER BY correlation").fetchall()
    conn.close()
    want = sorted((a["correlation"], a["blocks per SM"], a["warps per SM"], a["est. achieved occupancy %"])
                  for a in raw)
    assert rows == want
