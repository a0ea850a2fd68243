"""The typed events: what a Kineto trace holds that some table needs, decoded by msgspec in C.

Unknown keys are skipped while decoding, and the structs are not tracked by the GC. Events are typed by their
phase (``ph``, a tagged union): complete and instant events get their fields, every other phase (flows,
metadata: a third of a training trace's events) only an empty struct; a piece holding an event without a
phase of the format is decoded by the lenient decoder, which types every event as an :class:`Event`. Every
decoder reads a JSON float in an untyped field (``ts``, ``dur``, the header's values) as its text, so times
convert to exact ns per column (:mod:`..exact_ns`) and never pass through a float64. Decoding failures become one-line
:class:`~dlscope.errors.InputError` s naming the file, and where they can, the event.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar, Generic, TypeVar, Union

import msgspec
from msgspec import field

from ...errors import InputError

# Kineto writes these as ints, but a lenient type keeps one odd value from failing a whole import;
# the column builders turn anything non-numeric into -1.
Int = int | float | str | None
NO_JSON = msgspec.Raw()  # every absent JSON-text arg is this very object (the columns count it by identity)


class Args(msgspec.Struct, gc=False, frozen=True):
    """The ``args`` keys any table needs; every other key is skipped while decoding."""

    external_id: Int = field(name="External id", default=-1)
    legacy_external_id: Int = field(name="external id", default=-1)  # 2021 schema spelling
    seq: Int = field(name="Sequence number", default=-1)
    # Kept as JSON text (no nested lists built); only ops turn them into compact strings.
    input_dims: msgspec.Raw = field(name="Input Dims", default=NO_JSON)
    input_types: msgspec.Raw = field(name="Input type", default=NO_JSON)
    concrete_inputs: msgspec.Raw = field(name="Concrete Inputs", default=NO_JSON)
    # in the order Kineto writes a kernel's keys: msgspec looks for the next field after the last one found first
    device: Int = -1
    stream: Int = -1
    correlation: Int = -1
    registers: Int = field(name="registers per thread", default=-1)
    shared_mem: Int = field(name="shared memory", default=-1)
    blocks_per_sm: Int = field(name="blocks per SM", default=None)
    warps_per_sm: Int = field(name="warps per SM", default=None)
    grid: Any = None
    block: Any = None
    est_occupancy_pct: Int = field(name="est. achieved occupancy %", default=-1)
    bytes: Int = -1
    sync_kind: Any = field(name="cuda_sync_kind", default="")
    device_type: Int = field(name="Device Type", default=-1)
    device_id: Int = field(name="Device Id", default=-1)
    bytes_delta: Int = field(name="Bytes", default=-1)
    total_allocated: Int = field(name="Total Allocated", default=-1)
    total_reserved: Int = field(name="Total Reserved", default=-1)
    addr: Int = field(name="Addr", default=-1)
    # Collective metadata (record_param_comms cpu_ops, and NCCL kernels in newer traces)
    collective: Any = field(name="Collective name", default="")
    in_nelems: Int = field(name="In msg nelems", default=-1)
    out_nelems: Int = field(name="Out msg nelems", default=-1)
    group_size: Int = field(name="Group size", default=-1)
    comm_dtype: Any = field(name="dtype", default="")
    pg_name: Any = field(name="Process Group Name", default="")
    pg_ranks: Any = field(name="Process Group Ranks", default="")
    # Python frames (python_function events) and the legacy per-op Python stack (torch <= 1.10)
    python_id: Int = field(name="Python id", default=-1)
    python_parent_id: Int = field(name="Python parent id", default=-1)
    call_stack: Any = field(name="Call stack", default="")


NO_ARGS = Args()  # shared by every event without args (flows, metadata), so they cost no allocation


class Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: Int = -1
    tid: Int = -1
    # µs: an int, or a JSON float's text (float_hook=str); converted to exact ns per column, never a float
    ts: Any = 0
    dur: Any = 0
    args: Args = NO_ARGS


class _Phased(msgspec.Struct, gc=False, tag_field="ph"):
    """The typed events of the fast decoder, one class per Chrome phase (``ph``, read as the union's tag)."""


class Complete(_Phased, tag="X"):
    """A complete ("X") event: the fields of :class:`Event`, its ``ph`` a class constant (no string per event)."""

    ph: ClassVar[str] = "X"
    cat: str = ""
    name: str = ""
    pid: Int = -1
    tid: Int = -1
    ts: Any = 0
    dur: Any = 0
    args: Args = NO_ARGS


class MemoryArgs(msgspec.Struct, gc=False, frozen=True):
    """The ``args`` of an allocator sample: the keys of :class:`Args` the memory table reads, typed alike."""

    device_type: Int = field(name="Device Type", default=-1)
    device_id: Int = field(name="Device Id", default=-1)
    addr: Int = field(name="Addr", default=-1)
    bytes_delta: Int = field(name="Bytes", default=-1)
    total_allocated: Int = field(name="Total Allocated", default=-1)
    total_reserved: Int = field(name="Total Reserved", default=-1)


class Instant(_Phased, tag="i"):
    """An instant ("i") event: only the allocator's ``[memory]`` samples are read (name, thread, time, args), so
    its args hold only theirs (a struct of 6 fields instead of :class:`Args`' 37)."""

    ph: ClassVar[str] = "i"
    name: str = ""
    pid: Int = -1
    tid: Int = -1
    ts: Any = 0
    args: MemoryArgs = MemoryArgs()


#: the other phases of the Chrome trace format (flows, metadata, counters, async, ...): no table reads them, so
#: their keys are skipped and each costs one empty object instead of an :class:`Event` with its strings
SKIPPED_PHASES = ("B", "E", "I", "C", "b", "n", "e", "s", "t", "f", "P", "N", "O", "D", "M", "V", "v", "R", "c",
                  "(", ")", "=", "T", "p", "S", "F")
_SKIPPED = tuple(msgspec.defstruct(f"Phase{i}", [], bases=(_Phased,), tag=phase, namespace={"ph": phase})
                 for i, phase in enumerate(SKIPPED_PHASES))
PhasedEvent = Union[(Complete, Instant, *_SKIPPED)]  # type: ignore[valid-type]


class FastThenLenient:
    """Decode with the fast decoder (events typed by phase), or, when a piece holds an event it refuses (no
    ``ph``, or a phase outside the format), with the lenient one (every event an :class:`Event`).

    Both give the same rows: the tables read only complete and instant events, whose fields and types are
    the same in both; the fast one skips the other events' keys (30% of a training trace's events are flows),
    saving their objects (235 MB trace: decode and free 0.90 -> 0.74 s CPU, bench/README.md)."""

    def __init__(self, fast: msgspec.json.Decoder, lenient: msgspec.json.Decoder):
        self.fast, self.lenient = fast, lenient

    def decode(self, data: Any) -> Any:
        try:
            return self.fast.decode(data)
        except msgspec.ValidationError:
            return self.lenient.decode(data)


E = TypeVar("E")


class Trace(msgspec.Struct, Generic[E], gc=False):
    """The top level; its events are typed events (pieces) or raw JSON (the stream's header)."""

    traceEvents: list[E] | None = None
    deviceProperties: Any = None
    distributedInfo: Any = None
    schemaVersion: Any = None
    traceName: Any = None
    record_shapes: Any = None
    host_name: Any = None
    hostname: Any = None
    baseTimeNanoseconds: Any = None
    # what the profiler says about the machine (system facts; the raw numbers are kept in the source's meta)
    cupti_version: Any = None
    cuda_runtime_version: Any = None
    cuda_driver_version: Any = None
    roctracer_version: Any = None
    hip_runtime_version: Any = None
    hip_driver_version: Any = None
    dlscope_system: Any = None  # the facts a dlscope capture wrote (dlscope.system.TRACE_KEY)


def decoder(kind: Any) -> msgspec.json.Decoder:
    """A decoder of the file's keys and events: a float in an untyped field is kept as its text.

    The hook gets the number's text; ``str.strip`` returns that very string (a number has no spaces) and
    is a cheaper call than ``str`` (10% of the decode of a fractional-µs trace)."""
    return msgspec.json.Decoder(kind, float_hook=str.strip)


BATCH_DECODER = FastThenLenient(decoder(list[PhasedEvent]), decoder(list[Event]))
#: the keys before the event array closed with ``]}``
HEADER_DECODER = decoder(Trace[Event])
#: ``{"traceEvents":[`` + the last piece: its events and the keys after the array
TRAILER_DECODER = FastThenLenient(decoder(Trace[PhasedEvent]), HEADER_DECODER)
PLAIN_HEADER_DECODER = decoder(Trace)


class Unsplittable(Exception):
    """A piece did not decode on its own: its cut is not between events, or the file is bad."""


def decode_piece(piece_decoder: msgspec.json.Decoder | FastThenLenient, text: bytes | bytearray) -> Any:
    """A piece of the file, or :class:`Unsplittable` (the caller merges it with the next one)."""
    try:
        return piece_decoder.decode(text)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):  # ValidationError is a DecodeError
        raise Unsplittable from None


def decode_json(path: Any, json_decoder: msgspec.json.Decoder | FastThenLenient, data: bytes,
                first_event: int | None = None) -> Any:
    """Decode, turning every msgspec / UTF-8 / nesting failure into a one-line :class:`InputError`.

    ``first_event`` is the index of a batch's first event, to report positions in the whole file.
    """
    try:
        return json_decoder.decode(data)
    except msgspec.ValidationError as e:
        problem = one_line(e)
        if first_event is not None:
            problem = re.sub(r"\$\[(\d+)\]",
                             lambda m: f"$.traceEvents[{first_event + int(m.group(1))}]", problem)
        raise InputError(path, f"is JSON but not a Chrome/Kineto trace ({problem})") from None
    except msgspec.DecodeError as e:
        raise InputError(path, f"is not valid JSON: {one_line(e)}") from None
    except UnicodeDecodeError as e:
        raise InputError(path, f"is not valid JSON: not UTF-8 text ({one_line(e)})") from None
    except RecursionError:
        raise InputError(path, "nests JSON arrays or objects too deeply to be a trace") from None


def one_line(error: BaseException) -> str:
    return " ".join(str(error).split())
