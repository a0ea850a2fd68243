"""The summary's run-level roofline line says how much of the op GPU time its figures stand on, and judges the
run's quadrant only when the modelled op nodes hold at least ``min_modelled_share`` of it
(data/roofline_advice.json): a CUDA-graph capture, whose GEMMs all run under the graph replay's shapeless
``Graphed`` op, must not be told "kernels are too small or too few" from the 0.02 % of its GPU time that a copy
holds (seen on an H200, 2026-11-27)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import data_file
from raw_kineto import KERNEL_CATS, LAUNCH_CATS, events

from dlscope.pipeline import build_database
from dlscope.present.summary import render_summary, summary_dict
from dlscope.roofline.quadrants import min_modelled_share

LM_GRAPHS = Path(__file__).parent / "data" / "h200" / "lm_fp32_graphs_w0_r1.pt.trace.json.gz"
TOO_LITTLE = "too little of the GPU time is modelled to judge the run"


def _one_line(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.slow
def test_a_cuda_graph_capture_gets_no_quadrant_from_a_sliver_of_its_time(tmp_path):
    evs = events(LM_GRAPHS)
    api = {e.args.get("correlation"): e.name for e in evs if e.cat in LAUNCH_CATS}
    kernels = [e for e in evs if e.cat in KERNEL_CATS]
    replayed = sum(k.end - k.start for k in kernels if api.get(k.args.get("correlation")) == "cudaGraphLaunch")
    assert replayed > 0.9 * sum(k.end - k.start for k in kernels)        # the raw JSON: graph replays do the work
    launches = [e for e in evs if e.name == "cudaGraphLaunch"]
    graphed = [e for e in evs if e.cat == "cpu_op" and e.name.endswith(("Graphed", "GraphedBackward"))]
    # ...launched inside the replays of the graphed forward and backward, autograd Functions with no FLOP model
    assert launches and all(any(g.start <= c.start < g.end for g in graphed) for c in launches)
    db = build_database([LM_GRAPHS], tmp_path / "lm.sqlite", progress=False)
    text = _one_line(render_summary(summary_dict(db)))
    assert TOO_LITTLE in text
    assert "Kernels are too small or too few" not in text and "(both low" not in text


def test_a_modelled_run_keeps_its_quadrant_and_says_its_share(tmp_path):
    db = build_database([data_file("kineto", "tracelens_h100_vit_nsfw_infer.json.gz")], tmp_path / "vit.sqlite",
                        progress=False)
    summary = summary_dict(db)
    roof = summary["roofline"]
    share = roof["modelled_gpu_time_ns"] / roof["op_gpu_time_ns"]
    assert share >= min_modelled_share()
    text = _one_line(render_summary(summary))
    assert f"Run (modelled op nodes, {100 * share:.1f}% of op GPU time)" in text
    assert f"({roof['utilization']['quadrant_label']})" in text and TOO_LITTLE not in text


def test_the_threshold_is_data():
    doc = json.loads((Path(__file__).parents[1] / "src" / "dlscope" / "data" / "roofline_advice.json").read_text())
    assert doc["min_modelled_share"] == min_modelled_share() and 0 < min_modelled_share() < 1
