"""Microsecond JSON numbers, as written, to exact int64 nanoseconds.

Chrome/Kineto traces write ``ts`` and ``dur`` in µs, ns-resolution ones with 3 decimals
(``1692134095112345.678``). A float64 cannot hold such an epoch value (its spacing there is 0.25 µs),
so the numbers are taken from the JSON text (``msgspec.Raw``) and converted without floats:

* values all written with the same width and layout (timestamps of one trace usually are:
  ``1692134095112345`` or ``1692134095112345.678``) are parsed digit column by digit column on a view of
  the text, with no per-value object;
* other JSON integers (µs-resolution traces) are parsed as int64 by Arrow and multiplied by 1000;
* other numbers go through Arrow's exact decimal parser (fractions, exponents like ``1.5e3``): up to
  3 decimals are exact, more are rounded half to even to the nanosecond (like Python's ``round``);
* anything Arrow does not take (a string such as ``"12.5"``, more than 20 decimals) is converted one value
  at a time with :mod:`decimal`, under the same rule; a value that is not a number is an error.

A value whose nanoseconds do not fit int64 raises :class:`TimeOutOfRange` (the importer turns it into
a one-line error naming the file): never a silent wrap.
"""

from __future__ import annotations

import decimal
import sys
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

INT64_MAX = 2**63 - 1
_MAX_WHOLE_US = INT64_MAX // 1000  # larger |µs| integers overflow int64 once multiplied by 1000
_NS_DECIMAL = pa.decimal128(38, 3)  # µs with 3 decimals: the unscaled value is the ns count
_FINE_DECIMAL = pa.decimal128(38, 20)  # room for 20 decimals (and 18 integer digits) before rounding
_COMMA, _POINT = ord(","), ord(".")
_ANY_NUMBERS = msgspec.json.Decoder(list[Any], float_hook=str)  # a number keeps its text for messages
_EXACT = decimal.Context(prec=60, rounding=decimal.ROUND_HALF_EVEN, traps=[decimal.InvalidOperation])
_NS_QUANTUM = decimal.Decimal("0.001")


class TimeOutOfRange(ValueError):
    """A ``ts`` or ``dur`` that is not a number, or whose nanoseconds do not fit int64."""


def us_to_ns(values: list[msgspec.Raw], what: str) -> np.ndarray:
    """The int64 ns of each µs JSON value (``what`` names the field in errors: "ts", "dur")."""
    n = len(values)
    if n == 0:
        return np.empty(0, dtype=np.int64)
    text = msgspec.json.encode(values)  # "[v,v,...]": the values' own JSON text, copied in C
    same_width = _same_width_ns(text, n)
    if same_width is not None:
        return same_width
    found = _as_arrow_strings(text, n)
    if found is None:  # a JSON string, array or object among the values
        return _one_by_one(text, what)
    strings, body = found
    if body.find(b".") < 0 and body.find(b"e") < 0 and body.find(b"E") < 0:
        try:
            us = pc.cast(strings, pa.int64()).to_numpy()
        except pa.ArrowInvalid:  # past int64 µs, or not a number: the slower paths say which
            pass
        else:
            if us.max() > _MAX_WHOLE_US or us.min() < -_MAX_WHOLE_US:
                return _one_by_one(text, what)
            return us * 1000
    try:
        return _decimal_ns(pc.cast(strings, _NS_DECIMAL), strings, what)
    except pa.ArrowInvalid:  # more than 3 decimals, or not a number
        pass
    try:
        fine = pc.round(pc.cast(strings, _FINE_DECIMAL), ndigits=3, round_mode="half_to_even")
        return _decimal_ns(pc.cast(fine, _NS_DECIMAL), strings, what)
    except pa.ArrowInvalid:
        return _one_by_one(text, what)


def checked_end(start: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """``start + dur``, refusing sums that wrap int64."""
    end = start + dur
    wrapped = (dur > 0) & (end < start) | (dur < 0) & (end > start)
    if wrapped.any():
        i = int(np.flatnonzero(wrapped)[0])
        raise TimeOutOfRange(f"an event ends past what int64 nanoseconds hold "
                             f"(ts {int(start[i])} ns + dur {int(dur[i])} ns)")
    return end


def _same_width_ns(text: bytes, n: int) -> np.ndarray | None:
    """ns of ``[v,v,...]`` when every value has the same width, digits in every column but at most one
    column of ".", at most 16 integer and 3 decimal digits (so the µs×1000 fits uint64); else None."""
    width = (len(text) - 1) // n - 1
    if (width + 1) * n + 1 != len(text) or not 0 < width <= 20:
        return None
    rows = np.frombuffer(text, dtype=np.uint8, count=(width + 1) * n, offset=1).reshape(n, width + 1)
    if not (rows[:-1, width] == _COMMA).all():
        return None
    digits = rows[:, :width] - np.uint8(ord("0"))  # other bytes wrap to values above 9
    digit_columns = (digits <= 9).all(axis=0)
    points = np.flatnonzero(~digit_columns)
    if len(points) == 0:
        whole = width
    elif len(points) == 1 and 0 < points[0] < width - 1 and (rows[:, points[0]] == _POINT).all():
        whole = int(points[0])
    else:
        return None
    decimals = width - whole - (whole < width)
    if whole > 16 or decimals > 3:
        return None
    ns = np.zeros(n, dtype=np.uint64)
    for column in np.flatnonzero(digit_columns):
        ns *= np.uint64(10)
        ns += digits[:, column]
    ns *= np.uint64(10 ** (3 - decimals))
    if ns.max() > INT64_MAX:
        return None  # the general path names the value
    return ns.astype(np.int64)


def _as_arrow_strings(text: bytes, n: int) -> tuple[pa.Array, bytes] | None:
    """The n comma-separated values of ``[v,v,...]`` as an Arrow string array (and its bytes), built on one
    copy of the text without the commas: no Python object per value. None when the values are not all
    plain numbers (a string may hold commas; arrays and objects do)."""
    if text.find(b'"') >= 0:
        return None
    commas = np.flatnonzero(np.frombuffer(text, dtype=np.uint8) == _COMMA)
    if len(commas) != n - 1:
        return None
    offsets = np.empty(n + 1, dtype=np.int64)
    offsets[0] = 0
    offsets[1:n] = commas - 1 - np.arange(n - 1)  # value i starts after "[" and i commas
    offsets[n] = len(text) - 2 - (n - 1)
    body = text[1:-1].replace(b",", b"")
    return pa.LargeStringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(body)), body


def _decimal_ns(values: pa.Decimal128Array, texts: pa.Array, what: str) -> np.ndarray:
    """The unscaled int128 of a decimal128(38, 3) array, i.e. ns, checked to fit int64."""
    words = np.frombuffer(values.buffers()[1], dtype=np.int64)
    words = words[2 * values.offset:2 * (values.offset + len(values))].reshape(-1, 2)
    low, high = (words[:, 0], words[:, 1]) if sys.byteorder == "little" else (words[:, 1], words[:, 0])
    fits = high == (low >> 63)  # the high word only extends the low word's sign
    if not fits.all():
        i = int(np.flatnonzero(~fits)[0])
        raise TimeOutOfRange(f"{what} {texts[i].as_py()} µs does not fit int64 nanoseconds")
    return low.copy()


def _one_by_one(text: bytes, what: str) -> np.ndarray:
    """The exact rule with :mod:`decimal`, for the odd list that holds strings or other JSON."""
    return np.array([_ns_of(v, what) for v in _ANY_NUMBERS.decode(text)], dtype=np.int64)


def _ns_of(value: Any, what: str) -> int:
    if isinstance(value, str):
        value = value.strip()
    elif isinstance(value, bool) or not isinstance(value, (int, decimal.Decimal)):
        raise TimeOutOfRange(f"{what} {msgspec.json.encode(value).decode()[:40]} is not a number")
    try:
        us = decimal.Decimal(value)
    except decimal.InvalidOperation:
        raise TimeOutOfRange(f"{what} {value[:40]!r} is not a number") from None
    if not us.is_finite():
        raise TimeOutOfRange(f"{what} {value!r} is not a finite number")
    if us and us.adjusted() > 17:  # ns at least 10^21: decided before building a huge integer
        raise TimeOutOfRange(f"{what} {value} µs does not fit int64 nanoseconds")
    ns = int(_EXACT.multiply(us.quantize(_NS_QUANTUM, context=_EXACT), 1000))
    if not -INT64_MAX - 1 <= ns <= INT64_MAX:
        raise TimeOutOfRange(f"{what} {value} µs does not fit int64 nanoseconds")
    return ns
