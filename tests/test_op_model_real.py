"""Op nodes, their inclusive GPU figures, Tensor Core verdicts, groups and iteration windows on every real
profile, against independent readings of the raw files (tests/raw_kineto.py, plain SQL on the nsys export,
the hand labels of tests/data/tensor_core_labels.json)."""

from __future__ import annotations

import ast
import hashlib
import json
import sqlite3
from pathlib import Path

import pytest
import raw_kineto
from conftest import data_file, data_files

from dlscope.present.summary import summary_dict

KINETO = data_files("kineto", "**/*.json.gz")
NSYS = data_files("nsys_sqlite", "*.sqlite")
LABELS = Path(__file__).parent / "data" / "tensor_core_labels.json"


def _hand_label(name: str, labels: dict) -> bool:
    entry = labels.get(name) or labels.get(hashlib.sha256(name.encode("utf-8")).hexdigest())
    assert entry is not None, f"no hand label for kernel {name[:80]}"
    return entry["label"] == "tensor_core"


@pytest.fixture(scope="module")
def labels() -> dict:
    return {e.get("name") or e["sha256"]: e for e in json.loads(LABELS.read_text())["labels"]}


def _root_rows(db) -> dict[tuple, tuple]:
    conn = sqlite3.connect(db)
    rows = conn.execute("SELECT tid, name, start, gpu_time, kernel_time, kernel_count, using_tc, gpu_idle "
                        "FROM ops WHERE parent_id < 0").fetchall()
    conn.close()
    return {(str(r[0]), r[1], r[2]): r[3:] for r in rows}


def _idle(intervals: list[tuple[int, int]]) -> int:
    """From the first start to the last end, the time no interval covers (by sorting, the plain way)."""
    intervals = sorted(intervals)
    idle, reach = 0, intervals[0][1]
    for s, e in intervals[1:]:
        idle += max(0, s - reach)
        reach = max(reach, e)
    return idle


@pytest.mark.parametrize("path", KINETO, ids=lambda p: p.name)
def test_op_node_gpu_figures_include_everything_launched_beneath(path, import_db, labels):
    """PRODUCT.md: an op node's GPU time (kernels and memory operations), kernel count, Tensor Core verdict and
    GPU idle include everything launched beneath it, and every launched activity counts in exactly one node."""
    beneath = raw_kineto.activity_by_op_node(path)
    if not beneath:
        pytest.skip(f"{path.name}: no GPU activity launched by an op")
    got = _root_rows(import_db(path))
    nodes = {e.index: e for e in raw_kineto.op_nodes(path)}
    wrong = []
    for index, acts in beneath.items():
        node = nodes[index]
        row = got.get((str(node.tid), node.name, node.start))
        assert row is not None, f"op node {node.name} at {node.start} is not an op node in the database"
        kernels = [a for a in acts if a.cat in raw_kineto.KERNEL_CATS]
        expected = (sum(a.end - a.start for a in acts), sum(a.end - a.start for a in kernels), len(kernels),
                    int(any(_hand_label(k.name, labels) for k in kernels)),
                    _idle([(a.start, a.end) for a in acts]))
        if tuple(row) != expected:
            wrong.append((node.name, expected, tuple(row)))
    assert not wrong, f"{len(wrong)} of {len(beneath)} op node calls differ, e.g. {wrong[:3]}"


def _pyprof_ops(db_path) -> list[tuple[int, int, str, dict]]:
    """The DLProf/PyProf op ranges ({'mod': …, 'op': …}) of an nsys export: (start, end, text, fields)."""
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    rows = conn.execute("SELECT start, end, COALESCE(text, (SELECT value FROM StringIds WHERE id = textId)) "
                        "FROM NVTX_EVENTS WHERE end IS NOT NULL").fetchall()
    conn.close()
    out = []
    for start, end, text in rows:
        if text and text.startswith("{'mod'"):
            out.append((start, end, text, ast.literal_eval(text)))
    return out


def test_dlprof_program_has_dlprofs_op_nodes():
    """The DLProf program (PyProf markers + emit_nvtx): op nodes are the framework calls the user wrote (F.conv2d,
    Tensor.cuda, …), not the aten ops beneath them; counts taken from the NVTX table by hand rules."""
    path = data_file("nsys_sqlite", "dlprof_pytorch_emit_nvtx_rtx2070s_nsys2022.1.sqlite")
    ops = sorted(_pyprof_ops(path))
    outermost, reach = [], None
    for start, end, _text, fields in ops:
        if reach is None or start >= reach:
            outermost.append(fields)
        reach = end if reach is None else max(reach, end)
    import tempfile

    from dlscope.pipeline import build_database

    with tempfile.TemporaryDirectory() as tmp:
        db = build_database([path], Path(tmp) / "d.sqlite", progress=False)
        s = summary_dict(db)
        types = {r[0] for r in sqlite3.connect(db).execute("SELECT op_type FROM agg_ops")}
    m = s["aggregation"]["model_summary"]
    assert m["op_nodes"] == len(outermost) == 26
    assert m["tc_eligible_op_nodes"] == sum(f["op"] in ("conv2d", "linear") for f in outermost) == 3
    assert m["op_nodes_using_tc"] == 0  # an RTX 2070 run in FP32: no Tensor Core kernel at all
    assert types == {f["op"] for f in outermost}  # one vocabulary: the framework's op names
    # one forward pass is one iteration, not a loop
    assert s["aggregation"]["iteration_method"] == "whole_profile" and s["aggregation"]["iterations_profiled"] is None


@pytest.mark.parametrize("path", KINETO + NSYS, ids=lambda p: p.name)
def test_groups_never_exceed_the_wall_clock_and_windows_partition_it(path, import_db):
    db = import_db(path)
    conn = sqlite3.connect(db)
    for agg_id, wall, lo, hi, n in conn.execute(
            "SELECT agg_id, wall_clock_ns, window_start, window_end, iterations_profiled FROM aggregations"):
        over = conn.execute("SELECT name, cpu_time_ns, api_time_ns, gpu_time_ns FROM agg_groups WHERE agg_id = ? "
                            "AND is_group = 1 AND MAX(cpu_time_ns, api_time_ns, gpu_time_ns) > ?",
                            (agg_id, wall)).fetchall()
        assert not over, f"groups longer than the wall clock {wall}: {over[:3]}"
        assert conn.execute("SELECT COUNT(*) FROM agg_groups WHERE agg_id = ? AND is_group = 1 AND "
                            "api_time_ns > cpu_time_ns", (agg_id,)).fetchone()[0] == 0
        windows = conn.execute("SELECT start, \"end\" FROM agg_iterations WHERE agg_id = ? AND profiled = 1 "
                               "ORDER BY start", (agg_id,)).fetchall()
        if not windows:
            continue
        assert len(windows) == n and windows[0][0] == lo and windows[-1][1] == hi
        assert all(a[1] == b[0] for a, b in zip(windows, windows[1:])), "windows must touch, never overlap"
        durations = [e - s for s, e in windows]
        assert sum(durations) == wall and min(durations) <= wall / n <= max(durations)
    conn.close()
