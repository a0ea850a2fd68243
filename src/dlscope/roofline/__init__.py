"""Roofline analysis: analytic op FLOPs/bytes, GPU ceilings, Nsight Compute counters, report and chart."""

from dlscope.roofline.analysis import roofline_report, roofline_tables
from dlscope.roofline.ceilings import GpuCeilings, find_ceilings, load_spec_file, resolve_ceilings
from dlscope.roofline.flops import OpCost, op_cost
from dlscope.roofline.ncu import NCU_DDL, read_ncu_csv, sniff_ncu_csv, write_ncu_kernels

__all__ = ["NCU_DDL", "GpuCeilings", "OpCost", "find_ceilings", "load_spec_file", "op_cost", "read_ncu_csv",
           "resolve_ceilings", "roofline_report", "roofline_tables", "sniff_ncu_csv", "write_ncu_kernels"]
