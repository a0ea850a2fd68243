"""Capture a JAX, TensorFlow or PaddlePaddle program with that framework's own profiler, on CPU or GPU.

Same window as the torch capture (:class:`.schedule.CaptureWindow`: skip ``wait`` steps, profile ``warmup``
steps unmarked, record ``active`` steps), same sidecar facts. Steps come from ``dlscope.step()`` when the
program calls it, else from a hook on what a training step runs once:

* JAX: the first ``jax.jit`` function called a second time (at top level, not while tracing) is the step
  function; each later call starts a step. Recorded steps are wrapped in ``jax.profiler.StepTraceAnnotation``;
  the trace is ``jax.profiler.start_trace``'s ``.xplane.pb``.
* TensorFlow: Keras ``fit`` (``CallbackList.on_train_batch_end``); recorded steps are wrapped in
  ``tf.profiler.experimental.Trace(..., step_num=N, _r=1)`` (Keras also writes its own); the trace is the
  profiler's ``.xplane.pb``.
* PaddlePaddle: ``Optimizer.step()``/``minimize()`` of the first optimizer; ``paddle.profiler.Profiler``
  marks ``ProfileStep#N`` and exports its Chrome trace.

Each imports like any file of that format (:mod:`..importers.xspace`, :mod:`..importers.paddle`).
"""

from __future__ import annotations

import functools
import os
import platform
import threading
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..system import this_machine
from . import session as _session
from .schedule import RECORD, RECORD_AND_SAVE, WARMUP, CaptureWindow

FRAMEWORKS = ("jax", "tf", "paddle")
#: where each framework's profiler leaves the trace, under the trace folder
TRACE_GLOBS = {"jax": "**/*.xplane.pb", "tf": "**/*.xplane.pb", "paddle": "**/*.paddle_trace.json"}
_PROFILING = (WARMUP, RECORD, RECORD_AND_SAVE)
#: each framework as its makers spell it (the System Configuration's Framework)
FRAMEWORK_NAMES = {"jax": "JAX", "tf": "TensorFlow", "paddle": "PaddlePaddle"}


class FrameworkSession:
    """Start with :meth:`start`, advance with :meth:`step`, end with :meth:`stop` (idempotent)."""

    framework = ""

    def __init__(self, trace_dir: str | Path, *, window: CaptureWindow | None = None,
                 batch_size: int | None = None):
        self.trace_dir = Path(trace_dir)
        self.window = window or CaptureWindow()
        self.batch_size = batch_size
        self.step_num = 0
        self.explicit_steps = False
        self.step_source = ""
        self.started_at = time.time()
        self.ended_at: float | None = None
        self.exception: str | None = None
        self.version = ""
        self._profiling = False
        self._saved = False
        self._marker: Any = None
        self._undo: list[Callable[[], None]] = []
        self._stopped = False

    # -- what each framework provides ---------------------------------------------------------------
    def _import(self) -> None: ...
    def _hook_steps(self) -> None: ...
    def _profiler_start(self) -> None: ...
    def _profiler_stop(self) -> None: ...
    def _open_marker(self, step: int) -> Any: return None
    def _close_marker(self, marker: Any) -> None: ...

    # -- lifecycle ----------------------------------------------------------------------------------
    def start(self) -> FrameworkSession:
        if _session._ACTIVE is not None:
            raise RuntimeError("a dlscope capture is already running in this process")
        self.trace_dir.mkdir(parents=True, exist_ok=True)
        self._import()
        self._hook_steps()
        _session._ACTIVE = self  # dlscope.step() steps this session
        self._enter(self.window(0))
        return self

    def step(self, explicit: bool = True) -> None:
        """A training step ended; an explicit ``dlscope.step()`` turns the automatic hook off."""
        if self._stopped:
            return
        if explicit:
            self.explicit_steps = True
        elif self.explicit_steps:
            return
        self._end_marker()
        self.step_num += 1
        if self._profiling and self.window.phases.get(self.step_num - 1) == RECORD_AND_SAVE:
            self._stop_profiler()
        self._enter(self.window(self.step_num))

    def _enter(self, phase: str) -> None:
        if self._saved:
            return
        if phase in _PROFILING and not self._profiling:
            self._profiler_start()
            self._profiling = True
        if phase in (RECORD, RECORD_AND_SAVE):
            self._marker = self._open_marker(self.step_num)

    def _end_marker(self) -> None:
        if self._marker is not None:
            marker, self._marker = self._marker, None
            self._close_marker(marker)

    def _stop_profiler(self) -> None:
        self._profiling = False
        self._saved = True
        self._profiler_stop()

    def stop(self, exc: BaseException | None = None) -> None:
        if self._stopped:
            return
        self._stopped = True
        if exc is not None and self.exception is None:
            self.exception = f"{type(exc).__name__}: {exc}".strip().rstrip(":")
        self.ended_at = time.time()
        try:
            self._end_marker()
            if self._profiling:
                self._stop_profiler()
        finally:
            for undo in reversed(self._undo):
                undo()
            self._undo.clear()
            if _session._ACTIVE is self:
                _session._ACTIVE = None

    def trace_files(self) -> list[Path]:
        return sorted(self.trace_dir.glob(TRACE_GLOBS[self.framework])) if self.trace_dir.is_dir() else []

    def facts(self) -> dict[str, Any]:
        steps = self.window.recorded_steps(self.step_num)
        return {
            "backend": self.framework, "framework": self.framework, "framework_version": self.version,
            "python_version": platform.python_version(), "steps_seen": self.step_num,
            "steps_captured": len(steps), "captured_steps": steps,
            "step_source": "dlscope.step()" if self.explicit_steps else self.step_source,
            "schedule": {"wait": self.window.wait, "warmup": self.window.warmup, "active": self.window.active,
                         "delay_s": self.window.delay_s, "duration_s": self.window.duration_s},
            "batch_size": self.batch_size, "batch_size_source": "option" if self.batch_size else None,
            "exception": self.exception, "trace_files": [str(p) for p in self.trace_files()],
            "started_at": self.started_at, "ended_at": self.ended_at,
            "system": {**this_machine(), "framework": FRAMEWORK_NAMES.get(self.framework, self.framework),
                       "framework_version": self.version},
        }


class JaxSession(FrameworkSession):
    framework = "jax"

    def _import(self) -> None:
        import jax

        self._jax = jax
        self.version = jax.__version__
        self.step_source = "calls of the first jax.jit function called twice"

    def _hook_steps(self) -> None:
        self._undo.append(watch_jit(self._jax, lambda: self.step(explicit=False)))

    def facts(self) -> dict[str, Any]:
        """A call of the step function starts a step, so the program ran one step more than the boundaries."""
        facts = super().facts()
        if not self.explicit_steps and self.step_num:
            facts["steps_seen"] = self.step_num + 1
        return facts

    def _profiler_start(self) -> None:
        self._jax.profiler.start_trace(str(self.trace_dir))

    def _profiler_stop(self) -> None:
        self._jax.profiler.stop_trace()

    def _open_marker(self, step: int) -> Any:
        marker = self._jax.profiler.StepTraceAnnotation("train", step_num=step)
        marker.__enter__()
        return marker

    def _close_marker(self, marker: Any) -> None:
        marker.__exit__(None, None, None)


def watch_jit(jax: Any, on_step: Callable[[], None]) -> Callable[[], None]:
    """Wrap ``jax.jit`` so that each top-level call of the step function calls ``on_step`` first.

    The step function is the first jitted function called a second time; calls made while another jitted
    function runs or traces (nested) are not counted. The wrapper forwards every attribute
    (``.lower``, ``.trace`` ...) to the jitted function. Returns the undo.
    """
    original = jax.jit
    local = threading.local()
    state: dict[str, Any] = {"calls": {}, "step_fn": None}

    class Watched:
        def __init__(self, jitted: Any):
            self._jitted = jitted
            functools.update_wrapper(self, jitted, updated=())

        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            depth = getattr(local, "depth", 0)
            if depth == 0:
                key = id(self)
                if state["step_fn"] is None:
                    state["calls"][key] = state["calls"].get(key, 0) + 1
                    if state["calls"][key] == 2:
                        state["step_fn"] = key
                if state["step_fn"] == key:
                    on_step()
            local.depth = depth + 1
            try:
                return self._jitted(*args, **kwargs)
            finally:
                local.depth = depth

        def __getattr__(self, name: str) -> Any:
            return getattr(self._jitted, name)

        def __get__(self, obj: Any, objtype: Any = None) -> Any:
            return self if obj is None else types.MethodType(self, obj)

    @functools.wraps(original)
    def jit(fun: Any = None, *args: Any, **kwargs: Any) -> Any:
        if fun is None:  # jax.jit(static_argnums=...) used as a decorator factory
            return lambda f: Watched(original(f, *args, **kwargs))
        return Watched(original(fun, *args, **kwargs))

    jax.jit = jit

    def undo() -> None:
        if jax.jit is jit:
            jax.jit = original

    return undo


class TfSession(FrameworkSession):
    framework = "tf"

    def _import(self) -> None:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        import tensorflow as tf

        self._tf = tf
        self.version = tf.__version__
        self.step_source = "Keras fit batches"

    def _hook_steps(self) -> None:
        for module in ("keras.callbacks", "tf_keras.callbacks"):
            try:
                callbacks = __import__(module, fromlist=["CallbackList"])
            except ImportError:
                continue
            self._undo.append(_after(callbacks.CallbackList, "on_train_batch_end",
                                     lambda: self.step(explicit=False)))

    def _profiler_start(self) -> None:
        self._tf.profiler.experimental.start(str(self.trace_dir))

    def _profiler_stop(self) -> None:
        self._tf.profiler.experimental.stop()

    def _open_marker(self, step: int) -> Any:
        marker = self._tf.profiler.experimental.Trace("train", step_num=step, _r=1)
        marker.__enter__()
        return marker

    def _close_marker(self, marker: Any) -> None:
        marker.__exit__(None, None, None)


class PaddleSession(FrameworkSession):
    framework = "paddle"

    def _import(self) -> None:
        import paddle

        self._paddle = paddle
        self.version = paddle.__version__
        self.step_source = "optimizer.step()"
        self._prof: Any = None

    def _hook_steps(self) -> None:
        leader: list[Any] = []
        busy = threading.local()

        def after(opt: Any) -> None:
            if getattr(busy, "on", False):
                return
            if not leader:
                leader.append(opt)
            if leader[0] is opt:
                self.step(explicit=False)

        # Paddle's profiler wraps each optimizer's step in an "Optimization Step" event; a step boundary
        # (ProfileStep#N ends, the profiler stops) must come after that event closes, so its wrapping is
        # done first and ours goes around it, on every optimizer class
        from paddle.profiler.utils import wrap_optimizers

        wrap_optimizers()
        optimizers = self._paddle.optimizer
        classes = [getattr(optimizers, name) for name in getattr(optimizers, "__all__", [])]
        for cls in [optimizers.Optimizer, *[c for c in classes if isinstance(c, type)]]:
            for method in ("step", "minimize"):
                if method in cls.__dict__:
                    self._undo.append(_after(cls, method, after, pass_self=True, guard=busy))

    def _enter(self, phase: str) -> None:
        """Paddle numbers every step it profiles: warm-up steps are not profiled, so only recorded ones are."""
        super()._enter("none" if phase == WARMUP else phase)

    def _profiler_start(self) -> None:
        from paddle import profiler

        targets = [profiler.ProfilerTarget.CPU]
        if self._paddle.device.is_compiled_with_cuda() and self._paddle.device.cuda.device_count() > 0:
            targets.append(profiler.ProfilerTarget.GPU)
        self._prof = profiler.Profiler(targets=targets, on_trace_ready=profiler.export_chrome_tracing(
            str(self.trace_dir)))
        self._prof.step_num = self.step_num  # ProfileStep#N numbered like the program's steps
        self._prof.start()

    def _profiler_stop(self) -> None:
        self._prof.stop()

    def _open_marker(self, step: int) -> Any:
        if self._prof is not None and self._prof.step_num != step:
            self._prof.step()  # Paddle closes ProfileStep#N-1 and opens ProfileStep#N
        return None


def _after(cls: Any, name: str, callback: Callable, pass_self: bool = False, guard: Any = None) -> Callable[[], None]:
    """Run ``callback`` after every call of ``cls.name`` (``guard.on`` set meanwhile); returns the undo."""
    original = cls.__dict__.get(name, getattr(cls, name))

    @functools.wraps(original)
    def patched(obj: Any, *args: Any, **kwargs: Any) -> Any:
        if guard is not None and getattr(guard, "on", False):
            return original(obj, *args, **kwargs)
        if guard is not None:
            guard.on = True
        try:
            result = original(obj, *args, **kwargs)
        finally:
            if guard is not None:
                guard.on = False
        callback(obj) if pass_self else callback()
        return result

    setattr(cls, name, patched)

    def undo() -> None:
        if cls.__dict__.get(name) is patched:
            setattr(cls, name, original)

    return undo


SESSIONS = {"jax": JaxSession, "tf": TfSession, "paddle": PaddleSession}
