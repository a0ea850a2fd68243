"""The job's per-rank figures and collectives in the profile database, and the summary's ``ranks`` list."""

from __future__ import annotations

import sqlite3

import pandas as pd

from ..store.schema import JOB_DDL as DISTRIBUTED_DDL
from ..store.writer import insert_frame
from .figures import RANK_COLUMNS, rank_figures


def create_tables(conn: sqlite3.Connection) -> None:
    """Run the DDL statement by statement (executescript would commit the import's transaction)."""
    for statement in DISTRIBUTED_DDL.split(";"):
        lines = [ln for ln in statement.splitlines() if not ln.strip().startswith("--")]
        if "".join(lines).strip():
            conn.execute("\n".join(lines))


def write_distributed(conn: sqlite3.Connection, an, aggs: list, agg_ids: list[int],
                      figures: tuple[pd.DataFrame, pd.DataFrame] | None = None) -> None:
    """Store the per-rank figures and collectives of the import's aggregations (``figures``: what
    :func:`rank_figures` returned, when the caller computed them already)."""
    create_tables(conn)
    ranks, coll = figures if figures is not None else rank_figures(an, aggs)
    by_rank = {int(agg.row["rank"]): agg_id for agg, agg_id in zip(aggs, agg_ids)}
    ranks = ranks.assign(agg_id=ranks["rank"].map(by_rank))
    insert_frame(conn, "agg_ranks", ranks)
    insert_frame(conn, "collectives", coll)


def summary_ranks(conn: sqlite3.Connection) -> list[dict]:
    """The summary JSON's ``ranks`` list: the newest aggregation's figures of every rank, by rank."""
    exists = conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'agg_ranks'").fetchone()
    if not exists:
        return []
    cur = conn.execute(
        f"SELECT {', '.join(RANK_COLUMNS)} FROM agg_ranks r WHERE agg_id = "
        "(SELECT MAX(agg_id) FROM agg_ranks WHERE rank = r.rank) ORDER BY rank")
    return [dict(zip(RANK_COLUMNS, row)) for row in cur.fetchall()]
