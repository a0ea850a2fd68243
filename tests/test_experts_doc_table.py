"""docs/experts.md's table "What the real profiles show" says, per real profile, which rules fire and what
each saves; this keeps it true by reading the table as text and the findings straight from the database."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest
from conftest import DATA, REPO

DOC = REPO / "docs" / "experts.md"
HEADING = "## What the real profiles show"
SUFFIXES = (".pt.trace.json.gz", ".json.gz", ".sqlite")      # the table names profiles without their suffix
ENTRY = re.compile(r"(\w+): (\d+\.\d)")


def _remarks_removed(text: str) -> str:
    """The cell without its remarks in parentheses (they hold numbers and colons of their own)."""
    while True:
        stripped = re.sub(r"\([^()]*\)", "", text)
        if stripped == text:
            return stripped
        text = stripped


def table_rows(doc: str) -> list[tuple[str, dict[str, float]]]:
    """(profile path, rule -> saving %) per row; a cell that is not exactly "rule: number, ..." is an error,
    so a row the parser cannot read fails instead of checking nothing."""
    section = doc.split(HEADING, 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue
        profile_cell, findings_cell = (c.strip() for c in line.strip().strip("|").split("|"))
        profile = re.match(r"`([^`]+)`", profile_cell).group(1)
        cell = re.sub(r"\s+", " ", _remarks_removed(findings_cell)).strip()
        if cell == "none":
            rows.append((profile, {}))
            continue
        entries = [e.strip() for e in cell.split(",")]
        parsed = [ENTRY.fullmatch(e) for e in entries]
        assert all(parsed), f"unreadable entry in the row of {profile}: {entries}"
        savings = {m.group(1): float(m.group(2)) for m in parsed if m}
        assert len(savings) == len(entries), f"a rule is listed twice in the row of {profile}"
        rows.append((profile, savings))
    return rows


ROWS = table_rows(DOC.read_text())


def test_table_parser_reads_every_row_and_remark_numbers_are_not_savings():
    assert len(ROWS) >= 13
    rows = dict(ROWS)
    assert rows["kineto/hta_cpu_only_no_gpu"] == {}
    # "roofline_quadrant: 7.7 (both low: compute 49.9 %, memory 29.2 %; ...)": only 7.7 is the saving
    assert rows["kineto/tbplugin_resnet50_v100_workers0"]["roofline_quadrant"] == 7.7
    bad = f"{HEADING}\n| `kineto/x` | gpu_gaps: 33.4, gpu_gaps 7 |\n"
    with pytest.raises(AssertionError, match="unreadable"):
        table_rows(bad)


def _profile(path: str) -> Path:
    for suffix in SUFFIXES:
        if (DATA / (path + suffix)).exists():
            return DATA / (path + suffix)
    pytest.skip(f"real profile {DATA / path}.* not available (../shared/data is absent or lacks it)")


def _stored_savings(db: Path) -> dict[str, float]:
    """rule -> est_saving_pct of the newest aggregation, read with plain SQL."""
    conn = sqlite3.connect(db)
    try:
        return dict(conn.execute("SELECT rule, est_saving_pct FROM findings WHERE agg_id = "
                                 "(SELECT MAX(agg_id) FROM aggregations)").fetchall())
    finally:
        conn.close()


@pytest.mark.slow
@pytest.mark.parametrize(("profile", "documented"), ROWS, ids=[p for p, _ in ROWS])
def test_documented_rules_and_savings_match_the_findings_stored_for_the_real_profile(profile, documented,
                                                                                     import_db):
    stored = _stored_savings(import_db(_profile(profile)))
    assert set(documented) == set(stored), f"{profile}: rules in docs/experts.md vs rules that fire"
    assert {r: documented[r] for r in stored} == {r: round(p, 1) for r, p in stored.items()}
