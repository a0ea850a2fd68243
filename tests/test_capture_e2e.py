"""`dlscope profile -- python SCRIPT` end to end on CPU: the program runs as if alone, the database is right."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
pytestmark = pytest.mark.slow


def _profile_cmd() -> list[str]:
    from dlscope import cli

    if "profile" in cli.cli.list_commands(None):
        return [sys.executable, "-m", "dlscope", "profile"]
    return [sys.executable, "-c", "from dlscope.capture.cli_profile import profile_command as c; "
            "c(prog_name='dlscope profile')"]


def profile(tmp_path: Path, *args: str, db: str = "run.sqlite", **kw) -> subprocess.CompletedProcess:
    out = tmp_path / db
    return subprocess.run([*_profile_cmd(), "-o", str(out), *args], capture_output=True, text=True,
                          cwd=kw.pop("cwd", tmp_path), timeout=kw.pop("timeout", 240), **kw)


def summary(db: Path) -> dict:
    from dlscope.present.summary import summary_dict

    return summary_dict(db)


def iteration_names(db: Path) -> list[str]:
    with sqlite3.connect(db) as conn:
        return [r[0] for r in conn.execute("SELECT name FROM iterations ORDER BY iteration")]


def test_mlp_example_profiles_the_captured_steps(tmp_path):
    res = profile(tmp_path, "--", sys.executable, str(EXAMPLES / "mlp.py"), "--steps", "12", "--batch-size", "32")
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("mlp: 12 steps")  # the program's stdout is untouched
    assert "dlscope summary" in res.stderr  # dlscope speaks on stderr
    s = summary(tmp_path / "run.sqlite")
    cap = s["capture"]
    assert cap["steps_captured"] == 5 and cap["captured_steps"] == [2, 3, 4, 5, 6]
    assert cap["ended_early"] is False and cap["exit_status"] == 0 and cap["steps_seen"] == 12
    assert cap["backend"] == "torch" and cap["torch_version"].startswith("2.")
    assert s["profile"]["iterations_total"] == cap["steps_captured"]
    assert iteration_names(tmp_path / "run.sqlite") == [f"ProfilerStep#{i}" for i in cap["captured_steps"]]
    agg = s["aggregation"]
    assert sum(agg["resource_breakdown_ns"].values()) == agg["wall_clock_ns"] > 0
    assert not list(tmp_path.glob(".dlscope-capture-*"))  # the temporary capture folder is gone


SCRIPT = textwrap.dedent("""
    import os, sys, torch
    print("argv", sys.argv)
    print("name", __name__, "cwd", os.getcwd(), "path0", sys.path[0])
    print("to stderr", file=sys.stderr)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    fail_at = int(os.environ.get("FAIL_AT", "-1"))
    for step in range(int(os.environ.get("STEPS", "6"))):
        if step == fail_at:
            raise RuntimeError(f"boom at step {step}")
        model(torch.randn(3, 4)).sum().backward()
        opt.step()
    sys.exit(int(os.environ.get("EXIT", "0")))
""")


def _direct(tmp_path: Path, script: Path, *args: str, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, cwd=tmp_path,
                          env=env)


def test_argv_stdout_stderr_cwd_and_exit_code_pass_through(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "EXIT": "3", "STEPS": "9"}
    direct = _direct(tmp_path, script, "--flag", "x y", env=env)
    res = profile(tmp_path, "--", sys.executable, str(script), "--flag", "x y", env=env)
    assert direct.returncode == res.returncode == 3
    assert res.stdout == direct.stdout
    assert "to stderr" in res.stderr
    s = summary(tmp_path / "run.sqlite")
    assert s["capture"]["exit_status"] == 3 and s["capture"]["ended_early"] is True
    assert s["capture"]["argv"] == [sys.executable, str(script), "--flag", "x y"]


def test_crash_mid_run_leaves_a_database_of_the_steps_before_it(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "FAIL_AT": "4", "STEPS": "20"}
    res = profile(tmp_path, "--steps", "10", "--", sys.executable, str(script), env=env)
    direct = _direct(tmp_path, script, env=env)
    assert res.returncode == direct.returncode == 1
    assert "RuntimeError: boom at step 4" in res.stderr
    tb = res.stderr[res.stderr.index("Traceback"):res.stderr.index("RuntimeError: boom")]
    assert "bootstrap" not in tb and "runpy" not in tb and "prog.py" in tb  # the traceback is the user's own
    s = summary(tmp_path / "run.sqlite")
    cap = s["capture"]
    assert cap["ended_early"] is True and cap["exception"] == "RuntimeError: boom at step 4"
    # steps 2 and 3 completed; the crash happened inside step 4, which is kept up to the crash
    assert cap["captured_steps"] == [2, 3, 4]
    assert iteration_names(tmp_path / "run.sqlite") == ["ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"]
    assert "ended early" in res.stderr


def test_crash_before_the_window_says_nothing_was_captured(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(SCRIPT)
    res = profile(tmp_path, "--", sys.executable, str(script), env={**os.environ, "FAIL_AT": "0"})
    assert res.returncode == 1
    assert "nothing was captured" in res.stderr
    assert not (tmp_path / "run.sqlite").exists()


def _dataloader_time(tmp_path: Path, sleep_ms: str, db: str) -> tuple[float, float]:
    """Data-loading share of the wall clock and data-loading time per profiled step (ns)."""
    # a model with real compute per step (~12 ms here), so the shares compare loading against work
    res = profile(tmp_path, "--", sys.executable, str(EXAMPLES / "slow_dataset.py"), "--steps", "9",
                  "--sleep-ms", sleep_ms, "--hidden", "2048", db=db)
    assert res.returncode == 0, res.stderr
    s = summary(tmp_path / db)
    agg = s["aggregation"]
    assert sum(agg["resource_breakdown_ns"].values()) == agg["wall_clock_ns"]
    assert s["capture"]["batch_size"] == 16 and s["capture"]["batch_size_source"] == "first batch"
    loading = agg["resource_breakdown_ns"]["dataloader"]
    # throughput from that first batch: 16 samples a step; the reader cost counts all of each __next__, at least
    # the breakdown's Dataloader part (data loading while nothing else runs)
    tp = agg["throughput"]
    assert tp["samples_per_s"] == pytest.approx(16 * agg["iterations_profiled"] / (agg["wall_clock_ns"] * 1e-9))
    assert tp["reader_cost_ratio"] * agg["wall_clock_ns"] >= loading - 1  # a float ratio: equal to within 1 ns
    return loading / agg["wall_clock_ns"], loading / agg["iterations_profiled"]


def test_slow_dataset_shows_a_larger_dataloader_share(tmp_path):
    slow_share, slow_per_step = _dataloader_time(tmp_path, "10", "slow.sqlite")
    fast_share, fast_per_step = _dataloader_time(tmp_path, "0", "fast.sqlite")
    figures = f"slow: {slow_share:.2f} of wall, {slow_per_step / 1e6:.1f} ms/step; " \
              f"fast: {fast_share:.2f}, {fast_per_step / 1e6:.1f} ms/step"
    # the 16 samples x 10 ms of sleep per batch show up as data loading (at least half of it per step, allowing
    # for a captured step whose batch was fetched before the recording window opened). The sleep is the oracle: an
    # absolute time that CPU contention cannot shrink, whereas the compute it is compared with in a share can grow
    # many times on a busy machine (CI saw 155 ms of compute a step in the slow run against ~18 ms in the fast one)
    assert slow_per_step - fast_per_step >= 0.5 * 16 * 10e6, figures
    assert slow_share > fast_share, figures


def test_dataloader_workers_and_module_ranges(tmp_path):
    res = profile(tmp_path, "--batch-size", "32", "--", sys.executable, str(EXAMPLES / "cnn_dataloader.py"),
                  "--steps", "9", "--workers", "2")
    assert res.returncode == 0, res.stderr
    db = tmp_path / "run.sqlite"
    with sqlite3.connect(db) as conn:
        names = {r[0] for r in conn.execute("SELECT DISTINCT name FROM ranges")}
    assert "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__" in names
    assert {"nn.Module: SmallCNN", "nn.Module: SmallCNN.features.0", "forward_backward"} <= names
    assert summary(db)["capture"]["batch_size_source"] == "option"


def test_dlscope_step_marks_iterations_without_an_optimizer(tmp_path):
    script = tmp_path / "infer.py"
    script.write_text(textwrap.dedent("""
        import torch, dlscope.capture as dl
        model = torch.nn.Linear(8, 8)
        with torch.no_grad():
            for _ in range(8):
                with dl.range("predict"):
                    model(torch.randn(4, 8))
                dl.step()
    """))
    res = profile(tmp_path, "--steps", "3", "--", sys.executable, str(script))
    assert res.returncode == 0, res.stderr
    s = summary(tmp_path / "run.sqlite")
    assert s["capture"]["step_source"] == "dlscope.step()"
    assert iteration_names(tmp_path / "run.sqlite") == ["ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"]


def test_python_api_profile_block(tmp_path):
    script = tmp_path / "api.py"
    db = tmp_path / "api.sqlite"
    script.write_text(textwrap.dedent(f"""
        import torch, dlscope.capture as dl
        model = torch.nn.Linear(8, 8)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        with dl.profile({str(db)!r}, steps=4, summary=False) as p:
            for _ in range(10):
                model(torch.randn(4, 8)).sum().backward()
                opt.step()
        print(p.facts["steps_captured"], len(p.trace_paths))
    """))
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, timeout=240)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["4", "1"]
    assert iteration_names(db) == [f"ProfilerStep#{i}" for i in range(2, 6)]
    assert not list(tmp_path.glob(".dlscope-traces-*"))


def test_ctrl_c_still_leaves_a_database(tmp_path):
    script = tmp_path / "loop.py"
    script.write_text(textwrap.dedent("""
        import torch, time
        model = torch.nn.Linear(4, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        step = 0
        while True:
            model(torch.randn(3, 4)).sum().backward()
            opt.step()
            step += 1
            if step == 4:
                print("ready", flush=True)
            time.sleep(0.05)
    """))
    # like a terminal's Ctrl-C: SIGINT to the whole foreground process group
    proc = subprocess.Popen([*_profile_cmd(), "-o", str(tmp_path / "run.sqlite"), "--steps", "50", "--",
                             sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=tmp_path, start_new_session=True)
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(0.3)
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 130, err
    assert "KeyboardInterrupt" in err
    s = summary(tmp_path / "run.sqlite")
    assert s["capture"]["ended_early"] is True
    assert s["profile"]["iterations_total"] == s["capture"]["steps_captured"] >= 2


@pytest.mark.slow
def test_profile_view_opens_the_viewer_on_the_database_it_wrote(tmp_path, monkeypatch):
    """`dlscope profile --view` hands the new database to the viewer (it used to import `serve` from the wrong
    module and print "not available in this build")."""
    from click.testing import CliRunner

    from dlscope.capture.cli_profile import profile_command
    from dlscope.viewer import cli_view

    served = []
    monkeypatch.setattr(cli_view, "serve", lambda dbs, **kw: served.append((list(dbs), kw)))
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "v.sqlite"
    result = CliRunner().invoke(profile_command, ["-o", str(out), "--view", "--", sys.executable,
                                                  str(EXAMPLES / "mlp.py"), "--steps", "8"])
    assert result.exit_code == 0, result.output
    assert served == [([out], {"open_browser": True})]
