"""Compare runs: ``compare`` (the diff as one dict), ``check`` (a CI gate on regressions)."""

from .check import check
from .diff import compare

__all__ = ["check", "compare"]
