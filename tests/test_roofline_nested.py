"""The roofline places an op node without a model of its own (an autograd node, a custom op) by the modelled ops
beneath it, summed over its calls (``roofline.nested``, ``agg_ops.roofline_*``), as MFU counts them: an op with a
model counts and the ops nested in it do not. Oracles: a hand-made trace worked by hand, and the raw JSON of an
H200 training capture whose backward convolutions' FLOPs and bytes are computed here from their Input Dims and
Concrete Inputs by docs/roofline.md's definitions."""

from __future__ import annotations

import gzip
import json
import math
import sqlite3
from pathlib import Path

import pytest
from test_graph_replay_figures import TC_GEMM
from trace_builder import KinetoTrace

from dlscope.pipeline import build_database
from dlscope.roofline import roofline_report
from dlscope.store import reader

H200 = Path(__file__).parent / "data" / "h200"
MM_BACKWARD = "autograd::engine::evaluate_function: MmBackward0"


def _report(db: Path) -> dict:
    conn = sqlite3.connect(db)
    try:
        return roofline_report(conn, reader.current_agg_id(conn))
    finally:
        conn.close()


def _hand_trace(tmp_path: Path) -> Path:
    """Two 1 ms steps, each: an autograd node (no model) calling aten::mm [64, 32] × [32, 16] and aten::linear
    ([64, 16] by a [8, 16] weight, no bias) whose own aten::addmm must not count again, FP16, with a 100 µs Tensor
    Core kernel; a custom op with only an unmodelled op beneath it and a 50 µs kernel; and a custom op that
    launches a 50 µs kernel itself beside a modelled aten::mm and its 50 µs kernel (as a CUDA graph replayed under
    an autograd Function launches its work)."""
    t = KinetoTrace()
    for step in range(2):
        b = 1000.0 * step
        t.step(step + 1, b, b + 1000)
        t.op(MM_BACKWARD, b + 10, b + 200)
        t.op("aten::mm", b + 20, b + 60, **{"Input Dims": [[64, 32], [32, 16]], "Input type": ["c10::Half"] * 2})
        t.launch(b + 30, b + 40, TC_GEMM, b + 300, b + 400)
        t.op("aten::linear", b + 70, b + 150, **{"Input Dims": [[64, 16], [8, 16], []],
                                                   "Input type": ["c10::Half", "c10::Half", ""]})
        t.op("aten::addmm", b + 80, b + 140, **{"Input Dims": [[8], [64, 16], [16, 8], [], []],
                                                  "Input type": ["c10::Half"] * 3 + ["Scalar"] * 2})
        t.launch(b + 90, b + 100, TC_GEMM, b + 400, b + 500)
        t.op("my_ext::opaque", b + 600, b + 700)
        t.op("my_ext::inner", b + 610, b + 690, **{"Input Dims": [[64, 32]], "Input type": ["c10::Half"]})
        t.launch(b + 620, b + 630, TC_GEMM, b + 700, b + 750)
        t.op("my_ext::replay", b + 800, b + 900)
        t.launch(b + 805, b + 815, TC_GEMM, b + 750, b + 800)
        t.op("aten::mm", b + 830, b + 880, **{"Input Dims": [[64, 32], [32, 16]], "Input type": ["c10::Half"] * 2})
        t.launch(b + 840, b + 850, TC_GEMM, b + 800, b + 850)
    return build_database([t.write(tmp_path / "nested.json")], tmp_path / "nested.sqlite", progress=False)


def test_an_autograd_node_is_placed_by_the_modelled_ops_beneath_it(tmp_path):
    report = _report(_hand_trace(tmp_path))
    (node,) = [o for o in report["ops"] if o["op_name"] == MM_BACKWARD]
    mm, linear = 2 * 64 * 32 * 16, 2 * 64 * 8 * 16                 # 2·M·N·K each; addmm is linear's own call
    mm_bytes = (64 * 32 + 32 * 16 + 64 * 16) * 2                     # FP16 inputs and output, once each
    linear_bytes = (64 * 16 + 8 * 16 + 64 * 8) * 2
    assert node["calls"] == 2
    assert (node["flops"], node["bytes"]) == (2 * (mm + linear), 2 * (mm_bytes + linear_bytes))
    assert (node["family"], node["precision"], node["tensor_cores"]) == ("gemm", "fp16", True)
    assert node["cost_from"] == "ops beneath"
    assert node["gpu_time_ns"] == 2 * 200_000
    # a node whose ops have no model either stays out, and so does one whose modelled ops did not launch all of
    # its kernels: their GPU time counts as unmodelled
    assert not {"my_ext::opaque", "my_ext::replay"} & {o["op_name"] for o in report["ops"]}
    assert report["summary"]["unmodelled_gpu_time_ns"] == 2 * (50_000 + 100_000)


def _convolution_backward_oracle(path: Path) -> tuple[int, int, int]:
    """FLOPs, bytes and calls of every aten::convolution_backward in the profiled steps, from the raw JSON: each
    requested gradient of input and weight is the forward's multiply-adds × 2 (numel(dy)·C/g·kernel), the bias
    gradient one add per grad_output element; bytes are dy, x and w read and the gradients written, FP32."""
    with gzip.open(path) as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    steps = [e for e in events if e["name"].startswith("ProfilerStep#") and e.get("cat") == "user_annotation"]
    start, end = min(e["ts"] for e in steps), max(e["ts"] + e["dur"] for e in steps)
    flops = nbytes = calls = 0
    for e in events:
        if e["name"] != "aten::convolution_backward" or not start <= e["ts"] < end:
            continue
        dy, x, w = e["args"]["Input Dims"][:3]
        mask = [m == "True" for m in e["args"]["Concrete Inputs"][10].strip("[]").split(", ")]
        numel = [math.prod(shape) for shape in (dy, x, w)]
        macs = numel[0] * w[1] * w[2] * w[3]
        flops += 2 * macs * (mask[0] + mask[1]) + numel[0] * mask[2]
        nbytes += 4 * (sum(numel) + numel[1] * mask[0] + numel[2] * mask[1] + dy[1] * mask[2])
        calls += 1
    return flops, nbytes, calls


def test_the_backward_convolutions_of_an_h200_capture_are_placed_from_their_raw_shapes(tmp_path):
    path = H200 / "fp32_eager_w0.pt.trace.json.gz"
    flops, nbytes, calls = _convolution_backward_oracle(path)
    report = _report(build_database([path], tmp_path / "h200.sqlite", progress=False))
    nodes = [o for o in report["ops"] if o["op_name"].endswith(": ConvolutionBackward0")]
    assert calls and sum(o["calls"] for o in nodes) == calls
    assert (sum(o["flops"] for o in nodes), sum(o["bytes"] for o in nodes)) == (flops, nbytes)
    assert {o["family"] for o in nodes} == {"conv_bwd"} and {o["cost_from"] for o in nodes} == {"ops beneath"}
    assert {o["cost_from"] for o in report["ops"] if o["op_name"] == "aten::conv2d"} == {"own shapes"}
    # the loss's backward runs its kernel from aten::nll_loss_backward, which has no model: the aten::zero_ beneath
    # it (a modelled fill) does not stand for the node's work, so the node stays out
    assert not any(o["op_name"].endswith(": NllLossBackward0") for o in report["ops"])
    assert any(o["op_name"].endswith(": MaxPool2DWithIndicesBackward0") for o in report["ops"])  # pooling: modelled


@pytest.mark.parametrize("name", ["fp32_eager_w0", "lm_amp_eager_w0"])
def test_the_rule_and_the_report_place_the_same_nodes(tmp_path, name):
    """The roofline_quadrant rule (at import) and the report (from the database) read the same stored costs."""
    db = build_database([H200 / f"{name}.pt.trace.json.gz"], tmp_path / f"{name}.sqlite", progress=False)
    report = _report(db)
    with sqlite3.connect(db) as conn:
        row = conn.execute("SELECT evidence_json FROM findings WHERE rule = 'roofline_quadrant'").fetchone()
    assert row, "the quadrant finding fires on this step (both low)"
    evidence = json.loads(row[0])
    utilization = report["summary"]["utilization"]
    assert evidence["compute_utilization_pct"] == pytest.approx(utilization["compute_utilization_pct"])
    assert evidence["memory_utilization_pct"] == pytest.approx(utilization["memory_utilization_pct"])
