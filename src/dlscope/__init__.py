"""dlscope: an open deep-learning profiler.

Python API: ``dlscope.open(db)`` gives a profile database's tables as DataFrames; ``dlscope.profile``,
``dlscope.step``, ``dlscope.range`` and ``dlscope.trace_handler`` capture a PyTorch program.

The names load on first use (PEP 562): a training script that only calls ``dlscope.step()`` imports neither
pandas nor pyarrow.
"""

from __future__ import annotations

from typing import Any

from .version import __version__

__all__ = ["open", "profile", "range", "step", "trace_handler", "__version__"]

_CAPTURE = ("profile", "range", "step", "trace_handler")


def __getattr__(name: str) -> Any:
    if name == "open":
        from .api import open as open_database

        return open_database
    if name in _CAPTURE:
        from .capture import api

        return getattr(api, name)
    raise AttributeError(f"module 'dlscope' has no attribute {name!r}")
