"""Name patterns that classify CPU time (data loading, I/O), mark iterations and tell graph launches, from a data
file."""

from __future__ import annotations

import json
import re
from functools import lru_cache
from importlib import resources

import numpy as np
import pandas as pd

from .tensor_core import classify_names


@lru_cache(maxsize=1)
def patterns() -> dict:
    raw = json.loads(resources.files("dlscope.data").joinpath("categories.json").read_text())
    return {
        "dataloader": re.compile("|".join(raw["dataloader"]), re.IGNORECASE),
        "io": re.compile("|".join(raw["io"]), re.IGNORECASE),
        "profiler_step": re.compile(raw["profiler_step"]),
        "step_like_range": re.compile(raw["step_like_range"], re.IGNORECASE),
        **{key: re.compile(raw[key]) for key in ("marker_dataloader", "marker_zero_grad", "marker_optimizer",
                                                 "graph_launch")},
    }


_MEMO: dict[str, dict] = {}


def matches(names: pd.Series, kind: str) -> np.ndarray:
    rx = patterns()[kind]
    return classify_names(names, lambda n: rx.search(n) is not None, memo=_MEMO.setdefault(kind, {}))


def graph_launch_ids(api_calls: pd.DataFrame) -> np.ndarray:
    """The api_ids of the calls that launch a whole CUDA/HIP graph: the kernels they run hang under the op that
    replays the graph (torch's ``Graphed``), not under the ops that captured them."""
    if not len(api_calls):
        return np.zeros(0, np.int64)
    return api_calls["api_id"].to_numpy(np.int64)[matches(api_calls["name"], "graph_launch")]
