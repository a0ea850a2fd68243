"""From an imported :class:`~dlscope.model.Profile` to an analysed one: attribution, iterations, Tensor
Core verdicts and per-op-instance metrics. Aggregations (``aggregation.py``) are computed from this.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..model import ID_COLUMNS, TABLES, Profile, concat_tables, make_table, narrow_ints, put_column, text_column
from .attribution import (
    OpTree,
    ancestor_rows,
    attribute,
    gpu_idle_per_owner,
    link_launches,
    pack_keys,
    take,
    thread_keys,
)
from .call_tree import TREE_COLUMNS, analyse_frames
from .categories import matches
from .dtypes import numpy_name
from .intervals import sorted_unique
from .iterations import assign_by_rank, find_job_iterations
from .nesting import Nesting, inclusive_sum, levels
from .occupancy import COLUMNS as WAVE_COLUMNS
from .occupancy import kernel_waves
from .tensor_core import classify_names, kernel_uses_tc, op_type_tc_eligible


@dataclass
class Analysed:
    """The profile with attribution columns, plus iterations and how they were found (per rank)."""

    profile: Profile
    iterations: pd.DataFrame
    iteration_methods: dict[int, str] = field(default_factory=dict)
    key_node: str | None = None
    #: per rank, key-node candidates seen when the split is a guess (or there is none)
    key_node_candidates: dict[int, list[str]] = field(default_factory=dict)
    #: the Python call tree per thread (:mod:`.call_tree`), empty when the trace has no Python frames
    python_tree: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=TREE_COLUMNS))
    _by_rank: dict | None = field(default=None, repr=False)

    RAW = tuple(TABLES)

    def rank_tables(self, rank: int) -> Mapping[str, pd.DataFrame]:
        """The raw tables of one rank (each rank's rows in table order): a table is put in rank order once, when
        a rank first reads it, and each rank's rows are a slice of it (a job's ranks read few of the tables:
        splitting every table for every rank cost ~70 ms on 64 ranks)."""
        if self._by_rank is None:
            self._by_rank = {}
        return _RankTables(self, rank)

    def _rank_order(self, name: str) -> tuple[np.ndarray | None, np.ndarray]:
        """The table's rows in rank order (stable: each rank's in table order; None: they are already), and the
        rank of each of those rows."""
        assert self._by_rank is not None
        key = ("order", name)
        if key not in self._by_rank:
            rank_of_row = self.profile.table(name)["rank"].to_numpy(np.int64)
            order = None
            if len(rank_of_row) and not (rank_of_row[1:] >= rank_of_row[:-1]).all():
                order = np.argsort(rank_of_row, kind="stable")
                rank_of_row = rank_of_row[order]
            self._by_rank[key] = (order, rank_of_row)
        return self._by_rank[key]

    def _in_rank_order(self, name: str) -> pd.DataFrame:
        """The table with its rows in rank order (index labels kept), made once: each rank's rows a slice."""
        assert self._by_rank is not None
        key = ("frame", name)
        if key not in self._by_rank:
            order, _ = self._rank_order(name)
            frame = self.profile.table(name)
            self._by_rank[key] = frame if order is None else frame.take(order)
        return self._by_rank[key]

    def _column_in_rank_order(self, name: str, column: str) -> np.ndarray:
        assert self._by_rank is not None
        key = ("column", name, column)
        if key not in self._by_rank:
            order, _ = self._rank_order(name)
            values = self.profile.table(name)[column].to_numpy()
            self._by_rank[key] = values if order is None else values[order]
        return self._by_rank[key]

    @property
    def ranks(self) -> list[int]:
        return profile_ranks(self.profile)


def profile_ranks(profile: Profile) -> list[int]:
    """The ranks with ops, kernels, ranges, API calls or memory operations ([0]: none), sorted."""
    return [int(r) for r in _distinct_ranks([profile.table(name) for name in
                                             ("ops", "kernels", "ranges", "api_calls", "memops")])] or [0]


class _RankTables(Mapping):
    """:meth:`Analysed.rank_tables` of one rank: each table's rows of the rank, a slice of the table in rank
    order made on first read; a table with no other rank's rows is the table itself."""

    def __init__(self, an: Analysed, rank: int):
        self.an, self.rank = an, rank
        self._cut: dict[str, pd.DataFrame] = {}

    def _bounds(self, name: str) -> tuple[int, int, int]:
        """The rank's [lo, hi) in the table in rank order, and the table's length."""
        _, sorted_ranks = self.an._rank_order(name)
        lo, hi = np.searchsorted(sorted_ranks, self.rank, "left"), np.searchsorted(sorted_ranks, self.rank, "right")
        return int(lo), int(hi), len(sorted_ranks)

    def __getitem__(self, name: str) -> pd.DataFrame:
        if name not in self._cut:
            lo, hi, n = self._bounds(name)
            if lo == 0 and hi == n and n > 0:
                self._cut[name] = self.an.profile.table(name)  # one rank's rows only: the table itself
            else:
                self._cut[name] = self.an._in_rank_order(name).iloc[lo:hi]
        return self._cut[name]

    def rows(self, name: str) -> int:
        """How many rows of the table are the rank's (without cutting them out)."""
        lo, hi, _ = self._bounds(name)
        return hi - lo

    def column(self, name: str, column: str) -> np.ndarray:
        """One column of the rank's rows of a table (``self[name][column].to_numpy()``), without cutting the
        frame out: a view of the column in rank order, made once for all ranks."""
        lo, hi, _ = self._bounds(name)
        return self.an._column_in_rank_order(name, column)[lo:hi]

    def __iter__(self) -> Iterator[str]:
        return iter(self.an.RAW)

    def __len__(self) -> int:
        return len(self.an.RAW)


def _first_dtype(text: str) -> str:
    """The data type of an op: its first tensor input's dtype, in numpy spelling."""
    if not text:
        return ""
    try:
        types = json.loads(text)
    except ValueError:
        return ""
    for t in types if isinstance(types, list) else []:
        if isinstance(t, str) and numpy_name(t):
            return numpy_name(t)
    return ""


def _renumber(profile: Profile) -> None:
    """Make each id column equal its row number so ids index arrays directly."""
    for name, col in ID_COLUMNS.items():
        frame = profile.table(name).reset_index(drop=True)
        ids = frame[col].to_numpy()
        # an importer's ids are usually the row numbers already: kept, not a second column beside them
        if not (len(ids) == 0 or (ids.dtype == np.int64 and ids[0] == 0 and (np.diff(ids) == 1).all())):
            frame[col] = np.arange(len(frame), dtype=np.int64)
        setattr(profile, name, frame)


def _scopes(ops: pd.DataFrame, ranges: pd.DataFrame, skip_ranges: np.ndarray, tree: OpTree
            ) -> np.ndarray | pd.Categorical:
    """Group path of each op: the importer's scope, else the names of the annotation ranges open at its op
    node's start (ranges standing for ops included), then of the ops it is nested in."""
    promoted = (ops["range_domain"] != "").to_numpy(dtype=bool)
    cols = ["rank", "pid", "tid", "name", "start", "end"]
    cpu = pd.concat([ranges.loc[(ranges["device"] < 0).to_numpy() & ~skip_ranges, cols], ops.loc[promoted, cols]],
                    ignore_index=True)
    range_keys, op_keys = thread_keys([cpu, ops])
    nest = Nesting.build(range_keys, cpu["start"].to_numpy(), cpu["end"].to_numpy())
    names = cpu["name"].to_numpy(dtype=object)
    full = names.copy()  # each range's path, its own name last
    for rows in levels(nest.depth)[1:]:
        full[rows] = full[nest.parent[rows]] + "/" + names[rows]
    roots = np.flatnonzero(tree.parent < 0)
    hit = nest.innermost_at(op_keys[roots], ops["start"].to_numpy()[roots])
    # a range standing for an op is not a scope of itself
    own = promoted[roots] & (hit >= 0)
    hit[own] = nest.parent[hit[own]]
    # Paths as codes into ``words``: ops repeat few distinct paths, so each is joined once per level (a string
    # per row would be built, then encoded again)
    path = np.zeros(len(ops), dtype=np.int64)
    root_codes, root_words = pd.factorize(take(full, hit, missing="") if len(full) else np.full(len(roots), "", object))
    path[roots] = root_codes
    words = [str(w) for w in root_words]
    code_of = {w: i for i, w in enumerate(words)}
    name_codes, names_of = _codes(ops["name"])
    for rows in tree.levels[1:]:
        parent = tree.parent[rows]
        pairs, pair_of_row = _unique_sorted(path[parent] * max(len(names_of), 1) + name_codes[parent])
        joined = []
        for prefix, name in zip((words[p] for p in (pairs // max(len(names_of), 1)).tolist()),
                                (names_of[c] for c in (pairs % max(len(names_of), 1)).tolist())):
            text = name if prefix == "" else f"{prefix}/{name}"
            if text not in code_of:
                code_of[text] = len(words)
                words.append(text)
            joined.append(code_of[text])
        path[rows] = np.asarray(joined, dtype=np.int64)[pair_of_row.reshape(-1)]
    mine = ops["scope"]
    if not (mine != "").any():  # the importer gave no scopes (Kineto): the paths are the column
        return pd.Categorical.from_codes(path, categories=pd.Index(words, dtype=object))
    paths = np.asarray(words, dtype=object)[path] if len(words) else np.full(len(ops), "", dtype=object)
    mine = mine.to_numpy(dtype=object)
    return np.where(mine != "", mine, paths)


def _unique_sorted(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(values, return_inverse=True)`` of many int64 values with few distinct ones: hashed, then only
    the distinct values sorted (np.unique sorts every value)."""
    codes, distinct = pd.factorize(values)
    order = np.argsort(distinct)
    place = np.empty(len(order), dtype=np.int64)
    place[order] = np.arange(len(order), dtype=np.int64)
    return distinct[order], place[codes]


def _codes(column: pd.Series) -> tuple[np.ndarray, list[str]]:
    """A text column as int64 codes and the words they point at."""
    if isinstance(column.dtype, pd.CategoricalDtype) and not column.isna().any():
        return column.cat.codes.to_numpy(np.int64), [str(w) for w in column.cat.categories]
    codes, words = pd.factorize(column.to_numpy(dtype=object), use_na_sentinel=False)
    return codes.astype(np.int64), [str(w) for w in words]


def _activity_spans(profile: Profile) -> dict[int, tuple[int, int]]:
    """Per rank: the first start and last end of any op, range, kernel, memop or API call."""
    frames = [profile.table(name)[["rank", "start", "end"]] for name in ("ops", "ranges", "kernels", "memops",
                                                                         "api_calls")]
    ranks = [_one_rank(f["rank"].to_numpy()) for f in frames if len(f)]
    one = ranks[0] if ranks else None
    if one is not None and all(r == one for r in ranks):  # one rank (a single trace): no group-by
        return {one: (min(int(f["start"].min()) for f in frames if len(f)),
                           max(int(f["end"].max()) for f in frames if len(f)))}
    spans = pd.concat(frames, ignore_index=True).groupby("rank").agg(start=("start", "min"), end=("end", "max"))
    return {int(r): (int(s), int(e)) for r, s, e in zip(spans.index, spans["start"], spans["end"])}


def _one_rank(rank: np.ndarray) -> int | None:
    """The rank of every row when they are all one (None otherwise): two passes, no sort."""
    lo = int(rank.min())
    return lo if int(rank.max()) == lo else None


def _distinct_ranks(frames: list[pd.DataFrame]) -> np.ndarray:
    """The sorted distinct ranks of the frames' rows (a table of one rank read in two passes, not sorted)."""
    parts = []
    for frame in frames:
        rank = frame["rank"].to_numpy(np.int64)
        one = _one_rank(rank) if len(rank) else None
        parts.append(np.array([one], np.int64) if one is not None else np.unique(rank))
    return np.unique(np.concatenate(parts))


def _promote_launching_ranges(profile: Profile, links: dict[str, np.ndarray]) -> tuple[OpTree, np.ndarray]:
    """Annotation ranges that launch GPU work outside any framework op stand for an op (e.g. a custom
    extension's kernels under a ``record_function``); they join the ops (``range_domain`` set) so their
    launches are attributed. They own only launches no framework op encloses and never adopt an op.

    Returns the op tree and each API call's launching op row (for the ops as they are afterwards).
    """
    ops, ranges, api = profile.ops, profile.ranges, profile.api_calls
    op_keys, api_keys = thread_keys([ops, api])
    api_starts = api["start"].to_numpy(np.int64)
    tree = OpTree.build(ops, op_keys)
    api_op_row = tree.launching_op(api_keys, api_starts)
    launches = np.zeros(len(api), dtype=bool)  # calls that launched a kernel or memory operation
    for name in ("kernels", "memops"):
        rows = links[name]
        launches[rows[rows >= 0]] = True
    outside = launches & (api_op_row < 0)
    # annotations a user or a library wrote (record_function, NVTX); Python stack frames are not ops
    cand = ranges[(ranges["device"] < 0) & (ranges["domain"] != "python_function")
                  & ~matches(ranges["name"], "profiler_step") & ~matches(ranges["name"], "step_like_range")]
    if not outside.any() or cand.empty:
        return tree.drop_nestings(), api_op_row
    rng_keys, out_keys = thread_keys([cand, api[outside]])
    hit = Nesting.build(rng_keys, cand["start"].to_numpy(), cand["end"].to_numpy()).innermost_at(
        out_keys, api.loc[outside, "start"].to_numpy())
    rows = sorted_unique(hit[hit >= 0])
    if len(rows) == 0:
        return tree.drop_nestings(), api_op_row
    promoted = cand.iloc[rows]
    new_ops = make_table("ops", {c: promoted[c].to_numpy() for c in ("rank", "pid", "tid", "name", "start", "end")})
    new_ops["op_type"] = new_ops["name"]
    new_ops["range_domain"] = text_column(promoted["domain"].replace("", "annotation").to_numpy(dtype=object))
    del tree, api_op_row, op_keys, api_keys  # the ops change: their tree is built again
    profile.ops = _after_own_rank(ops, new_ops).reset_index(drop=True)
    profile.ranges = ranges.drop(index=promoted.index)
    op_keys, api_keys = thread_keys([profile.ops, api])
    tree = OpTree.build(profile.ops, op_keys)
    api_op_row = tree.launching_op(api_keys, api_starts)
    return tree.drop_nestings(), api_op_row


def _after_own_rank(ops: pd.DataFrame, new_ops: pd.DataFrame) -> pd.DataFrame:
    """``new_ops`` placed after the ops of their rank, so each rank's ops stay one block in input order
    and its ids are the same whether the job is analysed whole or rank by rank."""
    both = concat_tables("ops", [ops, new_ops])
    block = pd.factorize(both["rank"])[0]  # ranks numbered in order of first appearance
    order = np.lexsort((np.arange(len(both)), np.arange(len(both)) >= len(ops), block))
    return both.iloc[order].reset_index(drop=True)


#: the autograd engine's wrapper of a backward node: its op type is the node's name (e.g. AddmmBackward0)
_AUTOGRAD_WRAPPER = "autograd::engine::evaluate_function: "


def op_types(ops: pd.DataFrame) -> pd.Categorical:
    """One vocabulary of op types: the importer's type, else the name; an autograd wrapper is typed by its
    backward node (each distinct word looked at once, the rows carried as codes)."""
    type_codes, type_words = _codes(ops["op_type"])
    name_codes, name_words = _codes(ops["name"])
    no_type = np.asarray([w == "" for w in type_words], dtype=bool)
    code = type_codes.copy()
    if len(code):
        pick = no_type[type_codes]
        code[pick] = name_codes[pick] + len(type_words)
    words = [w.removeprefix(_AUTOGRAD_WRAPPER) for w in type_words + name_words]
    return _categorical(code, words)


def _categorical(code: np.ndarray, words: list[str]) -> pd.Categorical:
    """A text column (:func:`text_column`) from a code per row into ``words``: only the words used, each once."""
    used = np.flatnonzero(np.bincount(code, minlength=len(words)) > 0) if len(code) else np.zeros(0, np.int64)
    final, distinct = pd.factorize(np.asarray([words[i] for i in used.tolist()], dtype=object))
    remap = np.zeros(len(words), dtype=np.int64)
    remap[used] = final
    return text_column(pd.Categorical.from_codes(remap[code], categories=pd.Index(distinct, dtype=object)))


#: The raw tables that :func:`analyse` leaves as they are (the same frames, no column added or changed): the import
#: may write them while it analyses (tests/test_kept_as_parsed.py holds it to that on real traces).
KEPT_AS_PARSED = ("gpus", "memory", "comm_args")
#: The raw tables whose every column is set once their iterations are (the kernels: and their Tensor Core verdicts
#: and waves), before the ops' scopes, nodes and metrics, about half the analysis: :func:`analyse` hands them to
#: ``final`` then, and changes them no more (tests/test_kept_as_parsed.py holds it to that on real traces).
FINAL_BEFORE_OPS = ("ranges", "api_calls", "memops", "syncs", "kernels")


def analyse(profile: Profile, key_node: str | None = None,
            final: Callable[[dict[str, pd.DataFrame]], None] | None = None) -> Analysed:
    """Attribute GPU activity to ops and iterations and compute per-op-instance metrics. ``final``: given the
    ``FINAL_BEFORE_OPS`` tables as soon as they are final, the kernels last, in two calls (the import writes them
    while the analysis goes on)."""
    links = link_launches(profile.api_calls, {"kernels": profile.kernels, "memops": profile.memops,
                                              "syncs": profile.syncs})
    tree, api_op_row = _promote_launching_ranges(profile, links)
    _renumber(profile)  # keeps row order: the tree, the call rows and the links still hold
    ops, kernels, memops, syncs, api_calls, ranges = (profile.ops, profile.kernels, profile.memops,
                                                       profile.syncs, profile.api_calls, profile.ranges)
    for frame in (ops, kernels, memops):
        frame["dur"] = np.maximum(frame["end"].to_numpy(np.int64) - frame["start"].to_numpy(np.int64), 0)
    ops["op_type"] = op_types(ops)
    attribute(ops, api_calls, {"kernels": kernels, "memops": memops, "syncs": syncs}, tree, api_op_row, links)
    del links, api_op_row  # in the columns now

    ranges["category"] = np.select(
        [matches(ranges["name"], "profiler_step"), matches(ranges["name"], "dataloader"),
         matches(ranges["name"], "io")], ["step", "dataloader", "io"], "")

    ranks = _distinct_ranks([ops, ranges, kernels, api_calls])
    ranks = ranks if len(ranks) else np.zeros(1, np.int64)
    found = find_job_iterations(ops, ranges, [int(r) for r in ranks], key_node, _activity_spans(profile))
    iterations, methods, candidates = found.iterations, found.methods, found.candidates

    # GPU activity belongs to the iteration its launching call starts in: all but the kernels are then final, the
    # kernels with their Tensor Core verdicts and waves
    for frame, time_col in ((ranges, "start"), (api_calls, "start"), (kernels, "launch_ts"),
                            (memops, "launch_ts"), (syncs, "launch_ts")):
        put_column(frame, "iteration", narrow_ints(_assign_by_rank(frame, time_col, iterations)))
    if final is not None:
        final({name: profile.table(name) for name in FINAL_BEFORE_OPS if name != "kernels"})
    kernels["uses_tc"] = classify_names(kernels["name"], kernel_uses_tc)
    waves = kernel_waves(kernels, profile.gpus)
    for col in WAVE_COLUMNS:
        kernels[col] = waves.pop(col)  # the Series itself (same index): shared, not copied
    del waves
    if final is not None:
        final({"kernels": kernels})

    # ranges that are a rank's iterations are not a scope of its ops
    steps = iterations[iterations["rank"].map(methods) != "whole_profile"]
    step_keys = pd.MultiIndex.from_frame(steps[["rank", "name"]])
    skip_ranges = (pd.MultiIndex.from_frame(ranges[["rank", "name"]]).isin(step_keys)
                   | (ranges["category"] == "step").to_numpy())
    ops["scope"] = text_column(_scopes(ops, ranges, skip_ranges, tree))
    # numbered now, while few columns are added (its hash table is the high-water of a job of small ranks);
    # the columns go in last, where they always were
    node = _op_nodes(ops, tree)

    # an op belongs to the iteration its op node (root) starts in
    roots = tree.root
    put_column(ops, "iteration", narrow_ints(_assign_by_rank(ops, "start", iterations)[roots] if len(ops)
                                             else np.zeros(0, np.int64)))
    iterations["end"] = _iteration_ends(iterations, ops, kernels, memops)
    _op_metrics(ops, kernels, memops, tree)
    python_tree = analyse_frames(ops, profile.python_frames)
    _put_op_nodes(ops, tree, _nodes_by_data_type(node, ops["data_type"]))
    return Analysed(profile, iterations, methods, key_node, candidates, python_tree)


def _op_nodes(ops: pd.DataFrame, tree: OpTree) -> np.ndarray:
    """``node_id`` of each op: the calls of an op with the same name, type, direction, scope, input shapes and
    input types at the same level (an op node, the outermost op, or a nested op for drill-down); split by data
    type once that is known (:func:`_nodes_by_data_type`)."""
    is_node = pd.Series((tree.parent < 0).astype(np.int8))
    return narrow_ints(_group_numbers([ops[c] for c in ("rank", "name", "op_type", "direction", "scope",
                                                        "input_shapes", "input_dtypes", "range_domain")]
                                      + [is_node]))


def _nodes_by_data_type(node: np.ndarray, data_type: pd.Series) -> np.ndarray:
    """``node`` with the calls of a node that ran at different data types (known after the metrics: an autograd
    wrapper records no inputs and casts one way and the other) made nodes of their own, so the types a node
    stores are true of every call; numbered in order of first appearance as one key of all the columns would
    be. Unchanged (no row-sized key made) where every node has one data type, as almost always."""
    if len(node) == 0:
        return node
    codes = data_type.cat.codes.to_numpy() if isinstance(data_type.dtype, pd.CategoricalDtype) else \
        pd.factorize(data_type, use_na_sentinel=False)[0]
    count = int(node.max()) + 1
    seen, one = np.zeros(count, dtype=bool), np.zeros(count, dtype=codes.dtype)
    seen[node] = True
    one[node] = codes  # one of each node's types (whichever write lands): all its rows equal it iff it has one
    if seen.all() and (one[node] == codes).all():  # (np.minimum.at/maximum.at, codes into int64: 0.029 s, this 0.002)
        return node
    return narrow_ints(_group_numbers([pd.Series(node), data_type.reset_index(drop=True)]))


def _put_op_nodes(ops: pd.DataFrame, tree: OpTree, node: np.ndarray) -> None:
    """``node_id`` and ``parent_node_id`` (the node of the parent op, -1 for op nodes)."""
    put_column(ops, "node_id", node)
    put_column(ops, "parent_node_id", take(node, tree.parent))


def _group_numbers(columns: list[pd.Series]) -> np.ndarray:
    """``groupby(columns, sort=False).ngroup()``: each distinct combination of values numbered in order of
    first appearance, from the columns' codes (a categorical's own, else factorized) folded into one int64
    key, compressed whenever the next fold could overflow."""
    key, size = np.zeros(len(columns[0]), dtype=np.int64), 1
    for column in columns:  # folded in place: no row-sized array beside the key but the column's codes
        if isinstance(column.dtype, pd.CategoricalDtype):
            codes, n, shift = column.cat.codes.to_numpy(), len(column.cat.categories) + 1, 1
        elif isinstance(column.dtype, np.dtype) and column.dtype.kind in "ib" and len(column):
            # integers of a small span (a rank, a flag) as their offsets: any one code per value numbers the
            # groups alike (the key is numbered by first appearance below), and none is hashed
            values = column.to_numpy()
            lo, hi = int(values.min()), int(values.max())
            if lo == hi:
                continue  # one value: nothing to fold
            if hi - lo >= len(values):
                codes, uniques = pd.factorize(column, use_na_sentinel=False)
                n, shift = max(len(uniques), 1), 0
            else:
                codes, n, shift = values.astype(np.int64) - lo, hi - lo + 1, 0
        else:
            codes, uniques = pd.factorize(column, use_na_sentinel=False)
            n, shift = max(len(uniques), 1), 0
        if size * n >= 1 << 62:
            key, uniques = pd.factorize(key)
            size = max(len(uniques), 1)
        key *= n
        key += codes
        if shift:
            key += shift
        size *= n
        del codes
    return pd.factorize(key)[0].astype(np.int64, copy=False)


def _assign_by_rank(frame: pd.DataFrame, time_col: str, iterations: pd.DataFrame) -> np.ndarray:
    return assign_by_rank(frame["rank"].to_numpy(np.int64), frame[time_col].to_numpy(np.int64), iterations)


def _iteration_ends(iterations: pd.DataFrame, ops: pd.DataFrame, kernels: pd.DataFrame,
                    memops: pd.DataFrame) -> np.ndarray:
    """End of each iteration's own activity: the later of its CPU end, its ops' ends and the end of the GPU
    activity it launched. Each table's rows are looked up among the iterations where they lie (a table of
    all three side by side cost ~10 int64 per op and kernel)."""
    its = [iterations["rank"].to_numpy(np.int64), iterations["iteration"].to_numpy(np.int64)]
    act_end = np.full(len(iterations), -1, np.int64)  # no NaN: ns epochs exceed float precision
    for frame in (ops, kernels, memops):
        number = frame["iteration"].to_numpy()
        mine = np.flatnonzero(number >= 0)
        if len(mine) == 0 or len(iterations) == 0:
            continue
        it_key, key = pack_keys([[its[0], frame["rank"].to_numpy()[mine]], [its[1], number[mine]]])
        distinct, of_iteration = np.unique(it_key, return_inverse=True)
        at = np.minimum(np.searchsorted(distinct, key), len(distinct) - 1)
        known = distinct[at] == key
        reached = np.full(len(distinct), -1, np.int64)
        np.maximum.at(reached, at[known], frame["end"].to_numpy(np.int64)[mine[known]])
        np.maximum(act_end, reached[of_iteration], out=act_end)
    return np.maximum(iterations["cpu_end"].to_numpy(np.int64), act_end)


def _op_metrics(ops: pd.DataFrame, kernels: pd.DataFrame, memops: pd.DataFrame, tree: OpTree) -> None:
    """Per op instance, inclusive of everything launched beneath it (PRODUCT.md's op GPU time): kernel count
    and time, memory-operation time, GPU time (both), Tensor Core kernels and time, GPU idle; TC
    eligibility (its type, or an eligible op beneath it) and data type (what its kernels' launchers ran at, else
    its own, else a descendant's)."""
    n = len(ops)
    parent, by_level = tree.parent, tree.levels

    k_op = kernels["op_id"].to_numpy(np.int64)
    m_op = memops["op_id"].to_numpy(np.int64)
    k_dur = kernels["dur"].to_numpy(np.int64)
    tc = kernels["uses_tc"].to_numpy(bool)
    ones = np.ones(len(k_op), dtype=np.int64)
    tc_op = np.where(tc, k_op, -1)
    put_column(ops, "kernel_count", _inclusive_exact(k_op, ones, n, parent, by_level))
    kernel_time = _inclusive_exact(k_op, k_dur, n, parent, by_level)
    put_column(ops, "kernel_time", kernel_time)
    gpu_time = _inclusive_exact(m_op, memops["dur"].to_numpy(np.int64), n, parent, by_level)
    gpu_time += kernel_time
    put_column(ops, "gpu_time", gpu_time)
    del kernel_time, gpu_time
    put_column(ops, "tc_kernel_count", _inclusive_exact(tc_op, ones, n, parent, by_level))
    put_column(ops, "tc_gpu_time", _inclusive_exact(tc_op, k_dur, n, parent, by_level))
    ops["using_tc"] = ops["tc_kernel_count"].to_numpy() > 0
    eligible = classify_names(ops["op_type"], op_type_tc_eligible) | classify_names(ops["name"], op_type_tc_eligible)
    ops["tc_eligible"] = inclusive_sum(eligible.astype(np.int64), parent, by_level) > 0
    owner = np.concatenate([k_op, m_op])
    anc, act = ancestor_rows(owner, parent)
    starts = np.concatenate([kernels["start"].to_numpy(np.int64), memops["start"].to_numpy(np.int64)])
    ends = np.concatenate([kernels["end"].to_numpy(np.int64), memops["end"].to_numpy(np.int64)])
    put_column(ops, "gpu_idle", gpu_idle_per_owner(anc, starts, ends, n, act))
    del owner, starts, ends
    kernel_pairs = act < len(k_op)  # the (ancestor, kernel) pairs: what the data types are voted from
    pairs = (anc[kernel_pairs], act[kernel_pairs])
    del anc, act, kernel_pairs
    ops["data_type"] = _data_types(ops, tree, pairs, k_op, k_dur)


def _launchers_data_types(out: np.ndarray, words: list[str], pairs: tuple[np.ndarray, np.ndarray],
                          k_op: np.ndarray, k_dur: np.ndarray) -> np.ndarray:
    """``out`` (a dtype code per op; changed in place) with every op that launched kernels beneath it from ops of
    a floating type given the code of the floating type carrying most of that kernel time, by the launching ops'
    own data types (ties: the first by name). Integer launchers (index, embedding offsets) do not vote. ``pairs``: every
    (ancestor-or-self of a kernel's launching op, kernel) pair, as ``attribution.ancestor_rows`` gives them."""
    floating = np.asarray([w.startswith(("float", "bfloat")) for w in words], dtype=bool)  # float8_* too
    anc, kernel = pairs
    voting = floating[out[k_op[kernel]]]
    if not voting.any():
        return out
    anc, kernel = anc[voting], kernel[voting]
    word_id, distinct = pd.factorize(np.asarray(words, dtype=object))
    code_of_word = np.unique(word_id, return_index=True)[1]          # the first code of each word
    key = anc * len(distinct) + word_id[out[k_op[kernel]]]
    keys, inverse = np.unique(key, return_inverse=True)
    time = np.bincount(inverse, weights=k_dur[kernel].astype(np.float64))  # exact below 2⁵³ ns
    op, word = keys // len(distinct), keys % len(distinct)
    alphabetical = np.argsort(np.argsort(np.asarray(distinct, dtype=str)))
    order = np.lexsort((alphabetical[word], -time, op))           # per op: most time, ties by name
    first = order[np.r_[True, op[order][1:] != op[order][:-1]]]
    out[op[first]] = code_of_word[word[first]]
    return out


def _inclusive_exact(owner: np.ndarray, values: np.ndarray, n: int, parent: np.ndarray,
                     by_level: list[np.ndarray]) -> np.ndarray:
    """Int64 sums of ``values`` per owner, inclusive of descendants (np.bincount would go through float64)."""
    own = np.zeros(n, dtype=np.int64)
    has = owner >= 0
    np.add.at(own, owner[has], values[has])
    return inclusive_sum(own, parent, by_level)


def _data_types(ops: pd.DataFrame, tree: OpTree, pairs: tuple[np.ndarray, np.ndarray] | None = None,
                k_op: np.ndarray | None = None, k_dur: np.ndarray | None = None) -> pd.Categorical:
    """An op's data type: the dtype its GPU math ran at, i.e. the floating data type of the ops beneath it (or
    itself) that launched most of its kernel time; without such kernels, its first tensor input's dtype, else
    one of its descendants' (an autograd wrapper records no inputs; the op it calls does). Under autocast an
    ``aten::linear`` called on FP32 activations runs its GEMM in FP16 (its ``aten::addmm`` gets FP16 inputs): its
    data type is float16. Carried as codes into the distinct inputs' verdicts."""
    codes, texts = _codes(ops["input_dtypes"])
    words = [_first_dtype(t) for t in texts]
    empty = np.asarray([w == "" for w in words], dtype=bool)
    out = codes.copy()
    for rows in reversed(tree.levels[1:]):
        rows = rows[~empty[out[rows]]]
        par = tree.parent[rows]
        fill = empty[out[par]]
        out[par[fill]] = out[rows[fill]]
    if pairs is not None and k_op is not None and k_dur is not None and len(pairs[0]):
        out = _launchers_data_types(out, words, pairs, k_op, k_dur)
    return _categorical(out, words)
