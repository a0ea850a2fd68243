"""One capture: torch.profiler (or NVTX for nsys) around a running program, one bounded window of steps.

The session is shared by the ``dlscope profile`` bootstrap and the ``dlscope.profile()`` Python API, so
both record the same things: CPU ops with input shapes, module ranges, CUDA activity when a GPU is
there, ``ProfilerStep#N`` per step, and facts about the run (batch size, steps captured, how it ended)
that the database keeps next to the events.
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from ..system import TRACE_KEY, this_machine, torch_facts, trace_metadata
from .hooks import annotate_modules, first_batch_size, on_first_batch, on_optimizer_step
from .schedule import RECORD, RECORD_AND_SAVE, WARMUP, CaptureWindow


class Session(Protocol):
    """A running capture as ``dlscope.step()`` and the bootstrap see it: a :class:`CaptureSession` (torch
    profiler or NVTX) or a ``frameworks.FrameworkSession`` (JAX, TensorFlow, PaddlePaddle)."""

    step_num: int

    def start(self) -> Session: ...
    def step(self, explicit: bool = True) -> None: ...
    def stop(self, exc: BaseException | None = None) -> None: ...
    def facts(self) -> dict[str, Any]: ...


_ACTIVE: Session | None = None


def active_session() -> Session | None:
    """The capture running in this process, if any (what ``dlscope.step()`` steps)."""
    return _ACTIVE


def quiet_kineto() -> None:
    """Kineto prints profiler_start/stop lines on stderr; the user's stderr should stay theirs."""
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")


class CaptureSession:
    """Start with :meth:`start`, advance with :meth:`step`, end with :meth:`stop` (idempotent).

    ``backend="torch"`` records with torch.profiler and writes a Chrome trace into ``trace_dir`` when the
    window closes (or when the run ends inside it). ``backend="nvtx"`` is for running under nsys:
    autograd NVTX ranges (``emit_nvtx``), a ``ProfilerStep#N`` NVTX range per step, and
    ``cudaProfilerStart/Stop`` around the window so ``nsys --capture-range=cudaProfilerApi`` keeps it.
    """

    def __init__(self, trace_dir: str | Path, *, window: CaptureWindow | None = None, backend: str = "torch",
                 batch_size: int | None = None, record_shapes: bool = True, module_ranges: bool = True,
                 on_trace: Callable[[Path], None] | None = None, worker_name: str | None = None,
                 profile_memory: bool = False, with_stack: bool = False):
        if backend not in ("torch", "nvtx"):
            raise ValueError(f"unknown capture backend {backend!r}")
        self.trace_dir = Path(trace_dir)
        self.window = window or CaptureWindow()
        self.backend = backend
        self.batch_size = batch_size
        self.batch_size_source = "option" if batch_size else None
        self.record_shapes = record_shapes
        self.profile_memory = profile_memory  # every allocation and free: memory over time and its peaks
        self.with_stack = with_stack  # Python frames (python_function events) and each op's call stack
        self.module_ranges = module_ranges
        self.on_trace = on_trace
        self.worker_name = worker_name or f"{platform.node()}_{os.getpid()}"
        self.trace_paths: list[Path] = []
        self.step_num = 0
        self.explicit_steps = False
        self.started_at = time.time()
        self.ended_at: float | None = None
        self.exception: str | None = None
        self._prof: Any = None  # start(): a torch.profiler.profile, or emit_nvtx for the nsys backend (lazy torch)
        self._undo: list[Callable[[], None]] = []
        self._nvtx_step: Any = None
        self._cuda_profiling = False
        self._stopped = False

    # -- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> CaptureSession:
        global _ACTIVE
        if _ACTIVE is not None:
            raise RuntimeError("a dlscope capture is already running in this process")
        quiet_kineto()
        import torch

        self.torch_version = torch.__version__
        self.cuda = bool(torch.cuda.is_available())
        self.system = {**this_machine(), **torch_facts(torch)}
        self.trace_dir.mkdir(parents=True, exist_ok=True)
        self._undo.append(on_optimizer_step(lambda: self.step(explicit=False)))
        if self.batch_size is None:
            self._undo.append(on_first_batch(self._see_batch))
        if self.module_ranges and self.backend == "torch":
            self._undo.append(annotate_modules(lambda: self.window.is_capturing(self.step_num)))
        if self.backend == "torch":
            self._start_torch(torch)
        else:
            self._start_nvtx(torch)
        _ACTIVE = self
        return self

    def _start_torch(self, torch) -> None:
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU]
        if self.cuda:
            activities.append(ProfilerActivity.CUDA)
        self._prof = profile(activities=activities, schedule=self.window.torch_schedule(),
                             on_trace_ready=self._export, record_shapes=self.record_shapes,
                             with_modules=True, profile_memory=self.profile_memory, with_stack=self.with_stack)
        if hasattr(self._prof, "preset_metadata_json"):  # the facts travel with the trace file
            self._prof.preset_metadata_json(TRACE_KEY, trace_metadata(self.system))
        self._prof.start()

    def _start_nvtx(self, torch) -> None:
        self._prof = torch.autograd.profiler.emit_nvtx(record_shapes=self.record_shapes)
        self._prof.__enter__()
        self._nvtx_phase(self.window(0))

    def step(self, explicit: bool = True) -> None:
        """A training step ended. An explicit ``dlscope.step()`` turns the optimizer hook's steps off."""
        if self._stopped:
            return
        if explicit:
            self.explicit_steps = True
        elif self.explicit_steps:
            return
        self.step_num += 1
        if self.backend == "torch":
            self._prof.step()
        else:
            self._nvtx_phase(self.window(self.step_num))

    def stop(self, exc: BaseException | None = None) -> None:
        """End the capture; a window still open is written out with the steps recorded so far."""
        global _ACTIVE
        if self._stopped:
            return
        self._stopped = True
        if exc is not None and self.exception is None:
            self.exception = f"{type(exc).__name__}: {exc}".strip().rstrip(":")
        self.ended_at = time.time()
        try:
            if self.backend == "torch":
                self._prof.stop()
            else:
                self._nvtx_phase(None)
                self._prof.__exit__(None, None, None)
        finally:
            for undo in reversed(self._undo):
                undo()
            self._undo.clear()
            if _ACTIVE is self:
                _ACTIVE = None

    # -- outputs -----------------------------------------------------------------------------------
    def _export(self, prof) -> None:
        path = self.trace_dir / f"{self.worker_name}.{time.time_ns()}.pt.trace.json"
        prof.export_chrome_trace(str(path))
        self.trace_paths.append(path)
        if self.on_trace is not None:
            self.on_trace(path)

    def _see_batch(self, batch: Any) -> None:
        size = first_batch_size(batch)
        if size is not None and self.batch_size is None:
            self.batch_size, self.batch_size_source = size, "first batch"

    def _nvtx_phase(self, phase: str | None) -> None:
        """NVTX mode: a ProfilerStep#N range for every step, cudaProfilerStart/Stop around the window."""
        import torch

        if self._nvtx_step is not None:
            torch.cuda.nvtx.range_end(self._nvtx_step)
            self._nvtx_step = None
        recording = phase in (RECORD, RECORD_AND_SAVE)
        if recording and not self._cuda_profiling and self.cuda:
            torch.cuda.profiler.start()
            self._cuda_profiling = True
        if phase is not None and self.cuda:
            self._nvtx_step = torch.cuda.nvtx.range_start(f"ProfilerStep#{self.step_num}")
        if self._cuda_profiling and (phase is None or phase not in (WARMUP, RECORD, RECORD_AND_SAVE)):
            torch.cuda.synchronize()
            torch.cuda.profiler.stop()
            self._cuda_profiling = False

    def facts(self) -> dict[str, Any]:
        """What the database keeps about this capture (``extra_meta``)."""
        steps = self.window.recorded_steps(self.step_num)
        return {
            "backend": "torch" if self.backend == "torch" else "nsys",
            "profile_memory": self.profile_memory,
            "with_stack": self.with_stack,
            "torch_version": getattr(self, "torch_version", None),
            "python_version": platform.python_version(),
            "cuda_available": getattr(self, "cuda", None),
            "system": getattr(self, "system", {}),
            "steps_seen": self.step_num,
            "steps_captured": len(steps),
            "captured_steps": steps,
            "step_source": "dlscope.step()" if self.explicit_steps else "optimizer.step()",
            "schedule": {"wait": self.window.wait, "warmup": self.window.warmup, "active": self.window.active,
                         "delay_s": self.window.delay_s, "duration_s": self.window.duration_s},
            "batch_size": self.batch_size,
            "batch_size_source": self.batch_size_source,
            "exception": self.exception,
            "trace_files": [str(p) for p in self.trace_paths],
            "started_at": self.started_at,
            "ended_at": self.ended_at,
        }
