"""The memory budget of an import (``--max-memory``): what the analysis of the imported tables needs, and
the refusals made before anything is written (at once from the files' sizes, exactly after the parse)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from ..errors import DlscopeError
from ..model import TABLES, Profile

_UNITS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12,
          "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}


def parse_size(text: str | int | None) -> int | None:
    """Bytes from "4GB" (10^9), "4GiB" (2^30), "512M" or a plain number; Dask's spelling."""
    if text is None or isinstance(text, int):
        return text
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]i?)?b?\s*", str(text), re.IGNORECASE)
    if not m:
        raise DlscopeError(f"--max-memory {text!r}: expected a size such as 4GB, 512MiB or 2000000000")
    return int(float(m.group(1)) * _UNITS[(m.group(2) or "").lower()])



#: The import after the parse (analysis, aggregations, rules, the critical path's replay, the database writer)
#: peaks at about this many times the imported tables' size, plus a fixed part for the libraries and SQLite's
#: page cache. Under a budget the stages run one at a time (the raw writer ends before the rules; the replay's
#: columns are copied out and the analysed tables let go before its graph is built), so the peak is the largest
#: stage, not a sum. Measured (bench/memory_stages.py and /usr/bin/time's peak RSS; bench/README.md, "h28rules"):
#: 400 MiB + 2.85-2.98x the tables on the 13M-event trace (four runs' peak RSS; the analysis, the rank figures
#: and the rules' stage alike, now that the rules gather only the columns they read), 2.05x on the 4.3M-event one,
#: under 400 MiB on the 1.08M-event one; 3.25 keeps ~9% above the largest (a 3 GB budget takes the 13M-event trace).
ANALYSIS_PEAK_FACTOR = 3.25
ANALYSIS_FIXED_BYTES = 400 * 2**20


def analysis_memory(profile: Profile) -> int:
    """Estimated peak bytes of the import's stages after the parse, from the imported tables' size."""
    tables = sum(int(profile.table(name).memory_usage(deep=True).sum()) for name in TABLES)
    return ANALYSIS_FIXED_BYTES + int(ANALYSIS_PEAK_FACTOR * tables)


def check_analysis_fits(profile: Profile, budget: int, paths: Sequence[Path]) -> None:
    """Refuse, before anything is written, an import whose analysis would exceed ``--max-memory``."""
    needed = analysis_memory(profile)
    if needed > budget:
        rows = sum(len(profile.table(name)) for name in TABLES)
        raise DlscopeError(f"{_files_label(paths)}: analysing {rows:,} imported rows needs about "
                           f"{_size_text(needed)} of memory, "
                           f"more than --max-memory {_size_text(budget)}; raise --max-memory")


#: imported tables per byte of Kineto JSON: below the lowest over ../shared/data (0.14), above the highest (0.53)
#: (bench/table_bytes_per_json.py)
LEAST_TABLE_BYTES_PER_JSON_BYTE = 0.1
MOST_TABLE_BYTES_PER_JSON_BYTE = 1.0


def whole_job_fits(paths: Sequence[Path], budget: int) -> bool:
    """Whether the analysis of all these Kineto traces at once surely fits ``--max-memory`` (else a job is
    imported one rank at a time, which needs only one rank's share)."""
    from ..importers.kineto import estimated_json_size

    return _analysis_memory_of_json(sum(estimated_json_size(Path(p)) for p in paths),
                                    MOST_TABLE_BYTES_PER_JSON_BYTE) <= budget


def check_traces_could_fit(paths: Sequence[Path], budget: int, one_at_a_time: bool) -> None:
    """Refuse at once, before reading, Kineto traces whose analysis cannot fit ``--max-memory`` even with
    the leanest tables seen per byte of JSON (the exact check follows the parse)."""
    from ..importers.kineto import estimated_json_size

    sizes = [estimated_json_size(Path(p), least=True) for p in paths]
    if not sizes:
        return
    json_bytes = max(sizes) if one_at_a_time else sum(sizes)
    least = _analysis_memory_of_json(json_bytes, LEAST_TABLE_BYTES_PER_JSON_BYTE)
    if least > budget:
        what = _files_label([paths[sizes.index(max(sizes))]] if one_at_a_time else paths)
        raise DlscopeError(f"{what}: analysing at least {_size_text(json_bytes)} of trace JSON needs at least about "
                           f"{_size_text(least)} of memory, more than --max-memory {_size_text(budget)}; "
                           "raise --max-memory")


def most_json_bytes(budget: int) -> int:
    """The most JSON text an import under ``budget`` can read: past this, even the leanest tables seen per
    byte of JSON would not leave room for their analysis (so a trace that inflates further, a gzip bomb
    among them, is refused while it is read, not after it filled the memory)."""
    return max(0, int((budget - ANALYSIS_FIXED_BYTES) / (ANALYSIS_PEAK_FACTOR * LEAST_TABLE_BYTES_PER_JSON_BYTE)))


def _analysis_memory_of_json(json_bytes: int, table_bytes_per_json_byte: float) -> int:
    """:func:`analysis_memory` of tables estimated from the traces' JSON size."""
    return ANALYSIS_FIXED_BYTES + int(ANALYSIS_PEAK_FACTOR * table_bytes_per_json_byte * json_bytes)


def _files_label(paths: Sequence[Path]) -> str:
    return str(paths[0]) if len(paths) == 1 else f"{paths[0]} (+{len(paths) - 1} files)"


def _size_text(n: int) -> str:
    return f"{n / 10**9:.1f} GB" if n >= 10**9 else f"{n / 10**6:.0f} MB"
