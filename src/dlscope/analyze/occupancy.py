"""Occupancy and waves of each kernel launch (seed 002): how many of its blocks an SM holds at once, and in how
many waves the GPU runs its grid.

An SM holds as many blocks as the scarcest of four resources allows — warp slots, registers, shared memory
and block slots — with the limits of the GPU's compute capability (``data/sm_limits.json``), counted the
way CUDA's occupancy calculator counts them (registers per warp rounded up to the allocation unit and split
over the register-file partitions; shared memory plus the driver's reserved bytes rounded up to its unit). A
grid of B blocks on S SMs holding A blocks each runs in B / (S × A) waves; a last wave that is only partly
full leaves SMs idle while it runs (the tail effect). Vectorized over all launches; the Python loop is over
the few distinct compute capabilities.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources

import numpy as np
import pandas as pd

from .tensor_core import gpu_vendor

#: the derived columns added to the kernels table
COLUMNS = ("active_blocks_per_sm", "waves", "last_wave_fill", "occupancy")
#: the resources that can limit the blocks per SM, in CUDA's order (the first of equal limits is named)
LIMITERS = ("warps", "registers", "shared_memory", "blocks")
_NONE = np.iinfo(np.int64).max  # a resource the kernel does not use limits nothing


@lru_cache(maxsize=1)
def sm_limits() -> dict:
    return json.loads(resources.files("dlscope.data").joinpath("sm_limits.json").read_text())


def _round_up(x: np.ndarray, unit: int) -> np.ndarray:
    return -(-x // unit) * unit


def block_limits(threads: np.ndarray, registers: np.ndarray, shared_mem: np.ndarray, cc: str) -> dict | None:
    """Blocks per SM each resource allows for launches of one compute capability (int64 arrays by
    :data:`LIMITERS`), or None when the compute capability is not in ``sm_limits.json``."""
    spec = sm_limits()["compute_capabilities"].get(cc)
    if spec is None:
        return None
    warp = sm_limits()["warp_size"]
    warps = -(-threads // warp)
    fits = (threads > 0) & (threads <= 1024)
    by_warps = np.where(fits, (spec["max_threads_per_sm"] // warp) // np.maximum(warps, 1), 0)

    parts = spec["sub_partitions"]
    regs_per_warp = _round_up(registers * warp, spec["register_allocation_per_warp"])
    too_many = ((regs_per_warp * _round_up(warps, parts) > spec["registers_per_block"])
                | (regs_per_warp * warps > spec["registers_per_block"])
                | (registers > spec["max_registers_per_thread"]))
    warps_per_sm = (spec["registers_per_sm"] // parts) // np.maximum(regs_per_warp, 1) * parts
    by_registers = np.where(registers == 0, _NONE, np.where(too_many, 0, warps_per_sm // np.maximum(warps, 1)))

    reserved = spec["reserved_shared_memory_per_block_bytes"]
    smem = _round_up(shared_mem + reserved, spec["shared_memory_allocation_bytes"])
    too_big = smem > spec["shared_memory_per_block_bytes"] + reserved
    by_shared = np.where(smem == 0, _NONE,
                         np.where(too_big, 0, spec["shared_memory_per_sm_bytes"] // np.maximum(smem, 1)))
    by_blocks = np.full(len(threads), spec["max_blocks_per_sm"], dtype=np.int64)
    return dict(zip(LIMITERS, (by_warps, by_registers, by_shared, by_blocks)))


def kernel_waves(kernels: pd.DataFrame, gpus: pd.DataFrame, limiter: bool = False) -> pd.DataFrame:
    """Per launch: ``active_blocks_per_sm`` (resident blocks per SM, the scarcest resource's limit),
    ``waves`` = grid blocks / (SMs × active blocks), ``last_wave_fill`` (the share of the GPU's block slots
    the last wave fills: 1.0 when the grid is a whole number of waves) and ``occupancy`` (theoretical:
    resident warps / the SM's warp slots), and with ``limiter`` which resource limits them (for a few rows:
    an object column). -1 / NaN / "" where the grid, block, registers, shared memory, SM count or compute
    capability is unknown."""
    n = len(kernels)
    out = {"active_blocks_per_sm": np.full(n, -1, dtype=np.int64), "waves": np.full(n, np.nan),
           "last_wave_fill": np.full(n, np.nan), "occupancy": np.full(n, np.nan)}
    if limiter:
        out["limiter"] = np.full(n, "", dtype=object)
    if n == 0 or gpus.empty:
        return pd.DataFrame(out, index=kernels.index)
    g = gpus.drop_duplicates(["rank", "device"]).set_index(["rank", "device"])
    pos = g.index.get_indexer(pd.MultiIndex.from_arrays([kernels["rank"].to_numpy(), kernels["device"].to_numpy()]))
    found = pos >= 0
    take = np.maximum(pos, 0)
    sms = np.where(found, g["sm_count"].to_numpy(np.int64)[take], -1)
    major = np.where(found, g["cc_major"].to_numpy(np.int64)[take], -1)
    minor = np.where(found, g["cc_minor"].to_numpy(np.int64)[take], -1)

    def col(name: str) -> np.ndarray:
        return kernels[name].to_numpy(np.int64)

    # sm_limits.json holds NVIDIA compute capabilities: an AMD GPU's GFX version (gfx90a reports 9.0, Hopper's
    # number) and its CUs are not SMs, so AMD launches get no NVIDIA occupancy or waves
    names = g["name"].fillna("").astype(str) if "name" in g.columns else pd.Series([""] * len(g))
    nvidia = np.array([gpu_vendor(n) is None for n in names], dtype=bool)
    known = found & (sms > 0) & (major >= 0) & (minor >= 0) & np.where(found, nvidia[take], False)
    blocks = np.ones(n, dtype=np.int64)
    threads = np.ones(n, dtype=np.int64)
    for names, product in ((("grid_x", "grid_y", "grid_z"), blocks), (("block_x", "block_y", "block_z"), threads)):
        for name in names:
            dim = col(name)
            known &= dim > 0
            product *= dim
    registers, shared_mem = col("registers"), col("shared_mem")
    known &= (registers >= 0) & (shared_mem >= 0)
    cc = major * 1000 + minor  # one code per compute capability, named "major.minor" in the data file
    max_warps = {c: s["max_threads_per_sm"] // sm_limits()["warp_size"]
                 for c, s in sm_limits()["compute_capabilities"].items()}
    for code in np.unique(cc[known]):
        c = f"{code // 1000}.{code % 1000}"
        rows = np.flatnonzero(known & (cc == code))
        limits = block_limits(threads[rows], registers[rows], shared_mem[rows], c)
        if limits is None:
            continue
        stacked = np.stack([limits[k] for k in LIMITERS])
        active = stacked.min(axis=0)
        ok = active > 0  # a launch that ran fits at least one block: 0 means the limits do not describe it
        rows, active = rows[ok], active[ok]
        which = stacked[:, ok].argmin(axis=0) if limiter else None
        per_wave = sms[rows] * active
        rest = blocks[rows] % per_wave
        out["active_blocks_per_sm"][rows] = active
        out["waves"][rows] = blocks[rows] / per_wave
        out["last_wave_fill"][rows] = np.where(blocks[rows] < per_wave, blocks[rows] / per_wave,
                                               np.where(rest == 0, 1.0, rest / per_wave))
        out["occupancy"][rows] = active * (-(-threads[rows] // sm_limits()["warp_size"])) / max_warps[c]
        if limiter:
            out["limiter"][rows] = np.asarray(LIMITERS, dtype=object)[which]
    return pd.DataFrame(out, index=kernels.index)


def tail_ns(dur: np.ndarray, blocks: np.ndarray, slots: np.ndarray) -> np.ndarray:
    """The time the partial last wave of a launch leaves block slots empty (int64 ns, rounded half up): a grid
    of ``blocks`` on ``slots`` = SMs × active blocks per SM runs in N = ceil(blocks / slots) waves of equal
    length dur / N; the last one leaves N × slots − blocks slots empty, so it costs
    dur × (N × slots − blocks) / (N × slots) — what the launch would take less with its work in whole waves.
    0 for a grid of one wave or less (too few blocks to fill the GPU is not a tail), of whole waves, or
    with unknown slots (≤ 0)."""
    dur, blocks, slots = (np.asarray(a, dtype=np.int64) for a in (dur, blocks, slots))
    ok = (slots > 0) & (blocks > slots)
    s = np.where(ok, slots, 1)
    capacity = -(-blocks // s) * s
    empty = np.where(ok, capacity - blocks, 0)
    return (2 * dur * empty + capacity) // (2 * capacity)
