"""Never an empty success: a file that parses but holds no event dlscope models is an input error.

Checked once here, after any importer (the pipeline's one per-file entry, :func:`.executors.import_file`,
calls it), so every format follows the same rule without each importer repeating it.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import InputError
from ..model import Profile

#: the tables that hold events; GPU rows alone (device properties) are not a profile
EVENT_TABLES = ("ops", "ranges", "api_calls", "kernels", "memops", "syncs", "memory")


def require_events(profile: Profile, path: str | Path, kind: str = "") -> Profile:
    """``profile`` unchanged, or a one-line :class:`InputError` naming the file and what it did hold."""
    if any(len(profile.table(name)) for name in EVENT_TABLES):
        return profile
    meta = profile.meta
    what = meta.get("found") or (f"{meta['event_count']} events" if meta.get("event_count") else "")
    fmt = kind or meta.get("source_format") or "a trace"
    raise InputError(path, f"parsed as {fmt} but holds no ops, ranges, kernels or memory operations "
                           f"(found: {what or 'nothing'})")
