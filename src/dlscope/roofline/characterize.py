"""Measured roofs (seed 004's Empirical Roofline Toolkit, with torch): peak FLOP/s per precision and bandwidth
per memory level of this machine's GPU, or of its CPU when there is no GPU, written as a ``--gpu-spec`` file.

Datasheet peaks are boost-clock promises; what a GEMM or a copy reaches on the machine at hand is the roof an
op can actually hit (ERT reports ~93 % of the V100 datasheet DRAM figure). Each figure is the best of several
timed repeats after a warm-up, so a slow outlier (another process, a clock ramp) does not lower it:

* FLOP/s: an n×n×n matmul per dtype, 2·n³ FLOPs per call (``matmul_flops``). On a GPU FP32 runs with TF32
  off (CUDA cores) and again with TF32 on (Tensor Cores); FP16/BF16 run on Tensor Cores; FP8 with
  ``torch._scaled_mm`` on CC ≥ 8.9. FP64 goes to ``fp64_tensor_flops`` where cuBLAS uses DMMA (CC 8.0, 9.0,
  10.0), else ``fp64_flops``.
* Bandwidth: ``dst.copy_(src)`` moves 2 × the buffer's bytes (one read, one write). Device memory: a buffer
  of at least 4 × the last-level cache. ``l2``: a buffer of a quarter of the GPU's L2 (on a CPU: of its
  last-level cache), so source and destination together fill half of it and stay resident while copied
  repeatedly.
* Not measured (``skipped`` says why): L1, FMA vs no-FMA and CUDA-core FP16 ceilings need a micro-kernel
  whose working set and instruction mix torch calls cannot pin (a Triton or CUDA kernel: seed 004's ERT).
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from typing import Any

#: A measurement repeats until it has this many timed calls and at least MIN_SECONDS of them.
REPEATS = 5
MIN_SECONDS = 0.2
#: Matmul sizes: large enough to reach the math roof on a GPU, small enough for a CI CPU.
GPU_MATMUL_N = 8192
CPU_MATMUL_N = 512
#: The device-memory buffer is at least this many bytes and 4 × the last-level cache.
MIN_DRAM_BYTES = {"cuda": 1 << 30, "cpu": 64 << 20}
#: CUDA compute capabilities whose FP64 GEMMs run on Tensor Cores (DMMA).
FP64_TENSOR_CC = {(8, 0), (9, 0), (10, 0)}


def matmul_flops(n: int) -> int:
    """FLOPs of one n×n by n×n matrix product: n³ multiply-adds, 2 FLOPs each."""
    return 2 * n**3


def copy_bytes(nbytes: int) -> int:
    """Bytes a ``dst.copy_(src)`` of an nbytes buffer moves: each byte read once and written once."""
    return 2 * nbytes


def _best_rate(work: float, step: Callable[[], None], sync: Callable[[], None],
               repeats: int = REPEATS, min_seconds: float = MIN_SECONDS) -> tuple[float, int]:
    """(best work/s over the timed calls, calls timed): the fastest call is the one least disturbed."""
    step()
    sync()                                               # warm-up: allocation, kernel selection, clocks
    best, calls, spent = 0.0, 0, 0.0
    while calls < repeats or spent < min_seconds:
        sync()
        start = time.perf_counter()
        step()
        sync()
        elapsed = time.perf_counter() - start
        spent += elapsed
        calls += 1
        if elapsed > 0:
            best = max(best, work / elapsed)
        if calls >= 1000:
            break
    return best, calls


def _sysfs_cache_bytes() -> int | None:
    """The largest data/unified cache of CPU 0 from /sys (Linux), in bytes."""
    from pathlib import Path

    best = 0
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            if (index / "type").read_text().strip() == "Instruction":
                continue
            text = (index / "size").read_text().strip().upper()
        except OSError:
            continue
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            best = max(best, int(digits) * scale)
    return best or None


def _cache_bytes(device: str, torch: Any) -> int | None:
    """The last-level cache of the device: the GPU's L2, or the CPU's L3 (else L2), in bytes."""
    if device == "cuda":
        return int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0)) or None
    for name in ("SC_LEVEL3_CACHE_SIZE", "SC_LEVEL2_CACHE_SIZE"):
        try:
            size = os.sysconf(name)
        except (ValueError, OSError, AttributeError):
            continue
        if size and size > 0:
            return int(size)
    return _sysfs_cache_bytes()


def _flops(device: str, torch: Any, n: int, sync, repeats: int) -> tuple[dict[str, float], dict, dict[str, str]]:
    figures: dict[str, float] = {}
    how: dict[str, dict] = {}
    skipped: dict[str, str] = {}
    runs: list[tuple[str, Any, bool | None]] = [("fp64", torch.float64, None), ("fp32", torch.float32, False)]
    if device == "cuda":
        cc = torch.cuda.get_device_capability(0)
        runs[0] = ("fp64_tensor" if cc in FP64_TENSOR_CC else "fp64", torch.float64, None)
        runs += [("tf32_tensor", torch.float32, True), ("fp16_tensor", torch.float16, None),
                 ("bf16_tensor", torch.bfloat16, None)]
    fields = {"fp64": "fp64_flops", "fp64_tensor": "fp64_tensor_flops", "fp32": "fp32_flops",
              "tf32_tensor": "tf32_tensor_flops_dense", "fp16_tensor": "fp16_tensor_flops_dense",
              "bf16_tensor": "bf16_tensor_flops_dense", "fp8_tensor": "fp8_tensor_flops_dense"}
    for name, dtype, tf32 in runs:
        a = torch.randn(n, n, device=device).to(dtype)
        b = torch.randn(n, n, device=device).to(dtype)
        previous = torch.backends.cuda.matmul.allow_tf32 if device == "cuda" else None
        if tf32 is not None and device == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = tf32
        try:
            rate, calls = _best_rate(matmul_flops(n), partial(torch.mm, a, b), sync, repeats)
        finally:
            if previous is not None:
                torch.backends.cuda.matmul.allow_tf32 = previous
        figures[fields[name]] = rate
        how[fields[name]] = {"kernel": f"torch.mm {n}x{n}x{n} {str(dtype).removeprefix('torch.')}"
                                       + ("" if tf32 is None or device != "cuda" else f", allow_tf32={tf32}"),
                             "flops_per_call": matmul_flops(n), "calls": calls}
        del a, b
    if device == "cuda" and torch.cuda.get_device_capability(0) >= (8, 9) and hasattr(torch, "float8_e4m3fn"):
        try:
            a = torch.randn(n, n, device=device).to(torch.float8_e4m3fn)
            b = torch.randn(n, n, device=device).to(torch.float8_e4m3fn).t()
            one = torch.tensor(1.0, device=device)
            step = partial(torch._scaled_mm, a, b, one, one, out_dtype=torch.bfloat16)
            rate, calls = _best_rate(matmul_flops(n), step, sync, repeats)
            figures["fp8_tensor_flops_dense"] = rate
            how["fp8_tensor_flops_dense"] = {"kernel": f"torch._scaled_mm {n}x{n}x{n} e4m3", "calls": calls,
                                             "flops_per_call": matmul_flops(n)}
        except (RuntimeError, TypeError) as exc:       # torch builds without FP8 GEMMs for this GPU
            skipped["fp8_tensor_flops_dense"] = f"torch._scaled_mm failed: {exc}"
    elif device == "cuda":
        skipped["fp8_tensor_flops_dense"] = "FP8 Tensor Cores need compute capability 8.9 or later"
    return figures, how, skipped


def _bandwidth(device: str, torch: Any, sync, repeats: int, dram_bytes: int | None) -> tuple[dict, dict, dict]:
    figures: dict[str, float] = {}
    how: dict[str, dict] = {}
    skipped: dict[str, str] = {}
    cache = _cache_bytes(device, torch)
    big = dram_bytes or max(MIN_DRAM_BYTES[device], 4 * (cache or 0))
    sizes = {"dram_bandwidth_bytes_per_s": big}
    if cache:
        sizes["l2_bandwidth_bytes_per_s"] = cache // 4        # source and destination: half the cache
    else:
        skipped["l2_bandwidth_bytes_per_s"] = "the cache size is unknown on this machine"
    for field_name, nbytes in sizes.items():
        elements = max(1, nbytes // 4)
        src = torch.ones(elements, dtype=torch.float32, device=device)
        dst = torch.empty_like(src)
        rate, calls = _best_rate(copy_bytes(elements * 4), partial(dst.copy_, src), sync, repeats)
        figures[field_name] = rate
        how[field_name] = {"kernel": f"dst.copy_(src) of {elements * 4} bytes", "calls": calls,
                           "bytes_per_call": copy_bytes(elements * 4)}
        del src, dst
    skipped["l1_bandwidth_bytes_per_s"] = ("torch calls cannot keep a working set in one SM's (or core's) L1; "
                                           "needs a Triton/CUDA micro-kernel (ERT)")
    skipped["fma_vs_no_fma"] = "needs a micro-kernel with a chosen instruction mix (ERT)"
    skipped["fp16_cuda_core_flops"] = "needs a micro-kernel: torch half-precision math is a GEMM or memory bound"
    return figures, how, skipped


def characterize(device: str | None = None, *, matmul_n: int | None = None, repeats: int = REPEATS,
                 dram_bytes: int | None = None, threads: int | None = None) -> dict:
    """Measure this machine and return a ``--gpu-spec`` entry (the shape of a gpu_specs.json entry) with a
    ``measured`` block saying how each figure was taken. ``device``: "cuda", "cpu", or None (cuda when
    torch sees a GPU). ``threads``: CPU threads torch may use (default: torch's; 1 gives per-core roofs, which
    a busy machine disturbs least)."""
    import torch

    from dlscope.errors import DlscopeError

    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cuda", "cpu"):
        raise DlscopeError(f"characterize measures 'cuda' or 'cpu', not {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise DlscopeError("--device cuda: torch sees no GPU on this machine")
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    n = matmul_n or (GPU_MATMUL_N if device == "cuda" else CPU_MATMUL_N)
    previous_threads = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        flops, how_f, skipped_f = _flops(device, torch, n, sync, repeats)
        bandwidth, how_b, skipped_b = _bandwidth(device, torch, sync, repeats, dram_bytes)
        used_threads = torch.get_num_threads()
    finally:
        torch.set_num_threads(previous_threads)
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        name, cc, sms = props.name, f"{props.major}.{props.minor}", props.multi_processor_count
    else:
        from dlscope.system import this_machine

        name, cc, sms = this_machine().get("cpu_model") or platform.processor() or "CPU", None, None
    entry: dict[str, Any] = {"id": f"measured-{device}", "name": name, "name_strings": [name],
                             "compute_capability": cc, "sm_count": sms, **flops, **bandwidth}
    entry["measured"] = {
        "method": "dlscope characterize: best of repeated torch calls after a warm-up (seed 004, ERT)",
        "device": device, "torch": torch.__version__, "threads": used_threads if device == "cpu" else None,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "how": {**how_f, **how_b}, "skipped": {**skipped_f, **skipped_b},
    }
    return entry
