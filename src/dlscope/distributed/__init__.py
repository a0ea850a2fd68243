"""What is about jobs of many ranks: per-rank figures, NCCL collectives and the straggler ranking, and the
tables they are stored in. Importing the ranks of a job is the pipeline's (``dlscope.pipeline``).

The names load on first use (PEP 562): the import's inputs (``tables``) are read before pandas loads."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .figures import rank_figures
    from .store import DISTRIBUTED_DDL, summary_ranks, write_distributed

__all__ = ["DISTRIBUTED_DDL", "rank_figures", "summary_ranks", "write_distributed"]


def __getattr__(name: str) -> Any:
    if name == "rank_figures":
        from .figures import rank_figures

        return rank_figures
    if name in __all__:
        from . import store

        return getattr(store, name)
    raise AttributeError(f"module 'dlscope.distributed' has no attribute {name!r}")
