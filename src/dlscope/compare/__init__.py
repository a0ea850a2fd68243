"""Compare runs: ``compare`` (the diff as one dict), ``check`` (a CI gate on regressions).

Both are imported on first use (PEP 562), so ``dlscope --help`` and commands that compare nothing do not load
pandas through the command line's registration of ``diff`` and ``check``."""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["check", "compare"]

_HOMES = {"check": ".check", "compare": ".diff"}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_HOMES[name], __name__), name)
