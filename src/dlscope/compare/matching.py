"""Pair the op nodes of two runs by name, type, direction, scope and input shapes, and say what changed.

An op node is unique per aggregation by (name, direction, scope, input shapes). Pairs are found in passes,
strictest first, so each op pairs with its closest counterpart:

1. ``same``: every part equal.
2. same name/type/direction and input shapes, another scope: ``scope_changed`` (a renamed or moved module).
3. same name/type/direction, shapes equal except the batch (first) dimension, which changed from one value
   to one other value everywhere it differs, in a tensor of rank 2 or more at least:
   ``batch_size_changed`` (plus ``scope_changed`` when it did).
4. same name/type/direction, one op left on each side: ``input_shapes_changed``.
5. same op type, direction and input shapes, a similar name: ``renamed`` (TF/NVTX ops carry the module path
   in their names).

What is left over is new (only in the new run) or vanished (only in the base run).
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from difflib import SequenceMatcher

import pandas as pd

#: the columns that identify an op node (agg_ops' node key plus its type)
IDENTITY = ("op_name", "op_type", "direction", "scope", "input_shapes")
#: a rename needs names at least this similar (difflib ratio)
RENAME_SIMILARITY = 0.5
#: above this many candidate pairs in one bucket, pair by order instead of by similarity
MAX_SIMILARITY_PAIRS = 2500


@dataclass(frozen=True)
class Pair:
    """Row positions in the base and new frames (None when only one side has the op) and what changed."""

    base: int | None
    new: int | None
    match: str | None                     # "same", "scope_changed", "batch_size_changed,scope_changed", ...
    batch: tuple[int, int] | None = None  # (base batch, new batch) when the batch size changed


def _parse(shapes: str):
    try:
        return json.loads(shapes) if shapes else []
    except (ValueError, TypeError):
        return None


def _is_leaf(v) -> bool:
    return isinstance(v, list) and all(isinstance(x, (int, float)) for x in v)


def batch_change(base_shapes: str, new_shapes: str) -> tuple[int, int] | None:
    """(old, new) batch size when the shapes differ only in the first dimension, by one consistent change."""
    a, b = _parse(base_shapes), _parse(new_shapes)
    if a is None or b is None:
        return None
    changes: set[tuple] = set()
    batched: list[bool] = []   # a batch shows in a tensor of rank >= 2 (a 1-D change alone is a size, e.g. bias)

    def walk(x, y) -> bool:
        if _is_leaf(x) and _is_leaf(y):
            if len(x) != len(y) or x[1:] != y[1:]:
                return False
            if x and x[0] != y[0]:
                changes.add((x[0], y[0]))
                batched.append(len(x) >= 2)
            return True
        if isinstance(x, list) and isinstance(y, list) and not _is_leaf(x) and not _is_leaf(y):
            return len(x) == len(y) and all(walk(p, q) for p, q in zip(x, y))
        return x == y

    if walk(a, b) and len(changes) == 1 and any(batched):
        old, new = changes.pop()
        return int(old), int(new)
    return None


def _batch_free(shapes: str) -> str:
    """The shapes with every first dimension blanked: ops whose batch size changed share this signature."""
    def blank(v):
        if _is_leaf(v):
            return [None, *v[1:]] if v else []
        return [blank(x) for x in v] if isinstance(v, list) else v
    parsed = _parse(shapes)
    return shapes if parsed is None else json.dumps(blank(parsed))


def _similarity(a: str, b: str) -> float:
    return SequenceMatcher(None, a, b, autojunk=False).ratio()


def _greedy(bases: list[int], news: list[int], score, accept=lambda s: True) -> list[tuple[int, int]]:
    """Pair the most similar candidates first (ties: earlier ops first); by order when there are too many."""
    if len(bases) * len(news) > MAX_SIMILARITY_PAIRS:
        return list(zip(bases, news))
    cands = sorted(((score(b, n), -i, -j, b, n) for i, b in enumerate(bases) for j, n in enumerate(news)),
                   reverse=True)
    used_b, used_n, out = set(), set(), []
    for s, _, _, b, n in cands:
        if b in used_b or n in used_n or not accept(s):
            continue
        used_b.add(b)
        used_n.add(n)
        out.append((b, n))
    return out


def match_ops(base: pd.DataFrame, new: pd.DataFrame) -> list[Pair]:
    """Pair the rows of two agg_ops frames (positions 0..n-1); unpaired rows come back as new/vanished."""
    keys_b = [tuple("" if v is None else str(v) for v in r) for r in base[list(IDENTITY)].itertuples(index=False)]
    keys_n = [tuple("" if v is None else str(v) for v in r) for r in new[list(IDENTITY)].itertuples(index=False)]
    pairs: list[Pair] = []
    left_b, left_n = set(range(len(keys_b))), set(range(len(keys_n)))

    def take(b: int, n: int, match: str, batch=None) -> None:
        left_b.discard(b)
        left_n.discard(n)
        pairs.append(Pair(b, n, match, batch))

    # 1. exact
    index_n = {k: j for j, k in enumerate(keys_n)}
    for i, k in enumerate(keys_b):
        if k in index_n:
            take(i, index_n[k], "same")

    # 2-4. same name, type and direction
    def groups(left: set[int], keys: list[tuple]) -> dict:
        g = defaultdict(list)
        for i in sorted(left):
            g[keys[i][:3]].append(i)
        return g

    g_n = groups(left_n, keys_n)
    for gkey, bs in groups(left_b, keys_b).items():
        ns = g_n.get(gkey, [])
        if not ns:
            continue
        _pair_in_group(bs, ns, keys_b, keys_n, left_b, left_n, take)

    # 5. renamed: same type, direction and input shapes, similar name
    buckets_n = defaultdict(list)
    for j in sorted(left_n):
        buckets_n[(keys_n[j][1], keys_n[j][2], keys_n[j][4])].append(j)
    buckets_b = defaultdict(list)
    for i in sorted(left_b):
        buckets_b[(keys_b[i][1], keys_b[i][2], keys_b[i][4])].append(i)
    for bkey, bs in buckets_b.items():
        ns = buckets_n.get(bkey, [])
        if ns:
            for b, n in _greedy(bs, ns, lambda b, n: _similarity(keys_b[b][0], keys_n[n][0]),
                                lambda s: s >= RENAME_SIMILARITY):
                take(b, n, "renamed" if keys_b[b][3] == keys_n[n][3] else "renamed,scope_changed")

    pairs += [Pair(i, None, None) for i in sorted(left_b)]
    pairs += [Pair(None, j, None) for j in sorted(left_n)]
    return pairs


def _pair_in_group(bs, ns, keys_b, keys_n, left_b, left_n, take) -> None:
    """Passes 2-4 inside one (name, type, direction) group."""
    def scope_sim(b: int, n: int) -> float:  # by path segment: cheap, and a renamed module is one segment
        sb, sn = keys_b[b][3], keys_n[n][3]
        return 1.0 if sb == sn else SequenceMatcher(None, sb.split("/"), sn.split("/"), autojunk=False).ratio()

    # 2. same shapes, other scope
    by_shape = defaultdict(list)
    for n in ns:
        by_shape[keys_n[n][4]].append(n)
    for shapes in {keys_b[b][4] for b in bs}:
        cb = [b for b in bs if b in left_b and keys_b[b][4] == shapes]
        cn = [n for n in by_shape.get(shapes, []) if n in left_n]
        for b, n in _greedy(cb, cn, scope_sim):
            take(b, n, "scope_changed")

    # 3. batch size changed (same scope first, then another scope)
    by_sig = defaultdict(list)
    for n in ns:
        if n in left_n:
            by_sig[_batch_free(keys_n[n][4])].append(n)
    for same_scope in (True, False):
        for b in bs:
            if b not in left_b:
                continue
            cands = [n for n in by_sig.get(_batch_free(keys_b[b][4]), []) if n in left_n
                     and (keys_b[b][3] == keys_n[n][3]) == same_scope]
            scored = [(scope_sim(b, n), n, batch_change(keys_b[b][4], keys_n[n][4])) for n in cands]
            scored = [s for s in scored if s[2] is not None]
            if scored:
                _, n, batch = max(scored, key=lambda s: (s[0], -s[1]))
                take(b, n, "batch_size_changed" if same_scope else "batch_size_changed,scope_changed", batch)

    # 4. one op left on each side
    rest_b = [b for b in bs if b in left_b]
    rest_n = [n for n in ns if n in left_n]
    if len(rest_b) == 1 and len(rest_n) == 1:
        b, n = rest_b[0], rest_n[0]
        take(b, n, "input_shapes_changed" if keys_b[b][3] == keys_n[n][3] else "input_shapes_changed,scope_changed")
