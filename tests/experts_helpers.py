"""Helpers for the expert-system tests: run the rules on a database, build small hand-made traces."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from dlscope.experts import evaluate
from trace_builder import PID, TID, KinetoTrace


def findings(db: Path, rules_config: Path | None = None) -> dict[str, dict]:
    """rule id -> finding for the newest aggregation of a database."""
    conn = sqlite3.connect(db)
    try:
        agg = conn.execute("SELECT MAX(agg_id) FROM aggregations").fetchone()[0]
        return {f["rule"]: f for f in evaluate(conn, agg, rules_config)}
    finally:
        conn.close()


def blocking_call(t: KinetoTrace, name: str, ts: float, end: float) -> None:
    """A CUDA runtime call with no GPU activity of its own (cudaMemcpy's copy is added separately)."""
    t.events.append({"ph": "X", "cat": "cuda_runtime", "name": name, "pid": PID, "tid": TID, "ts": ts,
                     "dur": end - ts, "args": {"correlation": 10_000 + len(t.events)}})
