"""dlscope: an open deep-learning profiler.

Python API: ``dlscope.open(db)`` gives a profile database's tables as DataFrames; ``dlscope.profile``,
``dlscope.step``, ``dlscope.range`` and ``dlscope.trace_handler`` capture a PyTorch program.

The names load on first use (PEP 562): a training script that only calls ``dlscope.step()`` imports neither
pandas nor pyarrow.
"""

from __future__ import annotations

from .lazy import lazy_names
from .version import __version__

__all__ = ["open", "profile", "range", "step", "trace_handler", "__version__"]

__getattr__ = lazy_names(__name__, {"open": ".api", **{name: ".capture.api" for name in
                                                       ("profile", "range", "step", "trace_handler")}})
