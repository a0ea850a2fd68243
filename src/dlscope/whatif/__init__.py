"""Critical path and what-if: the job's dependency graph replayed with measured or changed durations.

``graph`` builds the dependency graph from the analysed events, ``replay`` replays it and walks its critical
path, ``scenarios`` changes it (no data-loader wait, AMP, no host syncs, CUDA graphs, overlapped
communication, no straggler, a name pattern faster by a factor), ``predict`` turns replays into iteration
times. ``whatif(DB, ...)`` is the `dlscope whatif` command's result. docs/whatif.md explains the model and
its measured errors.
"""

from __future__ import annotations

from pathlib import Path


def whatif(database: str | Path, scenarios: list[str], agg_id: int | None = None, top: int = 10) -> dict:
    """Predict the aggregation's iteration time under each scenario and all of them combined."""
    from ..errors import DlscopeError
    from ..store import reader
    from .graph import build
    from .job import from_database
    from .predict import parse_all, predict, price_findings, windows

    parsed = parse_all(scenarios)  # a bad scenario fails before the database is read
    conn = reader.connect(database)
    try:
        agg_id = reader.resolve_agg_id(conn, agg_id)
        row = conn.execute("SELECT rank, iter_start, iter_stop, avg_iteration_ns, iteration_method FROM aggregations "
                           "WHERE agg_id = ?", (agg_id,)).fetchone()
        job = from_database(conn)
        findings = conn.execute("SELECT rule, est_saving_ns FROM findings WHERE agg_id = ? ORDER BY finding_id",
                                (agg_id,)).fetchall()
    finally:
        conn.close()
    rank, iter_start, iter_stop, avg_ns, method = row
    if not len(job.ops) and not len(job.kernels) and not len(job.api_calls):
        raise DlscopeError(f"{database}: no CPU or GPU events to replay")
    g = build(job)
    win = windows(g, int(rank), int(iter_start), int(iter_stop))
    out = predict(g, win, parsed, baseline_ns=None if avg_ns is None else round(avg_ns), top=top)
    out["expert_findings"] = price_findings(g, win, findings)
    if method == "whole_profile":
        out["assumptions"].insert(0, "No iterations were found: the whole profile is one window.")
    return {"agg_id": int(agg_id), **out}
