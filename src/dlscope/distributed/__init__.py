"""What is about jobs of many ranks: per-rank figures, NCCL collectives and the straggler ranking, and the
tables they are stored in. Importing the ranks of a job is the pipeline's (``dlscope.pipeline``).

The names load on first use (PEP 562): the import's inputs (``tables``) are read before pandas loads."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_names

if TYPE_CHECKING:
    from .figures import rank_figures
    from .store import DISTRIBUTED_DDL, summary_ranks, write_distributed

__all__ = ["DISTRIBUTED_DDL", "rank_figures", "summary_ranks", "write_distributed"]

__getattr__ = lazy_names(__name__, {"rank_figures": ".figures", "DISTRIBUTED_DDL": ".store",
                                    "summary_ranks": ".store", "write_distributed": ".store"})
