"""Roofline analysis: analytic op FLOPs/bytes, GPU ceilings, Nsight Compute counters, report and chart.

The names below are imported on first use (PEP 562), so registering ``dlscope characterize`` does not load
pandas for every command."""

from __future__ import annotations

import importlib
from typing import Any

_HOMES = {
    "roofline_report": "analysis", "roofline_tables": "analysis",
    "GpuCeilings": "ceilings", "find_ceilings": "ceilings", "load_spec_file": "ceilings",
    "resolve_ceilings": "ceilings",
    "OpCost": "flops", "op_cost": "flops",
    "NCU_DDL": "ncu", "read_ncu_csv": "ncu", "sniff_ncu_csv": "ncu", "write_ncu_kernels": "ncu",
}

__all__ = ["NCU_DDL", "GpuCeilings", "OpCost", "find_ceilings", "load_spec_file", "op_cost", "read_ncu_csv",
           "resolve_ceilings", "roofline_report", "roofline_tables", "sniff_ncu_csv", "write_ncu_kernels"]


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
