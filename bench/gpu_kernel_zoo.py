"""A zoo of GPU work whose Tensor Core use is known by construction, for checking dlscope's Tensor Core verdicts
against Nsight Compute's counters on the GPU the device session lends (bench/gpu_session.sh).

    dlscope profile --keep-trace -o zoo.sqlite -- python bench/gpu_kernel_zoo.py --iters 5
    ncu --csv --metrics ... --log-file zoo.ncu.csv python bench/gpu_kernel_zoo.py --iters 1

Each case runs inside an NVTX range and a torch.profiler range of its own name (``zoo:<case>``), so a kernel of
the trace and a kernel of the ncu CSV can both be traced back to the case that launched it. The expectation
printed with each case is what the math libraries are documented to do, not a verdict: the counters decide.
"""

import argparse
import contextlib
import sys

import torch
import torch.nn.functional as F


def cases(device: str):
    """(name, expectation, thunk) for every case this device and torch build can run."""
    cuda = device == "cuda"
    g = torch.Generator(device=device).manual_seed(0)

    def rand(*shape, dtype=torch.float32):
        return torch.randn(*shape, device=device, generator=g).to(dtype)

    n = 2048 if cuda else 256
    a32, b32 = rand(n, n), rand(n, n)
    half = torch.float16 if cuda else torch.bfloat16
    a16, b16 = a32.to(half), b32.to(half)
    abf, bbf = a32.to(torch.bfloat16), b32.to(torch.bfloat16)

    def with_tf32(enabled: bool, thunk):
        def run():
            matmul, conv = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
            torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = enabled
            try:
                return thunk()
            finally:
                torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, conv
        return run

    yield "mm_fp32_no_tf32", "CUDA cores (FFMA)", with_tf32(False, lambda: a32 @ b32)
    yield "mm_fp32_tf32", "Tensor Cores (TF32)", with_tf32(True, lambda: a32 @ b32)
    yield "mm_fp16", "Tensor Cores (FP16)", lambda: a16 @ b16
    yield "mm_bf16", "Tensor Cores (BF16)", lambda: abf @ bbf
    yield "addmm_fp16_bias", "Tensor Cores (FP16)", lambda: F.linear(a16, b16, a16[0])
    yield "bmm_fp16", "Tensor Cores (FP16)", lambda: torch.bmm(a16.view(8, n // 8, n)[:, :, : n // 8],
                                                               b16.view(8, n // 8, n)[:, :, : n // 8])
    yield "mm_fp16_tiny", "either (16x16x16: may be a small kernel)", lambda: a16[:16, :16] @ b16[:16, :16]
    yield "gemv_fp16", "CUDA cores (matrix-vector)", lambda: a16 @ b16[:, 0]
    if cuda:
        a64, b64 = a32[:1024, :1024].double(), b32[:1024, :1024].double()
        yield "mm_fp64", "Tensor Cores (FP64 DMMA on A100/H100)", lambda: a64 @ b64
        a8 = (a32 * 8).round().clamp(-127, 127).to(torch.int8)
        b8 = (b32 * 8).round().clamp(-127, 127).to(torch.int8)
        with contextlib.suppress(Exception):
            torch._int_mm(a8, b8)
            yield "int_mm_int8", "Tensor Cores (IMMA)", lambda: torch._int_mm(a8, b8)
        with contextlib.suppress(Exception):
            fa, fb = a32.to(torch.float8_e4m3fn), b32.to(torch.float8_e4m3fn).t().contiguous().t()
            one = torch.ones((), device=device)
            torch._scaled_mm(fa, fb, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
            yield "scaled_mm_fp8", "Tensor Cores (FP8)", lambda: torch._scaled_mm(
                fa, fb, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

    x32 = rand(32, 64, 56, 56)
    w32 = rand(128, 64, 3, 3)
    yield "conv_fp32_tf32", "Tensor Cores (TF32; cuDNN allows TF32 by default)", with_tf32(
        True, lambda: F.conv2d(x32, w32, padding=1))
    yield "conv_fp32_no_tf32", "CUDA cores", with_tf32(False, lambda: F.conv2d(x32, w32, padding=1))
    x16 = x32.to(half).contiguous(memory_format=torch.channels_last)
    w16 = w32.to(half).contiguous(memory_format=torch.channels_last)
    yield "conv_fp16_nhwc", "Tensor Cores (FP16)", lambda: F.conv2d(x16, w16, padding=1)

    def conv_backward():
        x = x16.detach().requires_grad_()
        w = w16.detach().requires_grad_()
        F.conv2d(x, w, padding=1).sum().backward()
    yield "conv_fp16_nhwc_backward", "Tensor Cores (dgrad, wgrad)", conv_backward
    dw = rand(64, 1, 3, 3, dtype=half)
    yield "conv_depthwise_fp16", "CUDA cores (depthwise)", lambda: F.conv2d(x16, dw, padding=1, groups=64)

    q16 = rand(8, 16, 1024, 64, dtype=half)
    yield "sdpa_fp16", "Tensor Cores (FlashAttention / cuDNN attention)", lambda: F.scaled_dot_product_attention(
        q16, q16, q16, is_causal=True)
    qbf = q16.to(torch.bfloat16)
    yield "sdpa_bf16", "Tensor Cores", lambda: F.scaled_dot_product_attention(qbf, qbf, qbf)
    q32 = q16.float()
    yield "sdpa_fp32", "CUDA cores unless TF32", with_tf32(False, lambda: F.scaled_dot_product_attention(
        q32, q32, q32))

    yield "layer_norm_fp16", "CUDA cores", lambda: F.layer_norm(a16, (n,))
    yield "softmax_fp16", "CUDA cores", lambda: torch.softmax(a16, dim=-1)
    yield "gelu_fp16", "CUDA cores", lambda: F.gelu(a16)
    yield "sum_fp32", "CUDA cores", lambda: a32.sum(dim=0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=5, help="passes over the zoo (one dlscope step each)")
    parser.add_argument("--only", default="", help="comma-separated case names to run (default: all)")
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        import dlscope
        step = dlscope.step
    except ImportError:                       # under ncu alone dlscope need not be importable
        def step() -> None:
            return None
    wanted = {name for name in args.only.split(",") if name}
    zoo = [case for case in cases(device) if not wanted or case[0] in wanted]
    for name, expectation, _ in zoo:
        print(f"zoo:{name}\t{expectation}")
    for _ in range(args.iters):
        for name, _, thunk in zoo:
            nvtx = torch.cuda.nvtx.range(f"zoo:{name}") if device == "cuda" else contextlib.nullcontext()
            with nvtx, torch.profiler.record_function(f"zoo:{name}"):
                thunk()
        if device == "cuda":
            torch.cuda.synchronize()
        step()
    return 0


if __name__ == "__main__":
    sys.exit(main())
