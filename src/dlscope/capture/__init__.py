"""Capture: run a training program under torch.profiler or Nsight Systems and hand the trace to the import.

``dlscope profile -- python train.py`` (:mod:`.cli_profile`, :mod:`.runner`) runs the program in a child
process through :mod:`.bootstrap`; :mod:`.api` offers the same capture inside a program
(``dlscope.profile()``, ``dlscope.step()``, ``dlscope.range()``, ``dlscope.trace_handler()``).
"""

from .api import profile, range, step, trace_handler  # noqa: A004 - the capture API's own names

__all__ = ["profile", "range", "step", "trace_handler"]
