"""The precision a kernel computes in, from its name: for traces recorded without input dtypes.

The patterns are data (``data/kernel_precision.json``, each with its source). A name gets a precision only
when it is a GEMM / convolution / attention kernel (``math_kernel``, not ``not_math``); the first matching
pattern wins. Names are classified once per distinct name (``classify_names``), like the Tensor Core
verdicts. The rules use it only when the launching op's dtype is unknown: the op's dtype wins.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from importlib import resources

import numpy as np
import pandas as pd

#: every precision the classifier can answer ('' = unknown)
PRECISIONS = ("fp8", "fp4", "int8", "fp64", "bf16", "fp16", "tf32", "fp32")
#: precisions that run on Tensor Cores by construction (FP32 does only as TF32, said by uses_tc)
TENSOR_CORE_ONLY = ("tf32", "fp8", "fp4", "int8")


@lru_cache(maxsize=1)
def _rules() -> tuple[re.Pattern, re.Pattern, tuple[tuple[re.Pattern, str], ...]]:
    ref = json.loads(resources.files("dlscope.data").joinpath("kernel_precision.json").read_text())
    patterns = tuple((re.compile(p["pattern"]), p["precision"]) for p in ref["patterns"])
    unknown = sorted({p for _, p in patterns} - set(PRECISIONS))
    if unknown:
        raise ValueError(f"kernel_precision.json: unknown precision {unknown}")
    return re.compile(ref["math_kernel"]["pattern"]), re.compile(ref["not_math"]["pattern"]), patterns


@lru_cache(maxsize=65536)
def is_math_kernel(name: str) -> bool:
    """Whether the name is a GEMM / convolution / attention kernel (``math_kernel``, not ``not_math``), whatever
    its precision."""
    math, not_math, _ = _rules()
    return bool(name) and math.search(name) is not None and not_math.search(name) is None


@lru_cache(maxsize=65536)
def kernel_precision(name: str) -> str:
    """'fp32', 'tf32', 'fp16', 'bf16', 'fp8', 'int8', 'fp64', or '' when the name does not tell."""
    if not is_math_kernel(name):
        return ""
    for pattern, precision in _rules()[2]:
        if pattern.search(name):
            return precision
    return ""


def kernel_precisions(names: pd.Series) -> np.ndarray:
    """:func:`kernel_precision` of a column of names, evaluated once per distinct name."""
    from ..analyze.tensor_core import classify_names

    if isinstance(names.dtype, pd.CategoricalDtype):  # once per category, without spelling out every row
        verdicts = np.array([kernel_precision(str(c)) for c in names.cat.categories] + [kernel_precision("")],
                            dtype=object)
        return verdicts[names.cat.codes.to_numpy()]  # code -1 (missing): the last, the verdict on ""
    return classify_names(names.fillna("").astype(str), kernel_precision, dtype=object)


def math_mode(precision: str, uses_tc: bool) -> str:
    """What the kernel ran as: FP32 on Tensor Cores is TF32; other precisions are themselves."""
    return "tf32" if precision == "fp32" and uses_tc else precision


def dominant(precisions, weights) -> tuple[str, float]:
    """The precision with the largest total weight (time) and its share of the classified weight; ('', 0)
    when nothing is classified."""
    frame = pd.DataFrame({"p": np.asarray(precisions, dtype=object), "w": np.asarray(weights, dtype=float)})
    frame = frame[frame["p"] != ""]
    total = float(frame["w"].sum())
    if frame.empty or total <= 0:
        return "", 0.0
    by = frame.groupby("p")["w"].sum().sort_values(ascending=False, kind="stable")
    return str(by.index[0]), float(by.iloc[0]) / total
