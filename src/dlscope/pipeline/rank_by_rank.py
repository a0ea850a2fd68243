"""A job imported one rank at a time, so memory holds one rank's tables, not the whole job's.

Under ``--max-memory``, a job of Kineto traces whose whole analysis might not fit the budget is imported
this way: each rank is read, analysed, given the ids it has in the whole job (the rows of the ranks before
it are its offsets), written, aggregated and checked by the rules, then dropped. What the job-wide figures need
from it (per-rank figures, the rows of its collectives, its iterations) is small and kept. The database is the one
a whole import makes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd

from ..analyze.analysis import Analysed
from ..errors import DlscopeError
from ..model import REFERENCES
from .inputs import Identity, identities


def job_identities(paths: Sequence[Path]) -> list[Identity] | None:
    """Every file's rank, read from the start of each trace before any is imported; None when a file
    does not tell it there (then only a whole import can number the ranks)."""
    from ..importers.kineto import read_identity

    metas = [read_identity(p) for p in paths]
    known = [m for m in metas if m is not None]
    return None if len(known) < len(metas) else identities(paths, known)


def identity_after_import(who: Identity, meta: dict, path: Path) -> Identity:
    """The identity, checked against the full import (which also knows the host)."""
    if meta.get("rank_in_trace") and who.rank_source == "trace" and int(meta["rank"]) != who.rank:
        raise DlscopeError(f"{path}: its rank is only known after the events; import the job without --max-memory")
    return replace(who, hostname=str(meta.get("hostname") or who.hostname))


@dataclass
class IdOffsets:
    """Rows of each table written so far: the next rank's ids start there."""

    rows: dict[str, int] = field(default_factory=lambda: dict.fromkeys([*REFERENCES, "nodes"], 0))

    def shift(self, an: Analysed) -> None:
        """Give the rank's rows their ids in the whole job (missing references, -1, stay -1)."""
        p = an.profile
        for table, columns in REFERENCES.items():
            frame = p.table(table)
            for col, target in columns.items():
                if self.rows[target] and col in frame:
                    values = frame[col].to_numpy()
                    frame[col] = values + (values >= 0) * self.rows[target]
        for table in REFERENCES:
            self.rows[table] += len(p.table(table))
        nodes = p.ops["node_id"]
        self.rows["nodes"] = int(nodes.max()) + 1 if len(nodes) else self.rows["nodes"]


def by_rank(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """The ranks' iteration tables as one, in rank order (as a whole import builds it)."""
    return pd.concat(frames, ignore_index=True).sort_values("rank", kind="stable").reset_index(drop=True)
