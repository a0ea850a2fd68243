"""Microsecond JSON numbers, as written, to exact int64 nanoseconds.

Chrome/Kineto traces write ``ts`` and ``dur`` in µs, ns-resolution ones with 3 decimals
(``1692134095112345.678``). A float64 cannot hold such an epoch value (its spacing there is 0.25 µs),
so the importer decodes them untyped with ``float_hook=str``: a JSON integer arrives as an int, any other
number as its own text. This module turns a column of those into ns without a float:

* all ints (µs-resolution traces) are taken as int64 by Arrow (which refuses booleans, unlike numpy)
  and multiplied by 1000;
* texts written with the same width and layout (timestamps of one trace usually are) are parsed digit
  column by digit column on a view of the joined text, with no per-value object;
* texts with at most 3 decimals and no exponent (``12.5``, ``7013263985640.25``) are read by Arrow as the
  integer of their digits, scaled by the decimals they lack;
* other numbers go through Arrow's exact decimal parser (fractions, exponents like ``1.5e3``): up to
  3 decimals are exact, more are rounded half to even to the nanosecond (like Python's ``round``);
* anything Arrow does not take (a number written as a JSON string, more than 20 decimals, junk) is
  converted one value at a time with :mod:`decimal`, under the same rule.

A value that is not a number, or whose ns do not fit int64, raises :class:`TimeOutOfRange` (the importer
turns it into a one-line error naming the file): never a silent wrap.
"""

from __future__ import annotations

import decimal
import sys
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

INT64_MAX = 2**63 - 1
_MAX_WHOLE_US = INT64_MAX // 1000  # larger |µs| integers overflow int64 once multiplied by 1000
_NS_DECIMAL = pa.decimal128(38, 3)  # µs with 3 decimals: the unscaled value is the ns count
_FINE_DECIMAL = pa.decimal128(38, 20)  # room for 20 decimals (and 18 integer digits) before rounding
_COMMA, _POINT = ord(","), ord(".")
_EXACT = decimal.Context(prec=60, rounding=decimal.ROUND_HALF_EVEN, traps=[decimal.InvalidOperation])
_NS_QUANTUM = decimal.Decimal("0.001")


class TimeOutOfRange(ValueError):
    """A ``ts`` or ``dur`` that is not a number, or whose nanoseconds do not fit int64."""


def us_to_ns(values: list[Any], what: str) -> np.ndarray:
    """The int64 ns of each µs value: an int, or a number's JSON text (``what`` names the field in errors:
    "ts", "dur")."""
    n = len(values)
    if n == 0:
        return np.empty(0, dtype=np.int64)
    if type(values[0]) is str:  # a float's text: a column of fractional µs, most likely
        return _texts_to_ns(values, what)
    try:
        whole = pa.array(values, pa.int64())  # no float can be among them: floats are decoded as text
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):  # texts, booleans, ints past int64
        return _texts_to_ns(values, what)
    us = whole.to_numpy(zero_copy_only=False)
    if whole.null_count or us.max() > _MAX_WHOLE_US or us.min() < -_MAX_WHOLE_US:
        return _one_by_one(values, what)  # names the null or the value out of range
    return us * 1000


def checked_end(start: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """``start + dur``, refusing sums that wrap int64."""
    end = start + dur
    wrapped = (dur > 0) & (end < start) | (dur < 0) & (end > start)
    if wrapped.any():
        i = int(np.flatnonzero(wrapped)[0])
        raise TimeOutOfRange(f"an event ends past what int64 nanoseconds hold "
                             f"(ts {int(start[i])} ns + dur {int(dur[i])} ns)")
    return end


def _texts_to_ns(values: list[Any], what: str) -> np.ndarray:
    n = len(values)
    try:
        try:
            joined = ",".join(values)  # ns-resolution traces: every value a text
        except TypeError:
            joined = ",".join(map(str, values))  # ints among them (str() of a text is the text itself)
        text = ("[" + joined + "]").encode("ascii")
    except UnicodeEncodeError:
        return _one_by_one(values, what)
    for fast_path in (_same_width_ns, _short_decimals_ns):
        ns = fast_path(text, n)
        if ns is not None:
            return ns
    strings = _as_arrow_strings(text, n)
    if strings is None:  # a comma inside a value: not a plain number
        return _one_by_one(values, what)
    try:
        return _decimal_ns(pc.cast(strings, _NS_DECIMAL), strings, what)
    except pa.ArrowInvalid:  # more than 3 decimals, or not a number
        pass
    try:
        fine = pc.round(pc.cast(strings, _FINE_DECIMAL), ndigits=3, round_mode="half_to_even")
        return _decimal_ns(pc.cast(fine, _NS_DECIMAL), strings, what)
    except pa.ArrowInvalid:
        return _one_by_one(values, what)


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


def _short_decimals_ns(text: bytes, n: int) -> np.ndarray | None:
    """ns of ``[v,v,...]`` when no value has an exponent, two points or more than 3 decimals: the digits
    without the point, as an integer (Arrow's parser) times 10^(3 - decimals); else None."""
    if text.find(b"e") >= 0 or text.find(b"E") >= 0:
        return None
    flat = np.frombuffer(text, dtype=np.uint8)
    ends = np.flatnonzero(flat == _COMMA)
    ends = np.append(ends, len(text) - 1)  # the "]"
    points = np.flatnonzero(flat == _POINT)
    pointed = np.searchsorted(ends, points)  # the value each point belongs to
    if len(ends) != n or (len(points) > 1 and not (np.diff(pointed) > 0).all()):
        return None
    decimals = np.zeros(n, dtype=np.int64)
    decimals[pointed] = ends[pointed] - points - 1
    if len(points) and decimals.max() > 3:
        return None
    digits = _as_arrow_strings(text.replace(b".", b""), n)
    if digits is None:
        return None
    try:
        scaled = pc.cast(digits, pa.int64()).to_numpy(zero_copy_only=False)
    except pa.ArrowInvalid:  # not a number, or past int64
        return None
    scale = 10 ** (3 - decimals)
    limit = INT64_MAX // scale
    if ((scaled > limit) | (scaled < -limit)).any():
        return None  # the general path names the value
    return scaled * scale


def _as_arrow_strings(text: bytes, n: int) -> pa.Array | None:
    """The n comma-separated values of ``[v,v,...]`` as an Arrow string array, built on one copy of the
    text without the commas: no Python object per value. None when a value holds a comma or a quote."""
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
    return pa.LargeStringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(body))


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


def _one_by_one(values: list[Any], what: str) -> np.ndarray:
    """The exact rule with :mod:`decimal`, for the odd column: strings, nulls, values out of range."""
    return np.array([_ns_of(v, what) for v in values], dtype=np.int64)


def _ns_of(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        shown = "null" if value is None else "true" if value is True else "false" if value is False else "a " + \
            type(value).__name__
        raise TimeOutOfRange(f"{what} {shown} is not a number")
    try:
        us = decimal.Decimal(value.strip() if isinstance(value, str) else value)
    except decimal.InvalidOperation:
        raise TimeOutOfRange(f"{what} {str(value)[:40]!r} is not a number") from None
    if not us.is_finite():
        raise TimeOutOfRange(f"{what} {str(value)[:40]!r} is not a finite number")
    if us and us.adjusted() > 17:  # ns at least 10^21: decided before building a huge integer
        raise TimeOutOfRange(f"{what} {str(value)[:40]} µs does not fit int64 nanoseconds")
    ns = int(_EXACT.multiply(us.quantize(_NS_QUANTUM, context=_EXACT), 1000))
    if not -INT64_MAX - 1 <= ns <= INT64_MAX:
        raise TimeOutOfRange(f"{what} {str(value)[:40]} µs does not fit int64 nanoseconds")
    return ns
