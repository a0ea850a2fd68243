"""Nsight Systems SQLite exports (``nsys export --type sqlite``, nsys 2022.1 to 2025.1) -> :class:`Profile`.

Tables and columns come and go between nsys versions (``greenContextId``, ``deprecatedSyncType``,
``META_DATA_EXPORT`` vs ``EXPORT_META_DATA``, ENUM_* tables only from 2023.1 on, a ``name`` column on some
tables), so every query is built from what the schema holds: a missing table reads as zero rows and a
missing column as the model's missing value. Each table is read with one query; per-row work stays in SQL and
numpy (NVTX text is parsed once per distinct string).

Process and thread ids are packed as ``globalTid = hwId << 56 | vmId << 48 | pid << 24 | tid`` (``globalPid``
is the same with tid 0): ``(globalPid >> 24) & 0xFFFFFF`` equals ``PROCESSES.pid`` on every row of the test
exports. Times are the export's integer nanoseconds, kept as they are.
"""

from __future__ import annotations

import ast
import json
import re
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import NamedTuple
from urllib.parse import quote

import numpy as np
import pandas as pd

from ..errors import InputError
from ..model import Profile, make_table
from ..system import cuda_version, driver_version, env_pairs, environment_facts, known
from .streams import source

_ID_MASK = 0xFFFFFF

_KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
_RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
_DRIVER = "CUPTI_ACTIVITY_KIND_DRIVER"
_MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
_MEMORY_USAGE = "CUDA_GPU_MEMORY_USAGE_EVENTS"
_MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
_SYNC = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
_NVTX = "NVTX_EVENTS"

# ENUM_NSYS_EVENT_CLASS (identical in the 2023.1-2025.1 exports): nsys files CUDA driver calls in the
# RUNTIME table too, and with --cudabacktrace it adds a second copy of each call that carries the call stack.
_DRIVER_CLASSES = (1, 13)           # CUDA driver, CUDA EGL driver
_BACKTRACE_CLASSES = (67, 68, 69)   # CUDA backtrace (copies of calls already in the table)

_CUPTI_INVALID = 0xFFFFFFFF         # CUPTI's "no stream / no event" in synchronization records
_NVTX_RANGE_TYPES = (59, 60)        # NvtxPushPopRange, NvtxStartEndRange; marks and domain events are points

# Enum names by value for exports without ENUM_* tables (2022.x). These are nsys's own numberings, the same
# as the ENUM tables of the newer exports: a 2022 HtoD copy has srcKind 0 / dstKind 2, i.e. pageable -> device
# (CUPTI's memory-kind numbering would read it as unknown -> pinned).
_DEFAULT_ENUMS = {
    "ENUM_CUDA_MEMCPY_OPER": [
        "UNKNOWN", "HTOD", "DTOH", "HTOA", "ATOH", "ATOA", "ATOD", "DTOA", "DTOD", "HTOH", "PTOP",
        "UVM_HTOD", "UVM_DTOH", "UVM_DTOD"],
    "ENUM_CUDA_MEM_KIND": [
        "PAGEABLE", "PINNED", "DEVICE", "ARRAY", "MANAGED", "DEVICE_STATIC", "MANAGED_STATIC", "UNKNOWN"],
}

# Synchronization kind by the API call that caused it. The exports' syncType values disagree with their own
# ENUM_CUPTI_SYNC_TYPE (cudaDeviceSynchronize is 1 in 2022.1 and 2024.5 but 4 in 2025.1;
# cudaStreamSynchronize is 3 in 2023.1 but 2 in 2025.1), so the correlated call is the reliable source.
_SYNC_KINDS = {
    "cudaDeviceSynchronize": "device", "cudaThreadSynchronize": "device", "cuCtxSynchronize": "device",
    "cudaStreamSynchronize": "stream", "cuStreamSynchronize": "stream",
    "cudaEventSynchronize": "event", "cuEventSynchronize": "event",
    "cudaStreamWaitEvent": "stream_wait_event", "cuStreamWaitEvent": "stream_wait_event",
}

# PyTorch emit_nvtx range text: "aten::addmm, seq = 8, op_id = 34, sizes = [[64, 128], [128, 256]], ...".
# Names in framework namespaces or autograd nodes are ops; any other name only when emit_nvtx fields follow,
# so that C++ scopes such as "FusionCache::get" or TensorRT layers such as "onnx::Conv_239" stay ranges.
_TORCH_OP = re.compile(
    r"(?P<name>(?:aten|prim|c10d|_c10d_functional|quantized|torchvision|torch)::[\w:.]+"
    r"|autograd::engine::evaluate_function: [\w:.]+"
    r"|\w+Backward\d*"
    r"|[\w.:]+(?=, (?:seq|op_id|sizes) = ))"
    r"(?P<fields>, .*)?",
    re.DOTALL,
)
_SEQ = re.compile(r", seq = (-?\d+)")
_SIZES = re.compile(r", sizes = (\[.*?\])(?=, \w+ = |$)", re.DOTALL)
_BACKWARD = re.compile(r"Backward\d*$|^autograd::engine::evaluate_function: ")
_API_VERSION = re.compile(r"_v\d{4,}$")        # "cudaLaunchKernel_v7000"; keeps "cuGetProcAddress_v2"
_PER_THREAD_STREAM = re.compile(r"_pt[sd]z?$")  # "cudaStreamSynchronize_ptsz" syncs like the plain call


def load_nsys(path: Path) -> Profile:
    """Import one nsys SQLite export, read-only; any SQLite failure becomes an :class:`InputError`."""
    path = Path(path)
    try:
        with closing(_connect(path)) as conn:
            db = _Export(conn)
            if not db.is_nsys():
                raise InputError(path, "is an SQLite database but not an Nsight Systems export")
            return _profile(db, path)
    except sqlite3.Error as e:
        raise InputError(path, f"is not a readable SQLite database ({' '.join(str(e).split())})") from None


def _connect(path: Path) -> sqlite3.Connection:
    """Open read-only through a URI (quoted, so '?' or '#' in a path stay part of the name)."""
    conn = sqlite3.connect(f"file:{quote(str(source(path).resolve()))}?mode=ro", uri=True)
    conn.text_factory = _lenient_utf8
    return conn


def _lenient_utf8(raw: bytes) -> str:
    """NVTX text is whatever the application passed; bad UTF-8 must not abort the import."""
    return raw.decode("utf-8", "replace")


class _Ref(str):
    """A column that holds StringIds ids rather than text (kernel and API names, NVTX textId)."""


class _Export:
    """An open export plus its schema, so that queries only name the tables and columns that exist."""

    def __init__(self, conn: sqlite3.Connection):
        self.conn = conn
        self.tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        self._columns: dict[str, set[str]] = {}
        self._strings: tuple[pd.Index, np.ndarray] | None = None
        #: model table -> reason -> rows left out (see :meth:`read`)
        self.dropped: dict[str, dict[str, int]] = {}

    def is_nsys(self) -> bool:
        return _NVTX in self.tables or any(t.startswith("CUPTI_ACTIVITY_KIND_") for t in self.tables)

    def columns(self, table: str) -> set[str]:
        if table not in self._columns:
            info = self.conn.execute(f'PRAGMA table_info("{table}")') if table in self.tables else []
            self._columns[table] = {r[1] for r in info}
        return self._columns[table]

    def read(self, table: str, ints: dict[str, str | tuple[str, ...]],
             texts: dict[str, tuple[str, ...]] | None = None, where: str = "",
             events_of: str | None = None) -> pd.DataFrame:
        """Read ``table`` in one query into int64 / object columns that are never NULL (-1 / '').

        ``ints`` maps an output name to a column, or to columns of which the first non-NULL wins; ``texts``
        maps an output name to text columns, :class:`_Ref` columns resolved through StringIds, first
        non-NULL wins. Absent columns are skipped and an absent table gives zero rows. ``events_of``: the
        model table these rows become; rows whose ``start`` or ``end`` is not an integer (NULL, text) are
        left out and counted in :attr:`dropped` under it.
        """
        have = self.columns(table)
        int_sql = [_integer([c for c in _as_tuple(cols) if c in have]) for cols in ints.values()]
        sources = {name: [c for c in cols if c in have] for name, cols in (texts or {}).items()}
        flat = [c for cols in sources.values() for c in cols]
        text_sql = [_integer([c]) if isinstance(c, _Ref) else f"CAST({_column(c)} AS TEXT)" for c in flat]
        all_ints = all(isinstance(c, _Ref) for c in flat)
        rows = []
        if table in self.tables:
            if events_of is not None:
                timed = "typeof(t.start) = 'integer' AND typeof(t.\"end\") = 'integer'"
                bad = self.conn.execute(f'SELECT COUNT(*) FROM "{table}" AS t WHERE NOT ({timed})'
                                        + (f" AND {where}" if where else "")).fetchone()[0]
                if bad:
                    reasons = self.dropped.setdefault(events_of, {})
                    reasons["no_integer_time"] = reasons.get("no_integer_time", 0) + bad
                where = f"({where}) AND {timed}" if where else timed
            sql = f'SELECT {", ".join(int_sql + text_sql)} FROM "{table}" AS t'
            rows = self.conn.execute(sql + (f" WHERE {where}" if where else "")).fetchall()
        width = len(int_sql) + len(text_sql)
        values = np.array(rows, dtype=np.int64 if all_ints else object).reshape(len(rows), width).T
        data = {name: column.astype(np.int64) for name, column in zip(ints, values)}
        at = len(int_sql)
        for name, cols in sources.items():
            found = [self._resolve(v) if isinstance(c, _Ref) else v for c, v in zip(cols, values[at:])]
            data[name] = pd.Series(_first_present(found, len(rows)), dtype=object)
            at += len(cols)
        return pd.DataFrame(data, index=pd.RangeIndex(len(rows)))

    def _resolve(self, ids: np.ndarray) -> np.ndarray:
        """StringIds ids -> text (None where unknown); the table is read once, each string decoded once."""
        if self._strings is None:
            pairs = self.read("StringIds", {"id": "id"}, {"value": ("value",)}).drop_duplicates("id")
            self._strings = pd.Index(pairs.id), np.append(pairs.value.to_numpy(object), np.array([None], dtype=object))
        index, strings = self._strings
        return strings[index.get_indexer(ids.astype(np.int64))]

    def key_values(self, *tables: str) -> dict[str, str]:
        """The name -> value pairs of the first of ``tables`` present (metadata and system-env tables)."""
        for table in tables:
            if {"name", "value"} <= self.columns(table):
                return {str(k): str(v) for k, v in self.conn.execute(f'SELECT name, value FROM "{table}"')}
        return {}

    def enum(self, table: str) -> dict[int, str]:
        """Enum value -> name (e.g. 'CUDA_MEMCPY_KIND_HTOD'), from the export's ENUM table or the defaults.
        Rows whose id is not an integer say nothing and are skipped."""
        if {"id", "name"} <= self.columns(table):
            return {int(i): str(n) for i, n in self.conn.execute(
                f"SELECT id, name FROM \"{table}\" WHERE typeof(id) = 'integer'")}
        return dict(enumerate(_DEFAULT_ENUMS.get(table, [])))

    def require_times(self, path: Path, *tables: str) -> None:
        """A table of events without its ``start`` or ``end`` column cannot be imported: one line naming it."""
        for table in tables:
            missing = [c for c in ("start", "end") if c not in self.columns(table)]
            if missing and table in self.tables and self.conn.execute(f'SELECT 1 FROM "{table}" LIMIT 1').fetchone():
                raise InputError(path, f"has a {table} table without its {' and '.join(missing)} column")


def _first_present(candidates: list[np.ndarray], n: int) -> np.ndarray:
    """Element-wise first non-None of ``candidates``, '' where all are None."""
    out = np.full(n, None, dtype=object)
    for values in candidates:
        out = np.where(pd.isna(out), values, out)
    out[pd.isna(out)] = ""
    return out


def _column(name: str) -> str:
    return f't."{name}"'


def _integer(columns: list[str]) -> str:
    """SQL for the first non-NULL of ``columns`` as an integer, -1 when none is."""
    return f"CAST({_coalesce([_column(c) for c in columns], '-1')} AS INTEGER)"


def _as_tuple(cols: str | tuple[str, ...]) -> tuple[str, ...]:
    return (cols,) if isinstance(cols, str) else cols


def _coalesce(sources: list[str], default: str) -> str:
    return f"COALESCE({', '.join([*sources, default])})" if sources else default


def _pid(global_id: np.ndarray) -> np.ndarray:
    return np.where(global_id >= 0, (global_id >> 24) & _ID_MASK, -1)


def _tid(global_id: np.ndarray) -> np.ndarray:
    return np.where(global_id >= 0, global_id & _ID_MASK, -1)


def _numbered(name: str, id_column: str, columns: dict) -> pd.DataFrame:
    """A model table whose rows are numbered in their current order, all on rank 0."""
    n = len(next(iter(columns.values())))
    return make_table(name, {id_column: np.arange(n), "rank": np.zeros(n, np.int64), **columns}, n)


def _by_start(*frames: pd.DataFrame) -> pd.DataFrame:
    """Rows of ``frames`` in time order (sorting here is cheaper than ORDER BY in SQLite)."""
    return pd.concat(frames, ignore_index=True).sort_values("start", kind="stable", ignore_index=True)


def _profile(db: _Export, path: Path) -> Profile:
    db.require_times(path, _KERNEL, _RUNTIME, _DRIVER, _MEMCPY, _MEMSET, _SYNC, _NVTX)
    kernels = _kernels(db)
    api_calls = _api_calls(db)
    ops, ranges = _nvtx(db)
    profile = Profile(ops=ops, ranges=ranges, api_calls=api_calls, kernels=kernels, memops=_memops(db),
                      syncs=_syncs(db, api_calls), gpus=_gpus(db, kernels), memory=_memory(db, api_calls))
    profile.meta = _meta(db, path, profile)
    return profile


def _kernels(db: _Export) -> pd.DataFrame:
    k = _by_start(db.read(_KERNEL, {
        "start": "start", "end": "end", "gpid": "globalPid", "device": "deviceId", "stream": "streamId",
        "correlation": "correlationId", "grid_x": "gridX", "grid_y": "gridY", "grid_z": "gridZ",
        "block_x": "blockX", "block_y": "blockY", "block_z": "blockZ", "registers": "registersPerThread",
        "static_smem": "staticSharedMemory", "dynamic_smem": "dynamicSharedMemory",
    }, {"name": (_Ref("demangledName"), _Ref("shortName"))}, events_of="kernels"))
    smem = np.where((k.static_smem >= 0) & (k.dynamic_smem >= 0), k.static_smem + k.dynamic_smem, -1)
    columns = {c: k[c].to_numpy() for c in (
        "start", "end", "device", "stream", "correlation", "name", "grid_x", "grid_y", "grid_z",
        "block_x", "block_y", "block_z", "registers")}
    return _numbered("kernels", "kernel_id", {**columns, "pid": _pid(k.gpid.to_numpy()), "shared_mem": smem})


def _api_calls(db: _Export) -> pd.DataFrame:
    """Runtime and driver calls; nsys's backtrace copies of the same calls are dropped."""
    frames = []
    for table, kind in ((_RUNTIME, "runtime"), (_DRIVER, "driver")):
        calls = db.read(table, {"start": "start", "end": "end", "gtid": "globalTid",
                                "correlation": "correlationId", "event_class": "eventClass"},
                        {"name": ("name", _Ref("nameId"))}, events_of="api_calls")
        calls = calls[~calls.event_class.isin(_BACKTRACE_CLASSES)]
        frames.append(calls.assign(kind=np.where(calls.event_class.isin(_DRIVER_CLASSES), "driver", kind)))
    calls = _by_start(*frames)
    gtid = calls.gtid.to_numpy()
    return _numbered("api_calls", "api_id", {
        "pid": _pid(gtid), "tid": _tid(gtid),
        "name": _strip(calls["name"], _API_VERSION),
        "kind": calls.kind.to_numpy(object), "start": calls.start.to_numpy(), "end": calls.end.to_numpy(),
        "correlation": calls.correlation.to_numpy(),
    })


def _strip(values: pd.Series, pattern: re.Pattern) -> np.ndarray:
    """``values`` with ``pattern`` removed, worked out once per distinct value."""
    codes, distinct = pd.factorize(values)
    return np.array([pattern.sub("", v) for v in distinct], dtype=object)[codes]


def _memops(db: _Export) -> pd.DataFrame:
    copy_kinds = {v: _copy_kind(n) for v, n in db.enum("ENUM_CUDA_MEMCPY_OPER").items()}
    mem_kinds = {v: _mem_kind(n) for v, n in db.enum("ENUM_CUDA_MEM_KIND").items()}
    mem_labels = {v: (k or "unknown").replace("_", " ").title() for v, k in mem_kinds.items()}
    common = {"start": "start", "end": "end", "gpid": "globalPid", "device": "deviceId", "stream": "streamId",
              "correlation": "correlationId", "bytes": "bytes"}
    copies = db.read(_MEMCPY, {**common, "copy": "copyKind", "src": "srcKind", "dst": "dstKind"}, events_of="memops")
    sets = db.read(_MEMSET, {**common, "dst": "memKind"}, events_of="memops")
    copy_kind = _lookup(copies["copy"], copy_kinds)
    src_label = _lookup(copies.src, mem_labels, "Unknown")
    dst_label = _lookup(copies.dst, mem_labels, "Unknown")
    copies = copies.assign(kind="memcpy", copy_kind=copy_kind, src_mem=_lookup(copies.src, mem_kinds),
                           dst_mem=_lookup(copies.dst, mem_kinds),
                           name="Memcpy " + copy_kind.where(copy_kind != "", "Unknown")
                           + " (" + src_label + " -> " + dst_label + ")")
    sets = sets.assign(kind="memset", copy_kind="", src_mem="", dst_mem=_lookup(sets.dst, mem_kinds),
                       name="Memset (" + _lookup(sets.dst, mem_labels, "Unknown") + ")")
    ops = _by_start(copies, sets)
    columns = {c: ops[c].to_numpy() for c in ("device", "stream", "start", "end", "bytes", "correlation")}
    texts = {c: ops[c].to_numpy(object) for c in ("kind", "name", "copy_kind", "src_mem", "dst_mem")}
    return _numbered("memops", "memop_id", {**columns, **texts, "pid": _pid(ops.gpid.to_numpy())})


def _memory(db: _Export, api_calls: pd.DataFrame) -> pd.DataFrame:
    """CUDA memory usage (``nsys profile --cuda-memory-usage=true``): each device allocation (+bytes) or free
    (−bytes) of the block at ``address``, on the thread of the API call that made it (by correlation id). nsys
    records no totals: they are the running sum of these (docs/metrics.md, "Memory"), the CUDA driver's view,
    which for PyTorch is what its caching allocator reserves."""
    m = db.read(_MEMORY_USAGE, {"ts": "start", "gpid": "globalPid", "device": "deviceId", "addr": "address",
                                "bytes": "bytes", "op": "memoryOperationType", "correlation": "correlationId"},
                where="typeof(t.start) = 'integer'")
    m = m.sort_values("ts", kind="stable")
    pid = _pid(m.gpid.to_numpy())
    calls = api_calls.loc[api_calls["correlation"] >= 0, ["pid", "correlation", "tid"]].drop_duplicates(
        ["pid", "correlation"])
    tid = pd.DataFrame({"pid": pid, "correlation": m.correlation.to_numpy()}).merge(
        calls, on=["pid", "correlation"], how="left")["tid"].fillna(-1).to_numpy(np.int64)
    delta = np.where(m.op.to_numpy() == 1, -m.bytes.to_numpy(), m.bytes.to_numpy())
    return make_table("memory", {"rank": np.zeros(len(m), np.int64), "device": m.device.to_numpy(),
                                 "ts": m.ts.to_numpy(), "bytes_delta": delta,
                                 "pid": pid, "tid": tid, "addr": m.addr.to_numpy()})


def _lookup(values: pd.Series, names: dict[int, str], missing: str = "") -> pd.Series:
    return values.map(names).fillna(missing).astype(object)


def _copy_kind(enum_name: str) -> str:
    """'CUDA_MEMCPY_KIND_HTOD' -> 'HtoD' (unified-memory variants read as their direction)."""
    m = re.fullmatch(r"(?:CUDA_MEMCPY_KIND_)?(?:UVM_)?([A-Z])TO([A-Z])", enum_name)
    return f"{m[1]}to{m[2]}" if m else ""


def _mem_kind(enum_name: str) -> str:
    """'CUDA_MEMOPR_MEMORY_KIND_DEVICE_STATIC' -> 'device_static'; unknown -> ''."""
    kind = enum_name.removeprefix("CUDA_MEMOPR_MEMORY_KIND_").lower()
    return "" if kind == "unknown" else kind


def _syncs(db: _Export, api_calls: pd.DataFrame) -> pd.DataFrame:
    """Synchronizations, with thread and kind taken from the API call of the same process and correlation."""
    syncs = _by_start(db.read(_SYNC, {"start": "start", "end": "end", "gpid": "globalPid",
                                      "device": "deviceId", "stream": "streamId",
                                      "correlation": "correlationId"}, events_of="syncs"))
    syncs["pid"] = _pid(syncs.gpid.to_numpy())
    calls = api_calls[["pid", "correlation", "tid", "name"]].drop_duplicates(["pid", "correlation"])
    syncs = syncs.merge(calls, on=["pid", "correlation"], how="left")
    syncs["stream"] = syncs.stream.mask(syncs.stream == _CUPTI_INVALID, -1)
    api = pd.Series(_strip(syncs["name"].fillna(""), _PER_THREAD_STREAM))
    return _numbered("syncs", "sync_id", {
        **{c: syncs[c].to_numpy() for c in ("pid", "device", "stream", "start", "end", "correlation")},
        "tid": syncs.tid.fillna(-1).to_numpy(np.int64),
        "kind": api.map(_SYNC_KINDS).fillna("unknown").to_numpy(object),
    })


class _NvtxOp(NamedTuple):
    """The op columns one NVTX range text yields."""

    name: str
    op_type: str
    seq: int = -1
    direction: str = ""
    input_shapes: str = ""
    input_dtypes: str = ""
    concrete_inputs: str = ""


_NOT_AN_OP = _NvtxOp("", "")


def _nvtx(db: _Export) -> tuple[pd.DataFrame, pd.DataFrame]:
    """NVTX ranges split into ops (PyTorch emit_nvtx / DLProf op ranges) and all other ranges."""
    events = db.read(_NVTX, {"start": "start", "end": "end", "gtid": "globalTid"},
                     {"text": ("text", _Ref("textId"))},
                     where=f"t.eventType IN {_NVTX_RANGE_TYPES}", events_of="ranges")
    events = events[events.end != events.start]  # a range of no length is a point (marks are filtered above)
    events = events.sort_values(["start", "end"], ascending=[True, False], kind="stable", ignore_index=True)
    codes, texts = pd.factorize(events.text)
    parsed = [_classify(text) for text in texts]
    fields = pd.DataFrame([op or _NOT_AN_OP for op, _ in parsed], columns=_NvtxOp._fields).iloc[codes]
    is_op = np.array([op is not None for op, _ in parsed], dtype=bool)[codes]
    marker = np.array([scope for _, scope in parsed], dtype=object)[codes]
    start, end, gtid = events.start.to_numpy(), events.end.to_numpy(), events.gtid.to_numpy()
    pid, tid = _pid(gtid), _tid(gtid)
    scope = _scopes(tid, start, end, marker, is_op)
    ops = _numbered("ops", "op_id", {
        "pid": pid[is_op], "tid": tid[is_op], "start": start[is_op], "end": end[is_op], "scope": scope[is_op],
        **{c: fields[c].to_numpy()[is_op] for c in _NvtxOp._fields},
    })
    rest = ~is_op
    ranges = _numbered("ranges", "range_id", {
        "pid": pid[rest], "tid": tid[rest], "name": events.text.to_numpy(object)[rest],
        "domain": np.full(int(rest.sum()), "nvtx", dtype=object), "start": start[rest], "end": end[rest],
    })
    return ops, ranges


def _classify(text: str) -> tuple[_NvtxOp | None, str]:
    """(op columns or None, DLProf scope path or '') for one distinct NVTX range text."""
    fields = _literal_dict(text)
    if fields is not None:
        return _dlprof_op(fields), _dlprof_scope(fields)
    return _emit_nvtx_op(text), ""


def _literal_dict(text: str) -> dict | None:
    """DLProf/pyprof ranges hold a Python dict literal; anything that does not parse is plain text."""
    if not text.startswith("{"):
        return None
    try:
        value = ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _dlprof_op(fields: dict) -> _NvtxOp | None:
    """``{'mod': 'Tensor', 'op': 'uniform_', 'args': [...]}`` -> op "Tensor.uniform_" with argument shapes."""
    mod, op = fields.get("mod"), fields.get("op")
    if not (isinstance(mod, str) and isinstance(op, str)):
        return None
    args = fields.get("args")
    described = [_dlprof_arg(a) for a in args] if isinstance(args, list) else []
    shapes, dtypes, values = ([list(c) for c in zip(*described)] if described else ([], [], []))
    return _NvtxOp(name=f"{mod}.{op}", op_type=op, input_shapes=_json(shapes), input_dtypes=_json(dtypes),
                   concrete_inputs=_json(values) if any(values) else "")


def _dlprof_arg(arg: object) -> tuple[list, str, str]:
    """(shape, dtype, value) of one pyprof argument record; tensors have a shape, scalars a value."""
    if not isinstance(arg, dict):
        return [], "", ""
    shape = arg.get("shape")
    if isinstance(shape, (tuple, list)) and all(isinstance(d, int) for d in shape):
        return list(shape), str(arg.get("dtype", "")), ""
    return [], str(arg.get("type", "")), str(arg["value"]) if "value" in arg else ""


def _dlprof_scope(fields: dict) -> str:
    """The funcStack of a DLProf ``{'traceMarker': [...], 'funcStack': '/<module>/...'}`` range."""
    stack = fields.get("funcStack")
    return stack if isinstance(stack, str) else ""


def _emit_nvtx_op(text: str) -> _NvtxOp | None:
    """Parse ``torch.autograd.profiler.emit_nvtx`` text: name, seq and (with record_shapes) sizes."""
    m = _TORCH_OP.fullmatch(text)
    if not m:
        return None
    name, rest = m["name"], m["fields"] or ""
    seq = _SEQ.search(rest)
    number = int(seq[1]) if seq else -1
    return _NvtxOp(name=name, op_type=name, seq=number if -(2**63) <= number < 2**63 else -1,
                   direction="bwd" if _BACKWARD.search(name) else "", input_shapes=_sizes(rest))


def _sizes(fields: str) -> str:
    """The ``sizes = [[...], ...]`` field as compact JSON, '' when absent or malformed."""
    m = _SIZES.search(fields)
    if not m:
        return ""
    try:
        shapes = json.loads(m[1])
    except (ValueError, RecursionError):
        return ""
    return _json(shapes) if isinstance(shapes, list) else ""


def _json(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


def _scopes(tid: np.ndarray, start: np.ndarray, end: np.ndarray, marker: np.ndarray,
            is_op: np.ndarray) -> np.ndarray:
    """Scope of each op: the innermost DLProf scope marker on its thread that encloses it in time.

    Rows come sorted by start (longer first on ties), so a per-thread stack of open markers suffices.
    """
    scope = np.full(len(tid), "", dtype=object)
    has_marker = marker != ""
    if not has_marker.any():
        return scope
    open_markers: dict[int, list[tuple[int, str]]] = {}
    for i in np.flatnonzero(has_marker | is_op):
        stack = open_markers.setdefault(int(tid[i]), [])
        while stack and stack[-1][0] < start[i]:
            stack.pop()
        if has_marker[i]:
            stack.append((int(end[i]), marker[i]))
        else:
            scope[i] = next((path for stop, path in reversed(stack) if stop >= end[i]), "")
    return scope


def _gpus(db: _Export, kernels: pd.DataFrame) -> pd.DataFrame:
    """TARGET_INFO_GPU rows, numbered with the CUDA device ordinal that the kernel table's deviceId uses.

    ``id`` is nsys's own GPU index (it differs from the CUDA ordinal on the 4-GPU 2024.5 export);
    ``cuDevice`` is the CUDA ordinal, and TARGET_INFO_CUDA_DEVICE (2025.1) maps ``gpuId`` to the ordinal
    the process saw.
    """
    gpus = db.read("TARGET_INFO_GPU", {"id": "id", "cuda": ("cuDevice", "id"), "sm_count": "smCount",
                       "memory_bytes": "totalMemory", "cc_major": "computeMajor", "cc_minor": "computeMinor"},
                   {"name": ("name",)})
    seen = _cuda_ids(db, kernels.pid.unique())
    gpus["device"] = [seen.get(i, cuda) for i, cuda in zip(gpus.id, gpus.cuda)]
    gpus = gpus.sort_values("device", kind="stable", ignore_index=True)
    n = len(gpus)
    return make_table("gpus", {"rank": np.zeros(n, np.int64), "name": gpus["name"].to_numpy(object),
                               **{c: gpus[c].to_numpy() for c in ("device", "sm_count", "memory_bytes",
                                                                  "cc_major", "cc_minor")}}, n)


def _cuda_ids(db: _Export, pids: np.ndarray) -> dict[int, int]:
    """nsys GPU id -> CUDA ordinal as seen by the kernel-launching processes (any process if none match)."""
    seen = db.read("TARGET_INFO_CUDA_DEVICE", {"gpu": "gpuId", "cuda": "cudaId", "pid": "pid"})
    own = seen[seen.pid.isin(pids)]
    seen = own if len(own) else seen
    return {int(g): int(c) for g, c in seen.groupby("gpu").cuda.min().items()}


def _meta(db: _Export, path: Path, profile: Profile) -> dict:
    export = db.key_values("META_DATA_EXPORT", "EXPORT_META_DATA")
    target = db.key_values("TARGET_INFO_SYSTEM_ENV")
    return {
        "source_format": "nsys",
        "source_path": str(path),
        "nsys_version": export.get("EXPORT_PRODUCT_VERSION", ""),
        "export_schema_version": export.get("EXPORT_SCHEMA_VERSION", ""),
        "rank": 0,
        "world_size": 1,
        "hostname": target.get("Hostname", ""),
        "system": _system(db, target, export),
        "process_names": _process_names(db, profile.kernels.pid.unique()),
        "trace_start_ns": _trace_start(profile),
        **({"dropped_events": db.dropped} if db.dropped else {}),
    }


def _system(db: _Export, target: dict[str, str], export: dict[str, str]) -> dict:
    """The machine as nsys recorded it (:mod:`dlscope.system`): TARGET_INFO_SYSTEM_ENV's CPU, OS, host, driver and
    the CUDA the driver supports; the nsys version of the export; CUDA / cuDNN / NCCL versions the profiled
    process's environment states (NGC containers set them), else the environment of the machine."""
    facts = {"hostname": target.get("Hostname"), "cpu_model": target.get("CpuDescription"),
             "os": target.get("OsDescription"), "gpu_driver_version": driver_version(target.get("NvDriverVersion")),
             "cuda_driver_version": cuda_version(target.get("CudaDriverVersion")),
             "nsys_version": export.get("EXPORT_PRODUCT_VERSION")}
    env: list[tuple[str, str]] = []
    if {"name", "value"} <= db.columns("META_DATA_CAPTURE"):
        env = [(name, value) for name, _, value in (str(v).partition("=") for (v,) in db.conn.execute(
            "SELECT value FROM META_DATA_CAPTURE WHERE name LIKE 'PROCESS_%:ENVIRONMENT_VARIABLE'"))]
    env += env_pairs(target.get("DeviceEnvironment", ""))
    return known({**environment_facts(env), **facts})


def _process_names(db: _Export, pids: np.ndarray) -> list[str]:
    """Names of the processes that launched kernels."""
    processes = db.read("PROCESSES", {"gpid": "globalPid"}, {"name": ("name",)})
    launched = np.isin(_pid(processes.gpid.to_numpy()), pids)
    return sorted(set(processes["name"][launched]))


def _trace_start(profile: Profile) -> int:
    """Earliest imported event, as the Kineto importer defines it (-1 for an empty export)."""
    tables = ("kernels", "api_calls", "memops", "syncs", "ops", "ranges")
    starts = [profile.table(n).start.min() for n in tables if len(profile.table(n))]
    return int(min(starts)) if starts else -1
