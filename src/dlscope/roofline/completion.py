"""What a trace left out of an op's arguments, read from the ops around the call.

Traces of torch < 2.1 record tensor shapes but no scalar arguments (``Concrete Inputs``), so a call alone tells
neither a convolution's stride and padding nor which gradients a fused backward computed. The ops around it do:

* a forward convolution's output has the shape of the gradient its backward received: the ``grad_output`` of the
  convolution-backward op under the autograd node that carries the forward's sequence number (same rank);
* a backward whose schema names the gradients it computes (``output_mask``) computed those whose ops ran
  beneath it (``output_mask_from_children`` in data/roofline_ops.json): the first layer's input needs none.

Nothing here is guessed: a forward convolution without a backward (inference) or whose sequence number leads to
two different gradient shapes keeps an unknown output, and ``flops`` then gives it no model.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from .flops import _canonical, _table, op_family


def completed_arguments(ops: pd.DataFrame) -> pd.DataFrame:
    """``ops`` with what the ops around each call tell: ``concrete_inputs`` with the output masks read from the
    children (:func:`masks_from_children`), and ``output_shape`` (:func:`conv_output_shapes`). Made once per
    aggregation pass; MFU and the roofline's nested costs read the same frame."""
    return ops.assign(concrete_inputs=masks_from_children(ops), output_shape=conv_output_shapes(ops))


def _column_codes(column: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Codes and the distinct values of a text column (a categorical's own; -1 for a missing value)."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        return column.cat.codes.to_numpy(np.int64), np.asarray(column.cat.categories, dtype=object)
    codes, uniques = pd.factorize(column.to_numpy(dtype=object))
    return codes.astype(np.int64), np.asarray(uniques, dtype=object)


def _per_name(ops: pd.DataFrame, of_name) -> np.ndarray:
    """``of_name(name)`` of every row, evaluated once per distinct name."""
    codes, names = _column_codes(ops["name"])
    values = np.array([of_name(str(n)) for n in names] + [of_name("")], dtype=object)
    return values[codes]


def _shape_at(shapes_text, index: int) -> str:
    """The shape at ``index`` of an Input Dims JSON text, as JSON text; "" when it is not a tensor's."""
    try:
        shapes = json.loads(shapes_text) if isinstance(shapes_text, str) and shapes_text else []
    except ValueError:
        return ""
    shape = shapes[index] if isinstance(shapes, list) and 0 <= index < len(shapes) else None
    ok = isinstance(shape, list) and shape and all(isinstance(d, int) and d > 0 for d in shape)
    return json.dumps(shape, separators=(",", ":")) if ok else ""


def _autograd_seq(ops: pd.DataFrame) -> np.ndarray:
    """Per op: the sequence number of the nearest enclosing op (itself included) that carries one, -1 if none.
    A backward op runs under the autograd node whose sequence number is its forward's."""
    seq = ops["seq"].to_numpy(np.int64).copy()
    pos = pd.Index(ops["op_id"].to_numpy(np.int64)).get_indexer(ops["parent_id"].to_numpy(np.int64))
    depth = ops["depth"].to_numpy(np.int64)
    for d in np.unique(depth):  # top down, one vectorized step per depth
        rows = np.flatnonzero((depth == d) & (pos >= 0) & (seq < 0))
        seq[rows] = seq[pos[rows]]
    return seq


def conv_output_shapes(ops: pd.DataFrame) -> pd.Series:
    """Per op: the output shape (JSON text) of a forward convolution as its backward tells it; missing elsewhere.
    ``ops``: op calls with ``op_id``, ``parent_id``, ``depth``, ``rank``, ``seq``, ``name``, ``input_shapes``."""
    values = np.full(len(ops), None, dtype=object)
    family = _per_name(ops, op_family)
    backward = np.flatnonzero(family == "conv_bwd")
    forward = np.flatnonzero((family == "conv") & (ops["seq"].to_numpy(np.int64) >= 0))
    if not len(backward) or not len(forward):
        return pd.Series(pd.Categorical(values), index=ops.index)
    specs = _table()["ops"]
    grad_index = _per_name(ops, lambda n: specs.get(_canonical(n), {}).get("grad_output", -1) if n else -1)
    rows = ops.iloc[backward]
    codes, shape_texts = _column_codes(rows["input_shapes"])
    pairs = pd.DataFrame({"code": codes, "at": grad_index[backward].astype(np.int64)})
    distinct = pairs.drop_duplicates()  # each distinct (shapes, position) parsed once
    distinct = distinct.assign(grad=[_shape_at(shape_texts[c] if c >= 0 else "", i)
                                     for c, i in distinct.itertuples(index=False)])
    received = pd.DataFrame({
        "rank": rows["rank"].to_numpy(np.int64), "seq": _autograd_seq(ops)[backward],
        "grad": pairs.merge(distinct, on=["code", "at"], how="left")["grad"].to_numpy(dtype=object)})
    received = received[(received["seq"] >= 0) & (received["grad"] != "")].drop_duplicates()
    # a sequence number whose backward received two gradient shapes says nothing certain
    received = received[~received.duplicated(["rank", "seq"], keep=False)]
    key = pd.MultiIndex.from_frame(received[["rank", "seq"]])
    fwd = ops.iloc[forward]
    at = key.get_indexer(pd.MultiIndex.from_arrays([fwd["rank"].to_numpy(np.int64), fwd["seq"].to_numpy(np.int64)]))
    values[forward[at >= 0]] = received["grad"].to_numpy(dtype=object)[at[at >= 0]]
    return pd.Series(pd.Categorical(values), index=ops.index)


def masks_from_children(ops: pd.DataFrame) -> pd.Series:
    """``concrete_inputs`` with the ``output_mask`` of the backward ops that name it from their children filled
    in (``[true, false]`` for a first layer's convolution backward) where the trace recorded no value."""
    specs = _table()["ops"]
    parents_of = {name: spec for name, spec in specs.items() if spec.get("output_mask_from_children")}
    names = ops["name"]
    parent_rows = np.flatnonzero(names.isin(list(parents_of)).to_numpy(bool))
    if not len(parent_rows):
        return ops["concrete_inputs"]
    bits = np.zeros(len(ops), dtype=np.int64)
    pos = pd.Index(ops["op_id"].to_numpy(np.int64)).get_indexer(ops["parent_id"].to_numpy(np.int64))
    parent_name = np.full(len(ops), None, dtype=object)
    parent_name[pos >= 0] = names.to_numpy(dtype=object)[pos[pos >= 0]]
    for name, spec in parents_of.items():
        for bit, child in enumerate(spec["output_mask_from_children"]):
            kids = np.flatnonzero((parent_name == name) & (names == child).to_numpy(bool))
            np.bitwise_or.at(bits, pos[kids], 1 << bit)
    rows = parent_rows[bits[parent_rows] > 0]
    if not len(rows):
        return ops["concrete_inputs"]
    values = ops["concrete_inputs"].to_numpy(dtype=object).copy()
    concrete = pd.Series(values[rows], dtype=object)
    frame = pd.DataFrame({"name": names.to_numpy(dtype=object)[rows],
                          "concrete": concrete.where(concrete.notna(), "").to_numpy(dtype=object),
                          "bits": bits[rows]})
    distinct = frame.drop_duplicates()  # a few distinct values, each filled once and merged back
    distinct = distinct.assign(filled=[
        _with_mask(concrete, parents_of[name]["output_mask"], len(parents_of[name]["output_mask_from_children"]),
                   mask_bits) for name, concrete, mask_bits in distinct.itertuples(index=False)])
    values[rows] = frame.merge(distinct, on=["name", "concrete", "bits"], how="left")["filled"].to_numpy(dtype=object)
    return pd.Series(values, index=ops.index)


def _with_mask(concrete, index: int, width: int, bits: int):
    """The Concrete Inputs JSON text with ``output_mask`` at ``index`` set from ``bits``, unless it is recorded."""
    try:
        values = json.loads(concrete) if isinstance(concrete, str) and concrete else []
    except ValueError:
        return concrete
    if not isinstance(values, list):
        return concrete
    if index < len(values) and values[index] not in ("", None):
        return concrete
    values = values + [""] * (index + 1 - len(values))
    values[index] = json.dumps([bool(bits >> i & 1) for i in range(width)])
    return json.dumps(values)
