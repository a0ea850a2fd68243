"""GPU L1 and L2 read bandwidth with Triton kernels that only load (ERT's cache kernels), for
``dlscope characterize``.

torch has no kernel that is bound by cache bandwidth: ``buf.expand(R, n).sum()`` (the CPU's method) reads a
cache-resident buffer but is bound by the reduction's arithmetic, 2.8 TB/s for both L1 and L2 on an H200, below its
4.2 TB/s HBM (bench/README.md, 2026-11-27). These kernels issue nothing but loads and one add per element:

* L1: each program re-reads a private region of ``L1_REGION`` bytes with default (L1-cached) loads, so after the
  first pass its loads hit the L1 of its SM.
* L2: the programs read a working set of half the L2 with ``.cg`` loads (cached in L2, not in L1), each pass a
  different slice per program.

Bytes counted = loads issued × 4 (float32). Importing this module needs Triton (a GPU build of torch has it).
"""

from __future__ import annotations

from typing import Any

import triton
import triton.language as tl

#: Elements one program loads per step (4 KiB of float32), and 8 warps per program.
BLOCK = 1024
WARPS = 8
#: Bytes each program re-reads for L1 (measured plateau on an H200: 16-32 KiB at 2-8 programs per SM ≈ 29 TB/s).
L1_REGION = 32 << 10
#: Programs per SM: L1 4 (two regions fit any SM's L1 from V100 on), L2 8 (enough loads in flight).
L1_PROGRAMS_PER_SM, L2_PROGRAMS_PER_SM = 4, 8
#: Bytes loaded per timed call.
L1_BYTES_PER_CALL, L2_BYTES_PER_CALL = 8 << 30, 16 << 30


@triton.jit
def _reread_private(src, out, region_elements, passes, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    base = src + pid * region_elements
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for _ in range(passes):
        for start in range(0, region_elements, BLOCK):
            acc += tl.load(base + start + offs)
    tl.store(out + pid * BLOCK + offs, acc)


@triton.jit
def _reread_shared(src, out, n_blocks, passes, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for p in range(passes):
        for b in range(pid, n_blocks, programs):
            block = (b + p * 7919) % n_blocks
            acc += tl.load(src + block * BLOCK + offs, cache_modifier=".cg")
    tl.store(out + pid * BLOCK + offs, acc)


def l1_reread(torch: Any, sms: int) -> tuple[Any, int, str]:
    """(call, bytes per call, description) of the L1 kernel on an SM count."""
    programs = sms * L1_PROGRAMS_PER_SM
    elements = L1_REGION // 4
    src = torch.ones(programs * elements, device="cuda")
    out = torch.empty(programs * BLOCK, device="cuda")
    passes = max(1, L1_BYTES_PER_CALL // (programs * L1_REGION))

    def call() -> None:
        _reread_private[(programs,)](src, out, elements, passes, BLOCK=BLOCK, num_warps=WARPS)

    return (call, programs * L1_REGION * passes,
            f"Triton loads: {programs} programs each re-reading its own {L1_REGION} bytes {passes} times")


def l2_reread(torch: Any, sms: int, l2_bytes: int) -> tuple[Any, int, str]:
    """(call, bytes per call, description) of the L2 kernel: half the L2 re-read with L1-bypassing loads."""
    programs = sms * L2_PROGRAMS_PER_SM
    blocks = max(1, (l2_bytes // 2) // (4 * BLOCK))
    src = torch.ones(blocks * BLOCK, device="cuda")
    out = torch.empty(programs * BLOCK, device="cuda")
    working = blocks * BLOCK * 4
    passes = max(1, L2_BYTES_PER_CALL // working)

    def call() -> None:
        _reread_shared[(programs,)](src, out, blocks, passes, BLOCK=BLOCK, num_warps=WARPS)

    return (call, working * passes,
            f"Triton .cg loads: {programs} programs re-reading a {working}-byte working set {passes} times")
