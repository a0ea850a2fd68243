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
    """Return the format name of ``path``: "kineto", "nsys", "ncu_csv", "nsys_stats_csv", "tf_trace",
    "paddle" or "xspace" (or raise InputError)."""
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
        from .frameworks import json_flavour

        return json_flavour(text)
    from .xspace import looks_like_xspace

    if looks_like_xspace(head):
        return "xspace"
    if b"==PROF==" in head or b'"Kernel Name"' in head or b"Metric Name" in head:
        return "ncu_csv"
    from .nsys_stats_csv import looks_like_nsys_stats_csv

    if looks_like_nsys_stats_csv(path):
        return "nsys_stats_csv"
    raise InputError(path, "is not a recognised profile (expected a PyTorch/Kineto JSON trace, "
                           "an Nsight Systems SQLite export, an Nsight Compute CSV, a TensorFlow/JAX "
                           "profile (.xplane.pb, .trace.json.gz) or a PaddlePaddle profiler trace)")


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
    if kind in ("tf_trace", "xspace", "paddle"):
        from .frameworks import load_framework

        return load_framework(path, kind)
    if kind == "nsys_stats_csv":
        from .nsys_stats_csv import load_nsys_stats_csv

        return load_nsys_stats_csv(path)
    raise InputError(path, f"{kind} files carry no timeline; import them next to a trace "
                           "(roofline counters)")
