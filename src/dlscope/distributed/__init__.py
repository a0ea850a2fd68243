"""What is about jobs of many ranks: per-rank figures, NCCL collectives and the straggler ranking, and the
tables they are stored in. Importing the ranks of a job is the pipeline's (``dlscope.pipeline``)."""

from .figures import rank_figures
from .store import DISTRIBUTED_DDL, summary_ranks, write_distributed

__all__ = ["DISTRIBUTED_DDL", "rank_figures", "summary_ranks", "write_distributed"]
