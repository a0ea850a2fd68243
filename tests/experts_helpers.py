"""Helpers for the expert-system tests: run the rules on a database, build small hand-made traces."""

from __future__ import annotations

import json
import shutil
import sqlite3
import tempfile
from pathlib import Path

from trace_builder import PID, TID, KinetoTrace

from dlscope.pipeline import aggregate


def stored_findings(db: Path, agg_id: int | None = None) -> dict[str, dict]:
    """rule id -> finding as the database holds it (evidence parsed), for an aggregation (default: newest)."""
    conn = sqlite3.connect(db)
    try:
        agg = agg_id or conn.execute("SELECT MAX(agg_id) FROM aggregations").fetchone()[0]
        rows = conn.execute("SELECT rule, severity, problem, recommendation, est_saving_ns, est_saving_pct, "
                            "evidence_json FROM findings WHERE agg_id = ? ORDER BY finding_id", (agg,)).fetchall()
    finally:
        conn.close()
    keys = ("rule", "severity", "problem", "recommendation", "est_saving_ns", "est_saving_pct")
    return {r[0]: {**dict(zip(keys, r[:6])), "evidence": json.loads(r[6] or "{}")} for r in rows}


def findings(db: Path, rules_config: Path | None = None) -> dict[str, dict]:
    """rule id -> finding of the newest aggregation; with ``rules_config``, the rules run again as
    `dlscope aggregate --rules-config` runs them (on a copy: the database stays as it was)."""
    if rules_config is None:
        return stored_findings(db)
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "copy.sqlite"
        shutil.copy(db, copy)
        conn = sqlite3.connect(copy)
        start, stop, key = conn.execute("SELECT iter_start, iter_stop, key_node FROM aggregations "
                                        "ORDER BY agg_id DESC LIMIT 1").fetchone()
        conn.close()
        (agg_id,) = aggregate(copy, start, stop, key or None, rules_config=rules_config)[:1]
        return stored_findings(copy, agg_id)


def blocking_call(t: KinetoTrace, name: str, ts: float, end: float) -> None:
    """A CUDA runtime call with no GPU activity of its own (cudaMemcpy's copy is added separately)."""
    t.events.append({"ph": "X", "cat": "cuda_runtime", "name": name, "pid": PID, "tid": TID, "ts": ts,
                     "dur": end - ts, "args": {"correlation": 10_000 + len(t.events)}})
