"""Small helpers rules share to describe what they saw: readable kernel names, top items, time ranges."""

from __future__ import annotations

import re
from collections.abc import Mapping

import numpy as np
import pandas as pd

from ..format import fmt_ns  # noqa: F401  (re-exported for the rules)
from .spans import distinct, first_seen

_TEMPLATE = re.compile(r"<[^<>]*>")


def short_kernel(name: str) -> str:
    """'void at::native::vectorized_elementwise_kernel<4, AddFunctor<float>, ...>(int, ...)' ->
    'vectorized_elementwise_kernel<AddFunctor>'-like short text for problem sentences."""
    text = str(name).removeprefix("void ").strip()
    inner = ""
    functor = re.search(r"([A-Za-z_]\w*Functor\w*|[A-Za-z_]\w*_kernel\w*)", text.split("(")[0][text.find("<") + 1:]) \
        if "<" in text else None
    if functor:
        inner = functor.group(1)
    while _TEMPLATE.search(text):
        text = _TEMPLATE.sub("", text)
    text = text.split("(")[0].split("::")[-1] or str(name)[:60]
    return f"{text}<{inner}>" if inner and inner != text else text


def top_by(frame: pd.DataFrame | Mapping[str, np.ndarray], key: str, weight: str, n: int) -> list:
    """The ``n`` values of ``key`` with the largest summed ``weight``; ``frame``: a frame or its columns."""
    w = np.asarray(frame[weight])
    if len(w) == 0:
        return []
    if w.dtype.kind not in "iu":
        if not isinstance(frame, pd.DataFrame):
            frame = pd.DataFrame({key: frame[key], weight: w})
        s = frame.groupby(key, sort=False)[weight].sum().sort_values(ascending=False)
        return [v.item() if hasattr(v, "item") else v for v in s.index[:n]]
    # integer weights: groupby(sort=False).sum() then Series.sort_values(ascending=False) (pandas' nargsort:
    # quicksort of the reversed sums, reversed back), without their per-call cost
    column = frame[key]
    if isinstance(column, pd.Series) and isinstance(column.dtype, pd.CategoricalDtype):
        # a categorical's own codes numbered by first appearance (no text of a row made or hashed)
        cat = column.cat.codes.to_numpy(np.int64)
        named = np.flatnonzero(cat >= 0)  # missing keys: -1, dropped as groupby drops them
        codes = np.full(len(cat), -1, np.int64)
        used = np.zeros(0, np.int64)
        if len(named):
            codes[named], used = first_seen(cat[named])
        uniques = np.asarray(column.cat.categories, dtype=object)[used]
    else:
        keys = np.asarray(column)
        if keys.dtype.kind in "iu":  # no missing key
            codes, uniques = first_seen(keys)
        else:
            codes, uniques = pd.factorize(keys, sort=False)  # missing keys: -1, dropped as groupby drops them
    sums = np.zeros(len(uniques), dtype=np.int64)
    np.add.at(sums, codes[codes >= 0], w[codes >= 0].astype(np.int64))
    order = np.arange(len(sums))[::-1][sums[::-1].argsort(kind="quicksort")][::-1]
    return [v.item() if hasattr(v, "item") else v for v in np.asarray(uniques, dtype=object)[order[:n]]]


def longest_ranges(starts, ends, n: int) -> list[list[int]]:
    """The ``n`` longest [start, end] intervals, longest first."""
    s = np.asarray(starts, dtype=np.int64)
    e = np.asarray(ends, dtype=np.int64)
    order = np.argsort(-(e - s), kind="stable")[:n]
    return [[int(s[i]), int(e[i])] for i in order]


def node_ids(ctx, op_ids) -> list[int]:
    """Op node ids (agg_ops.node_id) of op instances, in first-seen order. An op node is an outermost op
    (PRODUCT.md): a nested op counts as the op node it runs under, so the viewer finds every id in agg_ops (a
    rule that names the op launching a kernel, e.g. an ``nccl:all_reduce`` under ``record_param_comms``,
    named a node that no aggregation table holds)."""
    pos = ctx.op_rows(op_ids)
    pos = pos[pos >= 0]
    parent = ctx.col("ops_all", "parent_id")
    moving = np.arange(len(pos))
    while len(moving):  # one nesting level a round, for the few ops a finding names
        up = ctx.op_rows(parent[pos[moving]])
        moving, up = moving[up >= 0], up[up >= 0]
        pos[moving] = up
    nodes = ctx.col("ops_all", "node_id")[pos]
    return [int(x) for x in first_seen(nodes)[1]]


def iterations_of(values) -> list[int]:
    """The distinct iteration numbers (of kernels, calls...), ascending, without -1 (outside any)."""
    numbers = distinct(np.asarray(values, dtype=np.int64))
    return numbers[numbers >= 0].tolist()


def plural(n: int, word: str, many: str | None = None) -> str:
    return f"{n:,} {word if n == 1 else many or word + 's'}"
