"""The reader for any layout: ijson (yajl2_c) walks the ``traceEvents`` array event by event.

Used when pieces cannot be cut (a bare event list, the array not opening in the first MiB, a bad file,
whose problem it names with the event's index). Each batch of ijson's dicts is re-encoded and decoded by
the same typed decoder as the pieces (same rows; ids follow its batches). Memory holds one batch.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import msgspec

from ...errors import InputError
from .columns import Tables
from .events import (
    BATCH_DECODER,
    PLAIN_HEADER_DECODER,
    Event,
    Trace,
    decode_json,
)
from .text import CountingReader, stream_errors

BATCH_EVENTS = 16_384  # ~10 MB of decoded structs at a time

#: ``progress(bytes_read, events_decoded)``; bytes are of the file as stored (compressed when gzip).
Progress = Callable[[int, int], None]


def ijson_tables(path: Path, progress: Progress | None) -> tuple[Trace, Tables, int]:
    """Header, tables and event count of a trace read as a stream by ijson."""
    header, batches = _stream_events(path, progress)
    tables, event_count = Tables(), 0
    for events in batches:
        event_count += len(events)
        tables.add(events)
        del events  # one batch of structs alive at a time
    return header, tables, event_count


def _stream_events(path: Path, progress: Progress | None) -> tuple[Trace, Iterator[list[Event]]]:
    """Header and event batches of a trace read as a stream: memory holds one batch, not the file."""
    import ijson

    head, bare = _stream_head(path)
    reader = CountingReader(path)
    header: dict[str, Any] = dict(head)

    def batches() -> Iterator[list[Event]]:
        done, batch = 0, []
        with stream_errors(path, reader):
            # Decimals, not floats: the numbers' exact values, written back as JSON numbers below
            items = ijson.items(reader, "item" if bare else "traceEvents.item", use_float=False)
            for event in items:
                batch.append(event)
                if len(batch) == BATCH_EVENTS:
                    yield _decode_streamed(path, batch, done)
                    done += len(batch)
                    batch = []
                    if progress:
                        progress(reader.stored_bytes(), done)
            if batch:
                yield _decode_streamed(path, batch, done)
                done += len(batch)
            if progress:
                progress(reader.stored_bytes(), done)
            if not bare:
                header.update({k: v for k, v in _trailing_keys(reader.tail).items() if k not in header})
                final[0] = _header(path, header)

    final = [_header(path, header)]

    class _Header:  # the trailing keys are known only after the last batch; load_kineto reads it then
        def __getattr__(self, name: str) -> Any:
            return getattr(final[0], name)

    return cast(Trace, _Header()), batches()  # a Trace: _Header forwards every attribute to the final one


def _stream_head(path: Path) -> tuple[dict[str, Any], bool]:
    """The top-level keys before ``traceEvents`` (Kineto writes its metadata first); stops there."""
    import ijson

    reader = CountingReader(path)
    out: dict[str, Any] = {}
    key, builder = None, None
    value = None
    with stream_errors(path, reader):
        for prefix, event, value in ijson.parse(reader, use_float=True):
            if prefix == "":
                if event == "start_array":
                    return out, True
                if event in ("map_key", "end_map"):
                    if builder is not None:
                        assert key is not None  # set together with the builder
                        out[key] = builder.value
                    if event == "end_map" or value == "traceEvents":
                        break
                    key, builder = value, ijson.ObjectBuilder()
                elif event != "start_map":
                    raise InputError(path, "is JSON but not a Chrome/Kineto trace (not an object or list)")
            elif builder is not None:
                builder.event(event, value)
        else:
            raise InputError(path, "is empty")
    if value != "traceEvents":
        raise InputError(path, "is JSON but not a Chrome/Kineto trace (no traceEvents)")
    return out, False


def _trailing_keys(tail: bytes) -> dict[str, Any]:
    """Top-level keys after the ``traceEvents`` array, from the last bytes of the file.

    The array's closing bracket is the leftmost ``]`` after which the rest reads as the remainder of
    a JSON object; brackets inside the last events leave unbalanced text and are rejected.
    """
    for m in re.finditer(rb"\](?=\s*[,}])", tail):
        try:
            rest = msgspec.json.decode(b'{"_":0' + tail[m.end():])
        except msgspec.DecodeError:
            continue
        if isinstance(rest, dict):
            rest.pop("_", None)
            return rest
    return {}


_STREAMED_ENCODER = msgspec.json.Encoder(decimal_format="number")


def _header(path: Path, keys: dict[str, Any]) -> Trace:
    keys = {k: v for k, v in keys.items() if k != "traceEvents"}
    try:
        text = _STREAMED_ENCODER.encode(keys)
    except RecursionError:
        raise InputError(path, "nests JSON arrays or objects too deeply to be a trace") from None
    return decode_json(path, PLAIN_HEADER_DECODER, text)


def _decode_streamed(path: Path, batch: list[dict], first_event: int) -> list[Event]:
    """ijson's dicts through the same typed decoder as the in-memory path (its Decimals are written back
    as the numbers they were read from, so ``ts``/``dur`` convert as in memory)."""
    try:
        text = _STREAMED_ENCODER.encode(batch)
    except RecursionError:
        raise InputError(path, "nests JSON arrays or objects too deeply to be a trace") from None
    return decode_json(path, BATCH_DECODER, text, first_event)

