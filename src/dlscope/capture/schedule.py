"""Which steps to capture: skip the first ones, warm up, record a few, then let the job run on.

A long job must not fill memory with events, so capture is one bounded window chosen by step count
(``torch.profiler.schedule``'s wait/warmup/active) or by time (``--delay`` / ``--duration``, checked at
step boundaries, since the profiler can only change state between steps).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

#: Defaults: skip one step (lazy init, first-call autotuning), warm one up, record five.
DEFAULT_WAIT = 1
DEFAULT_WARMUP = 1
DEFAULT_ACTIVE = 5

NONE, WARMUP, RECORD, RECORD_AND_SAVE = "none", "warmup", "record", "record_and_save"


@dataclass
class CaptureWindow:
    """A one-shot schedule: ``window(step)`` gives the phase of ``step``; steps must be asked in order.

    ``active=None`` with a ``duration_s`` records until the duration is spent; both ``None`` would
    record to the end of the run.
    """

    wait: int = DEFAULT_WAIT
    warmup: int = DEFAULT_WARMUP
    active: int | None = DEFAULT_ACTIVE
    delay_s: float | None = None
    duration_s: float | None = None
    clock: Callable[[], float] = time.monotonic
    phases: dict[int, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.wait < 0 or self.warmup < 0:
            raise ValueError("wait and warmup must be >= 0")
        if self.active is not None and self.active < 1:
            raise ValueError("the number of steps to capture must be >= 1")
        self._t0 = self.clock()
        self._state = "waiting"
        self._mark = 0  # first step of the current state
        self._active_t0 = 0.0

    def __call__(self, step: int) -> str:
        if step in self.phases:
            return self.phases[step]
        phase = self._next(step)
        self.phases[step] = phase
        return phase

    def _next(self, step: int) -> str:
        now = self.clock()
        if self._state == "waiting":
            delayed = self.delay_s is not None and now - self._t0 < self.delay_s
            if step < self.wait or delayed:
                return NONE
            self._state, self._mark = "warmup", step
        if self._state == "warmup":
            if step - self._mark < self.warmup:
                return WARMUP
            self._state, self._mark, self._active_t0 = "active", step, now
        if self._state == "active":
            count = step - self._mark + 1
            last = (self.active is not None and count >= self.active) or (
                self.duration_s is not None and now - self._active_t0 >= self.duration_s
            )
            if last:
                self._state = "done"
                return RECORD_AND_SAVE
            return RECORD
        return NONE

    def recorded_steps(self, upto: int) -> list[int]:
        """Steps that were being recorded, up to and including the step the run was in at ``upto``."""
        return sorted(s for s, p in self.phases.items() if s <= upto and p in (RECORD, RECORD_AND_SAVE))

    def is_capturing(self, step: int) -> bool:
        return self.phases.get(step, NONE) in (WARMUP, RECORD, RECORD_AND_SAVE)

    def torch_schedule(self):
        """This window as the callable ``torch.profiler.profile(schedule=...)`` expects."""
        from torch.profiler import ProfilerAction

        mapping = {NONE: ProfilerAction.NONE, WARMUP: ProfilerAction.WARMUP, RECORD: ProfilerAction.RECORD,
                   RECORD_AND_SAVE: ProfilerAction.RECORD_AND_SAVE}
        return lambda step: mapping[self(step)]
