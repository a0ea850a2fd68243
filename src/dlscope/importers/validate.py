"""The importer boundary: every value an importer produced is checked here, once, before any analysis.

Importers map what a file says; this module decides what the rest of dlscope may rely on, for every format
alike. A file whose facts contradict each other is refused with one line naming it (a GPU listed twice, a
rank no job can have, nothing to import); an event that cannot be true (it ends before it starts, its
ProfilerStep number does not fit int64) is dropped and counted, and the counts travel with the profile's
metadata into the database, the summary JSON and the terminal (``dropped_events``). After this, no table
holds a row with ``end < start``, so no duration or wall clock derived from them is negative.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from ..errors import InputError
from ..model import MISSING_INT, Profile, TableColumns

if TYPE_CHECKING:  # a job's forked parse validates its files' columns without loading pandas
    import pandas as pd

#: tables of events with a start and an end
TIMED_TABLES = ("ops", "ranges", "api_calls", "kernels", "memops", "syncs")
#: what can be counted as "an event" of a file: a file with none of these is refused, never an empty database
EVENT_TABLES = (*TIMED_TABLES, "memory")
#: the largest rank and world size accepted: well beyond any job run so far (about 10^5 GPUs), small
#: enough that per-rank arrays and ``rank + 1`` stay far from int64's edge
MAX_RANKS = 2**20
_STEP = re.compile(r"ProfilerStep#(\d+)\Z")
_INT64_MAX = 2**63 - 1

#: reason -> how the summary says it
REASONS = {
    "end_before_start": "end before they start",
    "no_integer_time": "have no integer start or end time",
    "step_number_too_large": "ProfilerStep numbers too large for int64",
}


def validated(profile: Profile, path: str | Path) -> Profile:
    """``profile`` with the events that cannot be true dropped (and counted in ``meta["dropped_events"]``),
    or an :class:`InputError` naming ``path`` when the file as a whole cannot be imported."""
    _check_identity(profile, path)
    _check_gpus(profile, path)
    dropped = {table: dict(reasons) for table, reasons in profile.meta.get("dropped_events", {}).items()}
    for name in TIMED_TABLES:
        frame = profile.table(name)
        if not len(frame):
            continue
        bad = {"end_before_start": frame["end"].to_numpy() < frame["start"].to_numpy()}
        if "name" in frame and name in ("ranges", "ops"):
            bad["step_number_too_large"] = _huge_step_numbers(frame["name"])
        keep = np.ones(len(frame), dtype=bool)
        for reason, rows in bad.items():
            rows = rows & keep  # each dropped event counted once, for the first reason
            if rows.any():
                reasons = dropped.setdefault(name, {})
                reasons[reason] = reasons.get(reason, 0) + int(rows.sum())
                keep &= ~rows
        if not keep.all():
            setattr(profile, name, _renumbered(frame[keep], name))
    _drop_comm_args_of_dropped(profile)
    _check_span(profile, path)
    if not any(len(profile.table(name)) for name in EVENT_TABLES):
        total = sum(n for reasons in dropped.values() for n in reasons.values())
        if total:
            raise InputError(path, f"holds no events to import (all {total} were dropped: {describe(dropped)})")
        meta = profile.meta  # never an empty success: say what the file did hold
        found = meta.get("found") or (f"{meta['event_count']} events" if meta.get("event_count") else "")
        raise InputError(path, f"holds no events to import: parsed as {meta.get('source_format') or 'a trace'}, "
                               f"it has no ops, ranges, kernels or memory operations (found: {found or 'nothing'})")
    if dropped:
        profile.meta["dropped_events"] = dropped
    return profile


def validated_columns(file: TableColumns, path: str | Path) -> bool:
    """Whether :func:`validated` would leave a file's tables as they are: nothing to drop, nothing to refuse
    (checked on its column arrays, so that a job's clean files need no DataFrames of their own). False
    sends the file through :func:`validated` itself, which drops or refuses as it says."""
    meta = file.meta
    if _identity_problem(meta):
        return False
    gpus = file.columns.get("gpus", {})
    devices = np.asarray(gpus.get("device", []), dtype=np.int64)
    if len(np.unique(devices)) < len(devices):
        return False
    timed: dict[str, tuple[Any, Any]] = {}
    for name in (*TIMED_TABLES, "comm_args"):
        if not file.rows.get(name, 0):
            continue
        columns = file.columns.get(name, {})
        if "start" not in columns or "end" not in columns:
            return False
        start, end = np.asarray(columns["start"], dtype=np.int64), np.asarray(columns["end"], dtype=np.int64)
        if (end < start).any():
            return False
        if name in ("ranges", "ops") and _any_huge_step_word(columns.get("name")):
            return False
        if name != "comm_args":
            timed[name] = (start, end)
    memory_ts = (np.asarray(file.columns.get("memory", {}).get("ts", [MISSING_INT]), dtype=np.int64)
                 if file.rows.get("memory", 0) else None)
    if _span_problem(timed, memory_ts):
        return False
    return any(file.rows.get(name, 0) for name in EVENT_TABLES) and "dropped_events" not in meta


def _any_huge_step_word(names: Any) -> bool:
    """Whether a text column's words (Arrow dictionary batches) include a ProfilerStep#N that int64 cannot
    hold (True, to be safe, for a column of another kind)."""
    if names is None:
        return False
    chunks = names.chunks if isinstance(names, pa.ChunkedArray) else [names]
    if not all(isinstance(c, pa.DictionaryArray) for c in chunks):
        return True
    return any(_huge_step(str(w)) for w in {w for c in chunks for w in c.dictionary.to_pylist()} if w is not None)


def describe(dropped: dict[str, dict[str, int]]) -> str:
    """"48 kernels end before they start; 1 ranges ..." for messages and the terminal."""
    return "; ".join(f"{n:,} {table} {REASONS.get(reason, reason)}"
                     for table, reasons in dropped.items() for reason, n in reasons.items())


def _check_identity(profile: Profile, path: str | Path) -> None:
    problem = _identity_problem(profile.meta)
    if problem:
        raise InputError(path, problem)


def _identity_problem(meta: dict) -> str | None:
    """Why a file's rank or world size cannot be a job's (None when they can)."""
    for key in ("rank", "world_size"):
        value = meta.get(key)
        if value is not None and not 0 <= int(value) < MAX_RANKS + (key == "world_size"):
            return (f"says its {key.replace('_', ' ')} is {value}, which no job has "
                    f"(0 to {MAX_RANKS - (key == 'rank'):,})")
    return None


def _check_gpus(profile: Profile, path: str | Path) -> None:
    gpus = profile.gpus
    twice = gpus[gpus.duplicated(["rank", "device"], keep=False)]
    if len(twice):
        device = int(twice["device"].iloc[0])
        names = sorted({str(n) for n in twice.loc[twice["device"] == device, "name"]})
        raise InputError(path, f"describes GPU {device} more than once ({', '.join(repr(n) for n in names)}); "
                               "a trace must list each GPU once")


def _check_span(profile: Profile, path: str | Path) -> None:
    """Every figure is a difference or a sum of times in int64 ns: the events' span, and each table's total
    duration, must fit (an event 146 years long, or clocks 2^63 ns apart, cannot be measured)."""
    timed = {name: (profile.table(name)["start"].to_numpy(), profile.table(name)["end"].to_numpy())
             for name in TIMED_TABLES if len(profile.table(name))}
    problem = _span_problem(timed, profile.memory["ts"].to_numpy() if len(profile.memory) else None)
    if problem:
        raise InputError(path, problem)


def _span_problem(timed: dict[str, tuple[Any, Any]], memory_ts: Any) -> str | None:
    """Why the events' times cannot be measured in int64 ns (None when they can): ``timed`` holds each
    non-empty timed table's (starts, ends), ``memory_ts`` the memory samples' times (None: no samples)."""
    firsts, lasts = [], []
    for name, (start, end) in timed.items():
        firsts.append(int(np.min(start)))
        lasts.append(int(np.max(end)))
        # in float64: a duration or their sum may not fit int64 (the refusal is the point)
        if float((np.asarray(end, np.float64) - np.asarray(start, np.float64)).sum()) > _INT64_MAX:
            return f"holds {name} whose durations add up to more than int64 nanoseconds hold"
    if memory_ts is not None:
        firsts.append(int(np.min(memory_ts)))
        lasts.append(int(np.max(memory_ts)))
    if firsts and max(lasts) - min(firsts) > _INT64_MAX:
        return f"has events from {min(firsts)} ns to {max(lasts)} ns, further apart than int64 nanoseconds can measure"
    return None


def _huge_step_numbers(names: pd.Series) -> np.ndarray:
    """ProfilerStep#N ranges whose N no int64 iteration number can hold (tested once per distinct name)."""
    import pandas as pd

    codes, distinct = pd.factorize(names)
    huge = np.zeros(len(distinct) + 1, dtype=bool)  # the last: code -1 (a missing name)
    for i, name in enumerate(distinct):
        huge[i] = _huge_step(str(name))
    return huge[codes]


def _huge_step(name: str) -> bool:
    """Whether ``name`` is a ProfilerStep#N whose N no int64 can hold."""
    m = _STEP.match(name)
    return m is not None and len(m.group(1)) >= 19 and int(m.group(1)) > _INT64_MAX


_ID_COLUMNS = {"ops": "op_id", "ranges": "range_id", "api_calls": "api_id", "kernels": "kernel_id",
               "memops": "memop_id", "syncs": "sync_id"}


def _renumbered(frame: pd.DataFrame, name: str) -> pd.DataFrame:
    """The kept rows, numbered again from 0 (ids are row numbers; nothing refers to them yet)."""
    frame = frame.reset_index(drop=True)
    frame[_ID_COLUMNS[name]] = np.arange(len(frame), dtype=np.int64)
    return frame


def _drop_comm_args_of_dropped(profile: Profile) -> None:
    """Collective metadata rows of events that were dropped go too (they are keyed by the same times)."""
    comm = profile.comm_args
    if len(comm):
        ok = comm["end"].to_numpy() >= comm["start"].to_numpy()
        if not ok.all():
            profile.comm_args = comm[ok].reset_index(drop=True)
