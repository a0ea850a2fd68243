"""The nsys backend: the user's program under ``nsys profile`` with autograd NVTX ranges, exported to SQLite."""

from __future__ import annotations

import shutil
from pathlib import Path

from ..errors import DlscopeError

TRACES = "cuda,nvtx,osrt,cudnn,cublas"
INSTALL_HINT = ("install Nsight Systems (https://developer.nvidia.com/nsight-systems, or the `nsight-systems-cli` "
                "package from NVIDIA's CUDA apt/yum repository) and put `nsys` on PATH, or use --backend torch")


def find_nsys() -> str:
    """Path of ``nsys`` on PATH, or a one-line error that says how to get it."""
    path = shutil.which("nsys")
    if path is None:
        raise DlscopeError(f"--backend nsys needs `nsys`, which is not on PATH: {INSTALL_HINT}")
    return path


def nsys_argv(nsys: str, report_base: Path, program: list[str], *, delay: float | None = None,
              duration: float | None = None, step_window: bool = True) -> list[str]:
    """``nsys profile`` around ``program``; with ``step_window`` nsys records only between the bootstrap's
    cudaProfilerStart/Stop (the step window); with ``--delay``/``--duration`` nsys times the window itself."""
    argv = [nsys, "profile", "-t", TRACES, "--export", "sqlite", "--force-overwrite", "true",
            "--sample", "none", "--cpuctxsw", "none", "-o", str(report_base)]
    if delay is not None:
        argv += ["--delay", f"{delay:g}"]
    if duration is not None:
        argv += ["--duration", f"{duration:g}"]
    if step_window and delay is None and duration is None:
        argv += ["--capture-range", "cudaProfilerApi", "--capture-range-end", "stop"]
    return [*argv, *program]


def exported_sqlite(report_base: Path) -> Path | None:
    """The SQLite file nsys exported next to the report, if it wrote one."""
    path = report_base.with_suffix(".sqlite")
    return path if path.exists() else None
