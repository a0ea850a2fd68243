"""How iterations are found (PRODUCT.md): step markers torch records by default, a loop only when the whole
top-level sequence repeats, a guess said so; on hand-made traces and on real CPU captures with torch."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest
from trace_builder import KinetoTrace

from dlscope.analyze.iterations import find_loop
from dlscope.pipeline import build_database
from dlscope.present.summary import summary_dict

US = 1000
LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def names(*parts) -> np.ndarray:
    return np.array([n for p in parts for n in p], dtype=object)


def test_a_loop_is_the_whole_sequence_repeating():
    assert find_loop(names(["a", "b", "c"] * 5)) == (0, 3, 5)
    assert find_loop(names(["a", "b", "c"] * 4, ["a", "b"])) == (0, 3, 4)  # cut short at the end
    assert find_loop(names(["c"], ["a", "b", "c"] * 4)) == (0, 3, 4)       # started inside a repeat
    assert find_loop(names(["randn"], ["a", "b", "c"] * 5)) is None         # an op outside the loop: no guess


def test_one_forward_pass_with_repeated_layers_is_not_a_loop():
    embedding, layer, head = (["emb", "emb", "add", "dropout"], ["ln", "linear", "sdpa", "linear", "add"],
                              ["ln", "lm_head"])
    assert find_loop(names(embedding, layer * 12, head)) is None
    # DLProf's program: ten inits, eleven copies to the GPU, one forward pass
    assert find_loop(names(["uniform_"] * 10, ["cuda"] * 11, ["randn", "cuda", "conv2d", "conv2d", "flatten",
                                                              "linear"])) is None
    assert find_loop(names(["a", "b", "c"] * 2)) is None  # twice is not yet a loop


def _training_steps(t: KinetoTrace, n: int, *, loader: bool = True, stop_iteration: bool = True) -> None:
    """n steps of 1000 µs: DataLoader __next__, zero_grad, a forward op with a kernel, the optimizer step."""
    for i in range(n):
        s = 1000 * i
        if loader:
            t.annotation(LOADER, s, s + 50)
        t.annotation("Optimizer.zero_grad#SGD.zero_grad", s + 60, s + 80)
        t.op("aten::linear", s + 100, s + 300)
        t.launch(s + 110, s + 120, "volta_sgemm_128x64_tn", s + 150, s + 450)
        t.annotation("Optimizer.step#SGD.step", s + 600, s + 700)
        t.op("aten::add_", s + 610, s + 650)
        t.launch(s + 615, s + 620, "void at::native::vectorized_elementwise_kernel<4>", s + 700, s + 720)
    if loader and stop_iteration:
        t.annotation(LOADER, 1000 * n, 1000 * n + 20)  # the call that raises StopIteration


def test_steps_split_at_the_dataloader_markers_torch_records(tmp_path):
    t = KinetoTrace()
    _training_steps(t, 4)
    s = summary_dict(build_database([t.write(tmp_path / "t.json")], tmp_path / "t.sqlite", progress=False))
    a = s["aggregation"]
    assert s["profile"]["iteration_method"] == "step_marker" and s["profile"]["iterations_total"] == 4
    assert a["iterations_guessed"] is False
    # four windows of 1000 µs, each from its __next__ to the next one (the last: to the __next__ that ends the
    # loop, where its CPU part ends)
    assert a["wall_clock_ns"] == 4000 * US and a["iteration_ns"]["min"] == a["iteration_ns"]["max"] == 1000 * US


def test_steps_split_at_the_optimizer_without_a_dataloader(tmp_path):
    t = KinetoTrace()
    _training_steps(t, 3, loader=False)
    s = summary_dict(build_database([t.write(tmp_path / "t.json")], tmp_path / "t.sqlite", progress=False))
    assert s["profile"]["iteration_method"] == "step_marker" and s["profile"]["iterations_total"] == 3
    conn = sqlite3.connect(tmp_path / "t.sqlite")
    starts = [r[0] for r in conn.execute("SELECT start FROM iterations ORDER BY iteration")]
    assert starts == [(1000 * i + 60) * US for i in range(3)]  # zero_grad opens each step


def test_a_guessed_loop_says_so_and_names_candidates(tmp_path):
    t = KinetoTrace()
    for i in range(5):  # five forward passes, no marker at all
        s = 1000 * i
        t.op("aten::linear", s, s + 200)
        t.launch(s + 10, s + 20, "volta_sgemm_128x64_tn", s + 50, s + 400)
        t.op("aten::relu", s + 300, s + 350)
        t.launch(s + 310, s + 320, "void at::native::vectorized_elementwise_kernel<4>", s + 400, s + 450)
    s = summary_dict(build_database([t.write(tmp_path / "t.json")], tmp_path / "t.sqlite", progress=False))
    a = s["aggregation"]
    assert a["iteration_method"] == "repeating_pattern" and a["iterations_guessed"] is True
    assert a["iterations_profiled"] == 5 and "aten::linear" in a["key_node_candidates"]


# ---------------------------------------------------------------- real captures with torch on the CPU

@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


def _capture(tmp_path, body) -> dict:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        body()
    trace = tmp_path / "trace.json"
    prof.export_chrome_trace(str(trace))
    return summary_dict(build_database([trace], tmp_path / "run.sqlite", progress=False))


@pytest.mark.slow
def test_a_real_training_loop_without_profiler_steps_is_split_per_step(tmp_path, torch):
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    data = torch.utils.data.TensorDataset(torch.randn(48, 16), torch.randn(48, 4))
    loader = torch.utils.data.DataLoader(data, batch_size=8)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    steps = []

    def train():
        for x, y in loader:
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            steps.append(1)

    s = _capture(tmp_path, train)
    assert s["profile"]["iteration_method"] == "step_marker"
    assert s["profile"]["iterations_total"] == len(steps) == 6


@pytest.mark.slow
def test_a_real_forward_pass_of_repeated_layers_is_one_window(tmp_path, torch):
    layers = [m for _ in range(8) for m in (torch.nn.Linear(32, 32), torch.nn.ReLU())]
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), *layers, torch.nn.Linear(32, 4), torch.nn.Softmax(-1))
    x = torch.randn(4, 16)
    s = _capture(tmp_path, lambda: model(x))
    assert s["aggregation"]["iteration_method"] == "whole_profile"
    assert s["aggregation"]["iterations_profiled"] is None


@pytest.mark.slow
def test_a_real_inference_loop_is_guessed_and_flagged(tmp_path, torch):
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    x = torch.randn(4, 16)

    def infer():
        with torch.no_grad():
            for _ in range(6):
                model(x)

    a = _capture(tmp_path, infer)["aggregation"]
    assert a["iteration_method"] == "repeating_pattern" and a["iterations_guessed"] is True
    assert a["iterations_profiled"] == 6
