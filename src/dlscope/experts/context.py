"""A read-only view of one aggregation for the rules: tables load lazily, once, as DataFrames; in a job, the
frames of all ranks are made once (:class:`RuleFrames`) and each rank's context reads its slices, as frames or,
cheaper, as numpy columns (:meth:`Context.col`: a rank's few thousand rows cost more in pandas' per-call
overhead than in the rules' work).

Every frame is restricted to the aggregation's rank; activity frames (ops, kernels, memops, API calls)
to its profiled iterations, which is how the aggregation itself counts them. GPU idleness is judged
against all GPU activity of the rank inside the window, as the aggregation's GPU busy time is.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from functools import cache, cached_property
from typing import TypeVar

import numpy as np
import pandas as pd

from ..analyze.aggregation import id_index
from ..analyze.categories import graph_launch_ids, matches
from ..analyze.dtypes import precision
from ..analyze.nesting import levels
from ..analyze.tensor_core import MatrixUnits, classify_names, matrix_units
from ..store.schema import DDL
from .precision_names import kernel_precisions
from .spans import Span, distinct

HALF = ("fp16", "bf16")
T = TypeVar("T")


@cache
def _db_columns(table: str) -> tuple[str, ...]:
    """A table's (or view's) columns in the profile database schema."""
    conn = sqlite3.connect(":memory:")
    try:
        conn.executescript(DDL)
        return tuple(r[1] for r in conn.execute(f'PRAGMA table_info("{table}")'))
    finally:
        conn.close()


_NOTHING = pd.DataFrame()


class _Cut:
    """A table's kept rows in the rules' order whose columns are gathered one at a time, on first use, and kept:
    the rules read a third of a kernel's columns, and a whole copy of a large trace's kernels and API calls
    (every column) was most of the rules' high-water. It answers what the rules ask of a frame (``[column]``,
    ``columns``, ``len``, ``assign``) with the values and dtypes a ``take`` of the frame would have; :meth:`frame`
    makes the frame itself (from the gathered columns, not copied again) where a rule reads it whole.

    ``rows``: the source's rows in order (None: all of them, as they are); ``fix``: per column, a function
    applied once to its gathered values; ``extra``: columns already in this order (``assign``)."""

    def __init__(self, source: pd.DataFrame, rows: np.ndarray | None, fix: dict | None = None):
        self.source, self.rows, self.fix = source, rows, dict(fix or {})
        self.extra: dict[str, pd.Series] = {}
        self._gathered: dict[str, pd.Series] = {}
        self._whole: pd.DataFrame | None = None
        self._columns: pd.Index | None = None
        self._names: frozenset = frozenset()

    @property
    def columns(self) -> pd.Index:
        if self._columns is None:  # made once: a rule asks for every rank (an Index costs ~0.3 ms to make and ask)
            names = [*self.source.columns, *(c for c in self.extra if c not in self.source.columns)]
            self._columns = pd.Index(names, dtype=object)
            self._names = frozenset(names)
        return self._columns

    def has(self, column: str) -> bool:
        return column in self.columns if self._columns is None else column in self._names

    def __len__(self) -> int:
        return len(self.source) if self.rows is None else len(self.rows)

    def __getitem__(self, column: str) -> pd.Series:
        if column in self.extra:
            return self.extra[column]
        memo = f"{column} (fixed)" if column in self.fix else column  # the gathered columns are shared (assign)
        values = self._gathered.get(memo)
        if values is None:
            whole = self.source[column]
            if self.rows is None:
                values = whole.reset_index(drop=True)
            else:
                values = pd.Series(whole.array.take(self.rows), name=column, copy=False)
            if column in self.fix:
                values = self.fix[column](values)
            self._gathered[memo] = values
        return values

    def assign(self, **columns) -> _Cut:
        """The same rows with ``columns`` (arrays in this order) added or replaced; gathered columns shared."""
        cut = _Cut(self.source, self.rows, self.fix)
        cut._gathered = self._gathered  # the same rows: what one gathered, the other reads
        cut.extra = {**self.extra, **{c: pd.Series(v, name=c, copy=False) for c, v in columns.items()}}
        cut._columns = None
        return cut

    def fixed(self, **functions) -> _Cut:
        """The same rows with these columns read through ``functions`` (of their gathered values), made once."""
        cut = self.assign()
        cut.fix.update(functions)
        return cut

    def frame(self) -> pd.DataFrame:
        """The whole frame, every column (a rule that reads the frame whole)."""
        if self._whole is None:
            self._whole = pd.DataFrame({c: self[c] for c in self.columns}, copy=False)
        return self._whole

    def rows_frame(self, lo: int, hi: int, mask: np.ndarray, columns: list[str] | None = None) -> pd.DataFrame:
        """Rows ``lo + flatnonzero(mask)`` of the whole frame, indexed by their place in ``[lo, hi)`` (what
        ``frame().iloc[lo:hi].reset_index(drop=True)[mask]`` is), gathered for these rows only; ``columns``:
        only these (in the frame's order), else every column."""
        at = np.flatnonzero(mask)
        pos = lo + at
        rows = pos if self.rows is None else self.rows[pos]
        out = {}
        for c in self.columns if columns is None else [c for c in self.columns if c in columns]:
            if c in self.extra or c in self._gathered or c in self.fix:
                out[c] = self[c].array.take(pos)
            else:
                out[c] = self.source[c].array.take(rows)
        return pd.DataFrame(out, index=at, copy=False)


class RuleFrames:
    """The frames the rules read, projected for every rank of a job at once: each raw table's rows in the
    database's columns, kept to each rank's profiled iterations or window, ordered by (rank, start) once (as a
    :class:`_Cut`: the row order, each column gathered when a rule first reads it);
    a rank's :class:`Context` gets slices (a job of many small ranks spent most of its rules' time in
    the same pandas calls repeated per rank). One rank is the same code with one entry in ``bounds``.

    ``tables``: raw tables (the whole job's or one rank's); ``bounds``: rank -> (iter_start, iter_stop,
    window_start, window_end) of its aggregation.
    """

    def __init__(self, tables: Mapping, bounds: dict[int, tuple[int, int, int, int]]):
        self.tables, self.bounds = tables, dict(bounds)
        self.ranks = np.array(sorted(self.bounds), dtype=np.int64)
        b = np.array([self.bounds[int(r)] for r in self.ranks], dtype=np.int64).reshape(-1, 4)
        self._it_lo, self._it_hi, self._lo, self._hi = b.T
        self._made: dict[str, tuple[pd.DataFrame, np.ndarray, np.ndarray]] = {}
        self._taken: dict[tuple[str, str | None], tuple[np.ndarray, pd.DataFrame]] = {}  # (table, by): rows, cut
        self._with_kernels: set | None = None
        self._named: dict[str, np.ndarray] = {}
        self._matches: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}
        self._no_framework_sign: bool | None = None
        self._ops_rank = np.zeros(0, dtype=np.int64)
        self._first_calls: tuple[pd.Index, dict[str, np.ndarray]] | None = None
        self._columns: dict[tuple[str, str], np.ndarray] = {}
        self._texts: dict[tuple[str, str], np.ndarray] = {}
        self._name_uniques: dict[str, np.ndarray] = {}
        self._isin: dict[tuple, np.ndarray] = {}
        self._configs: dict[str | None, dict] = {}
        self._ceilings: dict[tuple, object] = {}
        self._position = {int(r): i for i, r in enumerate(self.ranks)}
        self._only_make = False  # while making job-wide frames: no rank's slice of them (see :meth:`_slice`)

    def rules_config(self, path) -> dict:
        """:func:`.config.load_config` of ``path``, read once for all the job's ranks (the rules only read it)."""
        from .config import load_config

        key = None if path is None else str(path)
        if key not in self._configs:
            self._configs[key] = load_config(path)
        return self._configs[key]

    def gpu_ceilings(self, name: str | None, cc: str | None, sm_count):
        """:func:`~dlscope.roofline.ceilings.find_ceilings` of a GPU, matched once for all the job's ranks."""
        from ..roofline.ceilings import find_ceilings

        key = (name, cc, sm_count)
        if key not in self._ceilings:
            self._ceilings[key] = find_ceilings(name, cc, sm_count)[0]
        return self._ceilings[key]

    def covers(self, rank: int, bounds: tuple[int, int, int, int]) -> bool:
        return self.bounds.get(rank) == bounds

    def make_all(self) -> RuleFrames:
        """Make the frames every rank reads now (before forking workers, which then share them)."""
        if len(self.ranks):
            rank = int(self.ranks[0])
            for key in ("kernels", "memops", "api_calls", "ranges", "gpu_activity", "gpus", "memory", "kernel_facts"):
                self._make_frame(key, rank)  # made, not sliced: a rank's whole frame is made only if a rule reads it
            self.ops(rank)
            self.has_kernels(rank)
            for kind in ("dataloader", "io"):
                self.ops_named(kind, rank)
            self.first_calls()
            self.framework(rank)
        return self

    # ---------------------------------------------------------------- job-wide frames, made once each

    def _of_row(self, frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        """Per row: the index of its rank in ``ranks`` and whether the rank is one of them."""
        rank = frame["rank"].to_numpy(np.int64)
        i = np.minimum(np.searchsorted(self.ranks, rank), max(len(self.ranks) - 1, 0))
        return i, (self.ranks[i] == rank) if len(self.ranks) else np.zeros(len(rank), dtype=bool)

    def _cut(self, key: str, frame: pd.DataFrame, keep: np.ndarray, by: str | None, table: str | None = None,
             lazy: bool = True, fix: dict | None = None) -> None:
        """Store ``frame``'s kept rows ordered by rank, then ``by`` (stable: a rank's rows keep their
        order), with each rank's [lo, hi) slice bounds: as a :class:`_Cut` (its columns gathered on first use),
        or, ``lazy=False``, as the frame taken. ``table``: ``frame`` is that raw table's projection,
        so a cut of the same rows in the same order made before is shared, not made again (a one-rank
        trace's kernels in its iterations and overlapping its window are the same rows: 23 MiB on the 235 MB
        benchmark trace when taken whole). ``fix``: per column, a function of its values (:class:`_Cut`)."""
        rows = np.flatnonzero(keep)
        rank = frame["rank"].to_numpy(np.int64)[rows]
        order = np.lexsort((rank,) if by is None else (frame[by].to_numpy()[rows], rank))
        rows = rows[order]
        same = self._taken.get((table, by)) if table is not None else None
        if same is not None and np.array_equal(same[0], rows) and (lazy or not isinstance(same[1], _Cut)):
            made = same[1]
        elif lazy:
            whole = len(rows) == len(frame) and not (np.diff(rows) < 0).any()
            made = _Cut(frame, None if whole else rows, fix)
        else:
            made = frame.take(rows) if len(rows) != len(frame) or (np.diff(rows) < 0).any() else frame
        if table is not None and same is None:
            self._taken[(table, by)] = (rows, made)
        rank = rank[order]
        self._made[key] = (made, np.searchsorted(rank, self.ranks, "left"), np.searchsorted(rank, self.ranks, "right"))

    def _projected(self, table: str) -> pd.DataFrame:
        frame = self.tables[table]
        return frame[[c for c in _db_columns(table) if c in frame.columns]]

    def _slice(self, key: str, rank: int, make) -> pd.DataFrame:
        if key not in self._made:
            make()
        if self._only_make:
            return _NOTHING  # (:meth:`_make_frame`: the job-wide frame is what was asked for)
        frame, lo, hi = self._made[key]
        if isinstance(frame, _Cut):
            frame = frame.frame()
        i = int(np.searchsorted(self.ranks, rank))
        part = frame.iloc[lo[i]:hi[i]]
        return part if key == "ops_all" else part.reset_index(drop=True)

    def rows_of(self, key: str, rank: int, mask: np.ndarray, columns: list[str] | None = None) -> pd.DataFrame:
        """The rank's rows of its frame ``key`` (named as for :meth:`column`) where ``mask`` holds, in ``columns``
        (default: every column), indexed by their row in the rank's frame: what the frame's ``[mask]`` gives,
        without making the frame."""
        made = self.COLUMNS[key]
        if made not in self._made and len(self.ranks):
            self._make_frame(key, int(self.ranks[0]))
        frame, lo, hi = self._made[made]
        i = self._position[rank]
        if isinstance(frame, _Cut):
            return frame.rows_frame(int(lo[i]), int(hi[i]), mask, columns)
        part = frame.iloc[lo[i]:hi[i]].reset_index(drop=True)[mask]
        return part if columns is None else part[[c for c in part.columns if c in columns]]

    def table(self, table: str, rank: int) -> pd.DataFrame:
        """The rank's rows of a raw table, in the database's columns, in table order."""
        def make():
            frame = self._projected(table)
            self._cut(f"table {table}", frame, self._of_row(frame)[1], None)
        return self._slice(f"table {table}", rank, make)

    def in_iterations(self, table: str, rank: int) -> pd.DataFrame:
        """The rank's rows in its profiled iterations, by start."""
        def make():
            frame = self._projected(table)
            i, known = self._of_row(frame)
            it = frame["iteration"].to_numpy(np.int64)
            keep = known & (it >= self._it_lo[i]) & (it <= self._it_hi[i])
            key = f"in {table}"
            self._cut(key, frame, keep, "start", table)
            if table == "kernels":
                cut, lo, hi = self._made[key]
                if isinstance(cut, _Cut):
                    self._made[key] = (cut.fixed(uses_tc=_uses_tc), lo, hi)
                else:
                    self._made[key] = (cut.assign(uses_tc=_uses_tc(cut["uses_tc"])), lo, hi)
        return self._slice(f"in {table}", rank, make)

    def overlapping(self, table: str, rank: int, cpu_only: bool = False) -> pd.DataFrame:
        """The rank's rows overlapping its window, by start."""
        key = f"overlapping {table} {cpu_only}"

        def make():
            frame = self._projected(table)
            i, known = self._of_row(frame)
            keep = known & (frame["end"].to_numpy() > self._lo[i]) & (frame["start"].to_numpy() < self._hi[i])
            if cpu_only:
                keep &= frame["device"].to_numpy() < 0
            self._cut(key, frame, keep, "start", table)
        return self._slice(key, rank, make)

    def gpu_activity(self, rank: int) -> pd.DataFrame:
        """The rank's kernels then memops overlapping its window (device, start, end, kind)."""
        def make():
            k, m = self.overlapping_all("kernels"), self.overlapping_all("memops")
            rank = np.concatenate([k["rank"].to_numpy(np.int64), m["rank"].to_numpy(np.int64)])
            # (rows already in rank order, as a single trace's: taken as joined, no gather of each column)
            order = slice(None) if not len(rank) or bool((rank[1:] >= rank[:-1]).all()) else \
                np.argsort(rank, kind="stable")
            kind = np.concatenate([np.full(len(k), "kernel", dtype=object), m["kind"].to_numpy(object)])
            both = pd.DataFrame({c: np.concatenate([k[c].to_numpy(), m[c].to_numpy()])[order]
                                 for c in ("device", "start", "end")} | {"kind": pd.Series(kind[order], dtype=object)},
                                copy=False)
            rank = rank[order]
            self._made["gpu_activity"] = (both, np.searchsorted(rank, self.ranks, "left"),
                                          np.searchsorted(rank, self.ranks, "right"))
        return self._slice("gpu_activity", rank, make)

    def overlapping_all(self, table: str) -> pd.DataFrame:
        self.overlapping(table, int(self.ranks[0]))
        return self._made[f"overlapping {table} False"][0]

    def sorted_by(self, table: str, by: str, rank: int) -> pd.DataFrame:
        key = f"{table} by {by}"

        def make():
            frame = self._projected(table)
            self._cut(key, frame, self._of_row(frame)[1], by)
        return self._slice(key, rank, make)

    def ops_all(self, rank: int) -> pd.DataFrame:
        """The rank's ops by op id, indexed by it, with ``precision`` and ``eligible_root`` (:func:`_inherit`
        on all ranks at once: parents are on the op's own rank)."""
        def make():
            frame = self._projected("ops")[_OP_COLUMNS + ["rank"]]
            frame = frame.assign(**{c: frame[c].astype(np.int64) for c in ("tc_eligible", "using_tc")})
            self._cut("ops_all", frame, self._of_row(frame)[1], "op_id", lazy=False)
            ops = self._made["ops_all"][0]
            ops = ops.set_axis(id_index(ops["op_id"].to_numpy(), "op_id"))  # set_index("op_id", drop=False)
            _inherit(ops)
            self._ops_rank = ops["rank"].to_numpy(np.int64)
            self._made["ops_all"] = (ops.drop(columns="rank"), *self._made["ops_all"][1:])
        return self._slice("ops_all", rank, make)

    def ops(self, rank: int) -> pd.DataFrame:
        """:meth:`ops_all` in the rank's profiled iterations."""
        def make():
            self.ops_all(rank)
            ops, lo, hi = self._made["ops_all"]
            rank_pos = np.repeat(np.arange(len(self.ranks)), hi - lo)
            it = ops["iteration"].to_numpy(np.int64)
            keep = (it >= self._it_lo[rank_pos]) & (it <= self._it_hi[rank_pos])
            rows = np.flatnonzero(keep)
            kept = ops if len(rows) == len(ops) else ops.iloc[rows]
            self._made["ops in iterations"] = (kept, np.searchsorted(rows, lo, "left"),
                                               np.searchsorted(rows, hi, "left"))
        if "ops in iterations" not in self._made:
            make()
        frame, lo, hi = self._made["ops in iterations"]
        i = int(np.searchsorted(self.ranks, rank))
        return frame.iloc[lo[i]:hi[i]]

    def kernel_facts(self, rank: int) -> pd.DataFrame:
        """:meth:`in_iterations` of the kernels with their precision, eligible root and root node
        (:attr:`Context.kernel_facts`), for all ranks at once: op ids are unique across ranks."""
        key = "kernel facts"
        if key not in self._made:
            self.in_iterations("kernels", rank)
            self.ops_all(rank)
            k, lo, hi = self._made["in kernels"]
            ops = self._made["ops_all"][0]
            pos = ops.index.get_indexer(k["op_id"])
            pos[pos >= 0] = np.where(self._ops_rank[pos[pos >= 0]] == k["rank"].to_numpy(np.int64)[pos >= 0],
                                     pos[pos >= 0], -1)  # a rank's kernels look up its own ops only
            found = pos >= 0
            prec = np.full(len(k), "", dtype=object)
            root = np.full(len(k), -1, dtype=np.int64)
            prec[found] = ops["precision"].to_numpy(object)[pos[found]]
            root[found] = ops["eligible_root"].to_numpy(np.int64)[pos[found]]
            by_name = kernel_precisions(k["name"]) if len(k) else np.zeros(0, dtype=object)
            # a GEMM replayed from a CUDA graph hangs under the replay (`Graphed`): its own name says what it is
            replayed = found & (by_name != "") & (root < 0) & np.isin(k["api_id"].fillna(-1).to_numpy(np.int64),
                                                                       graph_launch_ids(self.tables["api_calls"]))
            root[replayed] = k["op_id"].to_numpy(np.int64)[replayed]
            prec[replayed] = ""
            node = np.full(len(k), -1, dtype=np.int64)
            rpos = ops.index.get_indexer(root)
            node[rpos >= 0] = ops["node_id"].to_numpy(np.int64)[rpos[rpos >= 0]]
            from_op = prec != ""
            source = np.where(from_op, "op", np.where(by_name != "", "name", "")).astype(object)
            prec = np.where(from_op, prec, by_name).astype(object)
            index = k.index if isinstance(k, pd.DataFrame) else None
            self._made[key] = (k.assign(precision=_object_column(prec, index),
                                        precision_source=_object_column(source, index),
                                        eligible_root=root, root_node=node, replayed=replayed), lo, hi)
        return self._slice(key, rank, lambda: None)

    def ops_named(self, kind: str, rank: int) -> np.ndarray:
        """Per row of the rank's :meth:`ops_all`: whether its name is of the category ``kind``
        (``analyze.categories``: 'dataloader', 'io'), matched once for the whole job."""
        key = f"ops named {kind}"
        if key not in self._made:
            self.ops_all(rank)
            ops, lo, hi = self._made["ops_all"]
            self._named[key] = matches(ops["name"], kind)
            self._made[key] = (ops, lo, hi)
        _, lo, hi = self._made[key]
        i = int(np.searchsorted(self.ranks, rank))
        return self._named[key][lo[i]:hi[i]]

    def framework(self, rank: int) -> str:
        """:func:`.frameworks.detect` of the rank's tables; "torch" for every rank at once when no rank can
        show another framework's signs (none in the whole job's op types, range domains or kernel names)."""
        from .frameworks import detect, shows_no_sign

        if self._no_framework_sign is None:
            self._no_framework_sign = shows_no_sign(self.tables["ops"], self.tables["ranges"], self.tables["kernels"])
        if self._no_framework_sign:
            return "torch"
        return detect(self.table("ops", rank), self.table("ranges", rank), self.table("kernels", rank))

    #: the job-wide frame behind each of :class:`Context`'s frames
    MADE = {"ops_all": "ops_all", "ops": "ops in iterations", "ranges": "overlapping ranges True",
            "kernels": "in kernels", "kernel_facts": "in kernels", "api_calls": "in api_calls"}

    def matching(self, key: str, pattern: re.Pattern, rank: int) -> np.ndarray:
        """Per row of the rank's frame ``key`` (a :class:`Context` frame named in :data:`MADE`): whether
        its name matches ``pattern``, matched once for the whole job."""
        made = self.MADE[key]
        memo = (made, pattern)
        if memo not in self._matches:
            if made not in self._made and len(self.ranks):
                self._make(key, int(self.ranks[0]))
            # the names as objects once per frame, whatever the pattern, shared with :meth:`column`'s
            self._matches[memo] = (self._objects(made, "name"), names_matching(self._made[made][0]["name"], pattern))
        _, lo, hi = self._made[made]
        i = int(np.searchsorted(self.ranks, rank))
        return self._matches[memo][1][lo[i]:hi[i]]

    def _make(self, key: str, rank: int) -> None:
        """Make the job-wide frame behind :class:`Context`'s frame ``key`` (not a rank's slice of it: that would
        make a :class:`_Cut` whole)."""
        with self._job_wide():
            if key in ("ops", "ops_all"):
                (self.ops if key == "ops" else self.ops_all)(rank)
            elif key == "ranges":
                self.overlapping("ranges", rank, cpu_only=True)
            else:
                self.in_iterations("kernels" if key == "kernel_facts" else key, rank)

    @contextmanager
    def _job_wide(self) -> Iterator[None]:
        """The frames asked for meanwhile are made job-wide, no rank's slice taken (see :meth:`_slice`)."""
        only, self._only_make = self._only_make, True
        try:
            yield
        finally:
            self._only_make = only

    #: the job-wide frame behind each :class:`Context` frame whose columns :meth:`column` reads
    COLUMNS = {**MADE, "kernel_facts": "kernel facts", "memops": "in memops", "gpu_activity": "gpu_activity",
               "gpus": "gpus by device", "memory": "memory by ts"}

    def has_column(self, key: str, column: str) -> bool:
        """Whether the frame ``key`` (named as for :meth:`column`) has ``column``."""
        made = self.COLUMNS[key]
        if made not in self._made and len(self.ranks):
            self._make_frame(key, int(self.ranks[0]))
        frame = self._made[made][0]
        return frame.has(column) if isinstance(frame, _Cut) else column in frame.columns

    def column(self, key: str, column: str, rank: int) -> np.ndarray:
        """The rank's values of one column of its frame ``key`` (a :class:`Context` frame named in
        :data:`COLUMNS`), as a read-only numpy view of the job-wide column (converted once): on a rank of a
        few thousand rows a rule's pandas calls cost far more than their work."""
        made = self.COLUMNS[key]
        memo = (made, column)
        values = self._columns.get(memo)
        if values is None:
            if made not in self._made and len(self.ranks):
                self._make_frame(key, int(self.ranks[0]))
            series = self._made[made][0][column]
            if isinstance(series.dtype, (pd.CategoricalDtype, pd.StringDtype)) or series.dtype == object:
                values = self._objects(made, column)
            else:
                values = np.asarray(series.to_numpy()).view()
                values.flags.writeable = False
            self._columns[memo] = values
        _, lo, hi = self._made[made]
        i = self._position[rank]
        return values[lo[i]:hi[i]]

    def column_in(self, key: str, column: str, values: tuple, rank: int) -> np.ndarray:
        """Per row of the rank's frame ``key``: whether ``column`` is one of ``values`` (``np.isin`` of the whole
        job's column once per values, sliced: on a rank's rows its per-call cost exceeds its work)."""
        made = self.COLUMNS[key]
        memo = (made, column, values)
        mask = self._isin.get(memo)
        if mask is None:
            if made not in self._made and len(self.ranks):
                self._make_frame(key, int(self.ranks[0]))
            series = self._made[made][0][column]
            if isinstance(series.dtype, pd.CategoricalDtype):  # each category matched once, each row by its code
                hit = np.append(series.cat.categories.isin(list(values)), False)  # code -1 (missing): no match
                mask = hit[series.cat.codes.to_numpy()]
            else:  # each distinct text matched once (np.isin compares every object row with every value)
                self.column(key, column, rank)  # the job-wide column, made once
                codes, uniques = pd.factorize(self._columns[(made, column)], sort=False)
                mask = np.append(np.isin(np.asarray(uniques, dtype=object), list(values)), False)[codes]
            mask.flags.writeable = False
            self._isin[memo] = mask
        _, lo, hi = self._made[made]
        i = self._position[rank]
        return mask[lo[i]:hi[i]]

    def _objects(self, made: str, column: str) -> np.ndarray:
        """A text column of the job-wide frame ``made`` as a read-only object array, made once for frames of
        the same rows (the kernels and their facts; the ops and those in iterations, when they are all): each
        distinct text one object (``to_numpy`` of a pandas ``str`` column makes one per row)."""
        same = made
        if made == "kernel facts":
            same = "in kernels"
        elif made == "ops in iterations" and self._made[made][0] is self._made["ops_all"][0]:
            same = "ops_all"
        values = self._texts.get((same, column))
        if values is None:
            series = self._made[made][0][column]
            if isinstance(series.dtype, pd.StringDtype):
                codes, uniques = pd.factorize(series, sort=False)
                known = np.asarray(uniques, dtype=object)
                values = np.append(known, np.array([series.dtype.na_value], dtype=object))[codes]
            else:
                values = np.asarray(series.to_numpy(object))
            values.flags.writeable = False
            self._texts[(same, column)] = values
        return values

    def _make_frame(self, key: str, rank: int) -> None:
        with self._job_wide():
            if key == "kernel_facts":
                self.kernel_facts(rank)
            elif key == "gpu_activity":
                self.gpu_activity(rank)
            elif key == "memops":
                self.in_iterations("memops", rank)
            elif key == "gpus":
                self.sorted_by("gpus", "device", rank)
            elif key == "memory":
                self.sorted_by("memory", "ts", rank)
            else:
                self._make(key, rank)

    def first_matches(self, key: str, pattern: re.Pattern, rank: int, count: int) -> list[str]:
        """The first ``count`` distinct names of the rank's frame ``key`` that match ``pattern``."""
        hit = self.matching(key, pattern, rank)
        _, lo, hi = self._made[self.MADE[key]]
        i = int(np.searchsorted(self.ranks, rank))
        mine = self._matches[(self.MADE[key], pattern)][0][lo[i]:hi[i]][hit]
        if count <= 0:
            return []
        head = mine[:64]  # the first distinct names are usually among the first hits: no hashing of them all
        if all(isinstance(n, str) for n in head):
            found = list(dict.fromkeys(head.tolist()))
            if len(found) >= count or len(head) == len(mine):
                return found[:count]
        return [str(n) for n in pd.unique(mine)[:count]]

    def name_codes(self, key: str, rank: int) -> tuple[np.ndarray, np.ndarray]:
        """(per row of the rank's frame ``key`` (named as for :meth:`column`), the code of its name; the
        names by code): ``pd.factorize`` of the whole job's names once (-1 for a missing name), sliced."""
        made = self.COLUMNS[key]
        memo = (made, "name codes")
        if memo not in self._columns:
            if made not in self._made and len(self.ranks):
                self._make_frame(key, int(self.ranks[0]))
            series = self._made[made][0]["name"]
            if isinstance(series.dtype, pd.CategoricalDtype):
                # the categories' codes numbered by first appearance: what factorizing the names gives, without
                # hashing every row's text (the benchmark trace's kernel names: 32 ms)
                by_category = series.cat.codes.to_numpy()
                known = by_category >= 0
                codes = np.full(len(by_category), -1, dtype=np.intp)
                codes[known], first = pd.factorize(by_category[known], sort=False)
                uniques = np.asarray(series.cat.categories, dtype=object)[first]
            else:
                self.column(key, "name", rank)  # the job-wide column, made once
                codes, uniques = pd.factorize(self._columns[(made, "name")], sort=False)
            self._columns[memo] = codes
            self._name_uniques[made] = np.asarray(uniques, dtype=object)
        _, lo, hi = self._made[made]
        i = self._position[rank]
        return self._columns[memo][lo[i]:hi[i]], self._name_uniques[made]

    def first_calls(self) -> tuple[pd.Index, dict[str, np.ndarray]]:
        """The first call of every op node in its rank's profiled iterations (shapes, dtypes, arguments),
        as (node ids, columns): node ids are unique across ranks."""
        if self._first_calls is None:
            if len(self.ranks):
                self.ops(int(self.ranks[0]))
            ops = self._made["ops in iterations"][0] if len(self.ranks) else pd.DataFrame(columns=_OP_COLUMNS)
            calls = ops[["node_id", "input_shapes", "input_dtypes", "concrete_inputs"]]
            first = calls.drop_duplicates("node_id")
            self._first_calls = (pd.Index(first["node_id"].to_numpy(np.int64)),
                                 {c: first[c].to_numpy() for c in first.columns if c != "node_id"})
        return self._first_calls

    def has_kernels(self, rank: int) -> bool:
        """Whether the rank ran any GPU kernel (in any iteration)."""
        if self._with_kernels is None:
            self._with_kernels = set(self.tables["kernels"]["rank"].unique().tolist())
        return rank in self._with_kernels


_OP_COLUMNS = ["op_id", "pid", "tid", "name", "op_type", "start", "end", "dur", "parent_id", "depth",
               "input_shapes", "input_dtypes", "concrete_inputs", "data_type", "iteration", "node_id",
               "tc_eligible", "using_tc", "kernel_count", "gpu_time", "api_time"]


class Context:
    """Data in for the rules: one aggregation of one rank, from frames only — ``tables`` (the rank's raw
    tables as the analysis made them: ops, kernels, memops, api_calls, ranges, gpus, memory) and
    ``aggregation`` (the computed summary tables) — plus ``config`` (all thresholds). ``frames``: the job's
    :class:`RuleFrames` when the job's ranks share them (else made here for this rank alone)."""

    def __init__(self, config: dict, tables: Mapping, aggregation, frames: RuleFrames | None = None):
        self.config, self.tables, self.aggregation = config, tables, aggregation
        self.agg = dict(aggregation.row)
        self.rank = int(self.agg["rank"])
        self.iter_start, self.iter_stop = int(self.agg["iter_start"]), int(self.agg["iter_stop"])
        self.window = (int(self.agg["window_start"]), int(self.agg["window_end"]))
        self.wall = int(self.agg["wall_clock_ns"] or 0)
        self.whole_profile = self.agg["iteration_method"] == "whole_profile"
        bounds = (self.iter_start, self.iter_stop, *self.window)
        if frames is None or not frames.covers(self.rank, bounds):
            frames = RuleFrames(tables, {self.rank: bounds})
        self.frames = frames
        self._busy: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}
        self._api_order: tuple[np.ndarray, np.ndarray] | None = None
        self._iteration_cols: dict[str, np.ndarray] = {}
        self._derived: dict[str, object] = {}

    def derived(self, key: str, make: Callable[[], T]) -> T:
        """``make()``, made once per context under ``key``: a fact several rules derive from the same columns
        (the kernels' launch calls and host waits, read by ``launch_bound`` and ``host_bound``)."""
        if key not in self._derived:
            self._derived[key] = make()
        return self._derived[key]  # type: ignore[return-value]

    # ------------------------------------------------------------------ loading

    @cached_property
    def matrix_units(self) -> MatrixUnits:
        """The words for this rank's Tensor Cores (NVIDIA) or matrix cores (AMD MFMA) in finding texts."""
        return matrix_units(self.col("gpus", "name").tolist())

    @cached_property
    def kernels(self) -> pd.DataFrame:
        return self.frames.in_iterations("kernels", self.rank)

    @cached_property
    def memops(self) -> pd.DataFrame:
        return self.frames.in_iterations("memops", self.rank)

    @cached_property
    def api_calls(self) -> pd.DataFrame:
        return self.frames.in_iterations("api_calls", self.rank)

    @cached_property
    def graph_launches(self) -> np.ndarray:
        """The api_ids of the rank's calls in the profiled iterations that launch a whole CUDA/HIP graph
        (``analyze.categories.graph_launch_ids``): kernels they ran were not launched one by one."""
        return graph_launch_ids(self.api_calls)

    @cached_property
    def ops(self) -> pd.DataFrame:
        """Op instances of the profiled iterations, with ``precision`` (own or nearest ancestor's input
        dtype) and ``eligible_root`` (the outermost TC-eligible op around it, -1 if none)."""
        return self.frames.ops(self.rank)

    @cached_property
    def ops_all(self) -> pd.DataFrame:
        return self.frames.ops_all(self.rank)

    @cached_property
    def gpu_activity(self) -> pd.DataFrame:
        """All kernels and memops of the rank overlapping the window (device, start, end, kind)."""
        return self.frames.gpu_activity(self.rank)

    @cached_property
    def iterations(self) -> pd.DataFrame:
        its = self.all_iterations
        profiled = its["profiled"].to_numpy().astype(bool)
        return its.copy(deep=False) if profiled.all() else its[profiled].reset_index(drop=True)

    @cached_property
    def all_iterations(self) -> pd.DataFrame:
        its = self.aggregation.iterations.assign(profiled=self.aggregation.iterations["profiled"].astype(np.int64))
        if not its["iteration"].is_monotonic_increasing:
            its = its.sort_values("iteration", kind="stable")
        return its.reset_index(drop=True)

    @cached_property
    def _iteration_rows(self) -> np.ndarray:
        """The rows of the aggregation's iterations that :attr:`iterations` holds, in its order."""
        its = self.aggregation.iterations
        number = its["iteration"].to_numpy()
        rows = np.arange(len(number)) if (np.diff(number) >= 0).all() else np.argsort(number, kind="stable")
        profiled = its["profiled"].to_numpy()[rows].astype(bool)
        return rows if profiled.all() else rows[profiled]

    def iteration_col(self, column: str) -> np.ndarray:
        """One column of :attr:`iterations` as a read-only numpy array, without making the frame (see :meth:`col`);
        made once per column (several rules read the same few, and a column of a frame costs ~30 µs)."""
        values = self._iteration_cols.get(column)
        if values is None:
            values = self.aggregation.iterations[column].to_numpy()[self._iteration_rows]
            values.flags.writeable = False
            self._iteration_cols[column] = values
        return values

    @cached_property
    def ranges(self) -> pd.DataFrame:
        """CPU annotation ranges of the rank overlapping the window."""
        return self.frames.overlapping("ranges", self.rank, cpu_only=True)

    @cached_property
    def gpus(self) -> pd.DataFrame:
        return self.frames.sorted_by("gpus", "device", self.rank)

    @cached_property
    def memory(self) -> pd.DataFrame:
        return self.frames.sorted_by("memory", "ts", self.rank)

    @cached_property
    def agg_ops(self) -> pd.DataFrame:
        ops = self.aggregation.ops
        return ops.assign(**{c: ops[c].astype(np.int64) for c in ("tc_eligible", "using_tc")})

    # ------------------------------------------------------------------ derived facts

    @cached_property
    def kernel_facts(self) -> pd.DataFrame:
        """The aggregation's kernels with their precision, eligible root and node.

        ``precision`` is the launching op's (own or inherited input dtype) when known, else the one the
        kernel's name tells (``precision_names``); ``precision_source`` says which ('op', 'name' or '').
        """
        return self.frames.kernel_facts(self.rank)

    def names_match(self, frame: str, patterns: list[str] | str) -> np.ndarray:
        """Per row of the frame named ``frame`` ('ops', 'ops_all', 'kernels', 'kernel_facts', 'api_calls',
        'ranges'): whether its name matches any of ``patterns`` (matched once for the whole job's rows)."""
        pattern = re.compile(patterns) if isinstance(patterns, str) else compile_any(patterns)
        return self.frames.matching(frame, pattern, self.rank)

    def col(self, frame: str, column: str) -> np.ndarray:
        """One column of the frame named ``frame`` (as :meth:`names_match` names them, or 'memops',
        'gpu_activity') as a read-only numpy array, without making the frame: the cheap way for rules."""
        return self.frames.column(frame, column, self.rank)

    def col_in(self, frame: str, column: str, values) -> np.ndarray:
        """Per row of the frame named ``frame`` (as for :meth:`col`): whether ``column`` is one of ``values``
        (``np.isin``, evaluated once for the whole job's rows); read-only."""
        return self.frames.column_in(frame, column, tuple(values), self.rank)

    def op_rows(self, op_ids) -> np.ndarray:
        """Per op id: its row in :attr:`ops_all`, -1 when it is none of the rank's ops (what
        ``ops_all.index.get_indexer`` gives, by binary search: the rank's ops are ordered by op id)."""
        ids = self.col("ops_all", "op_id")
        wanted = np.asarray(op_ids, dtype=np.int64)
        if len(ids) == 0:
            return np.full(len(wanted), -1, dtype=np.int64)
        pos = np.minimum(np.searchsorted(ids, wanted), len(ids) - 1)
        return np.where(ids[pos] == wanted, pos, -1)

    def api_rows(self, api_ids) -> np.ndarray:
        """Per API call id: its row in :attr:`api_calls`, -1 when it is none of them (``get_indexer``)."""
        if self._api_order is None:
            ids = self.col("api_calls", "api_id")
            order = np.argsort(ids, kind="stable")
            self._api_order = (order, ids[order])
        order, ids = self._api_order
        wanted = np.asarray(api_ids, dtype=np.int64)
        if len(ids) == 0:
            return np.full(len(wanted), -1, dtype=np.int64)
        pos = np.minimum(np.searchsorted(ids, wanted), len(ids) - 1)
        return np.where(ids[pos] == wanted, order[pos], -1)

    def ops_named(self, kind: str) -> np.ndarray:
        """Per row of :attr:`ops_all`: whether the op's name is of the category ``kind`` ('dataloader', 'io')."""
        return self.frames.ops_named(kind, self.rank)

    @cached_property
    def has_gpu(self) -> bool:
        """Whether the rank ran any GPU kernel. Without one, no GPU advice applies (registry ``gpu=True``)."""
        return self.frames.has_kernels(self.rank)

    @cached_property
    def training_evidence(self) -> list[str]:
        """Names that show a training step: backward ops or an optimizer step (framework ops or annotation
        ranges), or backward / weight-gradient / optimizer kernels (``run_kind`` in rules.json). At most
        three, for the findings' evidence; empty for an inference (forward-only) run."""
        cfg = self.config["run_kind"]
        found: list[str] = []
        for key, patterns in (("ops_all", cfg["training_op_patterns"]), ("ranges", cfg["training_op_patterns"]),
                              ("kernels", cfg["training_kernel_patterns"])):
            if len(self.col(key, "name")) == 0:
                continue
            found += self.frames.first_matches(key, compile_any(patterns), self.rank, 3 - len(found))
            if len(found) >= 3:
                break
        return found

    @cached_property
    def is_training(self) -> bool:
        """True for a training run (see :attr:`training_evidence`), False for forward-only (inference)."""
        return bool(self.training_evidence)

    @cached_property
    def framework(self) -> str:
        """"torch", "tf", "jax" or "paddle": whose words the recommendations use (:mod:`.frameworks`)."""
        return self.frames.framework(self.rank)

    def advice(self, rule: str, default: str) -> str:
        """``default`` (PyTorch words) or the framework's own recommendation for ``rule``."""
        from .frameworks import advice

        return advice(rule, self.framework, self.run_kind, default)

    @property
    def run_kind(self) -> str:
        return "training" if self.is_training else "inference"

    @cached_property
    def devices(self) -> list[int]:
        device = self.col("gpu_activity", "device")
        return [int(d) for d in distinct(device[device >= 0])]

    def busy(self, device: int | None = None, kinds: tuple = ("kernel", "memcpy", "memset")) -> tuple:
        """Intervals during which the device (or any device) runs GPU activity of the given kinds (selected
        once per device and kinds: most rules ask; each caller gets its own copy)."""
        key = (device, tuple(kinds))
        if key not in self._busy:
            sel = self.col_in("gpu_activity", "kind", kinds)
            if device is not None:
                sel = sel & (self.col("gpu_activity", "device") == device)
            self._busy[key] = Span(self.col("gpu_activity", "start")[sel], self.col("gpu_activity", "end")[sel])
        starts, ends = self._busy[key]
        return starts.copy(), ends.copy()

    def _first_gpu(self, column: str):
        """``column`` of the rank's first GPU (by device), None when the rank has no GPU row."""
        values = self.col("gpus", column)
        return values[0] if len(values) else None

    @cached_property
    def ceilings(self):
        """The rank's GPU ceilings from gpu_specs.json, or None when the GPU is unknown."""
        if len(self.col("gpus", "device")) == 0:
            return None
        major, minor = self._first_gpu("cc_major"), self._first_gpu("cc_minor")
        cc = f"{major}.{minor}" if major is not None and major >= 0 else None
        return self.frames.gpu_ceilings(self._first_gpu("name") or None, cc, self._first_gpu("sm_count"))

    @cached_property
    def compute_capability(self) -> float | None:
        major = self._first_gpu("cc_major")
        if len(self.col("gpus", "device")) == 0 or major is None or major < 0:
            return None
        return float(major) + float(max(self._first_gpu("cc_minor"), 0)) / 10

    def pct(self, ns: float) -> float:
        return 100.0 * ns / self.wall if self.wall else 0.0

    def link(self, rule_id: str) -> str:
        """The rule's reference; the framework's own page where ``data/framework_advice.json`` has one."""
        from .frameworks import table

        return table()["links"].get(rule_id, {}).get(self.framework) or self.config[rule_id]["link"]


def _inherit(ops: pd.DataFrame) -> None:
    """Add ``precision`` and ``eligible_root`` by walking parents level by level (depth ascending)."""
    ids = ops["op_id"].to_numpy(np.int64)
    parent_pos = ops.index.get_indexer(ops["parent_id"].to_numpy(np.int64))
    # each op's own precision as a code of the distinct ones (one verdict per distinct data type): the walk
    # compares and copies integers, not text objects (17 -> 3 ms on the benchmark trace's 283k ops)
    types, kinds = pd.factorize(ops["data_type"].fillna(""), sort=False)
    type_code, texts = pd.factorize(np.array([precision(str(t)) for t in kinds], dtype=object), sort=False)
    texts = np.asarray(texts, dtype=object)
    code = type_code[types]
    blank = np.flatnonzero(texts == "")
    unknown = int(blank[0]) if len(blank) else -1  # no op's own precision is unknown: nothing to inherit
    eligible = ops["tc_eligible"].fillna(0).astype(bool).to_numpy()
    root = np.where(eligible, ids, -1)
    depth = ops["depth"].fillna(0).to_numpy(np.int64)
    low = int(depth.min()) if len(depth) else 0
    for rows in levels(depth - low if low else depth):  # each depth's rows, ascending: one sort, then slices
        rows = rows[parent_pos[rows] >= 0]
        if len(rows) == 0:
            continue
        par = parent_pos[rows]
        mine = code[rows]
        code[rows] = np.where(mine == unknown, code[par], mine)
        root[rows] = np.where(root[par] >= 0, root[par], root[rows])
    ops["precision"] = _object_column(texts[code], ops.index)
    ops["eligible_root"] = root


def _object_column(values: np.ndarray, index: pd.Index | None) -> pd.Series:
    """Texts made here as a column of objects, as the rules read them: pandas would store them as Arrow strings
    (~50 ns a row), which the rules' numpy columns turn back into objects (as long again)."""
    return pd.Series(values, index=index, dtype=object, copy=False)


def compile_any(patterns: list[str], flags: int = 0) -> re.Pattern:
    """One regex matching any of the data file's patterns."""
    return re.compile("|".join(f"(?:{p})" for p in patterns), flags)


def names_matching(names: pd.Series, pattern: re.Pattern) -> np.ndarray:
    """Boolean mask of names matching a regex, evaluated once per distinct name."""
    return classify_names(names.fillna(""), lambda n: pattern.search(n) is not None,
                          memo=_MATCHED.setdefault(pattern, {}))


def _uses_tc(values: pd.Series) -> pd.Series:
    """A kernel's ``uses_tc`` as the rules read it: unknown is no."""
    return values.fillna(0).astype(bool)


#: per compiled pattern, the names already matched (the rules compile the same few patterns for every rank)
_MATCHED: dict[re.Pattern, dict] = {}
