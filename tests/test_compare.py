"""`dlscope diff` / compare(): hand-made pairs with numbers computed by hand, op matching rules, and real
before/after pairs (ResNet-50 with 0 vs 4 DataLoader workers; HTA's trace-diff pair) checked against the raw
JSON."""

from __future__ import annotations

import csv
import gzip
import json

import pandas as pd
import pytest
import raw_kineto
from click.testing import CliRunner
from conftest import data_file
from test_compare_traces import LOADER, SGEMM, TC_KERNEL, XSS, base_trace, new_trace
from trace_builder import KinetoTrace

from dlscope.compare import compare
from dlscope.compare.cli_compare import diff_command
from dlscope.compare.matching import batch_change, match_ops
from dlscope.errors import DlscopeError, InputError

US = 1000


@pytest.fixture(scope="module")
def pair(tmp_path_factory, import_db):
    d = tmp_path_factory.mktemp("pair")
    return import_db(base_trace(d / "base.json")), import_db(new_trace(d / "new.json"))


@pytest.fixture(scope="module")
def handmade(pair):
    return compare(*pair)


def _metric(d: dict, name: str) -> dict:
    return next(m for m in d["metrics"] if m["metric"] == name)


# --- hand-made pair: every number below is computed by hand from the trace layout ---------------------------

def test_runs_of_different_lengths_compare_per_iteration(handmade):
    assert handmade["values"] == "per_iteration"
    assert (handmade["base"]["iterations_profiled"], handmade["new"]["iterations_profiled"]) == (2, 3)
    it = _metric(handmade, "avg_iteration_time")
    assert (it["base"], it["new"], it["delta"]) == (1000 * US, 800 * US, -200 * US)
    assert it["ratio"] == pytest.approx(0.8) and it["change_pct"] == pytest.approx(-20.0)
    assert it["verdict"] == "better"
    wall = _metric(handmade, "wall_clock")  # the wall clock stays a total: 2 × 1000 µs vs 3 × 800 µs
    assert (wall["base"], wall["new"], wall["verdict"]) == (2000 * US, 2400 * US, "worse")
    assert handmade["verdict"].startswith("Average iteration time 1.00 ms → 800.00 µs: 20.0% faster (1.25×")


def test_gpu_and_tensor_core_metrics_side_by_side(handmade):
    util = _metric(handmade, "gpu_utilization")   # busy 350 of 1000 µs vs 560 of 800 µs
    assert (util["base"], util["new"]) == (pytest.approx(0.35), pytest.approx(0.7))
    assert util["delta"] == pytest.approx(0.35) and util["verdict"] == "better"
    eff = _metric(handmade, "tc_kernel_efficiency")  # TC 200 of (200 + 100 mm) vs 400 of (400 + 60 addmm)
    assert (eff["base"], eff["new"]) == (pytest.approx(200 / 300), pytest.approx(400 / 460))
    assert _metric(handmade, "kernel_time")["base"] == 350 * US


def test_every_breakdown_category_with_delta_ratio_and_share(handmade):
    rows = {r["category"]: r for r in handmade["breakdown"]}
    assert list(rows) == ["tensor_core", "non_tensor_core", "memory", "dataloader", "io", "cpu", "other"]
    assert (rows["dataloader"]["base_ns"], rows["dataloader"]["new_ns"]) == (300 * US, 20 * US)
    assert rows["dataloader"]["delta_ns"] == -280 * US
    assert rows["dataloader"]["ratio"] == pytest.approx(20 / 300)
    assert (rows["dataloader"]["base_share"], rows["dataloader"]["new_share"]) == (pytest.approx(0.3),
                                                                                 pytest.approx(0.025))
    assert (rows["tensor_core"]["base_ns"], rows["tensor_core"]["new_ns"]) == (200 * US, 400 * US)
    for side in ("base_ns", "new_ns"):  # the parts still add up to one iteration
        assert sum(r[side] for r in rows.values()) == _metric(handmade, "avg_iteration_time")[side.split("_")[0]]


def test_ops_matched_by_shape_report_the_batch_size_change(handmade):
    ops = {(r["status"], r["op_name"]): r for r in handmade["ops"]}
    conv = ops[("both", "aten::conv2d")]
    assert conv["match"] == "batch_size_changed" and (conv["base_batch"], conv["new_batch"]) == (8, 16)
    assert (conv["base_gpu_time_ns"], conv["new_gpu_time_ns"], conv["delta_gpu_time_ns"]) == (200 * US, 400 * US,
                                                                                            200 * US)
    assert conv["gpu_time_ns_ratio"] == pytest.approx(2.0)
    assert ops[("both", "aten::relu")]["match"] == "batch_size_changed"
    assert ops[("vanished", "aten::mm")]["base_gpu_time_ns"] == 100 * US
    assert ops[("new", "aten::addmm")]["new_gpu_time_ns"] == 60 * US
    assert handmade["batch_size"] == {"base": 8, "new": 16, "ops": 2}
    assert handmade["op_names"] == {"only_in_base": ["aten::mm"], "only_in_new": ["aten::addmm"], "in_both": 2}


def test_rows_are_sorted_by_impact(handmade):
    for key in ("ops", "op_types", "kernels"):
        impacts = [r["impact_ns"] for r in handmade[key]]
        assert impacts == sorted(impacts, reverse=True)
    kernels = {r["kernel_name"]: r for r in handmade["kernels"]}
    assert kernels[TC_KERNEL]["delta_gpu_time_ns"] == 200 * US
    assert kernels[SGEMM]["delta_gpu_time_ns"] == -40 * US   # 100 µs of mm → 60 µs of addmm per iteration
    types = {r["op_type"]: r for r in handmade["op_types"]}
    assert types["aten::mm"]["status"] == "vanished" and types["aten::addmm"]["status"] == "new"


def test_key_changes_lead_with_the_largest_varied_changes(handmade):
    kc = handmade["key_changes"]
    assert len(kc) == 3
    assert kc[0]["kind"] == "category" and kc[0]["subject"] == "dataloader" and kc[0]["impact_ns"] == 280 * US
    assert {c["kind"] for c in kc} == {"category", "op_type", "kernel"}


def test_compare_is_json_serializable(handmade):
    back = json.loads(json.dumps(handmade, allow_nan=False))
    assert back["metrics"] == handmade["metrics"]


# --- matching rules on hand-made agg_ops frames -----------------------------------------------------------------

def _ops(*rows) -> pd.DataFrame:
    return pd.DataFrame([dict(zip(("op_name", "op_type", "direction", "scope", "input_shapes"), r)) for r in rows])


def test_batch_change_needs_one_consistent_first_dimension_change():
    assert batch_change("[[32,256,56,56],[256],[]]", "[[64,256,56,56],[256],[]]") == (32, 64)
    assert batch_change("[[32,3],[32,5]]", "[[64,3],[64,5]]") == (32, 64)
    assert batch_change("[[32,3],[32,5]]", "[[64,3],[16,5]]") is None      # two different changes
    assert batch_change("[[32,3,4]]", "[[64,3,5]]") is None                 # another dimension changed
    assert batch_change("[[32,3]]", "[[32,3]]") is None                     # nothing changed
    assert batch_change("[[[2,3],[2,4]]]", "[[[5,3],[5,4]]]") == (2, 5)     # tensor lists
    assert batch_change("not json", "[[1]]") is None
    assert batch_change("[[8,4],[3]]", "[[8,4],[5]]") is None              # a 1-D size (bias) is no batch


def test_match_passes_scope_batch_shapes_rename_and_leftovers():
    base = _ops(("aten::mm", "aten::mm", "fwd", "", "[[8,4],[4,4]]"),
                ("aten::relu", "aten::relu", "fwd", "encoder/layer1", "[[8,4]]"),
                ("aten::add", "aten::add", "fwd", "", "[[8,4],[3]]"),
                ("model/block_a/conv/Conv2D", "Conv2D", "fwd", "", "[[1,3,8,8]]"),
                ("aten::gone", "aten::gone", "fwd", "", ""),
                ("aten::same", "aten::same", "bwd", "x", "[[1]]"))
    new = _ops(("aten::mm", "aten::mm", "fwd", "", "[[16,4],[4,4]]"),
               ("aten::relu", "aten::relu", "fwd", "decoder/layer1", "[[8,4]]"),
               ("aten::add", "aten::add", "fwd", "", "[[8,4],[5]]"),
               ("model/block_b/conv/Conv2D", "Conv2D", "fwd", "", "[[1,3,8,8]]"),
               ("aten::fresh", "aten::fresh", "fwd", "", ""),
               ("aten::same", "aten::same", "bwd", "x", "[[1]]"))
    got = {(p.base, p.new): (p.match, p.batch) for p in match_ops(base, new)}
    assert got == {(0, 0): ("batch_size_changed", (8, 16)), (1, 1): ("scope_changed", None),
                   (2, 2): ("input_shapes_changed", None), (3, 3): ("renamed", None),
                   (4, None): (None, None), (None, 4): (None, None), (5, 5): ("same", None)}


def test_renamed_needs_the_same_type_and_a_similar_name():
    base = _ops(("aten::mm", "aten::mm", "fwd", "", ""), ("encoder/attn/MatMul", "MatMul", "fwd", "", "[[2,2]]"))
    new = _ops(("CompiledFunction", "CompiledFunction", "fwd", "", ""), ("zzz", "MatMul", "fwd", "", "[[2,2]]"))
    assert all(p.match is None for p in match_ops(base, new))


# --- files and CLI ----------------------------------------------------------------------------------------------

def test_diff_command_prints_key_changes_first_and_writes_files(pair, tmp_path):
    base, new = pair
    res = CliRunner().invoke(diff_command, [str(base), str(new), "--formats", "md,csv,json", "-o", str(tmp_path)])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert "Average iteration time 1.00 ms → 800.00 µs" in lines[1]
    assert lines[2].startswith("  1. Dataloader time 300.00 µs → 20.00 µs")
    assert "Batch size changed: 8 → 16" in res.output
    assert json.loads((tmp_path / "diff.json").read_text())["op_names"]["only_in_base"] == ["aten::mm"]
    md = (tmp_path / "diff.md").read_text()
    assert "## Metrics" in md and "batch size 8→16" in md
    with open(tmp_path / "diff_ops.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert {r["op_name"] for r in rows} == {"aten::conv2d", "aten::relu", "aten::mm", "aten::addmm"}
    for name in ("diff_metrics", "diff_breakdown", "diff_op_types", "diff_kernels", "diff_op_names"):
        assert (tmp_path / f"{name}.csv").stat().st_size > 0


def test_names_from_traces_are_escaped_in_markdown(tmp_path, import_db):
    base = import_db(base_trace(tmp_path / "b.json"))
    new = import_db(new_trace(tmp_path / "n_xss.json", kernel_name=XSS))
    res = CliRunner().invoke(diff_command, [str(base), str(new), "--formats", "md", "-o", str(tmp_path), "-q"])
    assert res.exit_code == 0, res.output
    md = (tmp_path / "diff.md").read_text()
    assert XSS not in md and "&lt;script&gt;alert(1)&lt;/script&gt;" in md


def test_diff_refuses_bad_input(pair, tmp_path):
    base, _ = pair
    foreign = tmp_path / "foreign.sqlite"
    foreign.write_bytes(b"not a database at all" * 10)
    with pytest.raises(InputError, match="no such profile database"):
        compare(base, tmp_path / "missing.sqlite")
    with pytest.raises(InputError, match="not a"):
        compare(foreign, base)
    res = CliRunner().invoke(diff_command, [str(base), str(base), "--formats", "pdf"])
    assert isinstance(res.exception, DlscopeError) and "unknown diff format" in str(res.exception)


# --- real pairs -------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def resnet(import_db):
    w0 = import_db(data_file("kineto", "tbplugin_resnet50_v100_workers0.pt.trace.json.gz"))
    w4 = import_db(data_file("kineto", "tbplugin_resnet50_v100_workers4.pt.trace.json.gz"))
    return w0, w4


def test_resnet50_more_workers_collapse_the_dataloader_share_and_the_iteration_time(resnet):
    d = compare(*resnet)
    it = _metric(d, "avg_iteration_time")
    assert it["new"] < it["base"] and it["verdict"] == "better"
    assert it["base"] == pytest.approx(177_592_166.7, rel=1e-6) and it["new"] == pytest.approx(141_090_333.3, rel=1e-6)
    loader = next(r for r in d["breakdown"] if r["category"] == "dataloader")
    assert loader["base_share"] > 0.30 and loader["new_share"] < 0.01      # 33.4% → 0.8%
    assert d["key_changes"][0]["impact_ns"] >= d["key_changes"][1]["impact_ns"] * REPEAT_FLOOR
    assert any(c["subject"] == "dataloader" for c in d["key_changes"])
    assert LOADER in d["op_names"]["only_in_base"]
    assert "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__" in d["op_names"]["only_in_new"]
    assert d["batch_size"] is None                                        # both runs use batch 32


REPEAT_FLOOR = 0.5  # a repeated kind may outrank a larger change by at most the repeat penalty


def _raw_op_names(path) -> set[str]:
    """Op node names (outermost ops, ranges standing for ops) starting inside the ProfilerStep window, from the
    Kineto JSON read independently of dlscope (tests/raw_kineto.py)."""
    steps = [e for e in raw_kineto.events(path) if e.name.startswith("ProfilerStep#")]
    lo, hi = min(e.start for e in steps), max(e.end for e in steps)
    return {e.name for e in raw_kineto.op_nodes(path) if lo <= e.start < hi}


def test_hta_trace_diff_pair_lists_the_ops_present_in_only_one_run(import_db):
    control = data_file("kineto", "hta_trace_diff_control_a100_rank3of8.json.gz")
    test = data_file("kineto", "hta_trace_diff_test_v100_rank1of2.json.gz")
    d = compare(import_db(control), import_db(test))
    raw_c, raw_t = _raw_op_names(control), _raw_op_names(test)
    assert d["op_names"]["only_in_base"] == sorted(raw_c - raw_t)
    assert d["op_names"]["only_in_new"] == sorted(raw_t - raw_c)
    # the test run is torch.compile'd: its graph and its backward are op nodes the eager run lacks
    assert raw_c - raw_t and sorted(raw_t - raw_c) == [
        "CompiledFunction", "autograd::engine::evaluate_function: CompiledFunctionBackward"]
    only_new = {r["op_name"] for r in d["ops"] if r["status"] == "new"}
    vanished = {r["op_name"] for r in d["ops"] if r["status"] == "vanished"}
    assert raw_t - raw_c <= only_new and raw_c - raw_t <= vanished
    assert _metric(d, "avg_iteration_time")["verdict"] == "worse"
    json.dumps(d, allow_nan=False)


# --- runs that are not like for like; directions of Tensor Core metrics ------------------------------------------

def _gpu_names(path) -> list[str]:
    """deviceProperties names straight from the Kineto JSON (independent of dlscope)."""
    with gzip.open(path, "rt") as f:
        return sorted({d["name"] for d in json.load(f).get("deviceProperties", [])})


def test_a100_against_v100_warns_and_calls_lost_tensor_cores_a_regression(import_db, tmp_path):
    control = data_file("kineto", "hta_trace_diff_control_a100_rank3of8.json.gz")
    test = data_file("kineto", "hta_trace_diff_test_v100_rank1of2.json.gz")
    assert _gpu_names(control) != _gpu_names(test)                       # the oracle: different GPU models
    d = compare(import_db(control), import_db(test))
    kinds = {w["kind"] for w in d["warnings"]}
    assert "gpu" in kinds
    assert "precision" in kinds                  # TF32 Tensor Core GEMMs on the A100, FP32 sgemm on the V100
    tc = _metric(d, "tc_kernel_time")
    assert tc["base"] > 0 and tc["new"] == 0 and tc["verdict"] == "worse"
    for name in ("tensor_core", "tensor_core_share", "tc_kernel_efficiency"):
        m = _metric(d, name)
        assert m["new"] < m["base"] and m["verdict"] == "worse"
    assert any(r["metric"] == "tensor_core_share" and "lost" in r["text"] for r in d["regressions"])
    res = CliRunner().invoke(diff_command, [str(import_db(control)), str(import_db(test)), "--formats", "json,md",
                                            "-o", str(tmp_path)])
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "Warning: The runs are on different GPUs" in text and "Regression: Tensor Core share lost" in text
    doc = json.loads((tmp_path / "diff.json").read_text())
    assert {w["kind"] for w in doc["warnings"]} == kinds and doc["regressions"]
    assert "**Warning:**" in (tmp_path / "diff.md").read_text()


def test_a_drop_in_tensor_core_use_is_never_called_better(pair):
    """Swap the hand-made pair: the Tensor Core kernel time per iteration falls 400 → 200 µs."""
    base, new = pair
    d = compare(new, base)
    for name in ("tc_kernel_time", "tensor_core", "tensor_core_share", "tc_kernel_efficiency", "gpu_utilization"):
        m = _metric(d, name)
        assert m["new"] < m["base"] and m["verdict"] == "worse", name


def test_a_drop_in_tensor_core_time_is_a_regression_and_a_longer_iteration_is_not(pair, tmp_path, import_db):
    """Swapped, the hand-made pair's Tensor Core kernel time per iteration falls 400 → 200 µs: a regression. A run
    whose iteration grows from 1 to 3 ms while its Tensor Core GEMM grows from 400 to 600 µs has a smaller Tensor
    Core share (40 % → 20 %) but lost no Tensor Core work: the share is "worse", and no regression is claimed."""
    base, new = pair
    assert [r["metric"] for r in compare(new, base)["regressions"]] == ["tensor_core_share"]
    short, long = (import_db(_steps(tmp_path / name, step_us, gemm_us)) for name, step_us, gemm_us in
                   (("short.json", 1000, 400), ("long.json", 3000, 600)))
    d = compare(short, long)
    tc, share = _metric(d, "tc_kernel_time"), _metric(d, "tensor_core_share")
    assert (tc["base"], tc["new"]) == (400 * US, 600 * US)
    assert (share["base"], share["new"], share["verdict"]) == (pytest.approx(0.4), pytest.approx(0.2), "worse")
    assert d["regressions"] == []


def _steps(path, step_us: int, gemm_us: int):
    """2 steps of ``step_us``, each running one FP16 Tensor Core GEMM of ``gemm_us`` from 100 µs into the step."""
    t = KinetoTrace()
    for i in range(2):
        s = step_us * i
        t.step(i + 1, s, s + step_us)
        t.op("aten::mm", s + 10, s + 20, **{"Input Dims": [[64, 32], [32, 64]]})
        t.launch(s + 11, s + 14, TC_KERNEL, s + 100, s + 100 + gemm_us)
    return t.write(path)


def test_like_for_like_runs_get_no_warning(handmade):
    assert handmade["warnings"] == [] and handmade["regressions"] == []


def _one_gemm(path, kernel: str, devices: int = 1):
    t = KinetoTrace(devices=devices)
    for i in range(2):
        s = 1000 * i
        t.step(i + 1, s, s + 1000)
        for dev in range(devices):
            t.op("aten::mm", s + 100 + 10 * dev, s + 105 + 10 * dev, **{"Input Dims": [[64, 32], [32, 64]]})
            t.launch(s + 101 + 10 * dev, s + 104 + 10 * dev, kernel, s + 200, s + 600, device=dev)
    return t.write(path)


def test_different_precision_or_gpu_count_warns(tmp_path, import_db):
    fp16 = import_db(_one_gemm(tmp_path / "fp16.json", TC_KERNEL))            # volta_h884gemm: FP16
    fp32 = import_db(_one_gemm(tmp_path / "fp32.json", SGEMM))                # volta_sgemm: FP32
    two = import_db(_one_gemm(tmp_path / "two.json", SGEMM, devices=2))
    d = compare(fp16, fp32)
    assert [w["kind"] for w in d["warnings"]] == ["precision"]
    assert (d["base"]["precision"]["dominant"], d["new"]["precision"]["dominant"]) == ("fp16", "fp32")
    d = compare(fp32, two)
    assert [w["kind"] for w in d["warnings"]] == ["gpu_count"]
    assert (d["base"]["gpu_count"], d["new"]["gpu_count"]) == (1, 2)
