"""The rule registry: each module under ``experts/rules`` registers its checks with ``@rule``.

Modules are discovered, so adding a rule is one new module (plus its thresholds in ``data/rules.json``
and its test); nothing else lists the rules.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterable

#: rule id -> check(ctx, cfg) returning Finding objects (an iterable, a single Finding, or None)
RULES: dict[str, Callable] = {}
#: the rules whose advice is about a GPU (Tensor Cores, CUDA copies and syncs, kernels, GPU memory): they do
#: not run on a profile without GPU kernels
GPU_RULES: set[str] = set()
#: rule id -> the narrower rules it subsumes: where it fires, their findings are dropped (it says what they
#: would have said, with its own, larger saving); where it stays silent, they speak for themselves
SUBSUMES: dict[str, tuple[str, ...]] = {}


def rule(rule_id: str, *, gpu: bool = False, subsumes: tuple[str, ...] = ()) -> Callable:
    """Register ``check(ctx, cfg)`` under a stable rule id; ``gpu=True`` for GPU advice (skipped when the
    profile ran no GPU kernel); ``subsumes``: rules whose finding is a case of this one's (:data:`SUBSUMES`)."""
    def register(check: Callable) -> Callable:
        if rule_id in RULES and RULES[rule_id] is not check:
            raise ValueError(f"rule id {rule_id!r} registered twice")
        RULES[rule_id] = check
        if gpu:
            GPU_RULES.add(rule_id)
        if subsumes:
            SUBSUMES[rule_id] = tuple(subsumes)
        return check
    return register


def subsumed(fired: set[str]) -> set[str]:
    """The rules whose findings give way to a broader rule among ``fired``."""
    return {narrow for broad in fired for narrow in SUBSUMES.get(broad, ())}


def load_rules() -> dict[str, Callable]:
    """Import every module of ``dlscope.experts.rules`` once and return the registry."""
    global _LOADED
    if not _LOADED:
        from . import rules as package

        for info in pkgutil.iter_modules(package.__path__):
            importlib.import_module(f"{package.__name__}.{info.name}")
        _LOADED = True
    return RULES


_LOADED = False  # the rule modules are imported (listing them costs a directory scan per rank)


def as_list(result) -> list:
    if result is None:
        return []
    if isinstance(result, Iterable) and not hasattr(result, "rule"):
        return list(result)
    return [result]
