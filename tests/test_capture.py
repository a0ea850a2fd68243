"""Capture units: the step window, the command parsing, batch-size detection, the handler, bad requests."""

from __future__ import annotations

import sys

import pytest

from dlscope.capture.command import parse_python_command
from dlscope.capture.runner import ProfileRequest, run_profile
from dlscope.capture.schedule import NONE, RECORD, RECORD_AND_SAVE, WARMUP, CaptureWindow
from dlscope.errors import DlscopeError


def test_default_window_skips_warms_records_then_stops():
    w = CaptureWindow()
    assert [w(s) for s in range(9)] == [NONE, WARMUP, RECORD, RECORD, RECORD, RECORD, RECORD_AND_SAVE, NONE, NONE]
    assert w.recorded_steps(upto=100) == [2, 3, 4, 5, 6]
    assert w.recorded_steps(upto=3) == [2, 3]  # a run that ended inside step 3 recorded 2 and part of 3


def test_window_without_wait_or_warmup_records_from_the_start():
    w = CaptureWindow(wait=0, warmup=0, active=2)
    assert [w(s) for s in range(4)] == [RECORD, RECORD_AND_SAVE, NONE, NONE]


def test_delay_and_duration_are_checked_at_step_boundaries():
    now = [0.0]
    w = CaptureWindow(wait=0, warmup=1, active=None, delay_s=1.0, duration_s=2.0, clock=lambda: now[0])
    phases = []
    for step in range(10):
        phases.append(w(step))
        now[0] += 0.5
    # steps 0,1 fall inside the 1 s delay; 2 warms up; recording starts at 3 (t=1.5) and the step that
    # begins at or after t=3.5 is the last one recorded
    assert phases == [NONE, NONE, WARMUP, RECORD, RECORD, RECORD, RECORD, RECORD_AND_SAVE, NONE, NONE]
    assert w(5) == RECORD  # asking again gives the same answer


def test_window_rejects_zero_steps():
    with pytest.raises(ValueError):
        CaptureWindow(active=0)


@pytest.mark.parametrize("command, expect", [
    (["python", "SCRIPT", "--lr", "0.1"], dict(script="SCRIPT", args=["--lr", "0.1"], flags=[])),
    (["python3", "-u", "-W", "ignore", "SCRIPT", "-m", "x"],
     dict(script="SCRIPT", args=["-m", "x"], flags=["-u", "-W", "ignore"])),
    (["python", "-m", "pkg.train", "--epochs", "1"], dict(module="pkg.train", args=["--epochs", "1"], flags=[])),
    (["python", "-Xdev", "-c", "print(1)", "a"], dict(code="print(1)", args=["a"], flags=["-Xdev"])),
    (["SCRIPT", "b"], dict(script="SCRIPT", args=["b"], flags=[])),
])
def test_python_commands_are_understood(tmp_path, command, expect):
    script = tmp_path / "train.py"
    script.write_text("pass\n")
    command = [str(script) if c == "SCRIPT" else c for c in command]
    cmd = parse_python_command(command)
    assert cmd.interpreter_flags == expect["flags"]
    assert cmd.args == expect["args"]
    if "script" in expect:
        assert cmd.script == str(script)
        argv = cmd.bootstrap_argv(["--opt"])
        assert argv[-len(command) + command.index(str(script)):] == [str(script), *expect["args"]]
        assert argv[argv.index("--") + 1] == str(script)
    assert cmd.module == expect.get("module")
    assert cmd.code == expect.get("code")


def test_non_python_commands_and_missing_scripts():
    assert parse_python_command(["bash", "run.sh"]) is None
    with pytest.raises(DlscopeError, match="no such script"):
        parse_python_command(["python", "does_not_exist.py"])
    with pytest.raises(DlscopeError, match="interactive"):
        parse_python_command(["python"])


def test_first_batch_size_finds_the_first_tensor():
    torch = pytest.importorskip("torch")
    from dlscope.capture.hooks import first_batch_size

    assert first_batch_size((torch.zeros(7, 3), torch.zeros(7))) == 7
    assert first_batch_size({"meta": ["a"], "x": torch.zeros(5, 2)}) == 5
    assert first_batch_size([[torch.zeros(4)], torch.zeros(9)]) == 4
    assert first_batch_size(torch.tensor(3.0)) is None
    assert first_batch_size(["no", "tensors"]) is None


def _request(tmp_path, command, **kw) -> ProfileRequest:
    return ProfileRequest(command=command, output=tmp_path / "run.sqlite", **kw)


def test_existing_output_is_refused_before_the_program_runs(tmp_path):
    marker = tmp_path / "ran"
    script = tmp_path / "t.py"
    script.write_text(f"open({str(marker)!r}, 'w')\n")
    (tmp_path / "run.sqlite").write_text("x")
    with pytest.raises(DlscopeError, match="already exists"):
        run_profile(_request(tmp_path, [sys.executable, str(script)]))
    assert not marker.exists()


def test_torch_backend_needs_a_python_program(tmp_path):
    with pytest.raises(DlscopeError, match="--backend nsys"):
        run_profile(_request(tmp_path, ["bash", "-c", "true"]))


def test_nsys_backend_without_nsys_says_how_to_install(tmp_path, monkeypatch):
    script = tmp_path / "t.py"
    script.write_text("pass\n")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(DlscopeError) as err:
        run_profile(_request(tmp_path, [sys.executable, str(script)], backend="nsys"))
    message = str(err.value)
    assert "nsys" in message and "not on PATH" in message and "install" in message.lower()
    assert "\n" not in message
    assert not list(tmp_path.glob(".dlscope-capture-*"))


def test_nsys_command_line(tmp_path):
    from dlscope.capture.nsys import nsys_argv

    argv = nsys_argv("/opt/nsys", tmp_path / "report", ["python", "-m", "x"])
    assert argv[:2] == ["/opt/nsys", "profile"]
    assert argv[argv.index("-t") + 1] == "cuda,nvtx,osrt,cudnn,cublas"
    assert argv[argv.index("--export") + 1] == "sqlite"
    assert argv[argv.index("--capture-range") + 1] == "cudaProfilerApi"
    assert argv[-3:] == ["python", "-m", "x"]
    timed = nsys_argv("nsys", tmp_path / "r", ["p"], delay=3, duration=10)
    assert "--capture-range" not in timed and timed[timed.index("--delay") + 1] == "3"


def test_trace_handler_writes_a_kineto_trace(tmp_path):
    torch = pytest.importorskip("torch")
    import gzip
    import json

    from dlscope.capture.api import trace_handler

    handler = trace_handler(tmp_path / "traces", worker_name="w0")
    with torch.profiler.profile(schedule=torch.profiler.schedule(wait=0, warmup=1, active=2, repeat=1),
                                on_trace_ready=handler) as prof:
        for _ in range(4):
            torch.randn(8, 8) @ torch.randn(8, 8)
            prof.step()
    assert len(handler.paths) == 1
    path = handler.paths[0]
    assert path.name.startswith("w0.") and path.name.endswith(".pt.trace.json.gz")
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    steps = {e["name"] for e in events if e.get("name", "").startswith("ProfilerStep#")}
    assert steps == {"ProfilerStep#1", "ProfilerStep#2"}
    assert any(e.get("name") == "aten::mm" for e in events)


def test_range_is_a_record_function_annotation_and_a_decorator():
    torch = pytest.importorskip("torch")
    from dlscope.capture.api import range as dl_range

    @dl_range("decorated")
    def work():
        return torch.ones(2) + 1

    with torch.profiler.profile() as prof:
        with dl_range("block"):
            work()
    names = [e.name for e in prof.events()]
    assert "block" in names and "decorated" in names
