"""The notebook API: ``dlscope.open("run.sqlite")`` gives each table of a profile database as a DataFrame."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .present.summary import summary_dict
from .store import reader


class ProfileDatabase:
    """A read-only view of one profile database.

    ``db.kernels``, ``db.ops``, ``db.agg_ops`` … are DataFrames; ``agg_*`` tables are filtered to the
    current aggregation (``db.agg_id``: store.reader.CURRENT_AGGREGATION unless chosen) —
    ``db.table(name, agg_id=...)`` picks another.
    """

    def __init__(self, path: str | Path, agg_id: int | None = None):
        self.path = Path(path)
        self._conn = reader.connect(self.path)
        self.agg_id = reader.resolve_agg_id(self._conn, agg_id)

    def tables(self) -> list[str]:
        rows = self._conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view') ORDER BY name")
        return [r[0] for r in rows]

    def table(self, name: str, agg_id: int | None = None) -> pd.DataFrame:
        if name not in self.tables():
            raise KeyError(f"no table {name!r} in {self.path} (tables: {', '.join(self.tables())})")
        if name.startswith("agg_") or name == "findings":
            return reader.read_table(self._conn, name, "WHERE agg_id = ?", (agg_id or self.agg_id,))
        return reader.read_table(self._conn, name)

    def summary(self) -> dict:
        return summary_dict(self.path, self.agg_id)

    def sql(self, query: str, params: tuple = ()) -> pd.DataFrame:
        """Any read-only query (the database is opened read-only)."""
        return pd.read_sql_query(query, self._conn, params=params)

    def __getattr__(self, name: str) -> pd.DataFrame:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self.table(name)
        except KeyError as e:
            raise AttributeError(str(e)) from None

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> ProfileDatabase:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open(path: str | Path, agg_id: int | None = None) -> ProfileDatabase:  # noqa: A001 - dlscope.open reads well
    """Open a profile database for analysis in Python."""
    return ProfileDatabase(path, agg_id)


__all__ = ["ProfileDatabase", "open"]
