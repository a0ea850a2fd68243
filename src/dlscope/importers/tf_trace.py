"""Import the TensorBoard profile plugin's trace JSON (``*.trace.json.gz``, written by TensorFlow's profiler and
``jax.profiler.trace`` next to the ``.xplane.pb``), with the base install.

It is the XSpace converted to Chrome-trace form: a process per plane (``process_name`` ``/host:CPU``,
``/device:GPU:0``), a thread per line, ``X`` events with their stats as ``args`` (a TF op's type as its name
and ``long_name`` = ``node:Type``). Turned back into :class:`~.xla_model.Plane` s, it goes through the same
mapping as the protobuf. Times are µs with up to 3 decimals, read exactly as ns (:mod:`.exact_ns`).
"""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path
from typing import Any

import msgspec

from ..errors import InputError, reading
from ..model import Profile
from .exact_ns import TimeOutOfRange, us_to_ns
from .xla_model import Event, Line, Plane, build_profile

_DECODER = msgspec.json.Decoder(float_hook=str.strip)  # floats as their text: exact ns, never float64
#: plane names the profiler writes as process names; one of them early in the file marks the format
_PLANE_MARKS = (b'"/host:CPU"', b'"/device:GPU:', b'"/device:TPU:', b'"/host:', b'"/device:CUSTOM:')


def looks_like_tf_trace(head: bytes) -> bool:
    """A Chrome trace whose process names are XSpace plane names (TensorFlow / JAX profiler output)."""
    return b'"traceEvents"' in head and any(mark in head for mark in _PLANE_MARKS)


def _read(path: Path) -> Any:
    with reading(path):
        raw = Path(path).read_bytes()
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as e:
            raise InputError(path, f"is not a readable gzip file ({e})") from None
    try:
        return _DECODER.decode(raw)
    except msgspec.DecodeError as e:
        raise InputError(path, f"is not valid JSON ({e})") from None


def read_planes(path: Path) -> list[Plane]:
    """The trace's processes as planes and threads as lines (``X`` events only; ``M`` events name them)."""
    doc = _read(path)
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list):
        raise InputError(path, "has no traceEvents list")
    process_names: dict[Any, str] = {}
    thread_names: dict[tuple[Any, Any], str] = {}
    complete = []
    for ev in events:
        if not isinstance(ev, dict):
            continue
        ph = ev.get("ph")
        if ph == "M":
            name = (ev.get("args") or {}).get("name")
            if ev.get("name") == "process_name" and isinstance(name, str):
                process_names[ev.get("pid")] = name
            elif ev.get("name") == "thread_name" and isinstance(name, str):
                thread_names[(ev.get("pid"), ev.get("tid"))] = name
        elif ph == "X":
            complete.append(ev)
    try:
        starts = us_to_ns([ev.get("ts", 0) for ev in complete], "ts")
        durs = us_to_ns([ev.get("dur", 0) for ev in complete], "dur")
    except TimeOutOfRange as e:
        raise InputError(path, f"has an event whose {e}") from None
    lines: dict[tuple[Any, Any], Line] = {}
    for ev, start, dur in zip(complete, starts.tolist(), durs.tolist()):
        key = (ev.get("pid"), ev.get("tid"))
        line = lines.get(key)
        if line is None:
            line = lines[key] = Line(_as_int(ev.get("tid")), thread_names.get(key, str(ev.get("tid"))), [])
        args = ev.get("args") or {}
        stats = {k: _stat(v) for k, v in args.items()} if isinstance(args, dict) else {}
        name = str(args.get("long_name") or ev.get("name", "")) if isinstance(args, dict) else str(ev.get("name"))
        line.events.append(Event(name, start, start + dur, stats))
    planes: dict[Any, Plane] = {}
    for (pid, _tid), line in lines.items():
        plane = planes.get(pid)
        if plane is None:
            plane = planes[pid] = Plane(process_names.get(pid, str(pid)), [])
        plane.lines.append(line)
    return list(planes.values())


def _as_int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return -1


def _stat(value: Any) -> Any:
    """Args are strings in this JSON ("0", "196608"); integers come back as ints like the protobuf's."""
    if isinstance(value, str) and value.lstrip("-").isdigit():
        return int(value)
    return value


def load_tf_trace(path: str | Path) -> Profile:
    """Import one TensorBoard profile plugin trace JSON (plain or gzip)."""
    path = Path(path)
    planes = read_planes(path)
    return build_profile(planes, {"source_format": "tf_trace", "source_path": str(path)})
