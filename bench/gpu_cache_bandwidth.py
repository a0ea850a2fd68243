"""L1 and L2 read bandwidth of a GPU with a Triton kernel that only loads (ERT's idea), next to what
`dlscope characterize` measures today (``buf.expand(R, n).sum()``), for the device session (bench/gpu_session.sh).

    python bench/gpu_cache_bandwidth.py            (needs a CUDA GPU and Triton)

L1: every program re-reads a private region of REGION bytes (default loads, cached in L1), so after the first
pass its loads hit the L1 of its SM. L2: every program reads a slice of a working set of half the L2 with
``.cg`` loads (cached in L2 only, not L1), a different slice each pass. Bytes = loads issued × 4; the best of
several timed calls. Prints one line per figure.
"""

import sys
import time

import torch

try:
    import triton
    import triton.language as tl
except ImportError:
    print("gpu_cache_bandwidth.py: needs Triton", file=sys.stderr)
    sys.exit(2)


@triton.jit
def _reread_private(src, out, region_elements, passes, BLOCK: tl.constexpr):
    """Each program re-reads its own region (L1-resident after the first pass)."""
    pid = tl.program_id(0)
    base = src + pid * region_elements
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for _ in range(passes):
        for start in range(0, region_elements, BLOCK):
            acc += tl.load(base + start + offs)
    tl.store(out + pid * BLOCK + offs, acc)


@triton.jit
def _reread_shared(src, out, n_elements, passes, BLOCK: tl.constexpr):
    """Programs read the whole working set with L2-only loads, each pass a different slice per program."""
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    blocks = n_elements // BLOCK
    for p in range(passes):
        for b in range(pid, blocks, programs):
            block = (b + p * 7919) % blocks
            acc += tl.load(src + block * BLOCK + offs, cache_modifier=".cg")
    tl.store(out + pid * BLOCK + offs, acc)


def best_rate(nbytes: int, call, repeats: int = 10) -> float:
    call()
    torch.cuda.synchronize()
    best = 0.0
    for _ in range(repeats):
        torch.cuda.synchronize()
        start = time.perf_counter()
        call()
        torch.cuda.synchronize()
        best = max(best, nbytes / (time.perf_counter() - start))
    return best


def main() -> int:
    if not torch.cuda.is_available():
        print("gpu_cache_bandwidth.py: needs a CUDA GPU", file=sys.stderr)
        return 2
    props = torch.cuda.get_device_properties(0)
    sms, l2 = props.multi_processor_count, props.L2_cache_size
    print(f"{props.name}: {sms} SMs, L2 {l2} bytes")
    block = 1024
    for programs_per_sm in (1, 2, 4, 8):
        for region in (16 << 10, 32 << 10, 64 << 10):
            programs = sms * programs_per_sm
            elements = region // 4
            src = torch.ones(programs * elements, device="cuda")
            out = torch.empty(programs * block, device="cuda")
            passes = max(1, (8 << 30) // (programs * region))
            rate = best_rate(programs * region * passes, lambda: _reread_private[(programs,)](
                src, out, elements, passes, BLOCK=block, num_warps=8))
            print(f"l1 private region {region >> 10} KiB x {programs_per_sm}/SM: {rate / 1e9:10.1f} GB/s")
    working = (l2 // 2) // (4 * block) * (4 * block)
    src = torch.ones(working // 4, device="cuda")
    for programs_per_sm in (1, 2, 4, 8):
        programs = sms * programs_per_sm
        out = torch.empty(programs * block, device="cuda")
        passes = max(1, (16 << 30) // working)
        rate = best_rate(working * passes, lambda: _reread_shared[(programs,)](
            src, out, working // 4, passes, BLOCK=block, num_warps=8))
        print(f"l2 working set {working >> 20} MiB, {programs_per_sm}/SM: {rate / 1e9:10.1f} GB/s")
    big = torch.ones(1 << 30, device="cuda")                 # 4 GiB: DRAM for comparison, .cg loads
    out = torch.empty(sms * 4 * block, device="cuda")
    rate = best_rate(big.numel() * 4, lambda: _reread_shared[(sms * 4,)](big, out, big.numel(), 1, BLOCK=block,
                                                                       num_warps=8))
    print(f"dram read 4 GiB, 4/SM: {rate / 1e9:10.1f} GB/s")
    for name, elements in (("l1 (characterize)", (32 << 10) // 4), ("l2 (characterize)", (l2 // 2) // 4)):
        buf = torch.ones(elements, device="cuda")
        times = max(1, (4 << 30) // (elements * 4))
        view = buf.expand(times, elements)
        print(f"{name}: {best_rate(elements * 4 * times, view.sum, 5) / 1e9:10.1f} GB/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
