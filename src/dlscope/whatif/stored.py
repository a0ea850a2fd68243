"""What the profile database keeps of the replay: each aggregation's critical path and its findings priced.

The import and `dlscope aggregate` call :func:`annotate` on the aggregations they are about to write, so the
ops and kernels tables, the summary, the dashboard and the report show the critical path without replaying.
The graph is built and replayed unchanged once per database (a job's collectives link its ranks); each
aggregation then walks its own windows on that replay. A profile that cannot be replayed still imports: its
figures stay missing and ``critical_path_note`` says why.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..processes import ChildFailed, ForkedCall, Inbox, release_free_memory
from .graph import CATEGORIES, Graph, build, positions
from .job import Job
from .predict import IterationRows, Windows, path_parts, price_findings, windows
from .replay import Binding, Result, Weights, binding, unchanged
from .scenarios import for_rule

#: the rows of ``agg_critical_path``: time on the critical path per rank (-1: before the first event the
#: path reaches) and category
PATH_COLUMNS = ["rank", "category", "time_ns"]


def annotate(job_of: Callable[[], Job], aggs: list, findings: list[list[dict]]) -> None:
    """Add the replay's figures to aggregations before they are written (in place).

    ``agg.ops`` and ``agg.kernels`` get ``critical_path_ns`` (0: never on it), ``agg.critical_path`` the time
    per rank and category, each finding ``simulated_saving_ns`` (None: no scenario models its advice, or it
    cannot be priced) and ``agg.row`` ``findings_combined_saving_ns`` (all priced findings at once, overlaps
    counted once) and ``critical_path_note`` (why there is no critical path, else None).
    """
    figures = Replay(job_of).figures([request(agg, found) for agg, found in zip(aggs, findings)])
    apply(aggs, findings, figures)


@contextmanager
def annotated_beside(job_of: Callable[[], Job], hints: list[tuple[int, int, int]]) -> Iterator[Callable]:
    """:func:`annotate` with the replay started now, in a forked child, beside the caller's own work.

    The graph, its unchanged replay and the path of each window in ``hints`` ((rank, iter_start, iter_stop):
    the aggregations to come) depend on the analysed tables only, not on the aggregations or their findings:
    the child finds them while the caller aggregates and runs the rules. Yields ``annotate(aggs, findings)``,
    which sends the child the aggregations' windows and findings (unless its ``send`` did as soon as they were
    known), waits for their figures (the findings priced there, on the child's graph) and adds them as
    :func:`annotate` does. A child that dies leaves the
    aggregations without a critical path, the note saying why; a caller that fails (or is interrupted) kills
    the child instead of waiting for it.
    """
    call = ForkedCall(_replay_in_child, job_of, hints, inbox=True)
    try:
        yield _AnnotateBeside(call)
    finally:
        call.kill()  # nothing left to do when its result was read; else the caller gave up on it


class _AnnotateBeside:
    """``annotate(aggs, findings)`` of :func:`annotated_beside`; :meth:`add` hands the child each rank's findings
    (in groups of ``GROUP_RANKS``) as soon as its rules are done, so that it prices them beside the rules of the
    next ranks, and :meth:`send` the rest once all are known, while the caller still writes its tables."""

    def __init__(self, call: ForkedCall):
        self.call, self.sent = call, False
        self.added = 0  # the leading aggregations already sent
        self.group: list[tuple] = []

    def add(self, agg, found: list[dict]) -> None:
        """One more aggregation (in the order of the ``aggs`` given to :meth:`send`) and its findings."""
        self.group.append(request(agg, found))
        if len(self.group) >= GROUP_RANKS:
            self.call.send_part(self.group)
            self.added += len(self.group)
            self.group = []

    def send(self, aggs: list, findings: list[list[dict]]) -> None:
        if not self.sent:
            self.call.send([request(agg, found) for agg, found in zip(aggs[self.added:], findings[self.added:])])
            self.sent = True

    def __call__(self, aggs: list, findings: list[list[dict]]) -> None:
        self.send(aggs, findings)
        try:
            figures = self.call.result()
        except ChildFailed as e:
            figures = [Figures(note=f"the critical path could not be computed (its process {e})")] * len(aggs)
        except Exception as e:  # noqa: BLE001 - as in annotate, a replay that fails never fails the import
            figures = [Figures(note=f"the critical path could not be computed ({_one_line(e)})")] * len(aggs)
        apply(aggs, findings, figures)


def _replay_in_child(inbox: Inbox, job_of: Callable[[], Job], hints: list[tuple[int, int, int]]) -> list[Figures]:
    replay = Replay(job_of)
    replay.walk_ahead(hints)  # before the aggregations exist: their windows are known from the iterations
    replay.plan_ahead(inbox.ready)  # while they are not there yet
    return [fig for part in inbox.parts() for fig in replay.figures(part)]


#: the ranks whose findings go to the replay child together (each part costs a pickle and a pipe write; the
#: last part's pricing is what the import waits for after its last rule)
GROUP_RANKS = 8


def request(agg, found: list[dict]) -> tuple:
    """What the replay needs of an aggregation: its rank, its iterations and its findings' rules."""
    row = agg.row
    return row["rank"], row["iter_start"], row["iter_stop"], [(f["rule"], f.get("est_saving_ns")) for f in found]


@dataclass
class Figures:
    """An aggregation's figures from the replay, as small arrays (sent back from a forked replay): time on
    the path by op node, kernel name and (rank, category) cell, each finding's simulated saving, all
    together's; or the ``note`` saying why there are none."""

    note: str | None = None
    nodes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    node_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    kernel_names: np.ndarray = field(default_factory=lambda: np.zeros(0, object))
    kernel_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    cells: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    cell_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    savings: list = field(default_factory=list)
    combined: int | None = None


@dataclass
class _Walk:
    """One window's critical path, summed (what its figures need before its findings are priced)."""

    win: Windows
    nodes: np.ndarray
    node_ns: np.ndarray
    kernel_names: np.ndarray
    kernel_ns: np.ndarray
    cells: np.ndarray
    cell_ns: np.ndarray


class Replay:
    """A job's graph replayed unchanged, walked for each aggregation's window and pricing its findings.

    The graph is built and replayed unchanged once (a job's collectives link its ranks); each aggregation
    then walks its own windows on that replay, and a scenario's replay is made once for all of them.
    """

    def __init__(self, job_of: Callable[[], Job]):
        self.g: Graph | None = None
        self.base: Result | None = None
        self.note: str | None = None
        try:
            job = job_of()
            if not len(job.ops) and not len(job.kernels) and not len(job.api_calls):
                self.note = "no CPU or GPU events to replay"
            else:
                # the free pages handed back to the system before and after each step that leaves many behind (the
                # caller's rules before, the build's temporaries, the unchanged replay's): malloc keeps them resident,
                # and the graph's arrays, made among them, leave holes that grow the heap where they do not fit
                # (~80 MiB free at the build's end on the benchmark trace; ~20k more page faults, ~15 ms)
                release_free_memory()
                self.g = build(job)
                release_free_memory()
                self.base = unchanged(self.g)  # the measured times, checked
                release_free_memory()
        except Exception as e:  # noqa: BLE001 - a profile the replay cannot read still imports, saying why
            self.note = f"the dependency graph could not be built ({_one_line(e)})"
        self.replays: dict = {}  # a scenario changes the whole job: replayed once for every rank's window
        self.keep_replays = False  # set once more than one window is known (:meth:`walk_ahead`, :meth:`figures`)
        self._shared: _Shared | None = None  # what every rank's walk reads
        self._walks: dict[tuple, _Walk | Exception] = {}

    def walk_ahead(self, windows: list[tuple[int, int, int]]) -> None:
        """Walk these windows now (their failures kept for :meth:`figures` to note)."""
        self.keep_replays = self.keep_replays or len(windows) > 1  # the aggregations to come: more than one window
        for rank, iter_start, iter_stop in windows if self.note is None else []:
            try:
                self.walk(rank, iter_start, iter_stop)
            except Exception:  # noqa: BLE001, S112 - kept, noted when an aggregation of this window asks for it
                continue

    def plan_ahead(self, enough: Callable[[], bool]) -> None:
        """Find what the scenarios of the rules' findings derive from the graph alone (memoized on it), one
        scenario after another until ``enough()``: work the findings will likely ask for (a job's ranks
        mostly share their findings), done while they are not known yet. Changes no figure: the same
        derivations, made earlier."""
        for rule in PLANNED_AHEAD if self.note is None else ():
            if enough():
                return
            try:
                scenario = for_rule(rule)
                assert self.g is not None and scenario is not None
                scenario.apply(self.g, Weights.measured(self.g))  # on scratch weights: only the memo stays
            except Exception:  # noqa: BLE001, S112 - a scenario that fails fails again when a finding asks for it
                continue

    def walk(self, rank, iter_start, iter_stop) -> _Walk:
        """The window's path (found once per window; its failure too, raised again)."""
        key = (rank, iter_start, iter_stop)
        if key not in self._walks:
            try:
                self._walks[key] = self._walk(int(rank), int(iter_start), int(iter_stop))
            except Exception as e:  # noqa: BLE001 - kept for the aggregation of this window
                self._walks[key] = e
        found = self._walks[key]
        if isinstance(found, Exception):
            raise found
        return found

    def _walk(self, rank: int, iter_start: int, iter_stop: int) -> _Walk:
        g, base = self.g, self.base
        assert g is not None and base is not None  # built whenever there is no note
        shared = self._shared = _Shared(g, base) if self._shared is None else self._shared
        win = windows(g, rank, iter_start, iter_stop, shared.rows)
        # summed a few iteration windows at a time (sums of integers: exact in any grouping), so that the path of
        # the whole trace is never held at once
        partial: list[tuple[np.ndarray, ...]] = []
        pending: list[dict[str, np.ndarray]] = []
        size = 0
        for part in path_parts(g, win, base, shared.bound, PATH_CHUNK, unexplained=False):
            pending.append(part)
            size += len(part["ns"])
            if size >= PATH_CHUNK:
                partial.append(_path_sums(g, shared, pending))
                pending, size = [], 0
        if pending or not partial:
            partial.append(_path_sums(g, shared, pending))
        (nodes, node_ns), (codes, code_ns), (cells, cell_ns) = (
            _sums(np.concatenate([p[k] for p in partial]), np.concatenate([p[k + 1] for p in partial]))
            for k in (0, 2, 4))
        return _Walk(win, nodes, node_ns, np.asarray(shared.names[codes], object), code_ns, cells, cell_ns)

    def figures(self, requests: list[tuple]) -> list[Figures]:
        """Each aggregation's figures (``requests``: :func:`request` of each)."""
        out = []
        # one window (a single trace's import): nothing reads a scenario's replay again, so each is let go once
        # priced (the 2.9 GB trace's replays hold ~30M vertex times each)
        self.keep_replays = self.keep_replays or len(requests) > 1
        for rank, iter_start, iter_stop, rules in requests:
            if self.note is not None:
                out.append(Figures(note=self.note))
                continue
            try:
                out.append(self._figures(self.walk(rank, iter_start, iter_stop), rules))
            except Exception as e:  # noqa: BLE001 - one aggregation's failure leaves the others' figures
                out.append(Figures(note=f"the critical path could not be walked ({_one_line(e)})"))
        return out

    def _figures(self, walk: _Walk, rules: list[tuple[str, int | None]]) -> Figures:
        assert self.g is not None and self.base is not None
        priced = price_findings(self.g, walk.win, rules, self.base, self.replays if self.keep_replays else None)
        rows = iter(priced["findings"])  # price_findings lists the findings a scenario models, in their order
        savings = [next(rows)["simulated_saving_ns"] if for_rule(rule) else None for rule, _ in rules]
        return Figures(None, walk.nodes, walk.node_ns, walk.kernel_names, walk.kernel_ns, walk.cells, walk.cell_ns,
                       savings, priced["combined_saving_ns"])


#: the rules whose scenarios :meth:`Replay.plan_ahead` prepares, cheapest first (one of each scenario: cuda-graphs
#: is host_bound's and launch_bound's, prepared once for both; host_bound, the broader, is the likelier finding)
PLANNED_AHEAD = ("sync_api", "sync_memcpy", "dataloader_bottleneck", "amp_not_enabled", "host_bound")


class _Shared:
    """Found once for all aggregations of a replay, not once per rank."""

    def __init__(self, g: Graph, base: Result):
        self.bound: Binding = binding(g, base)
        self.rows = IterationRows(g)
        op_pos = positions(g.job.ops["op_id"].to_numpy(np.int64))
        # the op node of every op id (and -1 in a last slot, for ids past them): each path edge's looked up once
        self.node_of = np.r_[op_nodes(g, np.arange(len(op_pos) - 1, dtype=np.int64), op_pos), -1]
        acts = g.activities
        # (compared as the Arrow strings they are: no Python string per row)
        self.is_kernel = (acts["table"] == "kernel").to_numpy(bool) if len(acts) else np.zeros(0, bool)
        # kernel names as codes: a rank's path is summed by code, its kernels table looked up by name once
        code, names = g.name_codes()
        self.name_code = code
        self.names = pd.Index(names)


#: path edges summed at once in a walk (a few iteration windows' worth; bounds the walk's memory)
PATH_CHUNK = 1 << 16


def _path_sums(g: Graph, shared: _Shared, parts: list[dict[str, np.ndarray]]) -> tuple[np.ndarray, ...]:
    """(op nodes, their ns, kernel name codes, their ns, (rank, category) cells, their ns) of path edges."""
    def column(name: str) -> np.ndarray:
        return np.concatenate([p[name] for p in parts]).astype(np.int64) if parts else np.zeros(0, np.int64)
    ns, op_id, act = column("ns"), column("op_id"), column("act")
    owned = op_id >= 0
    nodes, node_ns = _sums(shared.node_of[np.minimum(op_id[owned], len(shared.node_of) - 1)], ns[owned])
    kernel = act >= 0
    kernel[kernel] = shared.is_kernel[act[kernel]]
    code = shared.name_code[act[kernel]]
    named = code >= 0  # a kernel without a name is in no kernels row
    codes, code_ns = _sums(code[named], ns[kernel][named])
    cells, cell_ns = _sums(column("rank") * len(CATEGORIES) + column("category"), ns)  # rank >= -1: (rank, category)
    return nodes, node_ns, codes, code_ns, cells, cell_ns


def apply(aggs: list, findings: list[list[dict]], figures: list[Figures]) -> None:
    """Add each aggregation's figures (or its note) to it and its findings."""
    kernel_path = iter(_kernel_path_ns([(agg, fig) for agg, fig in zip(aggs, figures) if fig.note is None]))
    for agg, found, fig in zip(aggs, findings, figures):
        if fig.note is not None:
            _not_replayed(agg, found, fig.note)
            continue
        agg.ops = agg.ops.assign(critical_path_ns=_lookup(agg.ops["node_id"].to_numpy(np.int64), fig.nodes,
                                                          fig.node_ns) if not agg.ops.empty else np.zeros(0, np.int64))
        agg.kernels = agg.kernels.assign(critical_path_ns=next(kernel_path))
        categories = np.asarray(CATEGORIES, object)
        agg.critical_path = pd.DataFrame({"rank": np.floor_divide(fig.cells, len(CATEGORIES)),
                                          "category": categories[np.mod(fig.cells, len(CATEGORIES))],
                                          "time_ns": fig.cell_ns})
        for f, saving in zip(found, fig.savings):
            f["simulated_saving_ns"] = saving
        agg.row["findings_combined_saving_ns"] = fig.combined
        agg.row["critical_path_note"] = None


def _kernel_path_ns(replayed: list[tuple]) -> list[np.ndarray]:
    """Each (aggregation, figures)'s kernel rows' time on its path, by kernel name (0: never on it; a name never
    on the path is in no kernel row of the walk): every aggregation's names matched at once (one factorization
    of all names, then (aggregation, name) keys looked up), not one index made and searched per rank."""
    rows = [agg.kernels["kernel_name"].to_numpy(object) if not agg.kernels.empty else np.zeros(0, object)
            for agg, _ in replayed]
    on_path = [np.asarray(fig.kernel_names, object) for _, fig in replayed]
    if not replayed:
        return []
    codes, names = pd.factorize(np.concatenate([*rows, *on_path]), use_na_sentinel=False)
    span = max(len(names), 1)

    def keys(arrays: list[np.ndarray], codes: np.ndarray) -> np.ndarray:  # (aggregation, name) as one integer
        return np.repeat(np.arange(len(arrays), dtype=np.int64), [len(a) for a in arrays]) * span + codes

    n_rows = sum(len(r) for r in rows)
    path_keys, path_ns = _sums(keys(on_path, codes[n_rows:].astype(np.int64)),
                               np.concatenate([np.asarray(fig.kernel_ns, np.int64) for _, fig in replayed]))
    found = _lookup(keys(rows, codes[:n_rows].astype(np.int64)), path_keys, path_ns)
    return np.split(found, np.cumsum([len(r) for r in rows])[:-1])


def op_nodes(g: Graph, op_id: np.ndarray, pos: np.ndarray | None = None) -> np.ndarray:
    """The op node (of the outermost op) each op belongs to: the nodes the ops table lists (-1: none).
    ``pos``: ``positions`` of the op ids of ``g.job.ops``, when the caller has it."""
    ops = g.job.ops
    pos = positions(ops["op_id"].to_numpy(np.int64)) if pos is None else pos

    def row_of(ids: np.ndarray) -> np.ndarray:
        inside = (ids >= 0) & (ids < len(pos) - 1)
        return np.where(inside, pos[np.where(inside, ids, -1)], -1)

    row = row_of(op_id)
    root = np.where(row >= 0, ops["root_id"].to_numpy(np.int64)[np.maximum(row, 0)], -1) if len(ops) else row
    root = np.where(root >= 0, root, op_id)
    root_row = row_of(root)
    return np.where(root_row >= 0, ops["node_id"].to_numpy(np.int64)[np.maximum(root_row, 0)], -1) if len(ops) \
        else root_row


def _sums(keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct keys in order, the sum of ``values`` of each): a group-by sum on integers, exact."""
    if len(keys) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    lo, hi = int(keys.min()), int(keys.max())
    if hi - lo < 4 * len(keys) + 1024:  # few distinct keys (categories, op nodes, kernel names): no sort
        at = keys - lo
        total = np.zeros(hi - lo + 1, np.int64)
        np.add.at(total, at, np.asarray(values, np.int64))
        seen = np.bincount(at, minlength=hi - lo + 1) > 0
        return np.flatnonzero(seen) + lo, total[seen]
    order = np.argsort(keys, kind="stable")
    k = keys[order]
    starts = np.flatnonzero(np.r_[True, k[1:] != k[:-1]])
    return k[starts], np.add.reduceat(values[order], starts)


def _lookup(keys: np.ndarray, distinct: np.ndarray, sums: np.ndarray) -> np.ndarray:
    """The sum of each key (0: not on the path)."""
    if len(distinct) == 0:
        return np.zeros(len(keys), np.int64)
    at = np.minimum(np.searchsorted(distinct, keys), len(distinct) - 1)
    return np.where(distinct[at] == keys, sums[at], 0).astype(np.int64)


def skip(aggs: list, findings: list[list[dict]], why: str) -> None:
    """The aggregations without the replay's figures (NULL, with ``why`` as their note)."""
    for agg, found in zip(aggs, findings):
        _not_replayed(agg, found, why)


def _not_replayed(agg, found: list[dict], why: str) -> None:
    agg.ops = agg.ops.assign(critical_path_ns=None) if not agg.ops.empty else agg.ops
    agg.kernels = agg.kernels.assign(critical_path_ns=None) if not agg.kernels.empty else agg.kernels
    agg.critical_path = pd.DataFrame(columns=PATH_COLUMNS)
    for f in found:
        f["simulated_saving_ns"] = None
    agg.row["findings_combined_saving_ns"] = None
    agg.row["critical_path_note"] = why


def _one_line(error: BaseException) -> str:
    return " ".join(f"{type(error).__name__}: {error}".split())
