"""The tables of a Kineto trace, built batch by batch from typed events.

Each batch of :class:`~.events.Event` s (a piece of the file, or a batch of the stream) becomes column
chunks per table, and is dropped; the chunks are joined into the model's DataFrames once at the end, so at
most one batch of Python objects is alive at a time, whatever the trace size. Row ids are row numbers in
batch order. Also here: what the trace's header says (rank, GPUs, metadata).
"""

from __future__ import annotations

import itertools
import re
from collections import Counter, defaultdict
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np
import pyarrow as pa

from ...model import ID_COLUMNS, MISSING_STR, TABLES, Profile, S, TableColumns, make_table
from ...system import cuda_version, known
from ..exact_ns import TimeOutOfRange, checked_end, us_to_ns
from ..python_frames import MAX_FRAMES, bounded, innermost_user_frame, parse_names
from .events import NO_JSON, Args, Complete, Event, Instant, Trace

if TYPE_CHECKING:  # a job's forked parse reads its files without loading pandas (bench/README.md, h27job)
    import pandas as pd

OP_CATS = ("cpu_op", "Operator")
KERNEL_CATS = ("kernel", "Kernel")
MEMCPY_CATS = ("gpu_memcpy", "Memcpy")
MEMSET_CATS = ("gpu_memset", "Memset")
RUNTIME_CATS = ("cuda_runtime", "Runtime")
DRIVER_CATS = ("cuda_driver",)
CUDA_DEVICE_TYPE = 1  # c10::DeviceType::CUDA (ROCm builds report HIP devices as CUDA too)
CPU_DEVICE_TYPE = 0  # c10::DeviceType::CPU: the CPU allocator's samples (profile_memory on any machine)

# ---------------------------------------------------------------------------------------- assembly


class Tables:
    """Column chunks of every table, added batch by batch and joined into DataFrames once at the end."""

    def __init__(self) -> None:
        self.chunks: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
        self.names: dict[str, str] = {}  # names repeat: one string object per distinct name, not per event
        self.rows: Counter[str] = Counter()
        self.unmapped: Counter[str] = Counter()

    def state(self) -> dict:
        """Plain, picklable contents (to send from a worker process)."""
        return {"chunks": {t: dict(cols) for t, cols in self.chunks.items()}, "rows": dict(self.rows),
                "unmapped": dict(self.unmapped)}

    def absorb(self, later: dict) -> None:
        """Append the tables of the events after ours (a worker's :meth:`state`)."""
        for table, cols in later["chunks"].items():
            for col, chunks in cols.items():
                self.chunks[table][col].extend(chunks)
        self.rows.update(later["rows"])
        self.unmapped.update(later["unmapped"])

    def add(self, events: list[Event]) -> None:
        by_cat, memory_events = _group(events)
        ops, op_names, steps = _split_profiler_steps(_take(by_cat, OP_CATS))
        python_functions = by_cat.pop("python_function", [])
        data_loading = _data_loading(python_functions)  # also kept as ranges: the data-loading figures read them
        self._add("python_frames", _python_frame_columns(python_functions))
        self._add("ops", _op_columns(ops, op_names))
        self._add("comm_args", _comm_columns(ops, "op"))
        self._add("ranges", _range_columns(by_cat.pop("user_annotation", []) + steps,
                                           by_cat.pop("gpu_user_annotation", []), data_loading))
        self._add("api_calls", _api_columns(_take(by_cat, RUNTIME_CATS), _take(by_cat, DRIVER_CATS)))
        kernels = _take(by_cat, KERNEL_CATS)
        self._add("kernels", _kernel_columns(kernels))
        self._add("comm_args", _comm_columns(kernels, "kernel"))
        self._add("memops", _memop_columns(_take(by_cat, MEMCPY_CATS), _take(by_cat, MEMSET_CATS)))
        self._add("syncs", _sync_columns(by_cat.pop("cuda_sync", [])))
        self._add("memory", _memory_columns(memory_events))
        self.unmapped.update({cat: len(evs) for cat, evs in by_cat.items() if cat})

    def _add(self, table: str, columns: dict[str, Any]) -> None:
        n = len(next(iter(columns.values())))
        if n:
            spec = TABLES[table]
            for col, values in columns.items():
                if table == "python_frames" and col == "name":  # indexed and parsed as strings (_python_frames)
                    values = [self.names.setdefault(name, name) for name in values]
                elif spec[col] == S:
                    values = _encoded(values)
                self.chunks[table][col].append(values)
            self.rows[table] += n

    def profile(self, rank: int, device_properties: Any, max_python_frames: int = MAX_FRAMES) -> Profile:
        return self.columns(rank, device_properties, max_python_frames).profile()

    def columns(self, rank: int, device_properties: Any, max_python_frames: int = MAX_FRAMES) -> TableColumns:
        """The file's tables as column arrays (a job makes its DataFrames once, :func:`~...model.joined_tables`)."""
        tables = {name: self._frame(name, rank) for name in
                  ("ops", "ranges", "api_calls", "kernels", "memops", "syncs", "memory")}
        tables["gpus"] = gpus_columns(device_properties, tables["kernels"][0].get("device"), rank)
        tables["comm_args"] = self._comm_frame(rank)
        tables["python_frames"], frames_meta = self._python_frames(rank, max_python_frames)
        meta = {
            "trace_start_ns": first_start_of({name: cols.get("start", np.full(n, -1)) for name, (cols, n) in
                                              tables.items() if name in _TIMED and n}),
            "python_frames": frames_meta,
            "dropped_python_functions": frames_meta["dropped"],
            "unmapped_categories": dict(self.unmapped),
        }
        return TableColumns({name: cols for name, (cols, _) in tables.items()},
                            {name: n for name, (_, n) in tables.items()}, meta)

    def _python_frames(self, rank: int, max_frames: int) -> tuple[tuple[dict[str, Any], int], dict[str, Any]]:
        """The python_function frames, at most ``max_python_frames`` of them (the longest), and what was kept."""
        n = self.rows["python_frames"]
        chunks = self.chunks.pop("python_frames", {})
        columns = {col: _concat(values) for col, values in chunks.items()} if n else {}
        meta: dict[str, Any] = {"recorded": n, "kept": n, "dropped": 0, "max_frames": max_frames}
        if not n:
            return ({}, 0), meta
        keep = bounded(np.asarray(columns["start"]), np.asarray(columns["end"]), max_frames)
        if len(keep) < n:
            columns["python_parent_id"] = kept_parent_ids(columns, keep)
            columns = {col: (np.asarray(v)[keep] if isinstance(v, np.ndarray) else [v[i] for i in keep])
                       for col, v in columns.items()}
            meta.update(kept=len(keep), dropped=n - len(keep),
                        dropped_reason=f"more than {max_frames} frames: the shortest were dropped")
        files, lines, functions = parse_names(columns["name"])
        m = len(keep)
        return ({**columns, "file": files, "line": lines, "function": functions,
                 "rank": np.full(m, rank, np.int64), "frame_id": np.arange(m, dtype=np.int64)}, m), meta

    def _comm_frame(self, rank: int) -> tuple[dict[str, Any], int]:
        chunks = self.chunks.pop("comm_args", {})
        n = self.rows["comm_args"]
        columns = {col: _concat(values) for col, values in chunks.items()}
        return {**columns, "rank": np.full(n, rank, np.int64)}, n

    def _frame(self, table: str, rank: int) -> tuple[dict[str, Any], int]:
        n = self.rows[table]
        columns = {col: _concat(chunks) for col, chunks in self.chunks.pop(table, {}).items()}
        columns["rank"] = np.full(n, rank, dtype=np.int64)
        if table == "ops" and n:
            columns["op_type"] = columns["name"]  # until op types are classified
        if table != "memory":
            columns[ID_COLUMNS[table]] = np.arange(n, dtype=np.int64)
        unknown = set(columns) - set(TABLES[table])
        if unknown:  # as make_table says it: a typo in an importer fails loudly
            raise KeyError(f"{table}: unknown columns {sorted(unknown)}")
        return columns, n


def _encoded(values: Any) -> Any:
    """A batch's text column as an Arrow dictionary array: each distinct string once and an int32 code per
    row, encoded in C (the table's categorical column is made from these codes, never from Python strings);
    the values as they are when they are not all strings."""
    if isinstance(values, pa.DictionaryArray):
        return values
    try:
        return pa.array(values, type=pa.large_string()).dictionary_encode()
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return values


def _concat(chunks: list) -> np.ndarray | list | pa.ChunkedArray:
    if isinstance(chunks[0], np.ndarray) and all(isinstance(c, np.ndarray) for c in chunks):
        # a lone chunk that is a view is copied: it may lie in the map a forked child's columns came back in
        # (dlscope.processes), which the table would otherwise keep alive whole
        return np.concatenate(chunks) if len(chunks) > 1 or not chunks[0].flags.owndata else chunks[0]
    if all(isinstance(c, pa.DictionaryArray) for c in chunks):
        return pa.chunked_array(chunks)
    return list(itertools.chain.from_iterable(c.to_pylist() if isinstance(c, pa.Array) else c for c in chunks))


def _group(events: list[Event]) -> tuple[dict[str, list[Event]], list[Event]]:
    """One pass: complete ("X") events by category, plus the allocator ``[memory]`` instant events."""
    by_cat: dict[str, list[Event]] = defaultdict(list)
    memory: list[Event] = []
    for e in events:  # the phase-typed decoder's classes first (an identity test, not a class attribute's read)
        kind = type(e)
        if kind is Complete:
            by_cat[e.cat].append(e)
        elif kind is Instant:
            if e.name == "[memory]":
                memory.append(e)
        elif kind is Event:  # the lenient decoder's
            if e.ph == "X":
                by_cat[e.cat].append(e)
            elif e.ph == "i" and e.name == "[memory]":
                memory.append(e)
    return by_cat, memory


def _take(by_cat: dict[str, list[Event]], cats: tuple[str, ...]) -> list[Event]:
    """Remove and concatenate the events of the given (old and new spelling) categories."""
    out: list[Event] = []
    for cat in cats:
        out += by_cat.pop(cat, [])
    return out


def _split_profiler_steps(ops: list[Event]) -> tuple[list[Event], Any, list[Event]]:
    """ProfilerStep#N is recorded as an op in some versions; it is an iteration range, not an op. Returns the
    ops, their names (:func:`_encoded`, which the ops' columns take) and the steps; each distinct name is tested
    once."""
    names = _encoded([e.name for e in ops])
    if not isinstance(names, pa.DictionaryArray):  # names that are not all strings (never from the decoders)
        steps = [e for e in ops if e.name.startswith("ProfilerStep#")]
        return [e for e in ops if not e.name.startswith("ProfilerStep#")], names, steps
    words = names.dictionary.to_pylist()
    is_step = np.array([w.startswith("ProfilerStep#") for w in words], dtype=bool)
    if not is_step.any():
        return ops, names, []
    codes = names.indices.to_numpy()
    step = is_step[codes]
    kept = np.flatnonzero(~step)
    return [ops[i] for i in kept], _from_codes(codes[kept], words), [ops[i] for i in np.flatnonzero(step)]


def _data_loading(python_functions: list[Event]) -> list[Event]:
    """The python_function frames that show data loading; the rest (often 100k+) are not kept.

    Frames repeat with every call, so the name test runs once per distinct name.
    """
    names = {e.name for e in python_functions}
    keep = {n for n in names if "__next__" in n or "dataloader" in n.lower()}
    return [e for e in python_functions if e.name in keep] if keep else []


def rank_of(header: Trace) -> int:
    rank = _as_int(_get(header.distributedInfo, "rank", 0))
    return max(rank, 0)


def identity(header: Trace) -> dict[str, Any]:
    """What the job's rank numbering reads from a trace (see ``distributed.inputs.identities``)."""
    return {"rank": rank_of(header), "world_size": max(_as_int(_get(header.distributedInfo, "world_size", 1)), 1),
            "rank_in_trace": _as_int(_get(header.distributedInfo, "rank", -1)) >= 0}


def meta(path: Path, header: Trace, event_count: int) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "source_format": "kineto",
        "source_path": str(path),
        **identity(header),
        "trace_name": header.traceName if isinstance(header.traceName, str) else "",
        "schema_version": header.schemaVersion,
        "event_count": event_count,
    }
    hostname = header.host_name or header.hostname
    if hostname:
        meta["hostname"] = str(hostname)
    if header.record_shapes is not None:
        meta["record_shapes"] = header.record_shapes
    if header.baseTimeNanoseconds is not None:
        meta["base_time_ns"] = _as_int(header.baseTimeNanoseconds)
    raw = {k: getattr(header, k) for k in RAW_VERSIONS if isinstance(getattr(header, k), (int, str))}
    if raw:
        meta["trace_versions"] = raw
    meta["system"] = system_facts(header)
    return meta


#: the header's version numbers, kept as written (CUDA's and HIP's integer encodings) in ``trace_versions``
RAW_VERSIONS = ("cupti_version", "cuda_runtime_version", "cuda_driver_version", "roctracer_version",
                "hip_runtime_version", "hip_driver_version")


def system_facts(header: Trace) -> dict[str, Any]:
    """What the header says about the machine (:mod:`dlscope.system`): Kinetos's own keys, then the facts a
    dlscope capture wrote into the trace. The framework is PyTorch when the header is Kineto's (a bare event
    list could be any Chrome trace): Kineto is PyTorch's profiler."""
    info = header.distributedInfo if isinstance(header.distributedInfo, dict) else {}
    kineto = any(v is not None for v in (header.schemaVersion, header.distributedInfo, header.deviceProperties))
    said = {"framework": "PyTorch" if kineto else None, "hostname": header.host_name or header.hostname,
            "cuda_runtime_version": cuda_version(header.cuda_runtime_version),
            "cuda_driver_version": cuda_version(header.cuda_driver_version),
            "distributed_backend": info.get("backend"), "nccl_version": info.get("nccl_version"),
            "world_size": info.get("world_size")}
    own = header.dlscope_system if isinstance(header.dlscope_system, dict) else {}
    return {**known(own), **known(said)}


def first_start(profile: Profile) -> int:
    """The earliest timestamp of any mapped event, in ns (-1 for a trace with none)."""
    return first_start_of({name: profile.table(name)["start"] for name in _TIMED if len(profile.table(name))})


#: the tables of events with a start (what :func:`first_start` reads)
_TIMED = ("ops", "ranges", "api_calls", "kernels", "memops", "syncs")


def first_start_of(starts: dict[str, Any]) -> int:
    """:func:`first_start` from the start columns of the tables with rows."""
    firsts = [np.asarray(column, dtype=np.int64).min() for column in starts.values()]
    return int(min(firsts)) if firsts else -1


# ------------------------------------------------------------------------ per-batch table columns


def _op_columns(evs: list[Event], names: Any) -> dict[str, Any]:
    """``names``: the events' names as :func:`_split_profiler_steps` encoded them."""
    args = [e.args for e in evs]
    start, end = _times(evs)
    return {
        "pid": _ints([e.pid for e in evs]),
        "tid": _ints([e.tid for e in evs]),
        "name": names,
        "start": start,
        "end": end,
        "external_id": _external_ids(args),
        "seq": _ints([a.seq for a in args]),
        "direction": _directions(names),
        "input_shapes": _json_strings([a.input_dims for a in args]),
        "input_dtypes": _json_strings([a.input_types for a in args]),
        "concrete_inputs": _json_strings([a.concrete_inputs for a in args]),
        "stack": _legacy_stacks([a.call_stack for a in args]),
    }


def _legacy_stacks(stacks: list[Any]) -> np.ndarray | pa.DictionaryArray:
    """The innermost user ``file.py:123`` of each op's legacy ``Call stack`` arg ("" when absent); stacks repeat,
    so each distinct one is read once."""
    if stacks.count(MISSING_STR) == len(stacks):  # no stacks recorded (torch > 1.10): one compare a row, in C
        return _constant(MISSING_STR, len(stacks))
    import pandas as pd

    codes, uniques = pd.factorize(pd.Series(stacks, dtype=object), use_na_sentinel=False)
    places = np.array([innermost_user_frame(s) if isinstance(s, str) and s else "" for s in uniques] or [""],
                      dtype=object)
    return places[codes] if len(codes) else np.zeros(0, dtype=object)


def _python_frame_columns(evs: list[Event]) -> dict[str, Any]:
    start, end = _times(evs)
    return {
        "pid": _ints([e.pid for e in evs]),
        "tid": _ints([e.tid for e in evs]),
        "name": [e.name for e in evs],
        "start": start,
        "end": end,
        "python_id": _ints([e.args.python_id for e in evs]),
        "python_parent_id": _ints([e.args.python_parent_id for e in evs]),
    }


def kept_parent_ids(columns: dict[str, Any], keep: np.ndarray) -> np.ndarray:
    """Each frame's Python parent id, skipping dropped frames: the id of its nearest kept ancestor (by the
    trace's ids; frames without ids are nested by time later, which needs no help)."""
    import pandas as pd

    pid, own, parent = (np.asarray(columns[c], dtype=np.int64) for c in ("pid", "python_id", "python_parent_id"))
    index = pd.MultiIndex.from_arrays([pid, own])
    up = np.where(parent >= 0, index.get_indexer(pd.MultiIndex.from_arrays([pid, parent])), -1)
    kept = np.zeros(len(own), dtype=bool)
    kept[keep] = True
    for _ in range(64):  # pointer jumping (halves the dropped chains each step); a cycle of ids ends as roots
        climb = (up >= 0) & ~kept[np.maximum(up, 0)]
        if not climb.any():
            break
        up[climb] = up[up[climb]]
    up[(up >= 0) & ~kept[np.maximum(up, 0)]] = -1
    return np.where(up >= 0, own[np.maximum(up, 0)], -1)


def _comm_columns(evs: list[Event], kind: str) -> dict[str, Any]:
    """Events that carry collective metadata (or are record_param_comms, whose sizes may come later)."""
    evs = [e for e in evs if e.name == "record_param_comms" or e.args.collective or e.args.in_nelems != -1]
    args = [e.args for e in evs]
    start, end = _times(evs)
    return {
        "kind": _runs((kind, len(evs))),
        "pid": _ints([e.pid for e in evs]),
        "tid": _ints([e.tid for e in evs]) if kind == "op" else np.full(len(evs), -1, np.int64),
        "device": _ints([a.device for a in args]),
        "stream": _ints([a.stream for a in args]),
        "name": [e.name for e in evs],
        "start": start,
        "end": end,
        "collective": [str(a.collective or "") for a in args],
        "in_nelems": _ints([a.in_nelems for a in args]),
        "out_nelems": _ints([a.out_nelems for a in args]),
        "group_size": _ints([a.group_size for a in args]),
        "dtype": [str(a.comm_dtype or "") for a in args],
        "pg_name": [str(a.pg_name or "") for a in args],
        "pg_ranks": [str(a.pg_ranks or "") for a in args],
    }


def _directions(names: pa.DictionaryArray) -> pa.DictionaryArray:
    """Mark autograd backward ops "bwd" and the rest "", testing each distinct name once."""
    bwd = np.array([("Backward" in n or n.startswith("autograd::engine::evaluate_function"))
                    for n in names.dictionary.to_pylist()], dtype=np.int32)
    return _from_codes(bwd[names.indices.to_numpy()] if len(bwd) else np.zeros(0, np.int32), ["", "bwd"])


def _range_columns(cpu: list[Event], gpu: list[Event], python: list[Event]) -> dict[str, Any]:
    """CPU annotations keep their pid/tid; GPU ones sit on a device lane (pid -1, tid = stream lane)."""
    evs = cpu + gpu + python
    n_cpu, n_gpu = len(cpu), len(gpu)
    pid = _ints([e.pid for e in evs])
    pid[n_cpu:n_cpu + n_gpu] = -1
    device = np.full(len(evs), -1, dtype=np.int64)
    device[n_cpu:n_cpu + n_gpu] = _gpu_lane_devices(gpu)
    start, end = _times(evs)
    return {
        "pid": pid,
        "tid": _ints([e.tid for e in evs]),
        "device": device,
        "name": [e.name for e in evs],
        "domain": _runs(("user_annotation", n_cpu), ("gpu_user_annotation", n_gpu), ("python_function", len(python))),
        "start": start,
        "end": end,
    }


def _gpu_lane_devices(evs: list[Event]) -> np.ndarray:
    """``args.device`` when present, else the pid, which Kineto sets to the device index on GPU lanes."""
    device = _ints([e.args.device for e in evs])
    return np.where(device >= 0, device, _ints([e.pid for e in evs]))


def _api_columns(runtime: list[Event], driver: list[Event]) -> dict[str, Any]:
    evs = runtime + driver
    start, end = _times(evs)
    return {
        "pid": _ints([e.pid for e in evs]),
        "tid": _ints([e.tid for e in evs]),
        "name": [e.name for e in evs],
        "kind": _runs(("runtime", len(runtime)), ("driver", len(driver))),
        "start": start,
        "end": end,
        "correlation": _ints([e.args.correlation for e in evs]),
    }


def _kernel_columns(evs: list[Event]) -> dict[str, Any]:
    args = [e.args for e in evs]
    grid = _triples([a.grid for a in args])
    block = _triples([a.block for a in args])
    start, end = _times(evs)
    return {
        "device": _ints([a.device for a in args]),
        "stream": _ints([a.stream for a in args]),
        "name": [e.name for e in evs],
        "start": start,
        "end": end,
        "correlation": _ints([a.correlation for a in args]),
        "grid_x": grid[:, 0], "grid_y": grid[:, 1], "grid_z": grid[:, 2],
        "block_x": block[:, 0], "block_y": block[:, 1], "block_z": block[:, 2],
        "registers": _ints([a.registers for a in args]),
        "shared_mem": _ints([a.shared_mem for a in args]),
        "blocks_per_sm": _floats([a.blocks_per_sm for a in args]),
        "warps_per_sm": _floats([a.warps_per_sm for a in args]),
        "est_occupancy_pct": _ints([a.est_occupancy_pct for a in args]),
    }


def _memop_columns(memcpy: list[Event], memset: list[Event]) -> dict[str, Any]:
    evs = memcpy + memset
    names = [e.name for e in evs]
    parsed = [_parse_memop_name(n) for n in names]
    args = [e.args for e in evs]
    start, end = _times(evs)
    return {
        "device": _ints([a.device for a in args]),
        "stream": _ints([a.stream for a in args]),
        "kind": _runs(("memcpy", len(memcpy)), ("memset", len(memset))),
        "name": names,
        "copy_kind": [p[0] for p in parsed],
        "src_mem": [p[1] for p in parsed],
        "dst_mem": [p[2] for p in parsed],
        "start": start,
        "end": end,
        "bytes": _ints([a.bytes for a in args]),
        "correlation": _ints([a.correlation for a in args]),
    }


_MEMCPY_NAME = re.compile(r"Memcpy\s+(\w+)\s*\(\s*(\w+)\s*->\s*(\w+)\s*\)")
_MEMSET_NAME = re.compile(r"Memset\s*\(\s*(\w+)\s*\)")


@lru_cache(maxsize=256)
def _parse_memop_name(name: str) -> tuple[str, str, str]:
    """("HtoD", "pageable", "device") from "Memcpy HtoD (Pageable -> Device)"; a memset only has a dst."""
    m = _MEMCPY_NAME.search(name)
    if m:
        return m.group(1), m.group(2).lower(), m.group(3).lower()
    m = _MEMSET_NAME.search(name)
    return ("", "", m.group(1).lower()) if m else ("", "", "")


def _sync_columns(evs: list[Event]) -> dict[str, Any]:
    args = [e.args for e in evs]
    stream = _ints([a.stream for a in args])
    stream[stream >= 0xFFFFFFFF] = -1  # CUPTI writes "no stream" as -1 or as uint32 -1
    start, end = _times(evs)
    return {
        "device": _ints([a.device for a in args]),
        "stream": stream,
        "kind": [_sync_kind(str(a.sync_kind or e.name)) for a, e in zip(args, evs)],
        "start": start,
        "end": end,
        "correlation": _ints([a.correlation for a in args]),
    }


@lru_cache(maxsize=64)
def _sync_kind(label: str) -> str:
    """CUPTI's sync type ("Stream Sync", "Event Sync", "Stream Wait Event", "Context Sync") to ours."""
    label = label.lower()
    if "wait" in label:
        return "stream_wait_event"
    if "event" in label:
        return "event"
    if "stream" in label:
        return "stream"
    if "context" in label or "device" in label:
        return "device"  # cudaDeviceSynchronize is recorded as a context sync
    return "unknown"


def _memory_columns(evs: list[Event]) -> dict[str, Any]:
    """Allocator samples of CUDA devices (device = its index) and of the CPU allocator (device -1); other
    devices' samples are dropped."""
    args = [e.args for e in evs]
    kind = _ints([a.device_type for a in args])
    keep = (kind == CUDA_DEVICE_TYPE) | (kind == CPU_DEVICE_TYPE)
    return {
        "device": np.where(kind == CUDA_DEVICE_TYPE, _ints([a.device_id for a in args]), -1)[keep],
        "ts": us_to_ns([e.ts for e in evs], "ts")[keep],
        "bytes_delta": _ints([a.bytes_delta for a in args])[keep],
        "total_allocated": _ints([a.total_allocated for a in args])[keep],
        "total_reserved": _ints([a.total_reserved for a in args])[keep],
        "pid": _ints([e.pid for e in evs])[keep],
        "tid": _ints([e.tid for e in evs])[keep],
        "addr": _ints([a.addr for a in args])[keep],
    }


def gpus_frame(device_properties: Any, kernel_devices: pd.Series, rank: int) -> pd.DataFrame:
    """One row per ``deviceProperties`` entry, plus a blank row for any kernel device it lacks."""
    columns, n = gpus_columns(device_properties, kernel_devices, rank)
    return make_table("gpus", columns, n)


def gpus_columns(device_properties: Any, kernel_devices: Any, rank: int) -> tuple[dict[str, Any], int]:
    """:func:`gpus_frame`'s columns."""
    listed = device_properties if isinstance(device_properties, list) else []  # any other value says nothing
    props = [p for p in listed if isinstance(p, dict)]
    devices = [_as_int(p.get("id", -1)) for p in props]
    seen = np.unique(np.asarray([] if kernel_devices is None else kernel_devices, dtype=np.int64))
    missing = sorted(set(seen.tolist()) - set(devices) - {-1})
    return {
        "rank": [rank] * (len(props) + len(missing)),
        "device": devices + missing,
        "name": [str(p.get("name", "")) for p in props] + [""] * len(missing),
        "sm_count": [_as_int(p.get("numSms", -1)) for p in props] + [-1] * len(missing),
        "memory_bytes": [_as_int(p.get("totalGlobalMem", -1)) for p in props] + [-1] * len(missing),
        "cc_major": [_as_int(p.get("computeMajor", -1)) for p in props] + [-1] * len(missing),
        "cc_minor": [_as_int(p.get("computeMinor", -1)) for p in props] + [-1] * len(missing),
    }, len(props) + len(missing)


# ----------------------------------------------------------------------------------- column helpers


def _times(evs: list[Event]) -> tuple[np.ndarray, np.ndarray]:
    """Start and end in exact int ns, each from the JSON text of ``ts`` and ``dur``; a value that is not a
    number or does not fit int64 ns is a :class:`TimeOutOfRange` naming its event."""
    try:
        start = us_to_ns([e.ts for e in evs], "ts")
        return start, checked_end(start, us_to_ns([e.dur for e in evs], "dur"))
    except TimeOutOfRange as e:
        raise TimeOutOfRange(f"{e} ({_culprit(evs)})") from None


def _culprit(evs: list[Event]) -> str:
    """The first event whose times do not convert, described for the error message."""
    for e in evs:
        try:
            start = us_to_ns([e.ts], "ts")
            checked_end(start, us_to_ns([e.dur], "dur"))
        except TimeOutOfRange:
            return f"the {e.cat or 'uncategorised'} event {e.name[:80]!r}"
    return "an event"


def _ints(values: list) -> np.ndarray:
    """An int64 column; the fast path covers clean ints, the slow one maps junk to -1.

    ``np.fromiter``, not ``np.array``: it converts each value as ``np.array`` would, without first walking the
    list for its shape (235 MB trace: 40% less time in this function)."""
    try:
        return np.fromiter(values, dtype=np.int64, count=len(values))
    except (TypeError, ValueError, OverflowError):
        return np.array([_as_int(v) for v in values], dtype=np.int64)


def _floats(values: list) -> np.ndarray:
    """A float64 column of figures the trace records as fractions (floats arrive as their text); NaN for
    anything missing or not a number."""
    try:
        return np.array(values, dtype=np.float64)  # None (absent) becomes NaN
    except (TypeError, ValueError, OverflowError):
        return np.array([_as_float(v) for v in values], dtype=np.float64)


def _as_float(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        return float("nan")


def _as_int(value: Any) -> int:
    """int for ints, floats and numeric strings ("7", "7.0": untyped floats arrive as text); -1 for anything
    else (e.g. "stream 7", None)."""
    try:
        out = int(value)
    except ValueError:
        try:
            out = int(float(value))
        except (TypeError, ValueError, OverflowError):
            return -1
    except (TypeError, OverflowError):
        return -1
    return out if -(2**63) <= out < 2**63 else -1


def _triples(values: list) -> np.ndarray:
    """An (n, 3) int64 array from [x, y, z] lists (grid / block), -1 where one is missing or odd.

    Lists of three (Kineto's) are chained and read by ``np.fromiter``, as ``np.array`` would read them, without
    its walk of the nested lists for their shape (half the time)."""
    n = len(values)
    try:
        if n and set(map(type, values)) == {list} and set(map(len, values)) == {3}:
            return np.fromiter(itertools.chain.from_iterable(values), dtype=np.int64, count=3 * n).reshape(n, 3)
        out = np.array(values, dtype=np.int64)
        if out.shape == (n, 3):
            return out
    except (TypeError, ValueError, OverflowError):
        pass
    out = np.full((len(values), 3), -1, dtype=np.int64)
    for i, v in enumerate(values):
        if isinstance(v, list):
            for j, x in enumerate(v[:3]):
                out[i, j] = _as_int(x)
    return out


def _external_ids(args: list[Args]) -> np.ndarray:
    new, legacy = _ints([a.external_id for a in args]), [a.legacy_external_id for a in args]
    if legacy.count(-1) == len(legacy):  # the 2021 spelling absent (as in every newer trace)
        return new
    return np.where(new != -1, new, _ints(legacy))


def _json_strings(values: list[msgspec.Raw]) -> pa.DictionaryArray:
    """Compact JSON text per value ("" when absent or null), so equal shapes compare equal as strings, as a
    dictionary array (:func:`_encoded`).

    Shapes and dtypes repeat across ops: the raw texts are joined in C, each ended by a NUL byte (never part
    of JSON text), cut where the NULs are and encoded by Arrow; each distinct text is compacted once.
    """
    n = len(values)
    if values.count(NO_JSON) == n:  # none recorded (a trace without record_shapes): the shared default, compared
        return _constant(MISSING_STR, n)  # by identity in C, no text joined
    data = b"\0".join(values) + b"\0"
    ends = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 0)
    if len(ends) != n:  # never for valid JSON (msgspec rejects a raw control character)
        raws = pa.array([bytes(v) + b"\0" for v in values], type=pa.large_binary()).dictionary_encode()
    else:
        offsets = np.concatenate([[0], ends + 1]).astype(np.int64)
        raws = pa.LargeBinaryArray.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(offsets),
                                                                        pa.py_buffer(data)]).dictionary_encode()
    compact = [msgspec.json.encode(msgspec.json.decode(t[:-1])).decode() if t not in (b"\0", b"null\0") else ""
               for t in raws.dictionary.to_pylist()]
    index: dict[str, int] = {}  # two texts may compact to one: each compact text's code, by first appearance
    codes = np.array([index.setdefault(text, len(index)) for text in compact], dtype=np.int32)
    return _from_codes(codes[raws.indices.to_numpy()], list(index))


def _runs(*runs: tuple[str, int]) -> pa.DictionaryArray:
    """A text column of runs of one word each (distinct words; a table's kind by source category), made from
    codes: encoding a list of the words cost 0.03 s for the 235 MB trace's 211k runtime calls."""
    codes = np.repeat(np.arange(len(runs), dtype=np.int32), [n for _, n in runs])
    return _from_codes(codes, [word for word, _ in runs])


def _constant(word: str, n: int) -> pa.DictionaryArray:
    """A text column holding ``word`` on every row."""
    return _from_codes(np.zeros(n, dtype=np.int32), [word])


def _from_codes(codes: np.ndarray, words: list[str]) -> pa.DictionaryArray:
    """A dictionary array from int codes into ``words`` (distinct); words no row uses are left out, so the
    table's categories are the values present, as when strings are encoded."""
    used = np.bincount(codes, minlength=len(words)) > 0
    if not used.all():
        codes = (np.cumsum(used) - 1).astype(np.int32)[codes]
        words = [w for w, u in zip(words, used) if u]
    return pa.DictionaryArray.from_arrays(codes.astype(np.int32, copy=False), pa.array(words, type=pa.large_string()))


def _get(obj: Any, key: str, default: Any) -> Any:
    return obj.get(key, default) if isinstance(obj, dict) else default
