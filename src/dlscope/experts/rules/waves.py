"""The tail effect (seed 002): a grid that ends in a partly filled wave leaves SMs idle while its last wave runs.

An SM holds ``active_blocks_per_sm`` blocks of a kernel at once, so the GPU runs its grid in waves of
SMs × active blocks (``analyze.occupancy``). When a launch has more than one wave and the last is only partly
full, that wave costs as long as a full one; the saving is the time the empty slots of the last wave cost,
dur × (N × slots − blocks) / (N × slots) with N waves (``occupancy.tail_ns``). Launches whose tail is at
least ``min_tail_share`` of their time count; the finding needs a saving of ``min_pct`` of the wall clock.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...analyze.occupancy import kernel_waves, tail_ns
from ..evidence import fmt_ns, iterations_of, node_ids, plural, short_kernel, top_by
from ..finding import Finding
from ..registry import rule

_CONFIG = ["name", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "registers", "shared_mem"]
#: the other columns of the kernels tail_effect reads
_READ = ["dur", "waves", "last_wave_fill", "device", "rank", "active_blocks_per_sm", "op_id", "iteration", "end"]


@rule("tail_effect", gpu=True)
def tail_effect(ctx, cfg):
    def kernels(c: str) -> np.ndarray:
        return ctx.col("kernels", c)

    dur = kernels("dur")
    if not len(dur) or not ctx.frames.has_column("kernels", "active_blocks_per_sm"):
        return None
    gpu_device, gpu_sms = ctx.col("gpus", "device"), ctx.col("gpus", "sm_count")  # by device
    pos = np.minimum(np.searchsorted(gpu_device, kernels("device")), max(len(gpu_device) - 1, 0))
    known = gpu_device[pos] == kernels("device") if len(gpu_device) else np.zeros(len(dur), dtype=bool)
    sm_count = np.where(known, gpu_sms[pos] if len(gpu_device) else -1, -1).astype(np.int64)
    active = kernels("active_blocks_per_sm")
    active = np.where(np.isnan(active), -1, active).astype(np.int64) if active.dtype.kind == "f" else active
    slots = np.where((sm_count > 0) & (active > 0), sm_count * active, 0)
    blocks = (kernels("grid_x") * kernels("grid_y") * kernels("grid_z")).astype(np.int64)
    tail = tail_ns(dur, blocks, slots)
    costly = (tail > 0) & (tail >= cfg["min_tail_share"] * dur)
    saving = int(tail[costly].sum())
    if not costly.any() or ctx.pct(saving) < cfg["min_pct"]:
        return None
    # the costly rows only, in the columns read below, not the whole frame
    hit = ctx.frames.rows_of("kernels", ctx.rank, costly, _CONFIG + _READ)
    hit = hit.assign(tail=tail[costly], slots=slots[costly], blocks=blocks[costly])
    n = ctx.config["evidence"]["max_items"]
    launches = _launches(hit).nlargest(n, "tail_ns")
    launches["limiter"] = kernel_waves(launches, ctx.gpus, limiter=True)["limiter"].to_numpy()
    top = launches.iloc[0]
    wave_len = dur[costly] // -(-blocks[costly] // np.maximum(slots[costly], 1))  # one wave: dur / N
    last = hit.assign(wave=wave_len).nlargest(n, "tail")
    return Finding(
        "tail_effect",
        f"{plural(int(costly.sum()), 'kernel launch', 'kernel launches')} ended in a partly filled last wave that "
        f"cost {fmt_ns(saving)} of idle SM slots; the largest, {short_kernel(top['name'])} "
        f"({int(top['blocks']):,} blocks, {int(top['active_blocks_per_sm'])} per SM by "
        f"{top['limiter'].replace('_', ' ')}, {int(top['slots']):,} per wave), runs {top['waves']:.2f} waves with "
        f"the last {100 * top['last_wave_fill']:.0f}% "
        f"full ({fmt_ns(int(top['tail_ns']))} over {plural(int(top['calls']), 'call')}).",
        ctx.advice("tail_effect",
                   "Size these grids to whole waves (a multiple of SMs × active blocks per SM): pick GEMM and "
                   "convolution dimensions (batch, hidden size) that tile into whole waves, let the library choose "
                   "another tile or split-K, or raise occupancy (fewer registers or less shared memory per block) "
                   "so the blocks fit in fewer waves.")
        + f" See {ctx.link('tail_effect')}",
        saving,
        {"node_ids": node_ids(ctx, top_by(hit[hit["op_id"] >= 0], "op_id", "tail", n)),
         "kernels": top_by(hit, "name", "tail", n), "iterations": iterations_of(hit["iteration"]),
         "time_ranges": [[int(e - w), int(e)] for e, w in zip(last["end"], last["wave"])],
         "launches": [{"kernel": r["name"], "grid": [int(r["grid_x"]), int(r["grid_y"]), int(r["grid_z"])],
                       "block": [int(r["block_x"]), int(r["block_y"]), int(r["block_z"])],
                       "active_blocks_per_sm": int(r["active_blocks_per_sm"]), "limiter": r["limiter"],
                       "blocks_per_wave": int(r["slots"]), "waves": float(r["waves"]),
                       "last_wave_fill": float(r["last_wave_fill"]), "calls": int(r["calls"]),
                       "tail_ns": int(r["tail_ns"]), "gpu_time_ns": int(r["gpu_time_ns"])}
                      for _, r in launches.iterrows()],
         "saving_basis": "the idle block slots of each launch's partial last wave, with waves of equal length"})


#: per launch configuration: the calls' sums, then the columns taken from its first call (``first``: the first
#: value that is not missing)
_SUMS = {"tail_ns": "tail", "gpu_time_ns": "dur"}
_FIRSTS = ["slots", "blocks", "waves", "last_wave_fill", "device", "rank", "active_blocks_per_sm"]


def _launches(hit: pd.DataFrame) -> pd.DataFrame:
    """The launches of ``hit`` grouped by configuration (``_CONFIG``), in order of first appearance: what
    ``hit.groupby(_CONFIG, sort=False).agg(calls=size, sums, firsts).reset_index()`` gives, grouped on integer
    codes (the names' own codes; a groupby over nine keys, one of them categorical, took ~20 ms)."""
    name = hit["name"]
    ints = [hit[c].to_numpy() for c in _CONFIG[1:]]
    if not isinstance(name.dtype, pd.CategoricalDtype) or any(v.dtype.kind not in "iu" for v in ints):
        return (hit.groupby(_CONFIG, sort=False)
                .agg(calls=("tail", "size"), **{k: (v, "sum") for k, v in _SUMS.items()},
                     **{c: (c, "first") for c in _FIRSTS})
                .reset_index())
    rows = np.flatnonzero(name.cat.codes.to_numpy() >= 0)  # a missing name is in no group (groupby's dropna)
    code = name.cat.codes.to_numpy(np.int64)[rows]
    for values in ints:  # (each step's codes below the rows' count: no product overflows)
        part, distinct = pd.factorize(values[rows])
        code = code * len(distinct) + part
        code = pd.factorize(code)[0]
    code = pd.factorize(code)[0]  # groups numbered by first appearance
    n = int(code.max()) + 1 if len(code) else 0
    seen = np.maximum.accumulate(code) if len(code) else code
    first = rows[np.flatnonzero(np.r_[True, seen[1:] > seen[:-1]])] if len(code) else rows
    out = {c: hit[c].iloc[first].reset_index(drop=True) for c in _CONFIG}
    out["calls"] = np.bincount(code, minlength=n).astype(np.int64)
    for column, source in _SUMS.items():
        total = np.zeros(n, np.int64)
        np.add.at(total, code, hit[source].to_numpy(np.int64)[rows])
        out[column] = total
    for column in _FIRSTS:
        values = hit[column].to_numpy()
        at = first
        if values.dtype.kind == "f":  # the first value that is not NaN (NaN where there is none)
            known = np.flatnonzero(~np.isnan(values[rows]))
            taken = np.full(n, -1, np.int64)
            group, where = np.unique(code[known], return_index=True)
            taken[group] = rows[known[where]]
            out[column] = np.where(taken >= 0, values[np.maximum(taken, 0)], np.nan)
            continue
        out[column] = values[at]
    return pd.DataFrame(out)
