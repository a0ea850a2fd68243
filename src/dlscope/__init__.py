"""dlscope: an open deep-learning profiler.

Python API: ``dlscope.open(db)`` gives a profile database's tables as DataFrames; ``dlscope.profile``,
``dlscope.step``, ``dlscope.range`` and ``dlscope.trace_handler`` capture a PyTorch program.
"""

__version__ = "0.1.0"

from .api import open  # noqa: E402,A004
from .capture.api import profile, range, step, trace_handler  # noqa: E402,A004

__all__ = ["open", "profile", "range", "step", "trace_handler", "__version__"]
