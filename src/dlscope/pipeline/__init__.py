"""The flow end to end: inputs and rank identity (``inputs``), the memory budget (``budget``), how files are
read (``executors``: serial, worker processes, Dask), one rank at a time (``rank_by_rank``), per-rank
aggregation and rules (``per_rank``), and the import and re-aggregation that run them (``build``). The CLI,
the capture and the viewer call ``build_database`` and ``aggregate``."""

from .build import aggregate, build_database, profile_from_database

__all__ = ["aggregate", "build_database", "profile_from_database"]
