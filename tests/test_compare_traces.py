"""Hand-made before/after traces for the compare/check/report tests, with numbers computed by hand.

Base (batch 8, 2 steps of 1000 µs): per step aten::conv2d launches a Tensor Core kernel of 200 µs,
aten::relu launches an elementwise kernel of 50 µs, aten::mm launches an sgemm of 100 µs, data loading
takes 300 µs.
New (batch 16, 3 steps of 800 µs): per step aten::conv2d (batch 16) launches the same TC kernel for 400 µs,
aten::relu (batch 16) 100 µs; aten::mm is gone; aten::addmm (new) launches an sgemm of 60 µs; data loading
takes 20 µs.
Per iteration: base wall 1000 µs, new 800 µs; TC kernel 200 → 400 µs; dataloader 300 → 20 µs.
"""

from __future__ import annotations

from pathlib import Path

from trace_builder import KinetoTrace

TC_KERNEL = "volta_h884gemm_64x64_ldg8_nn"
ELEMENTWISE = "void at::native::vectorized_elementwise_kernel<4>"
SGEMM = "volta_sgemm_128x64_tn"
XSS = "<script>alert(1)</script>"
LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def base_trace(path: Path) -> Path:
    t = KinetoTrace()
    for i in range(2):
        s = 1000 * i
        t.step(i + 1, s, s + 1000)
        t.annotation(LOADER, s + 10, s + 310)
        t.op("aten::conv2d", s + 400, s + 450, **{"Input Dims": [[8, 3, 32, 32], [16, 3, 3, 3]]})
        t.launch(s + 410, s + 420, TC_KERNEL, s + 450, s + 650)
        t.op("aten::relu", s + 460, s + 480, **{"Input Dims": [[8, 16, 30, 30]]})
        t.launch(s + 465, s + 470, ELEMENTWISE, s + 650, s + 700)
        t.op("aten::mm", s + 500, s + 520, **{"Input Dims": [[64, 32], [32, 64]]})
        t.launch(s + 505, s + 510, SGEMM, s + 700, s + 800)
    return t.write(path)


def new_trace(path: Path, kernel_name: str = SGEMM) -> Path:
    t = KinetoTrace()
    for i in range(3):
        s = 800 * i
        t.step(i + 1, s, s + 800)
        t.annotation(LOADER, s + 10, s + 30)
        t.op("aten::conv2d", s + 100, s + 150, **{"Input Dims": [[16, 3, 32, 32], [16, 3, 3, 3]]})
        t.launch(s + 110, s + 120, TC_KERNEL, s + 150, s + 550)
        t.op("aten::relu", s + 160, s + 180, **{"Input Dims": [[16, 16, 30, 30]]})
        t.launch(s + 165, s + 170, ELEMENTWISE, s + 550, s + 650)
        t.op("aten::addmm", s + 200, s + 220, **{"Input Dims": [[64], [64, 32], [32, 64]]})
        t.launch(s + 205, s + 210, kernel_name, s + 650, s + 710)
    return t.write(path)


def no_steps_trace(path: Path) -> Path:
    """One op and one kernel, no ProfilerStep: the whole profile is one window."""
    t = KinetoTrace()
    t.op("aten::mm", 0, 100, **{"Input Dims": [[64, 32], [32, 64]]})
    t.launch(10, 20, SGEMM, 50, 150)
    return t.write(path)
