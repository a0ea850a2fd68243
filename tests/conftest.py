"""Shared test fixtures: where the real profiles live, and a skip when they are absent."""

from __future__ import annotations

import os
import sqlite3
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


@pytest.fixture(scope="session")
def import_db(tmp_path_factory):
    """Build (once per session) a profile database from trace files; returns its path."""
    from dlscope.pipeline import build_database

    cache: dict = {}

    def build(*paths: Path, **options) -> Path:
        key = (tuple(str(p) for p in paths), tuple(sorted(options.items())))
        if key not in cache:
            out = tmp_path_factory.mktemp("db") / (Path(paths[0]).name + ".sqlite")
            build_database(list(paths), out, progress=False, **options)
            cache[key] = out
        return cache[key]

    return build


CHROMIUM = Path("/usr/bin/chromium")


@pytest.fixture(scope="module")
def browser():
    """Debian's headless Chromium driven by Playwright (never a downloaded browser); skips when absent."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed (pip install playwright; never `playwright install`)")
    if not CHROMIUM.exists():
        pytest.skip("/usr/bin/chromium is missing (apt-get install -y chromium chromium-driver)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM),
                              args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        yield b
        b.close()


def assert_same_rows(a, b, name: str = "") -> None:
    """Two tables hold the same rows, whatever their order. Row ids are row numbers, and a trace decoded
    in different batches (pieces, stream) lists one batch's rows category by category."""
    import pandas as pd

    ids = [c for c in a.columns if c.endswith("_id") and c != "external_id"]
    a, b = a.drop(columns=ids), b.drop(columns=ids)
    a = a.sort_values(list(a.columns)).reset_index(drop=True)
    b = b.sort_values(list(b.columns)).reset_index(drop=True)
    pd.testing.assert_frame_equal(a, b, obj=name)


def sql(db, query, params=()):
    """Rows of ``query`` on the database file ``db``: the tests' own reading, independent of dlscope's reader."""
    conn = sqlite3.connect(db)
    try:
        return conn.execute(query, params).fetchall()
    finally:
        conn.close()
