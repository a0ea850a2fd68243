"""Rule thresholds: the packaged ``data/rules.json`` merged with a user's partial override file."""

from __future__ import annotations

import copy
import json
from functools import lru_cache
from importlib import resources
from pathlib import Path

from ..errors import InputError, read_json_file


@lru_cache(maxsize=1)
def _packaged() -> dict:
    return json.loads(resources.files("dlscope.data").joinpath("rules.json").read_text())


def default_config() -> dict:
    """A fresh copy of the packaged thresholds."""
    return copy.deepcopy(_packaged())


def _merge(base: dict, override: dict, path: Path, where: str) -> None:
    """Overlay ``override`` on ``base`` in place; keys must already exist so typos fail loudly."""
    for key, value in override.items():
        if key not in base:
            known = ", ".join(sorted(k for k in base if k != "description"))
            raise InputError(path, f"unknown key '{where}{key}' (known: {known})")
        if isinstance(base[key], dict) and not isinstance(value, dict):
            raise InputError(path, f"'{where}{key}' must be an object")
        if isinstance(base[key], dict) and key not in ("multiple", "benchmark_arg"):
            _merge(base[key], value, path, f"{where}{key}.")
        else:
            base[key] = value


def load_config(rules_config: str | Path | None = None) -> dict:
    """Thresholds for every rule; ``rules_config`` is a JSON file of the same shape (partial allowed)."""
    config = default_config()
    if rules_config is None:
        return config
    path = Path(rules_config)
    override = read_json_file(path, "rules config")
    if not isinstance(override, dict):
        raise InputError(path, "rules config must be a JSON object keyed by rule id")
    override.pop("description", None)
    _merge(config, override, path, "")
    return config
