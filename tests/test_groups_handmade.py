"""Group Ops on a hand-made trace: a group's CPU, API and GPU times are the union of its members' time, never
more than the wall clock (PRODUCT.md), computed here by hand."""

from __future__ import annotations

import sqlite3

import pytest
from trace_builder import KinetoTrace

from dlscope.pipeline import build_database

US = 1000


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    """Two threads inside a range named "model" (µs), one step [0, 1000):

    thread 1: aten::linear [100, 400) holds aten::addmm [150, 350), which launches [200, 500);
              aten::relu [500, 600) launches [550, 650)
    thread 2: aten::add [300, 650) launches [400, 700) on another stream
    Launch calls: [160, 170), [510, 520) on thread 1, [310, 330) on thread 2.
    """
    t = KinetoTrace()
    t.step(1, 0, 1000)
    t.annotation("model", 50, 900)
    t.annotation("model", 250, 800, tid=2)
    t.op("aten::linear", 100, 400)
    t.op("aten::addmm", 150, 350)
    t.launch(160, 170, "volta_sgemm_128x64_tn", 200, 500)
    t.op("aten::relu", 500, 600)
    t.launch(510, 520, "void at::native::vectorized_elementwise_kernel<4>", 550, 650)
    t.op("aten::add", 300, 650, tid=2)
    t.launch(310, 330, "void at::native::elementwise_kernel<128>", 400, 700, stream=8, tid=2)
    base = tmp_path_factory.mktemp("groups")
    return build_database([t.write(base / "t.json")], base / "g.sqlite", progress=False)


def test_a_group_counts_overlapping_members_once(db):
    conn = sqlite3.connect(db)
    row = conn.execute("SELECT calls, kernel_count, cpu_time_ns, api_time_ns, gpu_time_ns, gpu_idle_ns, "
                       "cpu_overhead_ns FROM agg_groups WHERE is_group = 1 AND path = 'model'").fetchone()
    # CPU: [100, 400) ∪ [500, 600) ∪ [300, 650) = [100, 650); API: 10 + 10 + 20 (disjoint);
    # GPU: [200, 500) ∪ [550, 650) ∪ [400, 700) = [200, 700), no gap
    assert row == (3, 3, 550 * US, 40 * US, 500 * US, 0, 510 * US)
    wall = conn.execute("SELECT wall_clock_ns FROM aggregations").fetchone()[0]
    assert row[2] <= wall and row[4] <= wall


def test_op_nodes_in_the_group_keep_their_own_sums(db):
    conn = sqlite3.connect(db)
    leaves = dict(conn.execute("SELECT name, cpu_time_ns FROM agg_groups WHERE is_group = 0").fetchall())
    assert leaves == {"aten::linear": 300 * US, "aten::relu": 100 * US, "aten::add": 350 * US}  # addmm is in linear
