"""The flow end to end: inputs and rank identity (``inputs``), the memory budget (``budget``), how files are
read (``executors``: serial, worker processes, Dask; ``head_start``: a job's later files read while the import's
modules load), one rank at a time (``rank_by_rank``), per-rank aggregation and rules (``per_rank``), and the
import and re-aggregation that run them (``build``). The CLI, the capture and the viewer call ``build_database``
and ``aggregate``.

The names load on first use (PEP 562), so that ``head_start`` is reached without pandas and the analysis."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_names

if TYPE_CHECKING:
    from .build import aggregate, build_database, profile_from_database

__all__ = ["aggregate", "build_database", "profile_from_database"]

__getattr__ = lazy_names(__name__, dict.fromkeys(__all__, ".build"))
