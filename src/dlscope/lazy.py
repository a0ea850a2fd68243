"""Names a package gives on first use (PEP 562), so that a light entry point stays light: ``dlscope.step()`` in a
training script loads neither pandas nor pyarrow, and the import's head start forks before the analysis loads."""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from typing import Any


def lazy_names(package: str, homes: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__``: each name of ``homes`` taken from its submodule (relative to ``package``) when
    first asked for."""

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(import_module(home, package), name)

    return __getattr__
