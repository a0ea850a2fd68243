"""The domain tables of ``data/distributed.json``, loaded once."""

from __future__ import annotations

import json
import re
from functools import lru_cache
from importlib import resources


@lru_cache(maxsize=1)
def table() -> dict:
    return json.loads(resources.files("dlscope.data").joinpath("distributed.json").read_text())


@lru_cache(maxsize=1)
def rank_patterns() -> list[re.Pattern]:
    return [re.compile(p, re.IGNORECASE) for p in table()["rank_name_patterns"]]


@lru_cache(maxsize=1)
def host_patterns() -> list[re.Pattern]:
    return [re.compile(p) for p in table()["host_name_patterns"]]


@lru_cache(maxsize=1)
def cycle_patterns() -> list[re.Pattern]:
    """File names of one profiler cycle of a process: ``{worker}.{timestamp}.pt.trace.json``."""
    return [re.compile(p) for p in table()["cycle_name_patterns"]]
