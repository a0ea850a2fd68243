"""Unfused optimizer: the optimizer step launches many small per-parameter elementwise kernels.

A fused or foreach optimizer launches a handful of multi-tensor kernels instead. The saving is the step's
CPU time beyond what launching one kernel per distinct kernel name would cost (at the step's mean launch
time), capped per iteration by the GPU's idle time in that iteration: CPU time only turns into wall
clock when the GPU is waiting somewhere.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..context import compile_any, names_matching
from ..evidence import fmt_ns, iterations_of, longest_ranges, node_ids, top_by
from ..finding import Finding
from ..registry import rule
from ..spans import gaps_in_windows


@rule("unfused_optimizer", gpu=True)
def unfused_optimizer(ctx, cfg):
    is_step = ctx.names_match("ops", cfg["step_op_patterns"])
    if not is_step.any():
        return None
    ops = ctx.ops
    steps = ops[is_step]
    fused = compile_any(cfg["fused_patterns"])
    k, api = ctx.kernel_facts, ctx.api_calls.set_index("api_id")
    its = ctx.iterations
    gs, ge, window = gaps_in_windows(ctx.busy(), its["start"].to_numpy(np.int64), its["end"].to_numpy(np.int64))
    idle = np.bincount(window, weights=ge - gs, minlength=len(its)).astype(np.int64)
    idle_by_it = dict(zip(its["iteration"].astype(int).tolist(), idle.tolist()))
    total_kernels, saving, step_kernels, rows = 0, 0, [], []
    for step in steps.itertuples(index=False):
        inner = ops[(ops["pid"] == step.pid) & (ops["tid"] == step.tid) & (ops["start"] >= step.start)
                    & (ops["end"] <= step.end)]
        sk = k[k["op_id"].isin(inner["op_id"])]
        if names_matching(inner["name"], fused).any() or names_matching(sk["name"], fused).any():
            return None
        total_kernels += len(sk)
        step_kernels.append(sk)
        launch = api.reindex(sk["api_id"])
        mean_launch = float((launch["end"] - launch["start"]).mean()) if len(sk) else 0.0
        needed = sk["name"].nunique() * mean_launch
        cpu_excess = max(0.0, step.dur - needed)
        saving += int(min(cpu_excess, idle_by_it.get(int(step.iteration), 0)))
        rows.append(step)
    per_step = total_kernels / len(steps)
    if per_step < cfg["min_kernels_per_step"]:
        return None
    allk = pd.concat(step_kernels)
    n = ctx.config["evidence"]["max_items"]
    cpu = int(steps["dur"].sum())
    return Finding(
        "unfused_optimizer",
        f"The optimizer step ({steps['name'].iloc[0]}) launches {per_step:,.0f} kernels per iteration, mostly "
        f"small elementwise ones (median {fmt_ns(float(np.median(allk['dur'])) if len(allk) else 0)}); it "
        f"takes {fmt_ns(cpu / len(steps))} of CPU time per step.",
        "Use a fused or multi-tensor optimizer: torch.optim.AdamW(..., fused=True) or foreach=True (SGD, Adam), "
        f"apex.optimizers.FusedAdam, or torch.compile the optimizer step. See {ctx.link('unfused_optimizer')}",
        saving,
        {"node_ids": node_ids(ctx, steps["op_id"]), "kernels": top_by(allk, "name", "dur", n),
         "iterations": iterations_of(steps["iteration"]),
         "time_ranges": longest_ranges(steps["start"], steps["end"], n),
         "kernels_per_step": round(per_step, 1), "step_cpu_ns": cpu})
