"""Parse a table's URL parameters into a validated request; a bad value names its parameter (HTTP 400).

URL grammar (Datasette-like; the page URL prefixes each table's parameters with ``<table>.``):
``sort=<column>&order=asc|desc&page=N&size=10|25|50|100&q=<global search>&f.<column>=<column search>``
plus the table's scopes (``agg``, ``iteration``, ``node`` ...). Column search: text columns match a substring;
number/time columns take ``42``, ``>1ms``, ``<=500us``, ``10..20``; boolean columns take ``1`` or ``0``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dlscope.viewer.tables import TableSpec

PAGE_SIZES = (10, 25, 50, 100)
MAX_PAGE = 10_000_000
#: SQLite integers are 64-bit: a whole number outside this range cannot be bound, so it is a bad parameter.
INT64 = (-(2**63), 2**63 - 1)
_INT = re.compile(r"^\s*[+-]?[0-9]+\s*$")
UNITS_NS = {"": 1, "ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000,
            "min": 60_000_000_000}
_NUM = re.compile(r"^\s*(>=|<=|>|<|=|!=)?\s*(-?\d+(?:\.\d+)?(?:e[+-]?\d+)?)\s*([a-zµ]*)\s*$", re.I)
_RANGE = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*([a-zµ]*)\s*\.\.\s*(-?\d+(?:\.\d+)?)\s*([a-zµ]*)\s*$", re.I)
BOOL_VALUES = {"1": 1, "0": 0, "true": 1, "false": 0, "yes": 1, "no": 0, "✓": 1, "✗": 0}


class BadParameter(Exception):
    """A URL parameter the viewer cannot use; the message names it and says what is accepted."""

    def __init__(self, name: str, problem: str):
        self.name = name
        self.problem = problem
        super().__init__(f"bad URL parameter {name!r}: {problem}")


@dataclass
class TableRequest:
    spec: TableSpec
    sort: str
    desc: bool
    page: int = 1
    size: int = 10
    q: str = ""
    filters: dict[str, tuple[str, Any]] = field(default_factory=dict)   # column -> (op, value)
    scope: dict[str, Any] = field(default_factory=dict)


def parse_int(name: str, raw: str, lo: int | None = None, hi: int | None = None) -> int:
    """A whole number in ASCII digits within [lo, hi] (default: SQLite's 64-bit range), else BadParameter."""
    if not isinstance(raw, str) or len(raw) > 40 or not _INT.match(raw):
        raise BadParameter(name, f"{_short(raw)!r} is not a whole number")
    value = int(raw)
    lo = INT64[0] if lo is None else lo
    hi = INT64[1] if hi is None else hi
    if value < lo or value > hi:
        raise BadParameter(name, f"{value} is out of range [{lo}, {hi}]")
    return value


def _short(raw, limit: int = 60):
    return raw if not isinstance(raw, str) or len(raw) <= limit else raw[:limit] + "…"


def parse_number(name: str, raw: str, kind: str) -> tuple[str, Any]:
    """Column search on a number or time column: '42', '>1ms', '<=500us', '10..20'."""
    scale_ok = kind in ("ns", "ts")
    m = _RANGE.match(raw)
    if m:
        lo = float(m.group(1)) * _unit(name, m.group(2), scale_ok)
        hi = float(m.group(3)) * _unit(name, m.group(4), scale_ok)
        return "between", (lo, hi)
    m = _NUM.match(raw)
    if not m:
        raise BadParameter(name, f"{raw!r} is not a number search (use 42, >1ms, <=500us or 10..20)")
    value = float(m.group(2)) * _unit(name, m.group(3), scale_ok)
    if kind == "pct" and not m.group(3):
        value = value / 100.0 if value > 1 else value
    return (m.group(1) or "="), value


def _unit(name: str, unit: str, scale_ok: bool) -> int:
    unit = unit.lower()
    if unit and (not scale_ok or unit not in UNITS_NS):
        raise BadParameter(name, f"unknown unit {unit!r} (use ns, us, ms, s or min)")
    return UNITS_NS.get(unit, 1)


def parse_id_list(name: str, raw: str) -> set[int]:
    """A comma-separated list of whole numbers (the Group Ops tree's open/closed rows)."""
    return {parse_int(name, x) for x in raw.split(",") if x.strip()}


def parse_filter(name: str, raw: str, kind: str) -> tuple[str, Any] | None:
    raw = raw.strip()
    if raw == "":
        return None
    if kind == "bool":
        key = raw.lower()
        if key not in BOOL_VALUES:
            raise BadParameter(name, f"{raw!r}: type 1 (yes) or 0 (no)")
        return "=", BOOL_VALUES[key]
    if kind == "text":
        return "contains", raw
    return parse_number(name, raw, kind)


def parse_scope(name: str, raw: str, kind: str) -> Any:
    if kind == "int":
        return parse_int(name, raw)
    if kind == "list":
        try:
            value = json.loads(raw)
        except ValueError:
            value = None
        if not isinstance(value, list) or not all(isinstance(v, (int, str)) and not isinstance(v, bool)
                                                  for v in value):
            raise BadParameter(name, "must be a JSON list of numbers or names")
        if any(isinstance(v, int) and not INT64[0] <= v <= INT64[1] for v in value):
            raise BadParameter(name, f"a number in the list is out of range [{INT64[0]}, {INT64[1]}]")
        return value
    return raw


def parse_table_request(spec: TableSpec, params: Mapping[str, str], prefix: str = "",
                        defaults: Mapping[str, Any] | None = None) -> TableRequest:
    """Validate ``params`` (only the ones starting with ``prefix``) against the table's whitelist."""

    def get(key):
        return params.get(prefix + key)

    sort = get("sort") or spec.default_sort
    col = spec.column(sort)
    if sort == spec.default_sort:
        default_desc = spec.default_desc
    elif col is None or not col.sortable:
        raise BadParameter(prefix + "sort", f"{sort!r} is not a sortable column of {spec.name} "
                                            f"(one of {', '.join(c.name for c in spec.columns if c.sortable)})")
    else:
        default_desc = col.kind != "text" if col.desc_first is None else col.desc_first
    order = get("order")
    if order not in (None, "", "asc", "desc"):
        raise BadParameter(prefix + "order", f"{order!r}: use asc or desc")
    desc = default_desc if not order else order == "desc"
    page = parse_int(prefix + "page", get("page") or "1", 1, MAX_PAGE)
    size = parse_int(prefix + "size", get("size") or "10")
    if size not in PAGE_SIZES:
        raise BadParameter(prefix + "size",
                           f"{size} rows per page is not offered (use {', '.join(map(str, PAGE_SIZES))})")
    req = TableRequest(spec, sort, desc, page, size, (get("q") or "").strip())
    for key, raw in params.items():
        if key.startswith(prefix + "f."):
            cname = key[len(prefix) + 2:]
            column = spec.column(cname)
            if column is None:
                raise BadParameter(key, f"{cname!r} is not a column of {spec.name}")
            parsed = parse_filter(key, raw, column.kind)
            if parsed is not None:
                req.filters[cname] = parsed
    for scope in spec.scopes:
        given = params.get(scope.name)  # scopes are page-level: never prefixed
        if (given is None or given == "") and defaults and scope.name in defaults:
            req.scope[scope.name] = defaults[scope.name]
            continue
        if given is None or given == "":
            if scope.required:
                raise BadParameter(scope.name, f"is required by the {spec.title} table")
            continue
        req.scope[scope.name] = parse_scope(scope.name, given, scope.kind)
    return req
