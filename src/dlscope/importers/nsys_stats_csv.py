"""Import an ``nsys stats --report nvtx_pushpop_trace --format csv`` file as a range-only profile.

nsys-jax and many job scripts keep only these CSVs (often xz- or gzip-compressed) instead of the .nsys-rep:
one row per NVTX push/pop range with its process, thread and nesting. They carry no kernels, so the
profile holds ranges only (domain ``nvtx``): enough for iterations, NCCL call timing per process and
rank-to-rank comparison. Compression is detected from the content, never from the name.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InputError
from ..model import Profile, make_table
from .streams import source

XZ_MAGIC = b"\xfd7zXZ\x00"
GZIP_MAGIC = b"\x1f\x8b"
BZ2_MAGIC = b"BZh"
#: The columns of the nvtx_pushpop_trace report that the import needs (nsys 2023.2 and later).
REQUIRED = ("Start (ns)", "End (ns)", "Name", "PID", "TID")
#: read as text and converted exactly: a float64 column (one odd cell makes pandas infer one) cannot hold
#: epoch ns
INTEGER_COLUMNS = ("Start (ns)", "End (ns)", "PID", "TID")


def _open(path: Path) -> io.BufferedIOBase:
    path = source(path)
    with open(path, "rb") as f:
        magic = f.read(6)
    if magic.startswith(XZ_MAGIC):
        return lzma.open(path, "rb")
    if magic.startswith(GZIP_MAGIC):
        return gzip.open(path, "rb")
    if magic.startswith(BZ2_MAGIC):
        return bz2.open(path, "rb")
    return open(path, "rb")


def looks_like_nsys_stats_csv(path: str | Path) -> bool:
    """Whether the file's first line is an nvtx_pushpop_trace CSV header (after decompression)."""
    try:
        with _open(Path(path)) as f:
            first = f.readline(4096).decode("utf-8-sig", "replace")
    except (OSError, EOFError, lzma.LZMAError):
        return False
    columns = [c.strip().strip('"') for c in first.strip().split(",")]
    return all(c in columns for c in REQUIRED) and "Duration (ns)" in columns


def _int64_column(path: Path, texts: pd.Series, col: str) -> np.ndarray:
    """The column's integers, exactly as written; the first cell that is not an int64 integer is an error
    naming its line."""
    try:
        return pc.cast(pc.utf8_trim_whitespace(pa.array(texts.to_numpy(object), pa.string())), pa.int64()).to_numpy()
    except pa.ArrowInvalid:
        pass
    values = []
    for row, text in enumerate(texts.tolist(), start=2):  # line 1 is the header
        try:
            value = int(text)
        except ValueError:
            raise InputError(path, f"line {row}: column {col!r} is not an integer ({text[:40]!r})") from None
        if not -2**63 <= value < 2**63:
            raise InputError(path, f"line {row}: column {col!r} does not fit int64 ({text[:40]})")
        values.append(value)
    return np.array(values, dtype=np.int64)  # integers Python reads and Arrow does not ("1_000")


def load_nsys_stats_csv(path: str | Path) -> Profile:
    """The NVTX ranges of one process as the ``ranges`` table; rank comes from the file name later."""
    path = Path(path)
    try:
        with _open(path) as f:
            frame = pd.read_csv(f, usecols=list(REQUIRED),
                                dtype={"Name": object, **dict.fromkeys(INTEGER_COLUMNS, str)},
                                keep_default_na=False, engine="c")
    except FileNotFoundError:
        raise InputError(path, "no such file") from None
    except (OSError, EOFError, lzma.LZMAError) as e:
        raise InputError(path, f"is a truncated or corrupt compressed file ({e})") from None
    except ValueError as e:
        raise InputError(path, f"is not an nsys stats nvtx_pushpop_trace CSV ({' '.join(str(e).split())})") from None
    ints = {col: _int64_column(path, frame[col], col) for col in INTEGER_COLUMNS}
    n = len(frame)
    names = np.empty(n, dtype=object)
    names[:] = frame["Name"].astype(str).to_numpy(dtype=object)
    domain = np.empty(n, dtype=object)
    domain[:] = "nvtx"
    ranges = make_table("ranges", {
        "range_id": np.arange(n), "rank": np.zeros(n, np.int64), "pid": ints["PID"], "tid": ints["TID"],
        "device": np.full(n, -1, np.int64), "name": names, "domain": domain,
        "start": ints["Start (ns)"], "end": ints["End (ns)"]}, n)
    profile = Profile(ranges=ranges)
    profile.meta = {"source_format": "nsys_stats_csv", "source_path": str(path), "rank": 0, "world_size": 1,
                    "rank_in_trace": False, "event_count": n,
                    "trace_start_ns": int(ints["Start (ns)"].min()) if n else -1}
    return profile
