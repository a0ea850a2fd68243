"""Tensor Core verdicts: does a kernel use Tensor Cores, and could an op use them.

Both come from data files (``data/tensor_core_kernels.json``, ``data/eligible_ops.json``) so the lists can
be corrected without touching code. Verdicts are computed once per distinct name, not per event. AMD
matrix cores (MFMA) count as Tensor Cores; :func:`matrix_units` gives the words a rank's GPUs deserve.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterable
from functools import lru_cache
from importlib import resources
from typing import NamedTuple

import numpy as np
import pandas as pd


def _load(name: str) -> dict:
    return json.loads(resources.files("dlscope.data").joinpath(name).read_text())


def _compile(entries: list[dict], key: str) -> list[re.Pattern]:
    out = []
    for entry in entries:
        text = entry[key]
        flags = 0 if entry.get("case_sensitive", True) else re.IGNORECASE
        out.append(re.compile(text if entry.get("match") == "regex" else re.escape(text), flags))
    return out


@lru_cache(maxsize=1)
def _kernel_rules() -> tuple[list[re.Pattern], list[re.Pattern]]:
    ref = _load("tensor_core_kernels.json")
    positives = [p for p in ref["patterns"] if p.get("indicates") == "tensor_core" and p.get("confidence") != "low"]
    return _compile(positives, "pattern"), _compile(ref["negative_tokens"], "token")


def kernel_uses_tc(name: str) -> bool:
    """True when a kernel name matches a Tensor Core (or AMD matrix-core) pattern and no CUDA-core token."""
    positives, negatives = _kernel_rules()
    if not any(p.search(name) for p in positives):
        return False
    return not any(n.search(name) for n in negatives)


@lru_cache(maxsize=1)
def _op_rules() -> tuple[frozenset, tuple, tuple, list[re.Pattern]]:
    ref = _load("eligible_ops.json")
    return (frozenset(ref["exact"]), tuple(ref["tf_endswith"]), tuple(ref["tf_contains"]),
            [re.compile(r) for r in ref["regex"]])


def op_type_tc_eligible(op_type: str) -> bool:
    """True when ops of this type can run on Tensor Cores (GEMM, conv, attention, RNN families)."""
    exact, ends, contains, regexes = _op_rules()
    if op_type in exact or op_type.endswith(ends) or any(c in op_type for c in contains):
        return True
    return any(r.search(op_type) for r in regexes)


#: distinct names a ``memo`` of :func:`classify_names` keeps at most (then it starts over)
MEMO_SIZE = 1 << 17


def classify_names(names: pd.Series, verdict, dtype=bool, memo: dict | None = None) -> np.ndarray:
    """Apply a per-name function to a column, evaluating each distinct name once (once per process with
    ``memo``, a dict kept by the caller for this ``verdict``: the ranks of a job repeat the same names)."""
    if len(names) == 0:
        return np.zeros(0, dtype=dtype)
    codes, uniques, used = _coded(names)
    if memo is None:
        verdicts = np.array([verdict(str(u)) for u in uniques], dtype=dtype)
    else:
        if len(memo) > MEMO_SIZE:
            memo.clear()
        text = [str(u) for u in uniques]
        for t in text:
            if t not in memo:
                memo[t] = verdict(t)
        verdicts = np.array([memo[t] for t in text], dtype=dtype)
    if used is not None:  # verdicts of the categories the rows use, placed at their codes
        placed = np.zeros(used[-1] + 1 if len(used) else 0, dtype=dtype)
        placed[used] = verdicts
        verdicts = placed
    return verdicts[codes]


def _coded(names: pd.Series) -> tuple[np.ndarray, pd.Index | np.ndarray, np.ndarray | None]:
    """(codes, distinct names, None) as ``pd.factorize`` gives them; of a categorical without missing values,
    its own codes, the categories the rows use and their codes (no hashing of the rows: ~8 ms per 300k)."""
    if isinstance(names, pd.Series) and isinstance(names.dtype, pd.CategoricalDtype):
        codes = names.cat.codes.to_numpy()
        if len(codes) and codes.min() >= 0:
            used = np.flatnonzero(np.bincount(codes, minlength=len(names.cat.categories)))
            return codes, names.cat.categories.take(used), used
    codes, uniques = pd.factorize(names, sort=False)
    return codes, uniques, None


class MatrixUnits(NamedTuple):
    """How reports name the matrix-multiply units: 'Tensor Cores' (NVIDIA) or 'Matrix Cores (AMD MFMA)'."""

    plural: str
    singular: str
    short: str


@lru_cache(maxsize=1)
def _unit_rules() -> tuple[MatrixUnits, tuple[tuple[re.Pattern, MatrixUnits], ...]]:
    ref = _load("tensor_core_kernels.json")["matrix_units"]
    default = MatrixUnits(**ref["default"])
    vendors = tuple((re.compile(v["gpu_name_pattern"]), MatrixUnits(v["plural"], v["singular"], v["short"]))
                    for v in ref["vendors"])
    return default, vendors


@lru_cache(maxsize=256)
def gpu_vendor(name: str | None) -> str | None:
    """The vendor whose device-name pattern (``matrix_units`` in tensor_core_kernels.json) a GPU name matches
    ("AMD"), or None (NVIDIA and unnamed GPUs): one rule for every place that must not read an AMD GPU's GFX
    version as an NVIDIA compute capability."""
    if not name:
        return None
    ref = _load("tensor_core_kernels.json")["matrix_units"]
    return next((v["vendor"] for v in ref["vendors"] if re.search(v["gpu_name_pattern"], name)), None)


def matrix_units(gpu_names: Iterable[str | None]) -> MatrixUnits:
    """The words for a rank's GPUs: a vendor's when every named GPU is that vendor's, else 'Tensor Cores'.

    Unnamed GPUs (a device seen only through its kernels) do not count either way."""
    default, vendors = _unit_rules()
    names = [n for n in gpu_names if n]
    for pattern, units in vendors:
        if names and all(pattern.search(n) for n in names):
            return units
    return default


def rank_matrix_units(conn: sqlite3.Connection, rank: int | None) -> MatrixUnits:
    """:func:`matrix_units` of one rank's rows in the ``gpus`` table of a profile database."""
    rows = conn.execute("SELECT name FROM gpus WHERE rank = ?", (rank,)).fetchall() if rank is not None else []
    return matrix_units(r[0] for r in rows)
