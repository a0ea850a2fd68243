"""Child-process entry of ``dlscope profile``: run the user's program as ``__main__`` under a capture.

    python -m dlscope.capture.bootstrap [options] -- SCRIPT ARGS...
    python -m dlscope.capture.bootstrap [options] --module MOD -- ARGS...

The program sees the argv, ``__main__``, sys.path[0], stdout/stderr and exit status it would see when
run directly; a crash, ``sys.exit`` or Ctrl-C still writes the trace of the steps captured so far and
a JSON sidecar of facts about the run, then exits the way the program would have.
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import signal
import sys

from .schedule import CaptureWindow
from .session import CaptureSession, Session


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m dlscope.capture.bootstrap")
    p.add_argument("--trace-dir", required=True)
    p.add_argument("--sidecar", required=True)
    p.add_argument("--wait", type=int, default=1)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--delay", type=float, default=None)
    p.add_argument("--duration", type=float, default=None)
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--profile-memory", action="store_true", help="torch.profiler's profile_memory")
    p.add_argument("--with-stack", action="store_true", help="torch.profiler's with_stack (Python frames)")
    p.add_argument("--nvtx", action="store_true", help="run under nsys: NVTX ranges instead of torch.profiler")
    p.add_argument("--framework", default="torch", choices=["torch", "jax", "tf", "paddle"],
                   help="whose profiler records: torch.profiler, or JAX's, TensorFlow's or Paddle's own")
    p.add_argument("--module", default=None, help="run a module like python -m")
    p.add_argument("--code", default=None, help="run code like python -c")
    return p


def _split(argv: list[str]) -> tuple[list[str], list[str]]:
    if "--" not in argv:
        raise SystemExit("dlscope bootstrap: expected `-- SCRIPT ARGS...`")
    cut = argv.index("--")
    return argv[:cut], argv[cut + 1:]


def _write_sidecar(path: str, facts: dict) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as fh:
        json.dump(facts, fh, default=str)
    os.replace(tmp, path)


def _user_traceback(exc: BaseException):
    """The traceback from the user's first frame on, as Python would print it for a direct run."""
    tb = exc.__traceback__
    ours = {os.path.abspath(__file__), os.path.abspath(runpy.__file__), "<frozen runpy>"}
    while tb is not None and (tb.tb_frame.f_code.co_filename in ours
                              or os.path.abspath(tb.tb_frame.f_code.co_filename) in ours):
        tb = tb.tb_next
    return tb


def _run_user(opts, rest: list[str]) -> None:
    if opts.module:
        sys.argv = [opts.module, *rest]  # runpy replaces argv[0] with the module's file
        runpy.run_module(opts.module, run_name="__main__", alter_sys=True)
    elif opts.code is not None:
        sys.argv = ["-c", *rest]
        sys.path[0] = ""
        exec(compile(opts.code, "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
    else:
        script = rest[0]
        sys.argv = list(rest)
        sys.path[0] = os.path.dirname(os.path.abspath(script))
        runpy.run_path(script, run_name="__main__")


def _raise_sigterm(signum, frame):
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> None:
    ours, rest = _split(list(sys.argv[1:] if argv is None else argv))
    opts = _parser().parse_args(ours)
    if not rest and not opts.module and opts.code is None:
        raise SystemExit("dlscope bootstrap: no program to run")
    active = opts.steps
    if active is None and opts.duration is None:
        from .schedule import DEFAULT_ACTIVE
        active = DEFAULT_ACTIVE
    window = CaptureWindow(wait=opts.wait, warmup=opts.warmup, active=active,
                           delay_s=opts.delay, duration_s=opts.duration)
    session: Session
    if opts.framework != "torch":
        from .frameworks import SESSIONS

        session = SESSIONS[opts.framework](opts.trace_dir, window=window, batch_size=opts.batch_size)
    else:
        session = CaptureSession(opts.trace_dir, window=window, backend="nvtx" if opts.nvtx else "torch",
                                 batch_size=opts.batch_size, profile_memory=opts.profile_memory,
                                 with_stack=opts.with_stack)
    _write_sidecar(opts.sidecar, {"started": True})
    # A SIGTERM (e.g. a job scheduler's) becomes an exception so the open window is written out;
    # the program's own handler, if it installs one, replaces this.
    term_was_default = signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    if term_was_default:
        signal.signal(signal.SIGTERM, _raise_sigterm)
    session.start()
    outcome: BaseException | None = None
    try:
        _run_user(opts, rest)
    except BaseException as exc:  # noqa: BLE001 - everything is re-raised below, after cleanup
        outcome = exc
    interrupted = isinstance(outcome, KeyboardInterrupt)
    prev_int = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the export
    try:
        failed = outcome is not None and not (isinstance(outcome, SystemExit) and outcome.code in (None, 0))
        session.stop(outcome if failed else None)
    except Exception as err:  # dlscope's own failure: say so, keep the program's outcome
        print(f"dlscope: capture failed to stop cleanly: {err}", file=sys.stderr)
    finally:
        try:
            _write_sidecar(opts.sidecar, session.facts())
        except Exception as err:
            print(f"dlscope: could not write {opts.sidecar}: {err}", file=sys.stderr)
        signal.signal(signal.SIGINT, prev_int)
    if outcome is None:
        return
    if isinstance(outcome, SystemExit):
        if outcome.code == 128 + signal.SIGTERM and term_was_default \
                and signal.getsignal(signal.SIGTERM) is _raise_sigterm:
            _die_by(signal.SIGTERM)
        raise outcome
    sys.stdout.flush()
    trimmed = _user_traceback(outcome)
    outcome.__traceback__ = trimmed
    sys.excepthook(type(outcome), outcome, trimmed)
    if interrupted:
        _die_by(signal.SIGINT)  # what CPython does for an uncaught KeyboardInterrupt
    raise SystemExit(1)


def _die_by(signum: int) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
    raise SystemExit(128 + signum)


if __name__ == "__main__":
    main()
