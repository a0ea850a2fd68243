"""Shared test fixtures: where the real profiles live, and a skip when they are absent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("DLSCOPE_SHARED", REPO.parent / "shared"))
DATA = SHARED / "data"


def data_file(*parts: str) -> Path:
    """Path of a real profile under ../shared/data, or skip the test with the reason."""
    path = DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"real profile {path} not available (../shared/data is absent)")
    return path


def data_files(folder: str, pattern: str) -> list[Path]:
    base = DATA / folder
    return sorted(base.glob(pattern)) if base.exists() else []


requires_shared = pytest.mark.skipif(not DATA.exists(), reason="../shared/data is absent")
