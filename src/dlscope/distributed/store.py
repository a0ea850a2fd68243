"""The job's per-rank figures and collectives in the profile database, and the summary's ``ranks`` list."""

from __future__ import annotations

import sqlite3

import pandas as pd

from ..store.schema import JOB_DDL as DISTRIBUTED_DDL
from ..store.writer import NewDatabase, insert_frame
from .figures import RANK_COLUMNS, rank_figures


def create_tables(conn: sqlite3.Connection, indexes: bool = True) -> None:
    """Run the DDL statement by statement (executescript would commit the import's transaction); without its
    indexes (``indexes=False``: :func:`create_indexes` once the rows are in, one sort instead of an index
    update per row)."""
    for statement in _statements(index=False) + (_statements(index=True) if indexes else []):
        conn.execute(statement)


def create_indexes(conn: sqlite3.Connection) -> None:
    for statement in _statements(index=True):
        conn.execute(statement)


def _statements(index: bool) -> list[str]:
    """The job DDL's CREATE INDEX statements (``index``), else its other statements, comments left out."""
    out = []
    for statement in DISTRIBUTED_DDL.split(";"):
        lines = [ln for ln in statement.splitlines() if not ln.strip().startswith("--")]
        text = "\n".join(lines)
        if text.strip() and text.lstrip().upper().startswith("CREATE INDEX") == index:
            out.append(text)
    return out


#: Collectives from which an import ingests them through ADBC before its sqlite3 connection opens
#: (:func:`ingest_collectives`): the benchmark trace's 10,100 took ~45 ms of sqlite3's ``executemany`` (its
#: 212k values bound one by one) on the import's last, single-core stretch, 21-23 ms through ADBC with the
#: table made and indexed (bench/README.md, h31tail); a few hundred do not pay ADBC's connection.
INGEST_COLLECTIVES = 2_000


def ingest_collectives(db: NewDatabase, figures: tuple[pd.DataFrame, pd.DataFrame | None]
                       ) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """The collectives of :func:`rank_figures`' ``figures`` written into the new database ``db`` through ADBC
    (tables made, rows in, indexes built) while no sqlite3 connection has it open; returns the figures left to
    :func:`write_distributed` (collectives None: written)."""
    ranks, coll = figures
    if coll is None or len(coll) < INGEST_COLLECTIVES:
        return figures
    written = db.ingest(";".join(_statements(index=False)), {"collectives": coll}, ";".join(_statements(index=True)))
    return (ranks, None) if written else figures


def write_distributed(conn: sqlite3.Connection, an, aggs: list, agg_ids: list[int],
                      figures: tuple[pd.DataFrame, pd.DataFrame | None] | None = None) -> None:
    """Store the per-rank figures and collectives of the import's aggregations (``figures``: what
    :func:`rank_figures` returned, when the caller computed them already; collectives None: ingested already,
    :func:`ingest_collectives`)."""
    create_tables(conn, indexes=False)
    ranks, coll = figures if figures is not None else rank_figures(an, aggs)
    by_rank = {int(agg.row["rank"]): agg_id for agg, agg_id in zip(aggs, agg_ids)}
    ranks = ranks.assign(agg_id=ranks["rank"].map(by_rank))
    insert_frame(conn, "agg_ranks", ranks)
    if coll is not None:
        insert_frame(conn, "collectives", coll)
    create_indexes(conn)


def summary_ranks(conn: sqlite3.Connection, agg_id: int | None = None) -> list[dict]:
    """The summary JSON's ``ranks`` list: every rank's figures in the aggregation run of ``agg_id`` (default:
    the current run), by rank, each with the ``agg_id`` of its aggregation."""
    exists = conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'agg_ranks'").fetchone()
    if not exists:
        return []
    from .job import run_aggregations

    ids = [a["agg_id"] for a in run_aggregations(conn, agg_id)]
    if not ids:
        return []
    cur = conn.execute(
        f"SELECT {', '.join(RANK_COLUMNS)}, agg_id FROM agg_ranks WHERE agg_id IN ({', '.join('?' * len(ids))}) "
        "ORDER BY rank", tuple(ids))
    return [dict(zip([*RANK_COLUMNS, "agg_id"], row)) for row in cur.fetchall()]
