"""Replay: the time of every vertex as the latest of (predecessor + weight), and the critical path.

The graph is a set of chains (threads, streams) joined by cross edges. Along one chain with known cross
inputs ``x`` the recurrence t_i = max(t_{i-1} + w_i, x_i) has the closed form t_i = W_i + max_{j<=i}(x_j - W_j)
(W: the running sum of chain weights), one vectorized running maximum. The replay alternates sweeps over
the CPU chains and the GPU chains, feeding each with the other's latest times, until nothing changes (a
fixed point: the longest paths); each sweep crosses one more synchronization, so the number of sweeps is
about the number of host-GPU round trips, not the number of events.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from .graph import CATEGORIES, CROSS_CATEGORY, Graph, fitting

NONE = np.iinfo(np.int64).min // 4


@dataclass
class Weights:
    """The edge weights and switches of one replay (the measured ones, or a scenario's)."""

    wc: np.ndarray          # chain edge into each vertex
    wx: np.ndarray          # cross edges
    cut: np.ndarray         # chain edge into the vertex removed
    off: np.ndarray         # cross edge removed

    @classmethod
    def measured(cls, g: Graph) -> Weights:
        return cls(g.wc.copy(), g.wx.copy(), np.zeros(g.n, bool), g.xoff.copy())

    @classmethod
    def shared(cls, g: Graph) -> Weights:
        """The measured weights as read-only views of the graph's (no copy: for a replay that changes none)."""
        return cls(_read_only(g.wc), _read_only(g.wx), np.broadcast_to(np.False_, g.n), _read_only(g.xoff))


def _read_only(a: np.ndarray) -> np.ndarray:
    view = a.view()
    view.flags.writeable = False
    return view


@dataclass
class Result:
    t: np.ndarray           # replayed vertex times (relative, aligned clock)
    rounds: int
    weights: Weights | None  # None: let go (a scenario's replay kept only for its times)


def _settled(x: np.ndarray, C: np.ndarray, seg: np.ndarray, runs: list | None = None) -> np.ndarray:
    """One sweep of a block's local runs: each head at the latest of its own input ``x`` and its run's earlier
    heads' (a head ``C`` after the run's start: ``C + max over the run so far of (x - C)``), NONE where no
    input reached it yet. ``seg``: each head's run, numbered from 0; ``runs``: their (start, stop), when few."""
    valid = x > NONE
    if runs is not None and valid.all():  # the usual sweep (~2 runs of ~128 heads): a running maximum per run
        y = x - C
        for a, b in runs:
            np.maximum.accumulate(y[a:b], out=y[a:b])
        y += C
        return y
    if not valid.any():
        return np.full(len(x), NONE, np.int64)
    y = x - C
    lo = int(y[valid].min()) - 1
    z = np.where(valid, y - lo, 0)
    span = int(z.max()) + 1
    if int(seg[-1]) * span < 2 ** 62:
        off = seg * np.int64(span)
        z += off
        np.maximum.accumulate(z, out=z)
        z -= off
    else:  # too many runs for one axis
        z = pd.Series(z).groupby(seg).cummax().to_numpy(np.int64)
    return np.where(z > 0, z + lo + C, NONE)


#: a block's local runs swept one by one when fewer than this (else on one axis, offset apart)
FEW_RUNS = 8


#: heads settled together: blocks of about this many, in measured-time order
BLOCK = 256


@dataclass
class _Layout:
    """What a replay needs that depends on the graph and on which edges are on, not on their weights: heads,
    blocks, cross edges in block order and each block's local runs. Found once per graph and switch set (the
    scenarios that only change durations share the unchanged replay's)."""

    seg_start: np.ndarray   # a vertex starts a segment (its chain's first, or its chain edge cut)
    hid: np.ndarray         # segment (head) of each vertex
    heads: np.ndarray
    cont: np.ndarray        # a head continues the previous head's chain
    base: np.ndarray        # a source head's own (measured) time, else NONE
    e_src: np.ndarray       # cross edges on, in block then destination order: source vertex
    e_on: np.ndarray        # ... their index among all cross edges
    e_seg: np.ndarray       # ... source head
    d_seg: np.ndarray       # ... destination head
    order: np.ndarray       # heads by block, chain order inside
    joined: np.ndarray      # in ``order``: the head continues the local run of the one before it
    seg: np.ndarray         # in ``order``: local run number
    blocks: list            # per block: (lo, hi) in ``order``, (lo, hi) in the edges, destination positions
    #                         of the edges' first rows, their reduceat starts


def _layout(g: Graph, cut: np.ndarray, off: np.ndarray) -> _Layout:
    n = g.n
    seg_start = g.first | cut
    on = np.flatnonzero(~off)
    src, dst = g.src[on], g.dst[on]
    head = seg_start.copy()
    head[dst] = True
    hid = np.cumsum(head, dtype=fitting(n)) - 1  # segment of each vertex (kept with the layout: int32 where it fits)
    heads = np.flatnonzero(head)
    # a head continues the previous head's segment (same chain) unless its chain edge is cut or absent
    cont = ~seg_start[heads]
    has_cross = np.zeros(n, bool)
    has_cross[dst] = True
    base = np.where(seg_start[heads] & ~has_cross[heads], g.t[heads], NONE)
    e_seg, d_seg = hid[src], hid[dst]
    # blocks of heads by measured time; inside a block, heads stay in chain order
    th = g.t[heads]
    nb = max(1, len(heads) // BLOCK)
    bounds = (np.unique(np.quantile(th, np.linspace(0, 1, nb + 1)[1:-1], method="lower")) if nb > 1
              else np.zeros(0, np.int64))
    block = np.searchsorted(bounds, th, side="right")
    order = np.argsort(block, kind="stable")
    b_lo = np.searchsorted(block[order], np.arange(block.max() + 2 if len(block) else 1))
    e_block = block[d_seg]
    e_order = np.lexsort((d_seg, e_block))
    e_src, e_on, e_seg, d_seg, e_block = src[e_order], on[e_order], e_seg[e_order], d_seg[e_order], e_block[e_order]
    eb_lo = np.searchsorted(e_block, np.arange(len(b_lo)))
    # a local run continues inside the block; its first head carries in from its (final) predecessor
    joined = np.r_[False, (order[1:] == order[:-1] + 1) & cont[order[1:]]] if len(order) else np.zeros(0, bool)
    joined[b_lo[:-1][b_lo[:-1] < len(order)]] = False
    seg = np.cumsum(~joined)
    blocks = []
    for b in range(len(b_lo) - 1):
        lo, hi = int(b_lo[b]), int(b_lo[b + 1])
        if lo == hi:
            continue
        elo, ehi = int(eb_lo[b]), int(eb_lo[b + 1])
        d_ = d_seg[elo:ehi]
        starts = np.r_[0, np.flatnonzero(d_[1:] != d_[:-1]) + 1] if len(d_) else np.zeros(0, np.int64)
        upos = np.searchsorted(order[lo:hi], d_[starts]) if len(d_) else starts  # chain order: increasing
        blocks.append((lo, hi, elo, ehi, upos, starts))
    return _Layout(seg_start, hid, heads, cont, base, e_src, e_on, e_seg, d_seg, order, joined, seg, blocks)


def solve(g: Graph, w: Weights, max_rounds: int = 100_000, start: np.ndarray | None = None,
          scratch: bool = False) -> Result:
    """Replay the graph under ``w``: every vertex's time (sources keep their measured time).

    ``scratch``: ``w.wc`` may be overwritten (a caller that lets the weights go after: one array per vertex
    fewer); the result then has no weights.

    ``start``: vertex times to sweep from (the measured times, or the unchanged replay's). The graph has no
    cycle, so the sweeps reach the same times from any start (each sweep settles one more cross edge of every
    dependency); from times that differ only where a scenario changed something, a block needs about as many
    sweeps as the change travels across edges, not as many as its whole depth.

    Only vertices with a cross input can start something new; the others follow their chain predecessor by a
    fixed offset. So the chains are cut into segments at those vertices (heads: about one per GPU activity
    and per synchronization) and only heads are swept. Every edge points forward in measured time, whatever
    the weights, so heads are settled in blocks of measured time, one block after another: a block's inputs
    from earlier blocks are final, and sweeping it until nothing changes crosses its own few dependencies.
    The layout of heads and blocks depends only on which edges are on: it is found once per graph for each
    set of switches.
    """
    key = ("replay-layout", np.packbits(w.cut).tobytes(), np.packbits(w.off).tobytes())
    lay = g.memoized(key, lambda: _layout(g, w.cut, w.off))
    heads, hid, order = lay.heads, lay.hid, lay.order
    # (arrays per vertex made in place where they can: a scenario's replay is the peak of a priced import)
    if scratch:
        wc = w.wc
        wc[lay.seg_start] = 0
    else:
        wc = np.where(lay.seg_start, 0, w.wc)
    cont = lay.cont
    head_wc = wc[heads[cont]]
    run = np.cumsum(wc, out=wc)
    del wc
    off = run
    head_run = run[heads]
    for a in range(0, len(off), GATHER):      # offset of a vertex after its segment's head (a slice at a time)
        off[a:a + GATHER] -= head_run[hid[a:a + GATHER]]
    del head_run
    step = np.zeros(len(heads), np.int64)
    step[cont] = off[heads[cont] - 1] + head_wc
    e_off = off[lay.e_src] + w.wx[lay.e_on]
    e_seg, joined, seg = lay.e_seg, lay.joined, lay.seg
    # each local run's offsets from its first head, in block order
    local = np.cumsum(np.where(joined, step[order], 0))
    C_all = local  # (in place: the right side is gathered before it is subtracted)
    C_all -= local[np.flatnonzero(~joined)][seg - 1]
    step_o = step[order]
    carry_o = cont[order] & ~joined
    base = lay.base
    H = base.copy()
    if start is not None:
        H = np.maximum(start[heads], NONE)
    rounds = 0
    for lo, hi, elo, ehi, upos, starts in lay.blocks:
        hs = order[lo:hi]
        x0 = base[hs].copy()
        carry = carry_o[lo:hi]
        prev = H[hs[carry] - 1]
        x0[carry] = np.maximum(x0[carry], np.where(prev > NONE, prev + step_o[lo:hi][carry], NONE))
        C = C_all[lo:hi]
        sg = seg[lo:hi] - seg[lo]  # local runs from 0: each sweep's running maximum restarts at each
        cut = np.flatnonzero(sg[1:] != sg[:-1]) + 1
        runs = list(zip([0, *cut.tolist()], [*cut.tolist(), hi - lo])) if len(cut) < FEW_RUNS else None
        s_, o_ = e_seg[elo:ehi], e_off[elo:ehi]
        now = H[hs]  # the block's head times (only this block writes them: kept, not gathered each sweep)
        for _ in range(max_rounds):
            rounds += 1
            x = x0
            if len(starts):
                hv = H[s_]
                vals = np.where(hv > NONE, hv + o_, NONE)
                x = x0.copy()
                x[upos] = np.maximum(x[upos], np.maximum.reduceat(vals, starts))
            new = _settled(x, C, sg, runs)
            if (new == now).all():
                break
            H[hs] = now = new
        else:
            raise RuntimeError(f"the replay did not settle in {max_rounds} sweeps (a dependency cycle?)")
    # each vertex's time is its head's plus its offset, made in place in ``off`` (solve's own array: the
    # weights' scratch, or the copy above) a slice at a time: no second array per vertex at a replay's peak
    t = off
    for a in range(0, len(t), GATHER):
        h = H[hid[a:a + GATHER]]
        part = t[a:a + GATHER]
        part += h
        part[h <= NONE] = NONE
    return Result(t, rounds, None if scratch else w)


#: vertices whose times are gathered from their heads at once (bounds the replay's temporary arrays)
GATHER = 1 << 16


def unchanged(g: Graph) -> Result:
    """The unchanged replay. The graph is built so that the measured times are its fixed point (every vertex
    at the latest of its inputs): checked here in one vectorised pass, they are the replay (no sweep); were
    they not, it is solved."""
    w = Weights.shared(g)
    t = g.t
    on = ~w.off
    src, dst = g.src[on], g.dst[on]
    # each vertex's chain term over shifted views (no index array per vertex), NONE at the first of a chain
    latest = np.empty(g.n, np.int64)
    np.add(t[:-1], w.wc[1:], out=latest[1:])
    latest[g.first] = NONE
    if len(dst):  # cross edges are sorted by destination: the latest of each destination's inputs
        starts = np.flatnonzero(np.r_[True, dst[1:] != dst[:-1]])
        d = dst[starts]
        latest[d] = np.maximum(latest[d], np.maximum.reduceat(t[src] + w.wx[on], starts))
    source = latest == NONE   # neither a chain predecessor nor a cross input: keeps its measured time
    if np.array_equal(np.where(source, t, latest), t):
        return Result(_read_only(t), 0, w)  # the graph's own times: nothing copied
    return solve(g, w, start=t)


# ------------------------------------------------------------------------------------------ critical path


@dataclass
class Binding:
    """For each vertex, the edge that set its time in a replay: the chain edge (the run of chain-bound vertices
    it ends), a cross edge, or none."""

    cross_v: np.ndarray     # the vertices a cross edge binds, sorted (few: one array per vertex fewer)
    cross_e: np.ndarray     # ... that edge
    run_start: np.ndarray   # first vertex of the run of chain-bound vertices ending at each vertex

    def edge(self, v: int) -> int:
        """The cross edge that binds vertex ``v`` (-1: none)."""
        at = int(np.searchsorted(self.cross_v, v))
        return int(self.cross_e[at]) if at < len(self.cross_v) and self.cross_v[at] == v else -1


def binding(g: Graph, r: Result) -> Binding:
    t, w = r.t, r.weights
    assert w is not None, "a replay whose weights were let go"
    n = g.n
    seg_start = g.first | w.cut
    # vertex and edge indexes as int32 where they fit (two arrays per vertex kept for every walk)
    index = fitting(max(n, len(g.src)))
    by_chain = np.zeros(n, bool)
    if n > 1:  # (vertex 0 starts its chain)
        by_chain[1:] = (t[:-1] > NONE) & (t[:-1] + w.wc[1:] == t[1:])
    by_chain &= ~seg_start
    on = ~w.off
    tight = on & (t[g.src] > NONE) & (t[g.src] + w.wx == t[g.dst])
    e = np.flatnonzero(tight).astype(index)
    # edges are sorted by dst: the first tight one of each vertex
    d = g.dst[e]
    firsts = np.r_[True, d[1:] != d[:-1]] if len(e) else np.zeros(0, bool)
    cross_v, cross_e = d[firsts], e[firsts]
    # a cross edge explains a vertex better than its own chain (a wait, not work): prefer it
    by_chain[cross_v] = False
    run_start = np.arange(n, dtype=index)
    run_start[by_chain] = -1
    np.maximum.accumulate(run_start, out=run_start)
    return Binding(cross_v, cross_e, run_start)


@dataclass
class Path:
    """The critical path of one window: its chain edges (vertex v: the edge into v) and cross edges, each
    with the part of its time inside the window."""

    chain_v: np.ndarray
    chain_ns: np.ndarray
    cross_e: np.ndarray
    cross_ns: np.ndarray
    untracked_ns: int       # time before the first event the path reaches (a source inside the window)


def critical_path_pieces(g: Graph, r: Result, b: Binding, end_v: int, lo: int, size: int | None) -> Iterator[Path]:
    """The critical path: walked back from ``end_v`` along binding edges to time ``lo`` (its parts inside
    [lo, t[end_v]] add up to t[end_v] - lo exactly), in pieces of at most ``size`` chain edges, then one of its
    cross edges and untracked time (``size`` None: one piece): the walk keeps only its runs' bounds, so a window
    whose path crosses most of a large trace's vertices never holds one entry per vertex of it at once (four int64
    arrays per edge)."""
    t = r.t
    hi = int(t[end_v])
    runs, crosses = [], []
    v = int(end_v)
    untracked = 0
    for _ in range(g.n + 1):  # a walk back visits each vertex at most once
        j = int(b.run_start[v])
        runs.append((j, v))
        if t[j] <= lo:
            break
        e = b.edge(j)
        if e < 0:  # a source (or an unreached vertex) inside the window
            untracked = int(t[j]) - lo
            break
        crosses.append(e)
        v = int(g.src[e])
        if t[v] <= lo:
            break
    cross_e = np.asarray(crosses, np.int64)
    xs = np.maximum(t[g.src[cross_e]], lo)
    xe = np.minimum(t[g.dst[cross_e]], hi)
    cross = Path(_NONE, _NONE, cross_e, np.maximum(xe - xs, 0), untracked)
    if size is None:  # one piece: the chain edges with the cross edges
        chain_v = np.concatenate([np.arange(j + 1, v_ + 1) for j, v_ in runs]) if runs else _NONE
        yield replace(cross, chain_v=chain_v, chain_ns=_chain_ns(t, chain_v, lo, hi))
        return
    # the runs' chain edges, in the walk's order, cut into pieces of at most ``size``
    piece: list[np.ndarray] = []
    held = 0
    for j, v_ in runs:
        for first in range(j + 1, v_ + 1, size):
            part = np.arange(first, min(first + size, v_ + 1))
            if held + len(part) > size and piece:
                chain_v = np.concatenate(piece)
                yield Path(chain_v, _chain_ns(t, chain_v, lo, hi), _NONE, _NONE, 0)
                piece, held = [], 0
            piece.append(part)
            held += len(part)
    if held:
        chain_v = np.concatenate(piece)
        yield Path(chain_v, _chain_ns(t, chain_v, lo, hi), _NONE, _NONE, 0)
    yield cross


_NONE = np.zeros(0, np.int64)


def _chain_ns(t: np.ndarray, chain_v: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """Each chain edge's time inside [lo, hi] (edge v: from vertex v - 1 to v)."""
    if not len(chain_v):
        return chain_v
    return np.maximum(np.minimum(t[chain_v], hi) - np.maximum(t[chain_v - 1], lo), 0)


def path_columns(g: Graph, path: Path, unexplained: bool = True) -> dict[str, np.ndarray]:
    """The path's time by category, owner op and GPU activity: one entry per edge with time inside the
    window. ``unexplained`` False: without that column (the stored figures do not read it)."""
    cv, xe = path.chain_v, path.cross_e
    cat = g.cat[cv]
    cols = {
        "category": np.r_[cat, CROSS_CATEGORY[g.xkind[xe]], [CATEGORIES.index("before_trace")]],
        "op_id": np.r_[g.owner[cv], g.xowner[xe], [-1]],
        "act": np.r_[np.where(_IS_RUN[cat], g.act[cv], -1), np.full(len(xe), -1), [-1]],
        "rank": np.r_[g.rank[cv], g.rank[g.dst[xe]], [-1]],
        "ns": np.r_[path.chain_ns, path.cross_ns, [path.untracked_ns]]}
    if unexplained:  # waiting the model could not tie to work: the residual it kept on the edge (fixed in a what-if)
        cols["unexplained"] = np.r_[np.minimum(path.chain_ns, g.rc[cv]), np.minimum(path.cross_ns, g.rx[xe]),
                                    [path.untracked_ns]]
    keep = cols["ns"] > 0
    return {c: v[keep] for c, v in cols.items()}


_RUN_CATS = [CATEGORIES.index(c) for c in ("kernel", "memcpy", "memset", "communication")]
_IS_RUN = np.isin(np.arange(len(CATEGORIES)), _RUN_CATS)  # by category: a GPU run (looked up, not searched)
