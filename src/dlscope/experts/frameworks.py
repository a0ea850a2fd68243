"""Which framework a profile came from, and a rule's recommendation in that framework's words.

PyTorch wording is the rules' own; TensorFlow, JAX and PaddlePaddle get theirs from
``data/framework_advice.json`` (DLProf's "XLA not enabled" for TensorFlow, ``jax.jit`` for JAX, each
framework's mixed-precision API). Only the words change: evidence and savings stay the rule's.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources

import pandas as pd


@lru_cache(maxsize=1)
def table() -> dict:
    return json.loads(resources.files("dlscope.data").joinpath("framework_advice.json").read_text())


def detect(ops: pd.DataFrame, ranges: pd.DataFrame, kernels: pd.DataFrame) -> str:
    """"tf", "jax", "paddle", or "torch" (the default) from what the importer wrote."""
    op_types = set(ops["op_type"].unique()) if "op_type" in ops else set()
    domains = set(ranges["domain"].unique()) if "domain" in ranges else set()
    names = kernels["name"].drop_duplicates().head(500) if "name" in kernels else pd.Series([], dtype=object)
    for framework, signs in table()["detect"].items():
        if op_types & set(signs["op_types"]) or domains & set(signs["range_domains"]):
            return framework
        if any(names.str.contains(s, regex=False).any() for s in signs["kernel_substrings"]):
            return framework
    return "torch"


def shows_no_sign(ops: pd.DataFrame, ranges: pd.DataFrame, kernels: pd.DataFrame) -> bool:
    """True when :func:`detect` gives "torch" for any subset of these rows (e.g. each rank of a job): no op
    type, range domain or kernel name of them is another framework's sign."""
    op_types = set(ops["op_type"].unique()) if "op_type" in ops else set()
    domains = set(ranges["domain"].unique()) if "domain" in ranges else set()
    names = kernels["name"].drop_duplicates() if "name" in kernels else pd.Series([], dtype=object)
    return not any(op_types & set(signs["op_types"]) or domains & set(signs["range_domains"])
                   or any(names.str.contains(s, regex=False).any() for s in signs["kernel_substrings"])
                   for signs in table()["detect"].values())


def advice(rule: str, framework: str, run_kind: str, default: str) -> str:
    """The recommendation of ``rule`` for ``framework`` (``default``: the rule's PyTorch text)."""
    text = table()["advice"].get(rule, {}).get(framework)
    if isinstance(text, dict):
        text = text.get(run_kind)
    return text or default
