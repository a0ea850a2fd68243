"""GPU underutilization (DLProf's rule): kernels run less than half the wall clock; names the largest
non-GPU category of the resource breakdown, whose time (GPU idle by construction) is the saving.

It is a symptom: where the rule that owns its largest category's cause fired (data loading:
``dataloader_bottleneck``; the host's work in ops: ``host_bound``, or ``launch_bound``; the Python outside ops,
*Other*: ``host_bound``, whose waits count the time between ops), the recommendation points to that finding, which
says what to change and prices it by replay, rather than repeating its advice."""

from __future__ import annotations

from ...analyze.aggregation import CATEGORIES, CATEGORY_LABELS
from ..evidence import fmt_ns, longest_ranges
from ..finding import Finding
from ..registry import rule
from ..spans import gaps

ADVICE = {
    "dataloader": "Investigate the data loading pipeline: more DataLoader workers, pin_memory, prefetching, or "
                  "NVIDIA DALI for decoding and augmentation on the GPU.",
    "io": "File or network I/O blocks the step: move checkpointing and logging off the training loop, cache "
          "or prefetch the data set on local storage.",
    "cpu": "The CPU is busy in framework ops while the GPU waits: fuse small ops (torch.compile), use CUDA "
           "graphs to cut launch overhead{batch}.",
    "other": "Time outside any op or kernel: look for Python work between steps (logging, metrics, "
             "synchronizations) and add NVTX or record_function ranges to find it.",
}


#: the non-GPU category -> the rules whose finding owns its cause, first fired first
CAUSES = {"dataloader": ("dataloader_bottleneck",), "cpu": ("host_bound", "launch_bound"),
          "other": ("host_bound",)}
CAUSE_WORDS = {"dataloader": "It is time spent loading data",
               "cpu": "It is the host's work in framework ops (and the kernel launches they make) while the GPU waits",
               "other": "It is time outside any op or kernel (Python between ops and steps) while the GPU waits"}

#: batch-size advice is for training runs only (an inference batch is set by the requests)
BATCH = ", and raise the batch size so each step does more work per launch"


@rule("gpu_underutilized", gpu=True)
def gpu_underutilized(ctx, cfg):
    util = ctx.agg["gpu_utilization"]
    if not ctx.has_gpu or util is None or util >= cfg["max_utilization"] or not ctx.wall:
        return None
    parts = {c: int(ctx.agg[f"{c}_ns"] or 0) for c in ADVICE}  # the non-GPU categories
    top = max(parts, key=parts.get)
    idle = gaps(ctx.busy(kinds=("kernel",)), *ctx.window)
    n = ctx.config["evidence"]["max_items"]
    share = (f"{CATEGORY_LABELS[top]} has the highest non-GPU share at {ctx.pct(parts[top]):.1f}% "
             f"({fmt_ns(parts[top])}).")
    return Finding(
        "gpu_underutilized",
        f"The GPU is underutilized: only {100 * util:.1f}% of the aggregated wall clock "
        f"({fmt_ns(ctx.wall)}) has a kernel running.",
        f"{share} {ADVICE[top].format(batch=BATCH if ctx.is_training else '')} See {ctx.link('gpu_underutilized')}",
        parts[top],
        {"iterations": [int(i) for i in ctx.iteration_col("iteration")],
         "time_ranges": longest_ranges(*idle, n), "dominant_category": top,
         "breakdown_ns": {c: int(ctx.agg[f"{c}_ns"] or 0) for c in CATEGORIES}},
        refers={cause: f"{share} {CAUSE_WORDS[top]}: the {cause} finding says what to change and what it saves. "
                       f"See {ctx.link('gpu_underutilized')}" for cause in CAUSES.get(top, ())})
