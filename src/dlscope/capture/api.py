"""The capture from inside a program: ``dlscope.profile()``, ``dlscope.step()``, ``dlscope.range()``,
``dlscope.trace_handler()``. None of them imports torch until used, so ``import dlscope`` stays cheap.
"""

from __future__ import annotations

import functools
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, cast

from .schedule import DEFAULT_ACTIVE, DEFAULT_WAIT, DEFAULT_WARMUP, CaptureWindow
from .session import CaptureSession, active_session, quiet_kineto


def step() -> None:
    """Mark the end of a training step (for loops without ``optimizer.step()``, e.g. inference).

    Advances the capture running in this process (``dlscope profile`` or ``dlscope.profile()``); once
    called, optimizer steps no longer count. Without a capture it does nothing, so it can stay in the code.
    """
    session = active_session()
    if session is not None:
        session.step(explicit=True)


def _nvtx_wanted() -> bool:
    session = active_session()
    if session is not None:  # only the torch session has an NVTX backend; a JAX/TF/Paddle session has none
        return isinstance(session, CaptureSession) and session.backend == "nvtx"
    return os.environ.get("DLSCOPE_CAPTURE") == "nsys"


class range:  # noqa: A001 - named like torch.cuda.nvtx.range on purpose
    """A named range, as a context manager or decorator: ``with dlscope.range("forward"): ...``.

    Under the torch backend it is a ``torch.profiler.record_function`` annotation; under nsys an NVTX
    range (``nvtx`` package when installed, else ``torch.cuda.nvtx``). Outside a capture it costs
    about as much as an inactive ``record_function``.
    """

    def __init__(self, name: str):
        self.name = str(name)
        self._exits: list[Callable[[], None]] = []

    def __enter__(self) -> range:
        self._exits.append(_open_range(self.name))
        return self

    def __exit__(self, *exc) -> None:
        self._exits.pop()()

    def __call__(self, fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            close = _open_range(self.name)
            try:
                return fn(*args, **kwargs)
            finally:
                close()
        return wrapper


def _open_range(name: str) -> Callable[[], None]:
    if _nvtx_wanted():
        try:
            import nvtx

            nvtx.push_range(name, domain="dlscope")
            return lambda: nvtx.pop_range(domain="dlscope")
        except ImportError:
            import torch

            if torch.cuda.is_available():
                torch.cuda.nvtx.range_push(name)
                return torch.cuda.nvtx.range_pop
    import torch

    handle = torch.ops.profiler._record_function_enter_new(name, None)
    return lambda: torch.ops.profiler._record_function_exit._RecordFunction(handle)


class profile:  # noqa: A001 - reads as dlscope.profile(...)
    """Capture a block of a program: ``with dlscope.profile("run.sqlite", steps=10): train()``.

    Steps are counted at ``optimizer.step()`` (or ``dlscope.step()``); ``wait`` steps are skipped,
    ``warmup`` run with the profiler warming up, ``steps`` are recorded. On exit the trace is imported
    into ``db_path`` (when given) and, with ``summary=True``, the summary is printed on stderr. If the
    block raises, what was recorded is still written and the database says the run ended early.
    """

    def __init__(self, db_path: str | Path | None = None, *, steps: int | None = DEFAULT_ACTIVE,
                 wait: int = DEFAULT_WAIT, warmup: int = DEFAULT_WARMUP, delay: float | None = None,
                 duration: float | None = None, trace_dir: str | Path | None = None, batch_size: int | None = None,
                 profile_name: str | None = None, iter_start: int | None = None, iter_stop: int | None = None,
                 key_node: str | None = None, force: bool = False, summary: bool = True,
                 profile_memory: bool = False, with_stack: bool = False):
        self.db_path = Path(db_path) if db_path is not None else None
        if self.db_path is not None and self.db_path.exists() and not force:
            from ..errors import DlscopeError
            raise DlscopeError(f"{self.db_path}: already exists (use force=True to overwrite)")
        if trace_dir is None:
            base = self.db_path.parent if self.db_path is not None else Path.cwd()
            trace_dir = base / f".dlscope-traces-{os.getpid()}-{time.time_ns()}"
            self._own_trace_dir = True
        else:
            self._own_trace_dir = False
        self.trace_dir = Path(trace_dir)
        self.window = CaptureWindow(wait=wait, warmup=warmup, active=steps, delay_s=delay, duration_s=duration)
        self.session = CaptureSession(self.trace_dir, window=self.window, batch_size=batch_size,
                                      profile_memory=profile_memory, with_stack=with_stack)
        self._build: dict[str, Any] = dict(profile_name=profile_name, iter_start=iter_start, iter_stop=iter_stop,
                                           key_node=key_node, force=force)
        self.summary = summary
        self.facts: dict[str, Any] = {}

    @property
    def trace_paths(self) -> list[Path]:
        return list(self.session.trace_paths)

    def step(self) -> None:
        self.session.step(explicit=True)

    def __enter__(self) -> profile:
        self.session.start()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.session.stop(exc)
        self.facts = {**self.session.facts(), "backend": "torch", "argv": list(sys.argv),
                      "ended_early": exc is not None, "exit_status": None}
        if self.db_path is not None and self.trace_paths:
            try:
                self._write_database()
            except Exception as err:  # noqa: BLE001 - never replace the block's own exception
                if exc is None:
                    raise
                print(f"dlscope: could not build {self.db_path}: {err}", file=sys.stderr)
        elif self.db_path is not None:
            print(f"dlscope: nothing was captured ({self.session.step_num} steps seen; the window starts "
                  f"after {self.window.wait + self.window.warmup}); {self.db_path} was not written", file=sys.stderr)

    def _write_database(self) -> None:
        from ..pipeline import build_database
        from ..processes import embedded

        assert self.db_path is not None  # __exit__ writes a database only when one was asked for
        with embedded():  # the user's (multi-threaded) process: never forked
            build_database(self.trace_paths, self.db_path, extra_meta={"capture": self.facts}, progress=False,
                           **self._build)
        if self._own_trace_dir:
            for path in self.trace_paths:
                path.unlink(missing_ok=True)
            try:
                self.trace_dir.rmdir()
            except OSError:
                pass
        if self.summary:
            from ..present.summary import render_summary, summary_dict

            sys.stderr.write(render_summary(summary_dict(self.db_path)))


class TraceHandler(Protocol):
    """What ``trace_handler`` returns: an ``on_trace_ready`` callable with the list of the traces it wrote."""

    paths: list[Path]

    def __call__(self, prof: Any) -> Path: ...


def trace_handler(dir_name: str | Path, *, worker_name: str | None = None, use_gzip: bool = True,
                  db_path: str | Path | None = None, **build_options) -> TraceHandler:
    """An ``on_trace_ready`` handler for ``torch.profiler.profile``, like ``tensorboard_trace_handler``.

    Each ready trace is written to ``dir_name/{worker}.{ns}.pt.trace.json[.gz]``; with ``db_path`` it is
    also imported into that database (each new trace replaces the previous database). The written paths
    are in the handler's ``paths`` list.
    """
    directory = Path(dir_name)
    worker = worker_name or f"{platform.node()}_{os.getpid()}"
    quiet_kineto()

    def handler(prof) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{worker}.{time.time_ns()}.pt.trace.json{'.gz' if use_gzip else ''}"
        prof.export_chrome_trace(str(path))
        traced.paths.append(path)
        if db_path is not None:
            from ..pipeline import build_database
            from ..processes import embedded

            with embedded():  # the user's (multi-threaded) process: never forked
                build_database([path], db_path, **{"force": True, "progress": False, **build_options})
        return path

    traced = cast(TraceHandler, handler)  # a TraceHandler once it has its paths list, the next line
    traced.paths = []
    return traced
