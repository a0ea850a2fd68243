"""``dlscope profile`` in the parent process: run the program under the bootstrap, import, summarize.

The program is a real child process with the user's stdin/stdout/stderr and working directory, so it
behaves as if run directly; dlscope's own messages go to stderr. The exit status is the program's: a
dlscope failure after the program ran is reported on stderr and only changes a 0 into 2.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import DlscopeError
from .command import check_interpreter_has_dlscope, parse_python_command
from .nsys import exported_sqlite, find_nsys, nsys_argv

DLSCOPE_FAILED = 2


@dataclass
class ProfileRequest:
    command: list[str]
    output: Path
    backend: str = "torch"
    framework: str = "torch"
    delay: float | None = None
    duration: float | None = None
    steps: int | None = None
    wait: int = 1
    warmup: int = 1
    iter_start: int | None = None
    iter_stop: int | None = None
    key_node: str | None = None
    profile_name: str | None = None
    batch_size: int | None = None
    sample_unit: str | None = None  # what a sample is (images, tokens ...), for the throughput
    force: bool = False
    keep_trace: bool = False
    profile_memory: bool = False
    with_stack: bool = False  # torch.profiler's with_stack: Python frames and each op's file:line
    summary: bool = True


def say(message: str) -> None:
    print(f"dlscope: {message}", file=sys.stderr, flush=True)


def _bootstrap_options(req: ProfileRequest, trace_dir: Path, sidecar: Path, nvtx: bool) -> list[str]:
    opts = ["--trace-dir", str(trace_dir), "--sidecar", str(sidecar), "--wait", str(req.wait),
            "--warmup", str(req.warmup)]
    if req.steps is not None:
        opts += ["--steps", str(req.steps)]
    if req.batch_size is not None:
        opts += ["--batch-size", str(req.batch_size)]
    if req.framework != "torch":
        opts += ["--framework", req.framework]
    if req.profile_memory:
        opts.append("--profile-memory")
    if req.with_stack:
        opts.append("--with-stack")
    if nvtx:  # --delay/--duration go to nsys, which then times the window itself
        opts.append("--nvtx")
    else:
        if req.delay is not None:
            opts += ["--delay", str(req.delay)]
        if req.duration is not None:
            opts += ["--duration", str(req.duration)]
    return opts


def run_child(argv: list[str], env: dict[str, str]) -> int:
    """Run the program; Ctrl-C reaches it from the terminal, a SIGTERM to dlscope is passed on.

    Returns the exit status, as a shell reports it (128 + signal number for a signal)."""
    proc = subprocess.Popen(argv, env=env)
    forward = lambda signum, frame: proc.send_signal(signum)  # noqa: E731
    previous = {signal.SIGINT: signal.signal(signal.SIGINT, signal.SIG_IGN),  # the child gets it too
                signal.SIGTERM: signal.signal(signal.SIGTERM, forward)}
    try:
        while True:
            try:
                code = proc.wait()
                break
            except InterruptedError:  # pragma: no cover - PEP 475 retries, kept for safety
                continue
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return 128 - code if code < 0 else code


def _child_env(req: ProfileRequest) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("KINETO_LOG_LEVEL", "6")  # keep Kineto's profiler_start/stop lines off the user's stderr
    env["DLSCOPE_CAPTURE"] = req.backend
    return env


def _read_sidecar(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def run_profile(req: ProfileRequest) -> int:
    """Profile ``req.command`` into ``req.output``; returns the exit status for the dlscope process."""
    out = req.output.resolve()
    if out.exists() and not req.force:
        raise DlscopeError(f"{out}: already exists (use --force to overwrite)")
    if not out.parent.is_dir():
        raise DlscopeError(f"{out.parent}: output folder does not exist")
    program = parse_python_command(req.command)
    nsys = find_nsys() if req.backend == "nsys" else None
    if req.framework != "torch" and req.backend != "torch":
        raise DlscopeError(f"--framework {req.framework} records with that framework's own profiler: "
                           "leave --backend at its default")
    if program is None and req.backend == "torch":
        raise DlscopeError(f"cannot profile `{req.command[0]}` with the torch backend: it enters Python programs "
                           "(`python SCRIPT`, `python -m MODULE`, a .py file); use --backend nsys for others")
    if program is not None:
        check_interpreter_has_dlscope(program)

    work = Path(tempfile.mkdtemp(prefix=".dlscope-capture-", dir=out.parent))
    trace_dir, sidecar = work / "traces", work / "capture.json"
    if program is not None:
        argv = program.bootstrap_argv(_bootstrap_options(req, trace_dir, sidecar, nvtx=nsys is not None))
    else:
        argv = list(req.command)
    if nsys is not None:
        argv = nsys_argv(nsys, work / "report", argv, delay=req.delay, duration=req.duration,
                         step_window=program is not None)
    how = f"{req.framework} profiler" if req.framework != "torch" else f"{req.backend} backend"
    say(f"profiling `{' '.join(req.command)}` ({how}) into {out}")
    started = time.time()
    try:
        status = run_child(argv, _child_env(req))
    except OSError as err:
        shutil.rmtree(work, ignore_errors=True)
        raise DlscopeError(f"cannot run `{argv[0]}`: {err.strerror}") from None
    facts = _read_sidecar(sidecar)
    facts.update({"backend": req.backend, "argv": list(req.command), "cwd": os.getcwd(), "exit_status": status,
                  "wall_s": round(time.time() - started, 3)})
    facts["ended_early"] = status != 0 or bool(facts.get("exception"))
    traces = _traces(req, work, trace_dir)
    built = _build(req, out, traces, facts, work, status)
    if built and req.summary:
        _print_summary(out)
    if built is None and status == 0:
        return DLSCOPE_FAILED
    return status


def _traces(req: ProfileRequest, work: Path, trace_dir: Path) -> list[Path]:
    if req.backend == "nsys":
        report = exported_sqlite(work / "report")
        return [report] if report else []
    if req.framework != "torch":
        from .frameworks import TRACE_GLOBS

        return sorted(trace_dir.glob(TRACE_GLOBS[req.framework])) if trace_dir.is_dir() else []
    return sorted(trace_dir.glob("*.pt.trace.json*")) if trace_dir.is_dir() else []


def _build(req: ProfileRequest, out: Path, traces: list[Path], facts: dict, work: Path, status: int) -> Path | None:
    """Import what was captured; on failure say why on stderr and keep the raw files for a retry."""
    if not traces:
        seen, window = facts.get("steps_seen"), facts.get("schedule") or {}
        why = (f"the program ended (exit status {status}) after {seen} steps, before the capture window "
               f"(wait {window.get('wait')}, warmup {window.get('warmup')} steps) began"
               if seen is not None else f"the program ended (exit status {status}) before anything was recorded")
        if seen == 0 and status == 0:
            counted = {"jax": "calls of the jitted step function", "tf": "Keras fit batches"}.get(
                req.framework, "optimizer.step() calls")
            why = (f"no training steps were seen: the window counts {counted}; call dlscope.step() "
                   "once per iteration in loops without one")
        say(f"nothing was captured: {why}")
        shutil.rmtree(work, ignore_errors=True)
        return None
    try:
        from ..pipeline import build_database

        name = req.profile_name or _shorten(" ".join(req.command))
        build_database(traces, out, profile_name=name, iter_start=req.iter_start,
                       iter_stop=req.iter_stop, key_node=req.key_node, force=req.force,
                       extra_meta={"capture": facts, "throughput": {"unit": req.sample_unit}}, progress=True)
    except Exception as err:  # noqa: BLE001 - dlscope's failure must not hide the program's outcome
        say(f"could not build {out}: {err}; the raw capture is kept in {work}")
        return None
    if req.keep_trace:
        for trace in traces:
            shutil.move(str(trace), out.parent / f"{out.stem}.{trace.name}")
    shutil.rmtree(work, ignore_errors=True)
    return out


def _shorten(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _print_summary(db: Path) -> None:
    try:
        from ..present.summary import render_summary, summary_dict

        sys.stderr.write(render_summary(summary_dict(db)))
        sys.stderr.flush()
    except Exception as err:  # noqa: BLE001
        say(f"{db} was written, but its summary failed: {err}")
