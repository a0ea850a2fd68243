"""`dlscope check`, the CI gate: exit 0 within the limit, 1 with a reason beyond it, 2 for bad input; metric
directions from data/check_metrics.json; a metric one run cannot provide is an error, never a pass."""

from __future__ import annotations

import importlib
import json
import math
import subprocess
import sys

import pytest
from click.testing import CliRunner
from conftest import data_file
from test_compare_traces import base_trace, new_trace, no_steps_trace

from dlscope.compare.check import check, parse_metrics, parse_threshold, regression_pct
from dlscope.compare.cli_compare import check_command
from dlscope.compare.runs import metric_table
from dlscope.errors import DlscopeError


@pytest.fixture(scope="module")
def pair(tmp_path_factory, import_db):
    d = tmp_path_factory.mktemp("check")
    return import_db(base_trace(d / "base.json")), import_db(new_trace(d / "new.json"))


def _run(*args):
    return CliRunner().invoke(check_command, [str(a) for a in args])


def test_threshold_and_metric_parsing():
    assert parse_threshold("5%") == 5.0 and parse_threshold("2.5") == 2.5 and parse_threshold(" 0 % ") == 0.0
    for bad in ("-3", "five", "5%%", "", "1e3"):
        with pytest.raises(DlscopeError, match="bad --max-regression"):
            parse_threshold(bad)
    assert parse_metrics(()) == ["avg_iteration_time"]
    assert parse_metrics(("gpu_utilization,wall_clock", "gpu_utilization")) == ["gpu_utilization", "wall_clock"]
    with pytest.raises(DlscopeError, match="unknown metric 'speed'"):
        parse_metrics(("speed",))


def test_regression_direction_per_metric():
    assert regression_pct(100, 110, "lower") == pytest.approx(10.0)
    assert regression_pct(100, 90, "lower") == pytest.approx(-10.0)
    assert regression_pct(0.5, 0.4, "higher") == pytest.approx(20.0)
    assert regression_pct(0.5, 0.6, "higher") == pytest.approx(-20.0)
    assert regression_pct(0, 5, "lower") == math.inf and regression_pct(0, 0, "lower") == 0.0
    spec = metric_table()["metrics"]
    assert spec["gpu_utilization"]["better"] == "higher" and spec["tc_kernel_efficiency"]["better"] == "higher"
    assert spec["avg_iteration_time"]["better"] == "lower" and spec["dataloader"]["better"] == "lower"
    assert {"avg_iteration_time", "wall_clock", "kernel_time", "tensor_core", "non_tensor_core", "memory",
            "dataloader", "io", "cpu", "other"} <= set(spec)


def test_hand_made_pair_numbers(pair):
    base, new = pair
    r = check(new, base, ["avg_iteration_time", "wall_clock", "gpu_utilization", "dataloader"], 5.0)
    by = {x["metric"]: x for x in r["results"]}
    assert by["avg_iteration_time"]["regression_pct"] == pytest.approx(-20.0)      # 1000 → 800 µs
    assert by["wall_clock"]["regression_pct"] == pytest.approx(20.0)               # 2000 → 2400 µs total
    assert by["gpu_utilization"]["regression_pct"] == pytest.approx(-100.0)        # 35% → 70%
    assert by["dataloader"]["regression_pct"] == pytest.approx(100 * (20 - 300) / 300)
    assert [x["regressed"] for x in r["results"]] == [False, True, False, False]
    assert r["passed"] is False


def test_cli_passes_fails_and_explains(pair):
    base, new = pair
    ok = _run(new, "--baseline", base)
    assert ok.exit_code == 0, ok.output
    assert "passed" in ok.output and "20.0% better" in ok.output
    bad = _run(base, "--baseline", new, "--max-regression", "10%")
    assert bad.exit_code == 1
    assert "Average iteration time regressed by 25.0% (800.00 µs → 1.00 ms" in bad.output
    within = _run(base, "--baseline", new, "--max-regression", "30")
    assert within.exit_code == 0 and "within the limit" in within.output


def test_cli_json_output(pair):
    base, new = pair
    res = _run(base, "--baseline", new, "--metric", "avg_iteration_time", "--metric", "tc_kernel_efficiency", "--json")
    assert res.exit_code == 1
    doc = json.loads(res.stdout)
    assert doc["passed"] is False and [r["metric"] for r in doc["results"]] == ["avg_iteration_time",
                                                                                "tc_kernel_efficiency"]
    assert doc["results"][1]["regression_pct"] == pytest.approx(100 * (400 / 460 - 200 / 300) / (400 / 460))


def test_bad_input_is_exit_2(pair, tmp_path):
    base, new = pair
    foreign = tmp_path / "foreign.sqlite"
    foreign.write_text("hello")
    for args, message in (((new, "--baseline", tmp_path / "missing.sqlite"), "no such profile database"),
                          ((foreign, "--baseline", base), "not a"),
                          ((new, "--baseline", base, "--metric", "bogus"), "unknown metric"),
                          ((new, "--baseline", base, "--max-regression", "x%"), "bad --max-regression")):
        res = subprocess.run([sys.executable, "-m", "dlscope", "check", *map(str, args)], capture_output=True,
                             text=True)
        assert res.returncode == 2 and message in res.stderr, (args, res.stderr)
        assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr


def test_a_metric_missing_in_one_run_is_an_error_not_a_pass(pair, tmp_path, import_db):
    base, _ = pair
    whole = import_db(no_steps_trace(tmp_path / "nosteps.json"))
    res = _run(whole, "--baseline", base)
    assert isinstance(res.exception, DlscopeError)
    assert "Average iteration time cannot be compared: it is not available in the new run" in str(res.exception)
    assert "no iterations were found" in str(res.exception)
    ok = _run(whole, "--baseline", base, "--metric", "wall_clock", "--max-regression", "100%")
    assert ok.exit_code == 0, ok.output


def test_main_maps_check_failure_to_exit_1_and_a_crash_to_3(pair, monkeypatch, capsys):
    """Through the real entry point: a regression (1) must never look like a crash (3) to CI."""
    from dlscope import cli
    check = importlib.import_module("dlscope.compare.check")

    base, new = pair
    assert cli.main(["check", str(new), "--baseline", str(base)]) == 0
    assert cli.main(["check", str(base), "--baseline", str(new)]) == 1
    assert cli.main(["check", str(base), "--baseline", str(new), "--metric", "nope"]) == 2

    def broken(*args, **kwargs):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(check, "check", broken)
    capsys.readouterr()
    assert cli.main(["check", str(new), "--baseline", str(base)]) == cli.INTERNAL_ERROR == 3
    assert "internal error: ZeroDivisionError: a bug" in capsys.readouterr().err


@pytest.fixture(scope="module")
def resnet(import_db):
    return (import_db(data_file("kineto", "tbplugin_resnet50_v100_workers0.pt.trace.json.gz")),
            import_db(data_file("kineto", "tbplugin_resnet50_v100_workers4.pt.trace.json.gz")))


def test_resnet50_faster_run_passes_against_the_slower_baseline_and_not_reverse(resnet):
    slow, fast = resnet
    res = _run(fast, "--baseline", slow)
    assert res.exit_code == 0, res.output
    res = _run(slow, "--baseline", fast)
    assert res.exit_code == 1
    assert "Average iteration time regressed by 25.9%" in res.output   # 141.09 → 177.59 ms
    res = _run(slow, "--baseline", fast, "--metric", "dataloader_share,gpu_utilization", "--json")
    doc = json.loads(res.stdout)
    assert res.exit_code == 1 and all(r["regressed"] for r in doc["results"])



def test_lost_tensor_cores_fail_the_gate_like_the_diff_calls_them(pair):
    """The same direction table as `dlscope diff`: Tensor Core time and share falling is a regression."""
    base, new = pair                       # Tensor Core kernel time per iteration: 200 µs (base) → 400 µs (new)
    metrics = ["tc_kernel_time", "tensor_core", "tensor_core_share"]
    gained = check(new, base, metrics, 5.0)
    assert gained["passed"] and all(r["regression_pct"] < 0 for r in gained["results"])
    lost = check(base, new, metrics, 5.0)
    assert not lost["passed"] and all(r["regressed"] for r in lost["results"])
    by = {r["metric"]: r for r in lost["results"]}
    assert by["tc_kernel_time"]["regression_pct"] == pytest.approx(50.0)       # 400 → 200 µs
    spec = metric_table()["metrics"]
    assert all(spec[m]["better"] == "higher" for m in metrics)


def test_check_warns_when_the_runs_are_on_different_gpus(import_db):
    control = import_db(data_file("kineto", "hta_trace_diff_control_a100_rank3of8.json.gz"))
    test = import_db(data_file("kineto", "hta_trace_diff_test_v100_rank1of2.json.gz"))
    res = _run(test, "--baseline", control, "--metric", "tc_kernel_time", "--json")
    doc = json.loads(res.stdout)
    assert res.exit_code == 1 and doc["results"][0]["regressed"]               # 11 ms of Tensor Core time → 0
    assert "gpu" in {w["kind"] for w in doc["warnings"]}
    text = _run(test, "--baseline", control, "--metric", "tc_kernel_time")
    assert "warning: The runs are on different GPUs" in text.output
