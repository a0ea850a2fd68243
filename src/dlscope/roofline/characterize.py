"""Measured roofs (seed 004's Empirical Roofline Toolkit, with torch): peak FLOP/s per precision and bandwidth
per memory level of this machine's GPU, or of its CPU when there is no GPU, written as a ``--gpu-spec`` file.

Datasheet peaks are boost-clock promises; what a GEMM or a copy reaches on the machine at hand is the roof an
op can actually hit (ERT reports ~93 % of the V100 datasheet DRAM figure). Each figure is the best of several
timed repeats after a warm-up, so a slow outlier (another process, a clock ramp) does not lower it:

* FLOP/s: an n×n×n matmul per dtype, 2·n³ FLOPs per call (``matmul_flops``). On a GPU FP32 runs with TF32
  off (CUDA cores) and again with TF32 on (Tensor Cores); FP16/BF16 run on Tensor Cores; FP8 with
  ``torch._scaled_mm`` on CC ≥ 8.9. FP64 goes to ``fp64_tensor_flops`` where cuBLAS uses DMMA (CC 8.0, 9.0,
  10.0), else ``fp64_flops``.
* Elementwise (CUDA cores / CPU vector units): ERT's FMA kernel, ``CHAINS`` independent chains of ``ITERS``
  dependent ``y = y·a + b`` per element, fused into one kernel by ``torch.compile`` (Triton on a GPU, C++ on a
  CPU) so the chains run in registers; FP16/BF16 give the CUDA-core half-precision roof, and the same chains of
  ``y = y + b`` (1 FLOP each) the no-FMA ceiling of FP32/FP64 (``elementwise_flops``).
* Bandwidth per cache level: on a CPU a working set of half the level (sizes from /sys or sysconf) re-read many
  times in one call, ``buf.expand(R, n).sum()`` (``reread_bytes``); on a GPU Triton kernels that only load
  (``cache_kernels``: private 32 KiB regions per program for L1, half the L2 with L1-bypassing loads for L2), since
  torch's reduction is bound by its arithmetic there. A cache level measured at or below device memory is left
  out (``plausible_bandwidth``). Device memory: ``dst.copy_(src)`` of a buffer of at least 4 × the last-level
  cache moves 2 × its bytes.
"""

from __future__ import annotations

import importlib
import os
import platform
import time
from collections.abc import Callable
from contextlib import contextmanager
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
#: Cache re-reads move at least this many bytes per call (so launch and dispatch costs are negligible).
REREAD_BYTES = {"cpu": 256 << 20}
#: Elementwise micro-kernel: independent chains per element (instruction-level parallelism hides the FMA
#: latency) × dependent operations per chain; elements per call.
CHAINS, ITERS = 8, 32
ELEMENTWISE_N = {"cuda": 1 << 24, "cpu": 1 << 14}


def matmul_flops(n: int) -> int:
    """FLOPs of one n×n by n×n matrix product: n³ multiply-adds, 2 FLOPs each."""
    return 2 * n**3


def copy_bytes(nbytes: int) -> int:
    """Bytes a ``dst.copy_(src)`` of an nbytes buffer moves: each byte read once and written once."""
    return 2 * nbytes


def reread_bytes(nbytes: int, times: int) -> int:
    """Bytes ``buf.expand(times, n).sum()`` reads: the nbytes working set, ``times`` over."""
    return nbytes * times


def elementwise_flops(n: int, fma: bool) -> int:
    """FLOPs of one elementwise micro-kernel call over n elements: CHAINS × ITERS operations each, an FMA 2
    FLOPs, an ADD 1 (the chains' setup and final sum, 2·CHAINS − 1 more operations, are not counted: a lower
    bound by under 6 %)."""
    return n * CHAINS * ITERS * (2 if fma else 1)


def fma_chains(x):
    """ERT's FMA kernel: CHAINS independent chains of ITERS dependent ``y·a + b`` per element."""
    ys = [x + float(i) for i in range(CHAINS)]
    for _ in range(ITERS):
        ys = [y * 0.999 + 0.001 for y in ys]
    return sum(ys)


def add_chains(x):
    """The no-FMA kernel: the same chains of ``y + b``, one FLOP per instruction."""
    ys = [x + float(i) for i in range(CHAINS)]
    for _ in range(ITERS):
        ys = [y + 0.001 for y in ys]
    return sum(ys)


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


def cpu_cache_levels(root: str = "/sys/devices/system/cpu/cpu0/cache") -> dict[str, int]:
    """Data (or unified) cache sizes of CPU 0 by level ("l1", "l2", "l3"), in bytes: Linux's /sys, else
    sysconf; levels the OS does not report are left out."""
    from pathlib import Path

    levels: dict[str, int] = {}
    for index in sorted(Path(root).glob("index*")):
        try:
            if (index / "type").read_text().strip() == "Instruction":
                continue
            level = int((index / "level").read_text().strip())
            text = (index / "size").read_text().strip().upper()
        except (OSError, ValueError):
            continue
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit() and int(digits) > 0:
            levels[f"l{level}"] = int(digits) * scale
    if not levels:
        for key, name in (("l1", "SC_LEVEL1_DCACHE_SIZE"), ("l2", "SC_LEVEL2_CACHE_SIZE"),
                          ("l3", "SC_LEVEL3_CACHE_SIZE")):
            try:
                size = os.sysconf(name)
            except (ValueError, OSError, AttributeError):
                continue
            if size and size > 0:
                levels[key] = int(size)
    return levels


def _cache_levels(device: str, torch: Any) -> dict[str, int]:
    """Cache sizes by level: the GPU's L2 (and no L1 size: torch does not report it), or the CPU's levels."""
    if device == "cuda":
        l2 = int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0))
        return {"l2": l2} if l2 > 0 else {}
    return cpu_cache_levels()


def _cache_bytes(device: str, torch: Any) -> int | None:
    """The last-level cache of the device: the GPU's L2, or the CPU's L3 (else L2), in bytes."""
    levels = _cache_levels(device, torch)
    return max(levels.values()) if levels else None


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


def plausible_bandwidth(figures: dict[str, float], skipped: dict[str, str]) -> None:
    """Move to ``skipped`` every cache level measured at or below the device memory's bandwidth: a cache is
    faster than the memory behind it, so such a figure timed the kernel's arithmetic, not the cache."""
    dram = figures.get("dram_bandwidth_bytes_per_s")
    if not dram:
        return
    for level in ("l1", "l2", "l3"):
        field_name = f"{level}_bandwidth_bytes_per_s"
        rate = figures.get(field_name)
        if rate is not None and rate <= dram:
            del figures[field_name]
            skipped[field_name] = (f"measured {rate / 1e9:.1f} GB/s, not above the device memory's "
                                   f"{dram / 1e9:.1f} GB/s: the kernel was not bound by the {level.upper()}")


def _gpu_cache_calls(torch: Any, levels: dict[str, int], skipped: dict[str, str]) -> dict[str, tuple]:
    """{level: (call, bytes per call, description)} of the Triton cache kernels; none without Triton."""
    try:
        from . import cache_kernels
    except ImportError as exc:
        for level in ("l1", "l2"):
            skipped[f"{level}_bandwidth_bytes_per_s"] = f"needs Triton for a load-only kernel ({exc})"
        return {}
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    calls = {"l1": cache_kernels.l1_reread(torch, sms)}
    if "l2" in levels:
        calls["l2"] = cache_kernels.l2_reread(torch, sms, levels["l2"])
    else:
        skipped["l2_bandwidth_bytes_per_s"] = "the L2 size is not reported on this machine"
    return calls


def _cpu_cache_calls(torch: Any, levels: dict[str, int], skipped: dict[str, str]) -> dict[str, tuple]:
    """{level: (call, bytes per call, description)}: half of each level re-read by ``expand().sum()``."""
    calls: dict[str, tuple] = {}
    for level in ("l1", "l2", "l3"):
        if level not in levels:
            skipped[f"{level}_bandwidth_bytes_per_s"] = f"the {level.upper()} size is not reported on this machine"
            continue
        elements = max(1, (levels[level] // 2) // 4)
        times = max(1, REREAD_BYTES["cpu"] // (elements * 4))
        view = torch.ones(elements, dtype=torch.float32).expand(times, elements)
        calls[level] = (view.sum, reread_bytes(elements * 4, times),
                        f"buf.expand({times}, {elements}).sum(): a {elements * 4}-byte working set re-read "
                        f"{times} times")
    return calls


def _bandwidth(device: str, torch: Any, sync, repeats: int, dram_bytes: int | None) -> tuple[dict, dict, dict]:
    figures: dict[str, float] = {}
    how: dict[str, dict] = {}
    skipped: dict[str, str] = {}
    levels = _cache_levels(device, torch)
    big = dram_bytes or max(MIN_DRAM_BYTES[device], 4 * (max(levels.values()) if levels else 0))
    cache_calls = (_gpu_cache_calls if device == "cuda" else _cpu_cache_calls)(torch, levels, skipped)
    for level, (call, nbytes, kernel) in cache_calls.items():
        field_name = f"{level}_bandwidth_bytes_per_s"
        rate, calls = _best_rate(nbytes, call, sync, repeats)
        figures[field_name] = rate
        how[field_name] = {"kernel": kernel, "calls": calls, "bytes_per_call": nbytes}
    del cache_calls
    elements = max(1, big // 4)
    src = torch.ones(elements, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    rate, calls = _best_rate(copy_bytes(elements * 4), partial(dst.copy_, src), sync, repeats)
    figures["dram_bandwidth_bytes_per_s"] = rate
    how["dram_bandwidth_bytes_per_s"] = {"kernel": f"dst.copy_(src) of {elements * 4} bytes", "calls": calls,
                                         "bytes_per_call": copy_bytes(elements * 4)}
    del src, dst
    plausible_bandwidth(figures, skipped)
    return figures, how, skipped


def _elementwise(device: str, torch: Any, sync, repeats: int, n: int | None) -> tuple[dict, dict, dict]:
    """FMA and no-FMA FP32/FP64 and FMA FP16/BF16 rates of the compiled elementwise chains."""
    figures: dict[str, float] = {}
    how: dict[str, dict] = {}
    skipped: dict[str, str] = {}
    n = n or ELEMENTWISE_N[device]
    runs = [("fp32_elementwise_fma_flops", torch.float32, True), ("fp32_no_fma_flops", torch.float32, False),
            ("fp64_elementwise_fma_flops", torch.float64, True), ("fp64_no_fma_flops", torch.float64, False),
            ("fp16_flops", torch.float16, True), ("bf16_flops", torch.bfloat16, True)]
    for field_name, dtype, fma in runs:
        half = dtype in (torch.float16, torch.bfloat16)
        try:
            kernel = torch.compile(fma_chains if fma else add_chains, fullgraph=True, dynamic=False)
            x = torch.rand(n, dtype=dtype, device=device)
            with _half_math(torch, device == "cuda" and half) as kept:
                rate, calls = _best_rate(elementwise_flops(n, fma), partial(kernel, x), sync, repeats)
        except Exception as exc:  # no C++ compiler or Triton, an unsupported dtype: this figure is skipped
            skipped[field_name] = f"torch.compile of the elementwise kernel failed: {type(exc).__name__}: {exc}"
            continue
        figures[field_name] = rate
        how[field_name] = {"kernel": f"torch.compile'd {CHAINS} chains x {ITERS} "
                                     f"{'y*a+b (FMA)' if fma else 'y+b (no FMA)'} per element, "
                                     f"{n} {str(dtype).removeprefix('torch.')} elements",
                           "flops_per_call": elementwise_flops(n, fma), "calls": calls}
        if half:
            how[field_name]["math_in"] = str(dtype).removeprefix("torch.") if kept else "float32 (Inductor upcast)"
    return figures, how, skipped


@contextmanager
def _half_math(torch: Any, wanted: bool):
    """On a GPU, keep Inductor's half-precision math in FP16/BF16 (its Triton code upcasts to FP32 by default),
    so the chains can run as packed half2 FMAs; yields whether the math stays in half precision."""
    if not wanted:
        yield False
        return
    try:
        config = importlib.import_module("torch._inductor.config")
        patch = config.patch({"triton.codegen_upcast_to_fp32": False})
    except (AttributeError, KeyError, ImportError):        # an Inductor without the switch: it upcasts
        yield False
        return
    with patch:
        yield True


def characterize(device: str | None = None, *, matmul_n: int | None = None, repeats: int = REPEATS,
                 dram_bytes: int | None = None, threads: int | None = None, elementwise: bool = True,
                 elementwise_n: int | None = None) -> dict:
    """Measure this machine and return a ``--gpu-spec`` entry (the shape of a gpu_specs.json entry) with a
    ``measured`` block saying how each figure was taken. ``device``: "cuda", "cpu", or None (cuda when
    torch sees a GPU). ``threads``: CPU threads torch may use (default: torch's; 1 gives per-core roofs, which
    a busy machine disturbs least). ``elementwise``: also the compiled FMA / no-FMA / FP16 kernels (each
    compiles for a few seconds)."""
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
        if elementwise:
            scalar, how_e, skipped_e = _elementwise(device, torch, sync, repeats, elementwise_n)
        else:
            scalar, how_e = {}, {}
            skipped_e = {f: "not asked for (--no-elementwise)" for f in
                         ("fp32_no_fma_flops", "fp64_no_fma_flops", "fp16_flops", "bf16_flops")}
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
                             "compute_capability": cc, "sm_count": sms, **flops, **bandwidth,
                             **{k: v for k, v in scalar.items() if not k.endswith("_elementwise_fma_flops")}}
    entry["measured"] = {
        "method": "dlscope characterize: best of repeated torch calls after a warm-up (seed 004, ERT)",
        "device": device, "torch": torch.__version__, "threads": used_threads if device == "cpu" else None,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "how": {**how_f, **how_b, **how_e}, "skipped": {**skipped_f, **skipped_b, **skipped_e},
        "elementwise_fma_flops": {k.removesuffix("_elementwise_fma_flops"): v for k, v in scalar.items()
                                  if k.endswith("_elementwise_fma_flops")},
    }
    return entry
