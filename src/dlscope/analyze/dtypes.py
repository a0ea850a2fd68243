"""Tensor data types: how traces spell them, their numpy name, bytes per element and precision — one table
(``data/dtypes.json``) for the analysis, the experts, the roofline's FLOP/byte models and collective sizes."""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources


@lru_cache(maxsize=1)
def _table() -> dict[str, dict]:
    return json.loads(resources.files("dlscope.data").joinpath("dtypes.json").read_text())["dtypes"]


def dtype_info(spelling: str) -> dict | None:
    """{"name", "bytes", "precision"} of a dtype as a trace spells it ("float", "c10::Half", "torch.bfloat16"…)."""
    return _table().get(str(spelling).strip().lower())


def numpy_name(spelling: str) -> str:
    info = dtype_info(spelling)
    return info["name"] if info else ""


def precision(spelling: str) -> str:
    """The precision ("fp32", "bf16", …) of a dtype, "" when it has none (integers, bool) or is unknown."""
    info = dtype_info(spelling)
    return (info["precision"] or "") if info else ""


def bytes_per_element(spelling: str) -> int:
    info = dtype_info(spelling)
    return int(info["bytes"]) if info else -1
