"""Importers: real profile files in, one normalized :class:`~dlscope.model.Profile` out.

The format is detected from the file's content, never from its name.
"""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

from ..errors import InputError, reading
from ..model import Profile

GZIP_MAGIC = b"\x1f\x8b"
SQLITE_MAGIC = b"SQLite format 3\x00"


def sniff(path: Path) -> str:
    """Return the format name of ``path``: "kineto", "nsys" or "ncu_csv" (or raise InputError)."""
    with reading(path), open(path, "rb") as f:
        head = f.read(4096)
    if not head:
        raise InputError(path, "is empty")
    if head.startswith(SQLITE_MAGIC):
        return "nsys"
    if head.startswith(GZIP_MAGIC):
        try:
            with gzip.open(path, "rb") as g:
                head = g.read(4096)
        except (OSError, EOFError, zlib.error) as e:
            raise InputError(path, f"is not a readable gzip file ({e})") from None
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if text[:1] in (b"{", b"["):
        return "kineto"
    if b"==PROF==" in head or b'"Kernel Name"' in head or b"Metric Name" in head:
        return "ncu_csv"
    from .nsys_stats_csv import looks_like_nsys_stats_csv

    if looks_like_nsys_stats_csv(path):
        return "nsys_stats_csv"
    raise InputError(path, "is not a recognised profile (expected a PyTorch/Kineto JSON trace, "
                           "an Nsight Systems SQLite export or an Nsight Compute CSV)")


def load(path: str | Path) -> Profile:
    """Import one file into the normalized model."""
    path = Path(path)
    kind = sniff(path)
    if kind == "kineto":
        from .kineto import load_kineto

        return load_kineto(path)
    if kind == "nsys":
        from .nsys import load_nsys

        return load_nsys(path)
    if kind == "nsys_stats_csv":
        from .nsys_stats_csv import load_nsys_stats_csv

        return load_nsys_stats_csv(path)
    raise InputError(path, f"{kind} files carry no timeline; import them next to a trace "
                           "(roofline counters)")
