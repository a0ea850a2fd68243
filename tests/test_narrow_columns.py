"""The analysis keeps row references, depths and iteration numbers as int32 where every value fits (half the
memory of its columns), never where one does not: the values reach the database unchanged either way.

Oracles: hand-made boundaries; a hand-made trace whose ProfilerStep numbers pass 2^31; real traces read
independently from their raw JSON (tests/raw_kineto.py)."""

from __future__ import annotations

import bisect
import sqlite3

import numpy as np
import pytest
import raw_kineto
from conftest import data_file
from trace_builder import KinetoTrace

from dlscope.analyze.analysis import analyse
from dlscope.model import narrow_ints
from dlscope.pipeline import build_database
from dlscope.pipeline.executors import load_profiles_parallel

US = 1000
BIG = 2**31 + 5  # a ProfilerStep number int32 cannot hold


def test_narrow_ints_is_int32_exactly_when_every_value_fits():
    fits = np.array([-(2**31), -1, 0, 2**31 - 1], dtype=np.int64)
    assert narrow_ints(fits).dtype == np.int32 and narrow_ints(fits).tolist() == fits.tolist()
    for outside in (2**31, -(2**31) - 1):
        values = np.array([-1, 3, outside], dtype=np.int64)
        kept = narrow_ints(values)
        assert kept.dtype == np.int64 and kept.tolist() == [-1, 3, outside]
    assert narrow_ints(np.zeros(0, np.int64)).dtype == np.int32
    assert narrow_ints(np.array([0.5])).dtype == np.float64  # not integers: untouched


def _big_steps(path):
    """Two steps numbered past 2^31; in each an op node with a nested op that launches one kernel (µs)."""
    t = KinetoTrace()
    t.step(BIG, 0, 1000)
    t.step(BIG + 1, 1000, 2000)
    t.op("aten::linear", 100, 400)
    t.op("aten::addmm", 150, 350)
    t.launch(200, 210, "volta_sgemm_128x64_tn", 300, 500)
    t.op("aten::relu", 1100, 1300)
    t.launch(1150, 1160, "void at::native::vectorized_elementwise_kernel<4>", 1200, 1250)
    return t.write(path)


def test_step_numbers_past_int32_keep_int64_and_reach_the_database_exactly(tmp_path):
    trace = _big_steps(tmp_path / "big_steps.json")
    an = analyse(load_profiles_parallel([str(trace)], 1))
    ops, kernels = an.profile.ops, an.profile.kernels
    assert ops["iteration"].dtype == np.int64 and kernels["iteration"].dtype == np.int64  # the guard held
    assert ops["depth"].dtype == np.int32 and ops["parent_id"].dtype == np.int32  # small: narrowed
    db = build_database([trace], tmp_path / "big.sqlite", progress=False)
    conn = sqlite3.connect(db)
    got = conn.execute("SELECT name, start, iteration, depth, parent_id >= 0 FROM ops ORDER BY start").fetchall()
    kernels_got = conn.execute("SELECT start, iteration FROM kernels ORDER BY start").fetchall()
    conn.close()
    assert got == [("aten::linear", 100 * US, BIG, 0, 0), ("aten::addmm", 150 * US, BIG, 1, 1),
                   ("aten::relu", 1100 * US, BIG + 1, 0, 0)]
    assert kernels_got == [(300 * US, BIG), (1200 * US, BIG + 1)]


def _step_windows(path):
    """The ProfilerStep#N windows of the raw trace, by start: each to the next one's start, the last to its end."""
    steps = sorted((e.start, e.end, int(e.name.split("#")[1])) for e in raw_kineto.events(path)
                   if e.name.startswith("ProfilerStep#"))
    return [(s, steps[i + 1][0] if i + 1 < len(steps) else e, n) for i, (s, e, n) in enumerate(steps)]


def _iteration_at(windows, t: int) -> int:
    i = bisect.bisect_right([w[0] for w in windows], t) - 1
    return windows[i][2] if i >= 0 and t < max(windows[i][1], windows[i][0]) else -1


@pytest.mark.parametrize("name", ["hta_a100_nccl_rank0of2_3steps.json.gz",
                                  "hta_v100_ns_resolution_5steps.pt.trace.json.gz",
                                  "tbplugin_resnet50_v100_workers0.pt.trace.json.gz"])
def test_narrowed_references_of_real_traces_equal_the_raw_json(name, import_db):
    """Each kernel's and memory operation's op node (``root_op_id``) and iteration (``iteration``, from its
    launch call's start), and each op node's iteration, as the raw JSON gives them."""
    path = data_file("kineto", name)
    an = analyse(load_profiles_parallel([str(path)], 1))
    for table, col in (("kernels", "root_op_id"), ("kernels", "iteration"), ("ops", "root_id"), ("ops", "depth")):
        assert an.profile.table(table)[col].dtype == np.int32, (table, col)  # what this test is about
    windows = _step_windows(path)
    assert windows, f"{name}: no ProfilerStep in the trace"
    conn = sqlite3.connect(import_db(path))
    owners = {(c, d, s): (str(tid), n, st, it) for c, d, s, tid, n, st, it in conn.execute(
        "SELECT a.correlation, a.device, a.start, o.tid, o.name, o.start, a.iteration FROM "
        "(SELECT correlation, device, start, root_op_id, iteration FROM kernels UNION ALL "
        " SELECT correlation, device, start, root_op_id, iteration FROM memops) a "
        "JOIN ops o ON o.op_id = a.root_op_id")}
    nodes = {(str(tid), n, s): it for tid, n, s, it in conn.execute(
        "SELECT tid, name, start, iteration FROM ops WHERE parent_id < 0")}
    conn.close()
    calls = {}
    for e in raw_kineto.events(path):
        if e.cat in raw_kineto.LAUNCH_CATS and e.correlation is not None:
            calls.setdefault(e.correlation, e)
    by_index = {e.index: e for e in raw_kineto.events(path)}
    checked = 0
    for node_index, activities in raw_kineto.activity_by_op_node(path).items():
        node = by_index[node_index]
        key = (str(node.tid), node.name, node.start)
        assert nodes[key] == _iteration_at(windows, node.start), key
        for a in activities:
            got = owners[(a.correlation, a.args.get("device", a.pid), a.start)]
            assert got == (*key, _iteration_at(windows, calls[a.correlation].start)), (a.name, got)
            checked += 1
    assert checked > 100

