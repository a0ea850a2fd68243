"""Real captures from an NVIDIA H200 (tests/data/h200, recorded by bench/gpu_session.sh on 2026-11-27): Tensor Core
verdicts from Nsight Compute's counters and from kernel names against hand labels, tensor FLOPs against 2·M·N·K of
known GEMMs, and imports of the training step in FP32/AMP × eager/CUDA graphs × DataLoader workers 0/4 against
sums done here straight from the raw JSON."""

from __future__ import annotations

import csv
import gzip
import json
import sqlite3
from collections import defaultdict
from contextlib import closing
from pathlib import Path

import pytest
from conftest import data_file
from raw_kineto import KERNEL_CATS, activity_by_op_node, events, launching_ops

from dlscope.analyze.tensor_core import kernel_uses_tc
from dlscope.pipeline.build import build_database
from dlscope.roofline.ncu import read_ncu_csv

H200 = Path(__file__).parent / "data" / "h200"
CSVS = ("zoo.ncu.csv.gz", "train_amp.ncu.csv.gz", "train_fp32.ncu.csv.gz")
TRACES = sorted(p.name for p in H200.glob("*_w[04].pt.trace.json.gz"))
HFMA2 = "sm__inst_executed_pipe_tensor_op_hmma_type_hfma2.sum"
GMMA = "sm__inst_executed_pipe_tensor_op_gmma.sum"


def labels() -> dict[str, bool]:
    doc = json.loads((H200 / "tensor_core_labels.json").read_text())
    return {name: label["tensor_core"] for name, label in doc["labels"].items()}


def unzipped(name: str, tmp_path: Path, drop_metric: str | None = None) -> Path:
    """The gzipped CSV as ncu wrote it (optionally without one metric's rows), for read_ncu_csv."""
    out = tmp_path / name.removesuffix(".gz")
    with gzip.open(H200 / name, "rt", newline="") as src, open(out, "w", newline="") as dst:
        for line in src:
            if drop_metric is None or f'"{drop_metric}"' not in line:
                dst.write(line)
    return out


def raw_metric(path: Path, metric: str) -> dict[str, float]:
    """{kernel ID: value} of one metric, read with the csv module."""
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    return {row["ID"]: float(row["Metric Value"].replace(",", ""))
            for row in csv.DictReader(lines[start:]) if row["Metric Name"] == metric}


def test_the_labels_cover_every_kernel_of_the_h200_captures():
    names = set()
    for trace in TRACES + ["zoo.pt.trace.json.gz"]:
        names |= {e.name for e in events(H200 / trace) if e.cat in KERNEL_CATS}
    for name in CSVS:
        with gzip.open(H200 / name, "rt") as f:
            lines = f.read().splitlines()
        start = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
        names |= {row["Kernel Name"] for row in csv.DictReader(lines[start:])}
    assert names == set(labels())
    assert 30 < sum(labels().values()) < len(names) - 100      # both kinds, well represented


@pytest.mark.parametrize("name", CSVS)
def test_counters_judge_every_hopper_kernel_as_its_hand_label(name, tmp_path):
    """HMMA-pipe instructions minus HFMA2 ones: > 0 exactly for the kernels that do matrix math on H200."""
    frame = read_ncu_csv(unzipped(name, tmp_path))
    truth = labels()
    wrong = [(n, v) for n, v in zip(frame["kernel_name"], frame["uses_tc"]) if bool(v) != truth[n]]
    assert wrong == []
    assert set(frame["uses_tc_source"]) == {"counters"}
    assert frame["uses_tc"].sum() > 10 and (frame["uses_tc"] == 0).sum() > 10


@pytest.mark.parametrize("name", ["zoo.ncu.csv.gz", "train_amp.ncu.csv.gz"])
def test_without_the_hfma2_counter_warpgroup_mma_still_marks_tensor_core_kernels(name, tmp_path):
    """A CSV without hmma_type_hfma2: every kernel that issued a warpgroup MMA (wgmma) is a Tensor Core user,
    although its MMA share of all instructions is as low as 0.6 % (a 64x8 nvjet tile)."""
    path = unzipped(name, tmp_path, drop_metric=HFMA2)
    gmma = raw_metric(path, GMMA)
    frame = read_ncu_csv(path).set_index("kernel_id")
    with_wgmma = [int(kid) for kid, count in gmma.items() if count > 0]
    assert len(with_wgmma) >= 8
    assert frame.loc[with_wgmma, "uses_tc"].eq(1).all()
    assert frame.loc[with_wgmma, "tensor_share"].min() < 0.05


def test_tensor_flops_of_the_zoo_gemms_are_2mnk(tmp_path):
    """sm__ops_path_tensor_* of each GEMM the zoo ran (one launch per NVTX range) is exactly 2·M·N·K."""
    frame = read_ncu_csv(unzipped("zoo.ncu.csv.gz", tmp_path))
    expected = {"zoo:mm_fp32_tf32": 2 * 2048**3, "zoo:mm_fp16": 2 * 2048**3, "zoo:mm_bf16": 2 * 2048**3,
                "zoo:addmm_fp16_bias": 2 * 2048**3, "zoo:scaled_mm_fp8": 2 * 2048**3,
                "zoo:int_mm_int8": 2 * 2048**3, "zoo:mm_fp64": 2 * 1024**3, "zoo:bmm_fp16": 8 * 2 * 256**3}
    found = defaultdict(float)
    for ranges, flops, uses in zip(frame["nvtx_ranges"], frame["flops_tensor"], frame["uses_tc"]):
        for case in json.loads(ranges or "[]"):
            if case in expected and uses:
                found[case] += flops
    assert dict(found) == expected


def test_kernel_names_alone_give_the_hand_labels_on_hopper():
    wrong = [name for name, tc in labels().items() if bool(kernel_uses_tc(name)) != tc]
    assert wrong == []


@pytest.mark.parametrize("trace", TRACES)
def test_h200_training_step_imports_with_every_kernel_and_its_verdict(trace, tmp_path):
    """FP32 and AMP, eager and CUDA graphs (graph-launched kernels included), workers 0 and 4: every kernel
    of the raw JSON is in the database with its time, and the Tensor Core time is the hand labels' sum."""
    kernels = [e for e in events(H200 / trace) if e.cat in KERNEL_CATS]
    truth = labels()
    db = build_database([H200 / trace], tmp_path / "run.sqlite", progress=False)
    with closing(sqlite3.connect(db)) as conn:
        count, total, tc_total = conn.execute(
            "SELECT count(*), sum(dur), sum(CASE WHEN uses_tc THEN dur ELSE 0 END) FROM kernels").fetchone()
    assert count == len(kernels)
    assert total == sum(e.end - e.start for e in kernels)
    assert tc_total == sum(e.end - e.start for e in kernels if truth[e.name])
    if "amp" in trace or "fp32_eager" in trace:
        assert tc_total > 0                                  # convolutions on Tensor Cores (TF32 in FP32)


FLOATING = {"c10::Half": "float16", "c10::BFloat16": "bfloat16", "float": "float32", "double": "float64",
            "c10::Float8_e4m3fn": "float8_e4m3fn", "c10::Float8_e5m2": "float8_e5m2"}
INTEGRAL = {"long int", "long", "long long", "int", "unsigned int", "short int", "short", "signed char",
            "unsigned char", "bool"}


def _ran_at(path: Path) -> dict[int, str]:
    """Per op node call of the raw trace (event index): the floating type its kernels ran at, worked out from the
    JSON alone: each kernel votes its duration for its launching op's first tensor input type, when that type is
    a floating one; the type with the most time wins (ties: the first by name)."""
    launcher = launching_ops(path)
    out = {}
    for node, activity in activity_by_op_node(path).items():
        time: dict[str, int] = defaultdict(int)
        for e in activity:
            if e.cat not in KERNEL_CATS or launcher.get(e.index) is None:
                continue
            types = launcher[e.index].args.get("Input type") or []
            first = next((t for t in types if t in FLOATING or t in INTEGRAL), None)
            if first in FLOATING:
                time[FLOATING[first]] += e.end - e.start
        if time:
            out[node] = min(time, key=lambda t: (-time[t], t))
    return out


def _check_data_types(trace: Path, db: Path) -> list[tuple]:
    """Every op node call whose kernels ran at a floating type is in the database with the raw JSON's type (a
    node's data type is part of its key, so the type stored once per node is true of each of its calls, also
    where calls of the same op with the same shapes ran at different types). Returns (start, name, data type,
    input dtypes) of those calls."""
    by_event = {e.index: e for e in events(trace)}
    expected = {(by_event[i].start, by_event[i].name): dtype for i, dtype in _ran_at(trace).items()}
    with closing(sqlite3.connect(db)) as conn:
        rows = conn.execute("SELECT start, name, node_id, data_type, input_dtypes FROM ops "
                            "WHERE parent_node_id = -1 AND kernel_count > 0").fetchall()
        rows = [row for row in rows if (row[0], row[1]) in expected]
    assert len(rows) == len(expected) > 0
    assert {(start, name): dtype for start, name, _, dtype, _ in rows} == expected
    return [(start, name, dtype, dtypes) for start, name, _, dtype, dtypes in rows]


def test_calls_of_one_op_at_two_data_types_are_two_op_nodes(tmp_path):
    """In the autocast transformer ``aten::to`` is called with the same (scalar) shapes from FP32 and from FP64,
    and ``ToCopyBackward0`` (no inputs recorded) casts FP16→FP32 in some calls and back in others: each type is
    a node of its own, whose stored type is that of every call (by the raw JSON), never the first call's."""
    trace = H200 / "lm_amp_eager_w0.pt.trace.json.gz"
    db = build_database([trace], tmp_path / "lm.sqlite", progress=False)
    expected = {(e.start, e.name): e for e in events(trace)}
    with closing(sqlite3.connect(db)) as conn:
        nodes = conn.execute("SELECT n.node_id, n.name, n.input_shapes, n.data_type, n.input_dtypes FROM op_nodes n "
                             "WHERE n.parent_node_id = -1").fetchall()
        calls = conn.execute("SELECT node_id, start, name FROM ops WHERE parent_node_id = -1").fetchall()
    by_node = {node: (name, shapes, dtype, dtypes) for node, name, shapes, dtype, dtypes in nodes}
    raw_types: dict[int, set] = defaultdict(set)
    for node, start, name in calls:                 # each call's input types from the raw JSON
        raw_types[node].add(json.dumps(expected[(start, name)].args.get("Input type") or []))
    assert all(len(types) == 1 for types in raw_types.values())
    same_op = defaultdict(set)                      # (name, shapes) -> the data types of its nodes
    for name, shapes, dtype, _ in by_node.values():
        same_op[(name, shapes)].add(dtype)
    split = {key: dtypes for key, dtypes in same_op.items() if len(dtypes) > 1}
    assert any(name == "aten::to" for name, _ in split)
    assert any(name.endswith("ToCopyBackward0") and dtypes >= {"float16", "float32"}
               for (name, _), dtypes in split.items())


def test_an_autocast_linear_runs_at_fp16_in_its_data_type_roofline_and_mfu(tmp_path):
    """A transformer under autocast (FP16): every aten::linear is called on FP32 activations (after an FP32
    layer norm) or FP16 ones, and its GEMM runs FP16 on Tensor Cores. Its data type is what its kernels'
    launchers ran at (checked node call by node call against the raw JSON); the roofline places it under the
    FP16 Tensor Core roof, no math above a roof, and MFU's precision is FP16."""
    trace = H200 / "lm_amp_eager_w0.pt.trace.json.gz"
    db = build_database([trace], tmp_path / "lm.sqlite", progress=False)
    rows = _check_data_types(trace, db)
    assert len(rows) > 500
    linears = [(dtype, dtypes) for _, name, dtype, dtypes in rows if name == "aten::linear"]
    assert {dtype for dtype, _ in linears} == {"float16"}
    assert any(json.loads(dtypes)[0] == "float" for _, dtypes in linears)     # called on FP32 activations
    from dlscope.roofline import roofline_report
    with closing(sqlite3.connect(db)) as conn:
        report = roofline_report(conn, 1)
    linear_ops = [op for op in report["ops"] if op["op_name"] == "aten::linear"]
    assert linear_ops and {(op["precision"], op["tensor_cores"]) for op in linear_ops} == {("fp16", True)}
    # no math above its roof (a TF32 roof would put these GEMMs over it); memory-bound copies of a few MB can beat
    # DRAM from the L2, as the report's reason says
    assert not any(op.get("above_roof") and op["bound"] == "math" for op in report["ops"])
    assert all("cache" in op["above_roof_reason"] for op in report["ops"] if op.get("above_roof"))
    with closing(sqlite3.connect(db)) as conn:
        assert conn.execute("SELECT mfu_precision FROM aggregations").fetchone()[0] == "fp16"


@pytest.mark.parametrize("name", ["tracelens_h100_bert_small_infer.json.gz",
                                  "tracelens_h100_qwen1.5_0.5b_infer.json.gz",
                                  "tracelens_b200_llm_serving_rank0of8.json.gz",
                                  "tbplugin_resnet50_v100_workers0.pt.trace.json.gz",
                                  "hta_trace_diff_control_a100_rank3of8.json.gz"])
def test_op_data_types_of_real_profiles_are_what_their_kernels_ran_at(name, tmp_path):
    """The same check on profiles recorded by others with their inputs' types (H100, B200, V100, A100)."""
    trace = data_file("kineto", name)
    _check_data_types(trace, build_database([trace], tmp_path / "run.sqlite", progress=False))


def test_tensor_ops_parts_collected_beside_their_totals_are_not_counted_twice(tmp_path):
    """ncu also offers each total's parts (per instruction family, destination type, sparsity): a CSV holding
    them beside the totals still gives 2·M·N·K for the zoo's FP16 GEMM."""
    path = unzipped("zoo.ncu.csv.gz", tmp_path)
    lines = path.read_text().splitlines(keepends=True)
    extra = []
    for line in lines:
        if '"sm__ops_path_tensor_src_fp16.sum"' in line:
            for part in ("sm__ops_path_tensor_op_hgmma_src_fp16.sum", "sm__ops_path_tensor_src_fp16_sparsity_off.sum"):
                extra.append(line.replace('"sm__ops_path_tensor_src_fp16.sum"', f'"{part}"'))
    path.write_text("".join(lines + extra))
    frame = read_ncu_csv(path)
    gemm = [flops for ranges, flops in zip(frame["nvtx_ranges"], frame["flops_tensor"])
            if "zoo:mm_fp16" in json.loads(ranges or "[]")]
    assert gemm == [2 * 2048**3]
