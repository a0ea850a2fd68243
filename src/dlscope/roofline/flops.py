"""Analytic FLOPs and bytes of one framework op from the shapes the trace recorded.

The roofline needs, for every op, the work it does (FLOPs) and the data it must move (bytes). Both are
computed from the op's name, ``Input Dims``, ``Input type`` and ``Concrete Inputs`` as Kineto records
them; which argument is which comes from ``data/roofline_ops.json`` so a schema change in PyTorch is a
data fix, not a code fix.

Conventions (also in docs/roofline.md):

* A multiply-add is 2 FLOPs. GEMM: ``2·B·M·N·K``. Convolution: ``2·N·K·prod(out)·(C/g·prod(kernel))``.
* A bias adds one multiply-add per output element (seed 002's worked example: a 3×3 conv with bias,
  1×3×416×480 → 1×16×208×240, counts ``((3·3)·3 + 1)·16·208·240·2 = 44,728,320`` FLOPs). The same rule
  gives ``addmm``/``linear`` with bias ``2·M·N·(K+1)``.
* Attention forward: ``2·B·H·Sq·Sk·(Dqk + Dv)`` (QKᵀ and PV); backward = 2.5 × forward (five matmuls);
  causal masks halve both when ``Sq == Sk`` (FlashAttention's convention). Softmax inside is not counted.
* Bytes = every tensor input + every output, each counted once, at its dtype's size (ideal caching).
  Outputs take the dtype of the op's main operand. Destination-only ops (``copy_``, ``fill_``) do not
  read their destination.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any, TypeGuard

import numpy as np

from ..analyze.dtypes import dtype_info

#: Attention backward does 5 matmuls of the forward's 2 (recompute QKᵀ, dP, dV, dQ, dK).
ATTENTION_BWD_FACTOR = 2.5

#: The most FLOPs or bytes one call can be modelled with (2^53, 9 PFLOP: seconds of a whole GPU for one op; exact
#: as a float). Beyond it, or below zero, the shapes are absurd (a hostile or corrupt trace) and the call has no
#: model, so sums over a trace's calls stay far from int64's limit.
MOST_PER_CALL = 2 ** 53


def _plausible(*values: int) -> bool:
    return all(0 <= v <= MOST_PER_CALL for v in values)


@dataclass(frozen=True)
class OpCost:
    """Work and traffic of one call of an op."""

    flops: int
    bytes: int
    precision: str | None      # "fp64", "fp32", "fp16", "bf16", "fp8", "int8" or None (integer / unknown)
    family: str                # "gemm", "conv", "conv_bwd", "attention", "norm", "softmax", ...
    dtype: str = ""            # dtype string of the main operand as the trace wrote it


@lru_cache(maxsize=1)
def _table() -> dict:
    return json.loads(resources.files("dlscope.data").joinpath("roofline_ops.json").read_text())


# ---------------------------------------------------------------------------------------------- parsing

def _as_list(value: Any) -> list:
    """Input Dims / Input type / Concrete Inputs arrive as JSON text (database) or lists (trace)."""
    if value is None or value == "":
        return []
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return []
    return list(value) if isinstance(value, (list, tuple)) else []


def _at(seq: list, index: int | None, default: Any = None) -> Any:
    if index is None or index < 0 or index >= len(seq):
        return default
    return seq[index]


def _parse_scalar(text: Any) -> Any:
    """A Concrete Inputs string ("[1, 1]", "2", "True", "0.125", "") as a Python value; None if empty."""
    if not isinstance(text, str):
        return text
    text = text.strip()
    if text in ("", "None"):
        return None
    if text in ("True", "False", "true", "false"):
        return text.lower() == "true"
    try:
        return json.loads(text.replace("True", "true").replace("False", "false"))
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return text


def _ints(text: Any, ndim: int, default: int) -> list[int]:
    """A stride/padding/dilation argument expanded to one int per spatial dim."""
    value = _parse_scalar(text)
    if value is None or isinstance(value, str):
        return [default] * ndim
    if isinstance(value, (int, float)):
        return [int(value)] * ndim
    values = [int(v) for v in value]
    if len(values) == 1:
        return values * ndim
    return values if len(values) == ndim else [default] * ndim


def _is_shape(shape: Any) -> TypeGuard[list]:
    return isinstance(shape, list) and all(isinstance(d, (int, float)) for d in shape)


def _numel(shape: Any) -> int:
    if not isinstance(shape, list):
        return 0
    if shape and all(isinstance(s, list) for s in shape):      # TensorList recorded as a list of shapes
        return sum(_numel(s) for s in shape)
    return math.prod(int(d) for d in shape)  # exact: int64 would wrap on absurd shapes


def precision_of(dtype: str) -> str | None:
    info = dtype_info(dtype)
    return info["precision"] if info else None


def ran_at(data_type) -> str | None:
    """The precision an op node's data type names (analyze.analysis: the dtype of the ops that launched most of its
    kernel time, so an autocast ``aten::linear`` on FP32 activations is FP16); None when it names none (missing,
    NaN, an integer type)."""
    return precision_of(data_type) if isinstance(data_type, str) and data_type else None


class _Args:
    """One op call's arguments: which are tensors, their sizes in elements and bytes."""

    def __init__(self, shapes: Any, dtypes: Any, concrete: Any, output: Any = None):
        self.shapes = _as_list(shapes)
        self.dtypes = _as_list(dtypes)
        self.concrete = _as_list(concrete)
        # the output's shape where the ops around the call tell it (``roofline.completion``), else None
        output = _as_list(output)
        self.output = output if output and _is_shape(output) else None

    def shape(self, i: int | None) -> list | None:
        s = _at(self.shapes, i)
        return s if self.is_tensor(i) else None

    def is_tensor(self, i: int | None) -> bool:
        s = _at(self.shapes, i)
        if not isinstance(s, list):
            return False
        if s:
            return True
        return dtype_info(_at(self.dtypes, i, "")) is not None       # a 0-dim tensor

    def tensor_indices(self) -> list[int]:
        return [i for i in range(len(self.shapes)) if self.is_tensor(i)]

    def dtype(self, i: int | None) -> str:
        return str(_at(self.dtypes, i, "") or "")

    def value(self, i: int | None) -> Any:
        return _parse_scalar(_at(self.concrete, i))

    def element_bytes(self, i: int, fallback: int) -> int:
        info = dtype_info(self.dtype(i))
        return info["bytes"] if info else fallback

    def input_bytes(self, fallback: int, skip: tuple[int, ...] = ()) -> int:
        return sum(_numel(self.shapes[i]) * self.element_bytes(i, fallback)
                   for i in self.tensor_indices() if i not in skip)


def _canonical(op_name: str) -> str:
    name = op_name.strip()
    return name if "::" in name else f"aten::{name}"


# ---------------------------------------------------------------------------------------------- models

def _gemm(spec: dict, a: _Args) -> tuple[int, int] | None:
    x, w = a.shape(spec["a"]), a.shape(spec["b"])
    if not x or not w:
        return None
    if spec.get("b_transposed"):                      # linear: weight is [N, K]
        if len(w) != 2:
            return None
        n, k = w
        m = _numel(x[:-1]) if len(x) > 1 else 1
        batch = 1
        out_shape = [*x[:-1], n]
    else:
        x2 = [1, *x] if len(x) == 1 else x             # matmul's 1-D promotion
        w2 = [*w, 1] if len(w) == 1 else w
        m, k = x2[-2], x2[-1]
        n = w2[-1]
        try:
            batch_shape = list(np.broadcast_shapes(tuple(x2[:-2]), tuple(w2[:-2])))
        except ValueError:
            return None
        batch = _numel(batch_shape) if batch_shape else 1
        out_shape = [*batch_shape, m, n]
    has_bias = bool(a.shape(spec.get("bias")))     # None bias: [] with no dtype
    flops = 2 * batch * m * n * (k + (1 if has_bias else 0))
    return flops, _numel(out_shape)


def _conv_output(in_spatial, kernel, stride, padding, dilation, output_padding, transposed) -> list[int]:
    if transposed:
        return [(i - 1) * s - 2 * p + d * (r - 1) + op + 1
                for i, r, s, p, d, op in zip(in_spatial, kernel, stride, padding, dilation, output_padding)]
    return [(i + 2 * p - d * (r - 1) - 1) // s + 1
            for i, r, s, p, d in zip(in_spatial, kernel, stride, padding, dilation)]


def _conv_geometry(spec: dict, a: _Args, x: list, w: list):
    nd = len(w) - 2
    stride = _ints(a.value(spec.get("stride")), nd, 1)
    dilation = _ints(a.value(spec.get("dilation")), nd, 1)
    output_padding = _ints(a.value(spec.get("output_padding")), nd, 0)
    pad_value = a.value(spec.get("padding"))
    transposed = bool(spec.get("transposed_always")) or bool(a.value(spec.get("transposed")))
    if pad_value == "same":
        padding = [d * (r - 1) // 2 for d, r in zip(dilation, w[2:])]
    else:
        padding = _ints(pad_value, nd, 0)
    out = _conv_output(x[2:], w[2:], stride, padding, dilation, output_padding, transposed)
    groups = int(a.value(spec.get("groups")) or 1)
    return out, transposed, groups


def _conv_macs(x: list, w: list, y: list, transposed: bool) -> int:
    """Multiply-adds of a convolution: for each output (input when transposed) element, C/g·prod(kernel)."""
    per_point = w[1] * _numel(w[2:])
    if transposed:
        return x[0] * x[1] * _numel(x[2:]) * per_point
    return y[0] * y[1] * _numel(y[2:]) * per_point


#: the arguments that decide a convolution's or a pooling's output size
_GEOMETRY = ("stride", "padding", "dilation", "output_padding", "transposed", "ceil_mode")


def _geometry_recorded(spec: dict, a: _Args) -> bool:
    """Whether the trace recorded every geometry argument of the op's schema. Traces of torch < 2.1 record shapes
    but no scalar arguments; taking stride 1 and padding 0 there counts a stride-2 convolution four times over."""
    return all(a.value(spec[key]) is not None for key in _GEOMETRY if key in spec)


def _conv_output_shape(spec: dict, a: _Args, x: list, w: list) -> list | None:
    """The output's shape: from the geometry arguments, else the shape the ops around the call tell (checked
    against the input and the weight), else None."""
    if _geometry_recorded(spec, a):
        out, transposed, groups = _conv_geometry(spec, a, x, w)
        return [x[0], w[1] * groups if transposed else w[0], *out]
    y = a.output
    transposed = bool(spec.get("transposed_always")) or bool(a.value(spec.get("transposed")))
    channels_fit = y is not None and len(y) == len(x) and y[0] == x[0] and (
        y[1] % w[1] == 0 if transposed else y[1] == w[0])
    return y if channels_fit else None


def _conv(spec: dict, a: _Args) -> tuple[int, int] | None:
    x, w = a.shape(spec["input"]), a.shape(spec["weight"])
    if not x or not w or len(x) != len(w) or len(w) < 3:
        return None
    y = _conv_output_shape(spec, a, x, w)
    if y is None or min(y[2:]) <= 0:
        return None
    transposed = bool(spec.get("transposed_always")) or bool(a.value(spec.get("transposed")))
    flops = 2 * _conv_macs(x, w, y, transposed)
    if a.shape(spec.get("bias")):
        flops += 2 * _numel(y)                  # seed 002: the bias is one more multiply-add per output
    return flops, _numel(y)


def _conv_bwd(spec: dict, a: _Args) -> tuple[int, int] | None:
    dy = a.shape(spec["grad_output"])
    x = a.shape(spec.get("input")) or _parse_scalar(_at(a.concrete, spec.get("input_size")))
    w = a.shape(spec.get("weight")) or _parse_scalar(_at(a.concrete, spec.get("weight_size")))
    if not (_is_shape(dy) and _is_shape(x) and _is_shape(w)) or len(w) < 3:
        return None
    transposed = bool(a.value(spec.get("transposed")))
    mask = (spec.get("fixed_mask") or a.value(spec.get("output_mask")) or spec.get("default_mask")
            or [True, True, True])
    mask = [bool(m) for m in mask] + [False] * (3 - len(mask))
    macs = _conv_macs(x, w, dy, transposed)
    flops = 2 * macs * (int(mask[0]) + int(mask[1])) + (_numel(dy) if mask[2] and spec.get("bias_flops", True) else 0)
    out_elems = (_numel(x) if mask[0] else 0) + (_numel(w) if mask[1] else 0) + (dy[1] if mask[2] else 0)
    return flops, out_elems


def _attention_dims(shape: list, layout: str) -> tuple[int, int, int, int]:
    """(batch, heads, seq, head_dim); a 3-D varlen tensor [total, heads, dim] counts as one sequence."""
    if len(shape) == 3:
        return 1, shape[1], shape[0], shape[2]
    if layout == "BSHD":
        return shape[0], shape[2], shape[1], shape[3]
    return shape[0], shape[1], shape[2], shape[3]


def _attention_causal(spec: dict, a: _Args) -> bool:
    if "causal" in spec:
        return a.value(spec["causal"]) is True
    if "causal_mask_type" in spec:               # xFormers custom_mask_type: 0 none, 1/2 causal
        value = a.value(spec["causal_mask_type"])
        return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
    return False


def _attention(spec: dict, a: _Args) -> tuple[int, int] | None:
    q, k, v = a.shape(spec["q"]), a.shape(spec["k"]), a.shape(spec["v"])
    if not q or not k or not v or len(q) not in (3, 4) or len(k) != len(q) or len(v) != len(q):
        return None
    batch, heads, sq, dqk = _attention_dims(q, spec["layout"])
    _, _, sk, _ = _attention_dims(k, spec["layout"])
    dv = v[-1]
    flops = 2 * batch * heads * sq * sk * (dqk + dv)
    if spec["pass"] == "bwd":
        flops = int(flops * (ATTENTION_BWD_FACTOR if spec.get("recompute", True) else 2))
        out_elems = _numel(q) + _numel(k) + _numel(v)
    else:
        out_elems = batch * heads * sq * dv
    if _attention_causal(spec, a) and sq == sk:
        flops //= 2
    return flops, out_elems


def _norm(spec: dict, a: _Args) -> tuple[int, int] | None:
    x = a.shape(spec["input"])
    if not x:
        return None
    n = _numel(x)
    weight = a.shape(spec.get("weight"))
    channels = _numel(weight) if weight else 0
    factors = _table()["flops_per_element"]
    training = spec["training"] if "training" in spec else a.value(spec.get("training_arg")) is not False
    per_element = (factors["norm_stats"] if training or spec["pass"] == "bwd" else 2)
    per_element += factors["norm_affine"] if weight else 0
    flops = per_element * n
    out_elems = n
    if spec["pass"] == "bwd":
        flops *= factors["norm_backward_factor"]
        out_elems = n + 2 * channels
    return flops, out_elems


def _softmax(spec: dict, a: _Args) -> tuple[int, int] | None:
    x = a.shape(spec["input"])
    if not x:
        return None
    factors = _table()["flops_per_element"]
    n = _numel(x)
    return factors["softmax_bwd" if spec["pass"] == "bwd" else "softmax_fwd"] * n, n


def _pool(spec: dict, a: _Args) -> tuple[int, int] | None:
    """Max pooling: one comparison per window element per output; the output (and, ``with_indices``, its int64
    indices) written. The output's size needs the recorded geometry (kernel, stride, padding, dilation, ceil_mode)."""
    x = a.shape(spec["input"])
    kernel = _parse_scalar(_at(a.concrete, spec["kernel_size"]))
    if not x or len(x) < 3 or kernel is None or not _geometry_recorded(spec, a):
        return None
    nd = len(x) - 2
    kernel = _ints(kernel, nd, 1)
    stride = _ints(a.value(spec["stride"]), nd, 1) if a.value(spec["stride"]) not in ([], None) else kernel
    padding, dilation = _ints(a.value(spec["padding"]), nd, 0), _ints(a.value(spec["dilation"]), nd, 1)
    ceil = bool(a.value(spec.get("ceil_mode")))
    out = []
    for size, k, st, pad, dil in zip(x[2:], kernel, stride, padding, dilation):
        span = size + 2 * pad - dil * (k - 1) - 1
        length = (-(-span // st) if ceil else span // st) + 1
        if ceil and (length - 1) * st >= size + pad:  # PyTorch: the last window must start inside the input
            length -= 1
        out.append(length)
    if min(out) <= 0:
        return None
    y = _numel([*x[:2], *out])
    written = y + (y * 8 // a.element_bytes(spec["input"], 4) if spec.get("with_indices") else 0)
    return y * _numel(kernel), written


def _pool_bwd(spec: dict, a: _Args) -> tuple[int, int] | None:
    """Max pooling's gradient: each grad_output element added to the input position its index names; the input's
    gradient written."""
    dy, x = a.shape(spec["grad_output"]), a.shape(spec["input"])
    if not dy or not x:
        return None
    return _numel(dy), _numel(x)


def _elementwise(a: _Args) -> tuple[int, int] | None:
    shapes = [tuple(a.shapes[i]) for i in a.tensor_indices() if _is_shape(a.shapes[i])]
    if not shapes:
        # a foreach op (``_foreach_add_``): one result per element of its first tensor list
        lists = [a.shapes[i] for i in a.tensor_indices() if all(_is_shape(s) for s in a.shapes[i])]
        if not lists:
            return None
        out = _numel(lists[0])
        return out * _table()["flops_per_element"]["elementwise"], out
    try:
        out = _numel(list(np.broadcast_shapes(*shapes)))
    except ValueError:
        out = max(_numel(list(s)) for s in shapes)
    return out * _table()["flops_per_element"]["elementwise"], out


def _reduction(a: _Args) -> tuple[int, int] | None:
    indices = [i for i in a.tensor_indices() if _is_shape(a.shapes[i])]
    if not indices:
        return None
    x = a.shapes[indices[0]]
    n = _numel(x)
    dims = a.value(1)
    if isinstance(dims, (int, float)) and not isinstance(dims, bool):
        dims = [int(dims)]
    if isinstance(dims, list) and dims and x:
        reduced = _numel([x[d] for d in {int(d) % len(x) for d in dims}])
        out = n // max(reduced, 1)
    else:
        out = 1                                 # full reduction (or dims not recorded)
    return n * _table()["flops_per_element"]["reduction"], out


def _data_movement(name: str, a: _Args) -> tuple[int, int] | None:
    indices = [i for i in a.tensor_indices() if isinstance(a.shapes[i], list)]
    if not indices:
        return None
    if name in ("cat", "stack"):
        out = sum(_numel(a.shapes[i]) for i in indices)
    else:
        out = _numel(a.shapes[indices[0]])
    return 0, out


# ---------------------------------------------------------------------------------------------- entry

_FAMILIES = {"gemm": _gemm, "conv": _conv, "conv_bwd": _conv_bwd, "attention": _attention,
             "norm": _norm, "softmax": _softmax, "pool": _pool, "pool_bwd": _pool_bwd}
_MAIN_OPERAND = {"gemm": "a", "conv": "input", "conv_bwd": "grad_output", "attention": "q",
                 "norm": "input", "softmax": "input", "pool": "input", "pool_bwd": "grad_output"}


def op_family(op_name: str) -> str | None:
    """The model family of an op name, or None when dlscope has no FLOP model for it."""
    table = _table()
    canonical = _canonical(op_name)
    if canonical in table["ops"]:
        return table["ops"][canonical]["family"]
    short = canonical.removeprefix("aten::")
    for family in ("elementwise", "reduction", "data_movement"):
        if short in table[family]:
            return family
    return None


#: the families whose FLOPs are model FLOPs (MFU): the matrix products
MODEL_FAMILIES = ("gemm", "conv", "conv_bwd", "attention")


def model_flops(op_name: str, input_shapes: Any, input_dtypes: Any = None, concrete_inputs: Any = None,
                output_shape: Any = None) -> int | None:
    """FLOPs of one call as MFU counts a model's work, or None when the op is no matrix product or its shapes
    are missing: GEMMs, convolutions and their gradients and attention only, without bias adds and without
    recomputation (attention backward = 2 × forward: dV, dP, dQ, dK) — PaLM's model FLOPs and
    ``torch.utils.flop_counter``'s convention, so the figure is comparable to both."""
    family = op_family(op_name)
    if family not in MODEL_FAMILIES:
        return None
    spec = {**_table()["ops"].get(_canonical(op_name), {}), "bias": None, "bias_flops": False, "recompute": False}
    try:
        result = _FAMILIES[family](spec, _Args(input_shapes, input_dtypes, concrete_inputs, output_shape))
    except (TypeError, ValueError, IndexError, ZeroDivisionError):
        return None
    return None if result is None or not _plausible(int(result[0])) else int(result[0])


def op_cost(op_name: str, input_shapes: Any, input_dtypes: Any = None,
            concrete_inputs: Any = None, output_shape: Any = None) -> OpCost | None:
    """FLOPs, bytes and precision of one call, or None when the op has no model or shapes are missing.

    ``input_shapes`` / ``input_dtypes`` / ``concrete_inputs`` are JSON text (as stored in the ``ops``
    table) or the lists a Kineto event carries in ``Input Dims`` / ``Input type`` / ``Concrete Inputs``;
    ``output_shape`` the output's shape where the trace's arguments do not give it (``roofline.completion``).
    """
    family = op_family(op_name)
    if family is None:
        return None
    a = _Args(input_shapes, input_dtypes, concrete_inputs, output_shape)
    canonical = _canonical(op_name)
    short = canonical.removeprefix("aten::")
    spec = _table()["ops"].get(canonical, {})
    try:
        if family in _FAMILIES:
            result = _FAMILIES[family](spec, a)
            main = spec.get(_MAIN_OPERAND[family])
        elif family == "elementwise":
            result, main = _elementwise(a), None
        elif family == "reduction":
            result, main = _reduction(a), None
        else:
            result, main = _data_movement(short, a), None
    except (TypeError, ValueError, IndexError, ZeroDivisionError):
        return None                               # shapes that do not fit the op's schema
    if result is None:
        return None
    flops, out_elems = result
    if main is None or not a.is_tensor(main):
        tensors = a.tensor_indices()
        main = next((i for i in tensors if precision_of(a.dtype(i))), tensors[0] if tensors else None)
    dtype = a.dtype(main)
    info = dtype_info(dtype)
    element = info["bytes"] if info else 4
    skip = (0,) if short in _table()["write_only_destination"] and a.tensor_indices()[:1] == [0] else ()
    total_bytes = a.input_bytes(element, skip) + out_elems * element
    if not _plausible(int(flops), int(total_bytes)):
        return None
    return OpCost(flops=int(flops), bytes=int(total_bytes),
                  precision=info["precision"] if info else None, family=family, dtype=dtype)


