"""The roofline's cost of an op node without a model of its own: the modelled ops it called, summed.

An autograd node (``autograd::engine::evaluate_function: ConvolutionBackward0``), a custom op or an annotation
that stands for an op has no FLOP model, but the ops it calls have (``aten::convolution_backward``,
``aten::mm``). As MFU counts them (an op with a model counts; the ops nested in it do not), their FLOPs and bytes
summed over the node's calls place the node under the roof of the family and precision carrying most of those
FLOPs. Without it the roofline left out every backward node: 70 % of the GPU time of an FP32 CNN training step
on an H200.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .analysis import NESTED_COLUMNS as COLUMNS
from .analysis import node_cost
from .frames import distinct_rows, outermost


def nested_node_costs(ops: pd.DataFrame) -> pd.DataFrame:
    """Per op node (index ``node_id``) whose own calls have no model but call ops that have: ``roofline_flops``
    and ``roofline_bytes`` (sums over the calls in ``ops``), ``roofline_precision`` and ``roofline_family``
    (those of the nested work with the most FLOPs; without FLOPs, the most bytes).

    ``ops``: op calls with their arguments completed (``completion.completed_arguments``): ``op_id``,
    ``parent_id``, ``root_id``, ``depth``, ``node_id``, ``name``, ``input_shapes``, ``input_dtypes``,
    ``concrete_inputs``, ``output_shape``, ``data_type`` (when known) and ``kernel_count`` (inclusive). A node is
    costed only where the ops counted beneath it launched all of its kernels."""
    empty = pd.DataFrame({c: pd.Series(dtype=object) for c in COLUMNS}, index=pd.Index([], name="node_id"))
    if ops.empty:
        return empty
    if "data_type" not in ops.columns:
        ops = ops.assign(data_type=None)
    keys = ["name", "input_shapes", "input_dtypes", "concrete_inputs", "data_type", "output_shape"]
    codes, uniques = distinct_rows(ops, keys)
    costs = [node_cost(*(None if pd.isna(v) else v for v in key)) for key in uniques]
    has = np.array([c is not None for c in costs], dtype=bool)[codes]
    ids = ops["op_id"].to_numpy(np.int64)
    root_pos = pd.Index(ids).get_indexer(ops["root_id"].to_numpy(np.int64))
    # nested work only: an op that counts (no enclosing op has a model) and is not its node's root, whose root
    # (its op node's call) has no model
    counted = outermost(has, ops) & (root_pos >= 0) & (root_pos != np.arange(len(ops)))
    counted[counted] &= ~has[root_pos[counted]]
    if not counted.any():
        return empty
    # ...and only where those ops launched every kernel beneath the node: a CUDA graph replayed under an autograd
    # Function (``Graphed``) is launched by the node itself, and the copies beside it say nothing of its work
    kernels = ops["kernel_count"].fillna(0).to_numpy(np.int64)
    node = ops["node_id"].to_numpy(np.int64)
    own = root_pos == np.arange(len(ops))
    launched = pd.Series(kernels[own]).groupby(node[own]).sum()
    beneath = pd.Series(kernels[counted]).groupby(node[root_pos[counted]]).sum()
    whole = beneath.reindex(launched.index).fillna(-1).to_numpy(np.int64) == launched.to_numpy(np.int64)
    counted &= np.isin(node[np.maximum(root_pos, 0)], launched.index.to_numpy()[whole])
    if not counted.any():
        return empty
    rows = np.flatnonzero(counted)
    per_key = pd.DataFrame([(c.flops, c.bytes, c.precision or "", c.family) if c else (0, 0, "", "")
                            for c in costs], columns=["flops", "bytes", "precision", "family"])
    work = per_key.iloc[codes[rows]].reset_index(drop=True)
    work["node_id"] = node[root_pos[rows]]
    totals = work.groupby("node_id")[["flops", "bytes"]].sum()
    by_kind = work.groupby(["node_id", "family", "precision"], as_index=False)[["flops", "bytes"]].sum()
    main = by_kind.sort_values(["node_id", "flops", "bytes"], ascending=[True, False, False]).drop_duplicates(
        "node_id").set_index("node_id")
    return pd.DataFrame({"roofline_flops": totals["flops"].astype(np.int64),
                         "roofline_bytes": totals["bytes"].astype(np.int64),
                         "roofline_precision": main["precision"].reindex(totals.index).replace("", None),
                         "roofline_family": main["family"].reindex(totals.index)})
