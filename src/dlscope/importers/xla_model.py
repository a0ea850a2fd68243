"""TensorFlow / JAX (XLA) profiles into the normalized model, whichever file they came in.

TensorFlow's profiler, ``jax.profiler`` and PyTorch/XLA all record an XSpace: planes (``/host:CPU``,
``/device:GPU:0``, ...) of lines (threads, CUDA streams, derived rows) of events with stats. The TensorBoard
profile plugin's trace JSON is the same data converted (process = plane, thread = line). Both readers
(:mod:`.xspace`, :mod:`.tf_trace`) hand :func:`build_profile` the same :class:`Plane` list, so both files of
one run give the same tables by construction, and the mapping below is written once.

Mapping (docs/schema.md, "TensorFlow and JAX"):

* device-plane stream events are kernels, or memory operations when named ``Memcpy*``/``Memset*``; derived
  rows (``TensorFlow Ops``, ``XLA Ops``, ``Steps`` ...) are not activity;
* host events carrying a ``correlation_id`` are the launch calls (driver API) of those activities;
* host TF ops (``node:Type``, ``is_eager`` stat) and XLA ops (``hlo_op`` stat) are ops; so are the calls of
  compiled functions (``PjitFunction(f)``, a ``tf.function``), the level the user wrote;
* a GPU op runs its kernels from inside TF's executor, which records no host event for it: the kernel's
  annotation (``node:Type``, or XLA's ``hlo_op``) names it, and consecutive launches of one thread under one
  annotation become that op's CPU instance (first launch start to last launch end). Its CPU time is thus the
  span of its launches, a lower bound (said in the import's meta ``op_cpu_time``);
* steps: host markers (``tf.profiler.experimental.Trace(..., step_num=N, _r=1)``,
  ``jax.profiler.StepTraceAnnotation``), else TF's device ``Steps`` row (stretched back to the CPU start of
  the events of its step group), become ``ProfilerStep#N`` ranges;
* tf.data events (``Iterator::...``) are data-loading ranges; GPU properties come from the device plane's
  stats; allocator events (``MemoryAllocation``) feed the memory table.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..model import Profile, make_table, text_column


@dataclass
class Event:
    name: str
    start: int  # ns
    end: int  # ns
    stats: dict[str, Any] = field(default_factory=dict)


@dataclass
class Line:
    line_id: int
    name: str
    events: list[Event]


@dataclass
class Plane:
    name: str
    lines: list[Line]
    stats: dict[str, Any] = field(default_factory=dict)


_DEVICE = re.compile(r"^/device:(GPU|TPU|CUSTOM|XPU|ROCM)(?::[A-Za-z]*)?:?(\d+)", re.IGNORECASE)
_STREAM = re.compile(r"^Stream #(\d+)")
#: a TF op's long name "scope/node:Type" (a single colon; runtime events use "::")
_TF_OP = re.compile(r"^([^:#]*[^:#/]):([A-Za-z_][A-Za-z0-9_]*)$")
_COMPILED_CALL = re.compile(r"^(PjitFunction|PmapFunction)\((.*)\)$")
_DATA_PIPELINE = re.compile(r"^(Iterator::|IteratorGetNext|ParallelMapProduce|MapAndBatchProduce)")
_GPU_ALLOCATOR = re.compile(r"GPU_(\d+)_bfc", re.IGNORECASE)
_BACKWARD = re.compile(r"(^|/)(gradient_tape|gradients)(/|$)|Backprop|Grad[A-Z]|transpose\(jvp", re.ASCII)
_HLO_TYPE = re.compile(r"^(.*?)(\.\d+)*$")
_COPY_KINDS = {"H2D": "HtoD", "D2H": "DtoH", "D2D": "DtoD", "P2P": "PtoP", "HtoD": "HtoD", "DtoH": "DtoH",
               "DtoD": "DtoD", "PtoP": "PtoP"}
_DERIVED_ROWS = ("TensorFlow Ops", "TensorFlow Name Scope", "XLA Ops", "XLA Modules", "Steps", "Source code",
                 "Launch Stats", "Async XLA Ops", "XLA TraceMe", "Framework Ops", "Framework Name Scope")


def _int(value: Any, default: int = -1) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def tf_op_parts(long_name: str) -> tuple[str, str, str] | None:
    """(node name, op type, name scope) of a TF op's long name ``scope/node:Type``; None for other events."""
    m = _TF_OP.match(long_name)
    if not m:
        return None
    node, op_type = m.group(1), m.group(2)
    return node, op_type, node.rpartition("/")[0]


def _annotation_op(stats: dict[str, Any]) -> tuple[str, str, str] | None:
    """The op a device activity ran for: the innermost TF op of its annotation, else its XLA op."""
    annotation = str(stats.get("annotation", "") or "")
    for level in reversed(annotation.split("::")):
        parts = tf_op_parts(re.sub(r"#.*?#", "", level).strip())
        if parts:
            return parts
    hlo = str(stats.get("hlo_op", "") or "")
    if hlo:
        return hlo, _hlo_type(hlo), _xla_scope(stats)
    return None


def _hlo_type(hlo_op: str) -> str:
    """``dot.3`` -> ``dot``; fusions keep their kind (``loop_add_fusion`` -> ``fusion``)."""
    match = _HLO_TYPE.match(hlo_op)
    assert match is not None  # every name matches: the numeric suffixes are optional
    base = match.group(1)
    return "fusion" if base.endswith("fusion") else base


def _xla_scope(stats: dict[str, Any]) -> str:
    """JAX's name stack (``tf_op``/``long_name`` stat: ``jit(step)/jit(main)/dot_general``) less the op."""
    stack = str(stats.get("tf_op", "") or stats.get("long_name", "") or "")
    stack = stack.split(":")[0]
    return stack.rpartition("/")[0] or str(stats.get("hlo_module", "") or "")


def _direction(name: str, scope: str, op_type: str) -> str:
    return "bwd" if _BACKWARD.search(f"{scope}/{name}/{op_type}") else "fwd"


def _copy_kind(name: str) -> str:
    m = re.search(r"(H2D|D2H|D2D|P2P|HtoD|DtoH|DtoD|PtoP)", name)
    return _COPY_KINDS[m.group(1)] if m else ""


def _bytes_of(stats: dict[str, Any]) -> int:
    details = str(stats.get("memcpy_details", "") or stats.get("memset_details", "") or "")
    m = re.search(r"size:(\d+)", details)
    return int(m.group(1)) if m else _int(stats.get("bytes", -1))


def _kernel_details(stats: dict[str, Any]) -> dict[str, int]:
    text = str(stats.get("kernel_details", "") or "")
    out: dict[str, int] = {}
    m = re.search(r"regs:(\d+)", text)
    if m:
        out["registers"] = int(m.group(1))
    m = re.search(r"shm:(\d+)", text) or re.search(r"static_shared:(\d+)", text)
    if m:
        out["shared_mem"] = int(m.group(1))
    for key in ("grid", "block"):
        m = re.search(rf"{key}:(\d+),(\d+),(\d+)", text)
        if m:
            for axis, value in zip("xyz", m.groups()):
                out[f"{key}_{axis}"] = int(value)
    return out


def _is_step_marker(ev: Event) -> bool:
    return "step_num" in ev.stats and (_int(ev.stats.get("_r"), 0) == 1 or ev.name in ("train", "TraceContext"))


class _Rows:
    """Column lists of one table, appended row by row (these profiles are small: MBs, not GBs)."""

    def __init__(self) -> None:
        self.cols: dict[str, list] = {}

    def add(self, **row: Any) -> None:
        if not self.cols:
            self.cols = {k: [] for k in row}
        for k, v in row.items():
            self.cols[k].append(v)

    def __len__(self) -> int:
        return len(next(iter(self.cols.values()))) if self.cols else 0


def build_profile(planes: list[Plane], meta: dict[str, Any]) -> Profile:
    """The normalized profile of one XSpace (see the module docstring); ``meta`` is kept and completed."""
    pid = next((_int(p.stats.get("process_id")) for p in planes if "process_id" in p.stats), 0)
    ops, ranges, api, kernels, memops, memory, gpus = (_Rows() for _ in range(7))
    found: Counter[str] = Counter()
    launches: list[tuple[int, int, int, int]] = []  # (tid, start, end, correlation) of host launch calls
    host_ops: dict[int, list[tuple[int, int, str]]] = {}
    group_spans: dict[int, list[int]] = {}
    device_steps: list[tuple[int, Event]] = []
    activity_op: dict[int, tuple[str, str, str]] = {}  # correlation -> (node, type, scope) of its annotation
    for plane in planes:
        dev = _DEVICE.match(plane.name)
        if plane.name.startswith("/host:CPU"):
            for line in plane.lines:
                for ev in line.events:
                    found["host events"] += 1
                    _host_event(ev, line, pid, ops, ranges, launches, host_ops, memory, group_spans, found)
        elif dev:
            device = int(dev.group(2))
            _gpu_row(plane, device, gpus)
            for line in plane.lines:
                stream = _STREAM.match(line.name)
                if line.name == "Steps":
                    device_steps += [(device, ev) for ev in line.events]
                    continue
                if line.name in _DERIVED_ROWS or not (stream or any("correlation_id" in e.stats
                                                                     for e in line.events[:50])):
                    found[f"derived '{line.name}' events"] += len(line.events)
                    continue
                stream_id = int(stream.group(1)) if stream else _int(line.line_id)
                for ev in line.events:
                    _device_event(ev, device, stream_id, pid, kernels, memops, activity_op, found)
        else:
            found[f"'{plane.name}' plane"] += 1
            meta.update({k: v for k, v in plane.stats.items() if isinstance(v, (str, int, float))
                         and k.endswith("version")})
    _launch_ops(launches, activity_op, host_ops, pid, ops, found)
    for corr_tid, start, end, corr in launches:
        api.add(rank=0, pid=pid, tid=corr_tid, name="cuLaunchKernel", kind="driver", start=start, end=end,
                correlation=corr)
    _device_step_ranges(device_steps, group_spans, ranges)
    profile = Profile(ops=make_table("ops", ops.cols) if len(ops) else Profile().ops,
                      ranges=make_table("ranges", ranges.cols) if len(ranges) else Profile().ranges,
                      api_calls=make_table("api_calls", api.cols) if len(api) else Profile().api_calls,
                      kernels=make_table("kernels", kernels.cols) if len(kernels) else Profile().kernels,
                      memops=make_table("memops", memops.cols) if len(memops) else Profile().memops,
                      memory=make_table("memory", memory.cols) if len(memory) else Profile().memory,
                      gpus=make_table("gpus", gpus.cols) if len(gpus) else Profile().gpus)
    _name_launches(profile)
    for name in ("ops", "ranges", "api_calls", "kernels", "memops"):
        table = profile.table(name)
        id_col = {"ops": "op_id", "ranges": "range_id", "api_calls": "api_id", "kernels": "kernel_id",
                  "memops": "memop_id"}[name]
        table[id_col] = np.arange(len(table), dtype=np.int64)
    meta.setdefault("rank", 0)
    meta["op_cpu_time"] = "launch span" if found["ops from kernel annotations"] else "recorded"
    meta["found"] = ", ".join(f"{n} {what}" for what, n in sorted(found.items(), key=lambda kv: -kv[1]) if n)
    profile.meta = meta
    return profile


def _host_event(ev: Event, line: Line, pid: int, ops: _Rows, ranges: _Rows, launches: list,
                host_ops: dict, memory: _Rows, group_spans: dict, found: Counter) -> None:
    tid = _int(line.line_id, 0)
    stats = ev.stats
    group = _int(stats.get("group_id"))
    if group >= 0:
        span = group_spans.setdefault(group, [ev.start, ev.end])
        span[0], span[1] = min(span[0], ev.start), max(span[1], ev.end)
    if "correlation_id" in stats:
        launches.append((tid, ev.start, ev.end, _int(stats["correlation_id"])))
        return
    if _is_step_marker(ev):
        found["step markers"] += 1
        ranges.add(rank=0, pid=pid, tid=tid, device=-1, name=f"ProfilerStep#{_int(stats['step_num'], 0)}",
                   domain="step", start=ev.start, end=ev.end)
        return
    if ev.name in ("MemoryAllocation", "MemoryDeallocation") and "bytes_allocated" in stats:
        size = _int(stats.get("allocation_bytes"), 0)
        gpu = _GPU_ALLOCATOR.search(str(stats.get("allocator_name", "")))
        memory.add(rank=0, device=int(gpu.group(1)) if gpu else -1, ts=ev.start,
                   bytes_delta=size if ev.name == "MemoryAllocation" else -size,
                   total_allocated=_int(stats.get("bytes_allocated")), total_reserved=_int(stats.get("bytes_reserved")))
        found["allocator events"] += 1
        return
    parts = tf_op_parts(ev.name) if ("is_eager" in stats or ":" in ev.name) else None
    compiled = _COMPILED_CALL.match(ev.name)
    if "hlo_op" in stats:
        hlo = str(stats["hlo_op"])
        parts = (hlo, _hlo_type(hlo), _xla_scope(stats))
    elif compiled:
        parts = (ev.name, compiled.group(1), "")
    elif "tf_function_call" in stats:
        parts = (ev.name, "tf.function", "")
    if parts is not None:
        node, op_type, scope = parts
        ops.add(rank=0, pid=pid, tid=tid, name=node, op_type=op_type, start=ev.start, end=ev.end,
                direction=_direction(node, scope, op_type), scope=scope)
        host_ops.setdefault(tid, []).append((ev.start, ev.end, node))
        found["ops"] += 1
    elif _DATA_PIPELINE.match(ev.name):
        ranges.add(rank=0, pid=pid, tid=tid, device=-1, name=ev.name, domain="tf_data", start=ev.start, end=ev.end)
        found["data pipeline events"] += 1
    elif ev.name.startswith("$"):
        ranges.add(rank=0, pid=pid, tid=tid, device=-1, name=ev.name[1:], domain="python_function",
                   start=ev.start, end=ev.end)
        found["Python frames"] += 1
    else:
        found["runtime events (not modelled)"] += 1


def _device_event(ev: Event, device: int, stream: int, pid: int, kernels: _Rows, memops: _Rows,
                  activity_op: dict, found: Counter) -> None:
    corr = _int(ev.stats.get("correlation_id"))
    op = _annotation_op(ev.stats)
    if op is not None and corr >= 0:
        activity_op[corr] = op
    if ev.name.startswith(("Memcpy", "Memset")) or "memcpy_details" in ev.stats:
        memset = ev.name.startswith("Memset")
        memops.add(rank=0, pid=pid, device=device, stream=stream, kind="memset" if memset else "memcpy",
                   name=ev.name, copy_kind="" if memset else _copy_kind(ev.name), start=ev.start, end=ev.end,
                   bytes=_bytes_of(ev.stats), correlation=corr)
        found["memory operations"] += 1
    else:
        details = _kernel_details(ev.stats)
        kernels.add(rank=0, pid=pid, device=device, stream=stream, name=ev.name, start=ev.start, end=ev.end,
                    correlation=corr, **{k: details.get(k, -1) for k in (
                        "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "registers", "shared_mem")})
        found["kernels"] += 1


def _launch_ops(launches: list, activity_op: dict, host_ops: dict, pid: int, ops: _Rows, found: Counter) -> None:
    """The CPU instance of each GPU op: a run of one thread's launches under the same annotation."""
    runs: list[list] = []  # [tid, start, end, op]
    previous: tuple[int, Any] | None = None
    for tid, start, end, corr in sorted(launches):
        op = activity_op.get(corr)
        if op is not None and previous == (tid, op):
            runs[-1][2] = max(runs[-1][2], end)
        elif op is not None:
            runs.append([tid, start, end, op])
        previous = (tid, op)
    for tid, start, end, (node, op_type, scope) in runs:
        if any(s <= start and end <= e and name == node for s, e, name in host_ops.get(tid, ())):
            continue  # the host recorded this op itself
        ops.add(rank=0, pid=pid, tid=tid, name=node, op_type=op_type, start=start, end=end,
                direction=_direction(node, scope, op_type), scope=scope)
        found["ops from kernel annotations"] += 1


def _name_launches(profile: Profile) -> None:
    """Launch calls are named by what they launched (TF records them under the activity's own name)."""
    api = profile.api_calls
    if api.empty:
        return
    copies = set(profile.memops.loc[profile.memops["kind"] == "memcpy", "correlation"])
    sets = set(profile.memops.loc[profile.memops["kind"] == "memset", "correlation"])
    corr = api["correlation"]
    api["name"] = text_column(np.where(corr.isin(copies), "cuMemcpyAsync",
                                       np.where(corr.isin(sets), "cuMemsetAsync", "cuLaunchKernel")))


def _device_step_ranges(device_steps: list, group_spans: dict, ranges: _Rows) -> None:
    """TF's device ``Steps`` row, when the host recorded no step marker: one step per step group, from the
    first CPU event of its group (the step's CPU start) to the later of the row's and the group's end."""
    if not device_steps or any(d == "step" for d in ranges.cols.get("domain", [])):
        return
    seen: set[int] = set()
    for _device, ev in device_steps:
        number = _int(ev.stats.get("group_id"), _int(ev.name, len(seen)))
        if number in seen:
            continue
        seen.add(number)
        start, end = ev.start, ev.end
        if number in group_spans:
            start, end = min(start, group_spans[number][0]), max(end, group_spans[number][1])
        ranges.add(rank=0, pid=-1, tid=-1, device=-1, name=f"ProfilerStep#{number}", domain="step",
                   start=start, end=end)


def _gpu_row(plane: Plane, device: int, gpus: _Rows) -> None:
    s = plane.stats
    name = str(s.get("device_name", "") or s.get("device_type_string", "") or "")
    gpus.add(rank=0, device=device, name=name, sm_count=_int(s.get("core_count")),
             memory_bytes=_int(s.get("memory_size")), cc_major=_int(s.get("compute_cap_major")),
             cc_minor=_int(s.get("compute_cap_minor")))
