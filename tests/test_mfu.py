"""MFU (docs/metrics.md, "MFU"): model FLOPs from the trace's shapes against torch's own FLOP counter and the
6 × parameters × tokens rule on captured CPU training steps, and the MFU of a hand-made GPU step against the
datasheet's dense peak."""

from __future__ import annotations

import gzip
import json
import sqlite3

import pytest
from conftest import data_file
from raw_kineto import flops_at_op_level
from trace_builder import KinetoTrace

from dlscope.format import readable_value
from dlscope.pipeline import build_database
from dlscope.present.summary import render_summary, summary_dict

torch = pytest.importorskip("torch")
FlopCounterMode = pytest.importorskip("torch.utils.flop_counter").FlopCounterMode


def _captured(tmp_path, step, name: str):
    """Run ``step`` once under FlopCounterMode (torch's count) and once under the profiler (the trace)."""
    torch.manual_seed(0)
    step()  # warm up: lazy initialisation stays out of both
    with FlopCounterMode(display=False) as counter:
        step()
    with (torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof,
          torch.profiler.record_function("ProfilerStep#1")):  # one iteration, as a scheduled profiler marks it
        step()
    trace = tmp_path / f"{name}.json"
    prof.export_chrome_trace(str(trace))
    db = build_database([trace], tmp_path / f"{name}.sqlite", progress=False)
    conn = sqlite3.connect(db)
    (flops,) = conn.execute("SELECT model_flops FROM aggregations").fetchone()
    conn.close()
    return flops, counter.get_total_flops(), db


def test_model_flops_equal_torch_flop_counter_on_a_cnn_training_step(tmp_path):
    nn = torch.nn
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, stride=2), nn.ReLU(),
                          nn.Flatten(), nn.Linear(8 * 3 * 3, 16), nn.ReLU(), nn.Linear(16, 4))
    x = torch.randn(2, 3, 8, 8)

    def step():
        model.zero_grad()
        model(x).sum().backward()

    flops, counted, db = _captured(tmp_path, step, "cnn")
    assert counted > 0 and flops == counted
    summary = summary_dict(db)
    mfu = summary["aggregation"]["mfu"]
    assert mfu["model_flops_per_iteration"] == counted and mfu["precision"] == "fp32"
    assert mfu["mfu"] is None and mfu["peak_flops_per_s"] is None  # a CPU run: no GPU peak to divide by
    # its n/a says so (not "the GPU's dense peak at fp32 is unknown") and gives torch's count over the wall clock
    rate = counted / (summary["aggregation"]["wall_clock_ns"] / 1e9)
    line = " ".join(render_summary(summary).split())
    assert (f"no GPU kernels ran, and MFU measures against a GPU's dense peak; on the CPU the step did "
            f"{readable_value('achieved_flops_per_s', rate)} of matrix products over its wall clock") in line
    assert "dense peak at" not in line


class _Block(torch.nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(d, 3 * d, bias=False)
        self.proj = torch.nn.Linear(d, d, bias=False)
        self.up = torch.nn.Linear(d, 4 * d, bias=False)
        self.down = torch.nn.Linear(4 * d, d, bias=False)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in self.qkv(x).chunk(3, dim=-1))
        att = torch.softmax(q @ k.transpose(-2, -1) / (d // self.heads) ** 0.5, dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, s, d))
        return x + self.down(torch.relu(self.up(x)))


def test_transformer_training_step_is_6_params_tokens_plus_attention(tmp_path):
    """PaLM's model FLOPs: 6·N·T for the N weights of the matrix products over T tokens, plus
    12·L·S·d·T for attention's scores and values (forward 4·B·S²·d a layer, backward twice that)."""
    vocab, d, heads, layers, batch, seq = 64, 32, 4, 2, 2, 16
    emb = torch.nn.Embedding(vocab, d)
    blocks = torch.nn.ModuleList(_Block(d, heads) for _ in range(layers))
    head = torch.nn.Linear(d, vocab, bias=False)
    tokens = torch.randint(0, vocab, (batch, seq))

    def step():
        for m in (emb, blocks, head):
            m.zero_grad()
        x = emb(tokens)
        for blk in blocks:
            x = blk(x)
        torch.nn.functional.cross_entropy(head(x).view(-1, vocab), tokens.view(-1)).backward()

    weights = sum(m.weight.numel() for m in [*blocks.modules(), head] if isinstance(m, torch.nn.Linear))
    t = batch * seq
    expected = 6 * weights * t + 12 * layers * seq * d * t
    flops, counted, _ = _captured(tmp_path, step, "gpt")
    assert counted == expected  # torch's counter agrees with the rule, so the model is the rule's
    assert flops == expected


A100_FP16_DENSE = 312e12  # NVIDIA A100 datasheet: 312 TFLOPS FP16 Tensor Core (624 "with sparsity")


def test_mfu_of_a_half_precision_gemm_is_against_the_dense_peak(tmp_path):
    """One step: a 4096³ FP16 GEMM (2 × 4096³ = 137,438,953,472 FLOPs) on Tensor Cores for 400 µs."""
    t = KinetoTrace()
    t.step(1, 0, 1000)
    t.op("aten::mm", 100, 200, **{"Input Dims": [[4096, 4096], [4096, 4096]],
                                  "Input type": ["c10::Half", "c10::Half"]})
    t.launch(110, 120, "ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_nn", 200, 600)
    db = build_database([t.write(tmp_path / "t.json")], tmp_path / "t.sqlite", progress=False)
    a = summary_dict(db)["aggregation"]
    flops = 2 * 4096 ** 3
    wall_s = a["wall_clock_ns"] * 1e-9
    assert a["mfu"]["model_flops_per_iteration"] == flops
    assert (a["mfu"]["precision"], a["mfu"]["peak_flops_per_s"]) == ("fp16", A100_FP16_DENSE)
    assert a["mfu"]["achieved_flops_per_s"] == pytest.approx(flops / wall_s, rel=1e-12)
    assert a["mfu"]["mfu"] == pytest.approx(flops / wall_s / A100_FP16_DENSE, rel=1e-12)
    conn = sqlite3.connect(db)
    node = conn.execute("SELECT model_flops, mfu FROM agg_ops WHERE op_name = 'aten::mm'").fetchone()
    conn.close()
    assert node == (flops, pytest.approx(flops / 400e-6 / A100_FP16_DENSE, rel=1e-12))  # over its 400 µs


def test_no_shapes_means_no_model_flops(tmp_path):
    t = KinetoTrace()
    t.step(1, 0, 1000)
    t.op("aten::mm", 100, 200)
    t.launch(110, 120, "ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_nn", 200, 600)
    db = build_database([t.write(tmp_path / "t.json")], tmp_path / "t.sqlite", progress=False)
    assert summary_dict(db)["aggregation"]["mfu"] == dict.fromkeys(
        ("model_flops", "model_flops_per_iteration", "achieved_flops_per_s", "peak_flops_per_s", "precision", "mfu"))


H100_BF16_DENSE = 989.4e12  # NVIDIA H100 SXM datasheet: 989.4 TFLOPS BF16 Tensor Core (1,979 "with sparsity")


def test_bert_inference_model_flops_from_the_raw_trace(import_db):
    """Every aten::linear (2 · tokens · N · K, weight [N, K]) and scaled_dot_product_attention (2 · B · H · S² ·
    (D + Dv), not causal here) call of the recorded step, read from the raw JSON; MFU over the H100's dense BF16
    peak. The nested addmm / flash-attention calls are the same work and must not count again."""
    path = data_file("kineto", "tracelens_h100_bert_small_infer.json.gz")
    with gzip.open(path) as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("cat") == "cpu_op"]
    flops = 0
    for e in events:
        dims = e["args"].get("Input Dims")
        if e["name"] == "aten::linear":
            x, (n, k) = dims[0], dims[1]
            tokens = 1
            for d in x[:-1]:
                tokens *= d
            flops += 2 * tokens * n * k
        elif e["name"] == "aten::scaled_dot_product_attention":
            assert e["args"]["Concrete Inputs"][5] == "False"  # is_causal
            (b, h, s, d), (_, _, sk, _), (_, _, _, dv) = dims[:3]
            flops += 2 * b * h * s * sk * (d + dv)
    a = summary_dict(import_db(path))["aggregation"]
    assert a["iterations_profiled"] == 1
    mfu = a["mfu"]
    assert mfu["model_flops_per_iteration"] == flops
    assert (mfu["precision"], mfu["peak_flops_per_s"]) == ("bf16", H100_BF16_DENSE)
    assert mfu["mfu"] == pytest.approx(flops / (a["wall_clock_ns"] * 1e-9) / H100_BF16_DENSE, rel=1e-12)


A100_TF32_DENSE = 156e12  # NVIDIA A100 datasheet: TF32 Tensor Core 156 TFLOPS (312 "with sparsity", never used)


def _gemm_flops(name: str, dims: list) -> int | None:
    """2·M·N·K of the GEMM-like ops this trace records, straight from their Input Dims."""
    def prod(xs):
        out = 1
        for x in xs:
            out *= x
        return out

    if name == "aten::mm":
        return 2 * dims[0][0] * dims[0][1] * dims[1][1]
    if name == "aten::addmm":
        return 2 * dims[1][0] * dims[1][1] * dims[2][1]
    if name == "aten::bmm":
        return 2 * dims[0][0] * dims[0][1] * dims[0][2] * dims[1][2]
    if name == "aten::linear":
        return 2 * prod(dims[0][:-1]) * dims[1][0] * dims[1][1]
    if name == "aten::matmul" and len(dims[1]) == 2:
        return 2 * prod(dims[0][:-1]) * dims[0][-1] * dims[1][1]
    return None


def test_mfu_of_the_real_a100_pg509_200_trace_is_over_the_a100_dense_tf32_peak(import_db):
    """The HTA A100-PG509-200 trace (6 steps of an FP32 recommender on TF32 Tensor Cores): model FLOPs = every
    GEMM-like op of the ProfilerStep windows not nested in another counted op (per thread, from the raw JSON),
    over the wall clock of those windows, over the A100's dense TF32 peak typed by hand."""
    path = data_file("kineto", "hta_trace_diff_control_a100_rank3of8.json.gz")
    with gzip.open(path) as f:
        events = json.load(f)["traceEvents"]
    steps = [e for e in events if e.get("ph") == "X" and e.get("name", "").startswith("ProfilerStep#")]
    start, end = min(e["ts"] for e in steps), max(e["ts"] + e["dur"] for e in steps)
    flops = sum(work for _, work in flops_at_op_level(
        events, start, end, lambda e: _gemm_flops(e["name"], e["args"].get("Input Dims") or [])))
    a = summary_dict(import_db(path))["aggregation"]
    assert a["iterations_profiled"] == len(steps) == 6
    mfu = a["mfu"]
    assert flops > 0 and mfu["model_flops_per_iteration"] == round(flops / 6)
    assert (mfu["precision"], mfu["peak_flops_per_s"]) == ("tf32", A100_TF32_DENSE)
    wall_s = (end - start) * 1e-6
    assert mfu["mfu"] is not None
    assert mfu["mfu"] == pytest.approx(flops / wall_s / A100_TF32_DENSE, rel=1e-9)


def test_distinct_rows_codes_each_distinct_tuple_once_with_missing_values_and_categoricals():
    import numpy as np
    import pandas as pd

    from dlscope.roofline.frames import distinct_rows

    # hand-made: rows 0 and 3 equal, rows 1 and 4 equal (NaN in a categorical), row 2 alone; a plain column too
    frame = pd.DataFrame({"name": pd.Categorical(["mm", "mm", "conv", "mm", "mm"]),
                          "shapes": pd.Categorical(["[1]", None, "[1]", "[1]", None]),
                          "plain": ["a", "b", "a", "a", "b"]})
    codes, tuples = distinct_rows(frame, ["name", "shapes", "plain"])
    assert codes[0] == codes[3] and codes[1] == codes[4]
    assert len({codes[0], codes[1], codes[2]}) == 3 and len(tuples) == 3
    assert tuples[codes[0]] == ("mm", "[1]", "a") and tuples[codes[2]] == ("conv", "[1]", "a")
    name, shapes, plain = tuples[codes[1]]
    assert (name, plain) == ("mm", "b") and isinstance(shapes, float) and np.isnan(shapes)
    # what MultiIndex factorization gives, up to the order of the tuples
    mi_codes, mi_uniques = pd.MultiIndex.from_frame(frame).factorize()
    assert sorted(map(str, tuples)) == sorted(map(str, mi_uniques))
    assert (pd.Series(codes).groupby(mi_codes).nunique() == 1).all()
    empty_codes, empty = distinct_rows(frame.iloc[:0], ["name", "shapes"])
    assert len(empty_codes) == 0 and empty == []
