"""Compare runs: ``compare`` (the diff as one dict), ``check`` (a CI gate on regressions).

Both are imported on first use (PEP 562), so ``dlscope --help`` and commands that compare nothing do not load
pandas through the command line's registration of ``diff`` and ``check``."""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

__all__ = ["check", "compare"]

_HOMES = {"check": ".check", "compare": ".diff"}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOMES[name], __name__), name)
    globals()[name] = value
    return value


class _Package(types.ModuleType):
    """``check`` stays the function when its submodule (also ``check``) is imported: the import system would
    bind the submodule to the package's attribute, as an eager ``from .check import check`` undid."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _HOMES and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
