"""Import an XSpace protobuf (``*.xplane.pb``: TensorFlow's profiler, ``jax.profiler.trace``, PyTorch/XLA).

Decoding is the protobuf runtime's (``pip install "dlscope[xplane]"``): the message classes are built at run
time from the published XPlane definition (``data/xplane.proto``, as TensorFlow/XLA's tsl ships it; compiled
once to ``data/xplane_descriptor.json``) in a private descriptor pool, so a TensorFlow in the same process,
with its own copy of the same file, does not clash. Times stay exact: ``timestamp_ns`` of the line plus the
event's picosecond offset, in integers, rounded to the nearest ns.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from ..errors import InputError, reading
from ..model import Profile
from .xla_model import Event, Line, Plane, build_profile

#: XSpace field 1 (planes, length-delimited) opens the file; a plane's name follows within a few bytes
_FIRST_BYTE = 0x0A
_PLANE_NAMES = (b"/host:", b"/device:", b"Task Environment")
INSTALL_HINT = 'reading XSpace (.xplane.pb) files needs the protobuf package: pip install "dlscope[xplane]"'


def looks_like_xspace(head: bytes) -> bool:
    """An XSpace's first bytes: the planes field tag, then a plane whose name is a host or device path."""
    return bool(head) and head[0] == _FIRST_BYTE and any(name in head[:4096] for name in _PLANE_NAMES)


@lru_cache(maxsize=1)
def xspace_class() -> Any:
    """The ``tensorflow.profiler.XSpace`` message class (raises ImportError without protobuf)."""
    from google.protobuf import (
        descriptor_pb2,
        descriptor_pool,
        json_format,
        message_factory,
    )

    text = resources.files("dlscope.data").joinpath("xplane_descriptor.json").read_text()
    proto = json_format.Parse(text, descriptor_pb2.FileDescriptorProto())
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("tensorflow.profiler.XSpace"))


def _ps_to_ns(ps: int) -> int:
    """Nearest ns of a picosecond count, halves up (integer arithmetic: no float on epoch values)."""
    return (ps + 500) // 1000


def _stat_values(stats, names: dict[int, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for stat in stats:
        kind = stat.WhichOneof("value")
        if kind is None:
            continue
        value = getattr(stat, kind)
        if kind == "ref_value":
            value = names.get(value, "")
        elif kind == "bytes_value":
            continue  # serialized protos (HLO, options): nothing the model maps
        out[names.get(stat.metadata_id, str(stat.metadata_id))] = value
    return out


def read_planes(path: Path) -> tuple[list[Plane], list[str]]:
    """Every plane of the file as :class:`Plane` s (events with exact ns), and the XSpace's hostnames."""
    try:
        cls = xspace_class()
    except ImportError:
        raise InputError(path, INSTALL_HINT) from None
    from google.protobuf.message import DecodeError

    with reading(path):
        data = Path(path).read_bytes()
    space = cls()
    try:
        space.ParseFromString(data)
    except DecodeError as e:
        raise InputError(path, f"is not a readable XSpace protobuf ({e})") from None
    planes = []
    for plane in space.planes:
        stat_names = {k: v.name for k, v in plane.stat_metadata.items()}
        metadata = plane.event_metadata
        lines = []
        for line in plane.lines:
            base_ps = line.timestamp_ns * 1000
            events = []
            for ev in line.events:
                meta = metadata[ev.metadata_id]
                stats = _stat_values(meta.stats, stat_names) if meta.stats else {}
                stats.update(_stat_values(ev.stats, stat_names))
                start_ps = base_ps + ev.offset_ps
                events.append(Event(meta.name or meta.display_name, _ps_to_ns(start_ps),
                                    _ps_to_ns(start_ps + ev.duration_ps), stats))
            lines.append(Line(line.id, line.name or line.display_name, events))
        planes.append(Plane(plane.name, lines, _stat_values(plane.stats, stat_names)))
    return planes, list(space.hostnames)


def load_xspace(path: str | Path) -> Profile:
    """Import one ``.xplane.pb`` file."""
    path = Path(path)
    planes, hostnames = read_planes(path)
    meta: dict[str, Any] = {"source_format": "xspace", "source_path": str(path),
                            "planes": json.dumps([p.name for p in planes])}
    if hostnames:
        meta["hostname"] = hostnames[0]
    return build_profile(planes, meta)
