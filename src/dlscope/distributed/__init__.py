"""Whole distributed jobs: every rank's trace into one database, imported in parallel worker processes
or on an existing Dask cluster, with per-rank figures, NCCL collectives and a straggler ranking."""

from .figures import rank_figures
from .inputs import expand_inputs
from .parallel import load_profiles_parallel, parse_size
from .store import DISTRIBUTED_DDL, summary_ranks, write_distributed

__all__ = ["DISTRIBUTED_DDL", "expand_inputs", "load_profiles_parallel", "parse_size", "rank_figures",
           "summary_ranks", "write_distributed"]
