"""The timeline's matrices of every rank of a job made at once: each rank's rows in the table's order, missing values
as the timeline's defaults, a rank absent from a table an empty matrix; the arrays the import stores unchanged."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from conftest import data_file

from dlscope.analyze.timeline import COLUMNS, MEMORY_COLUMNS, matrices_by_rank
from dlscope.pipeline import build
from dlscope.pipeline.inputs import expand_inputs

TABLE_OF = {"op": "ops", "range": "ranges", "runtime": "api_calls", "kernel": "kernels", "memop": "memops"}


def _job_tables() -> dict[str, pd.DataFrame]:
    """Three ranks interleaved; rank 2 has no kernels, no table has rank 5; NaN where a default applies; the
    memops lack their ``stream`` column."""
    return {
        "ops": pd.DataFrame({"rank": [1, 0, 1, 2, 0], "op_id": [10, 11, 12, 13, 14], "pid": [7, 7, np.nan, 8, 7],
                             "tid": [1, 2, 3, 4, 5], "depth": [0, 1, np.nan, 0, 2], "start": [5, 1, 9, 3, 2],
                             "end": [6, 4, 12, 7, 3]}),
        "ranges": pd.DataFrame({"rank": [2, 0], "range_id": [0, 1], "pid": [1, 1], "tid": [1, 1],
                                "device": [np.nan, 0], "start": [0, 0], "end": [9, 9]}),
        "api_calls": pd.DataFrame(columns=["rank", "api_id", "pid", "tid", "start", "end"], dtype=np.int64),
        "kernels": pd.DataFrame({"rank": [0, 1, 0], "kernel_id": [3, 4, 5], "device": [0, 1, 0],
                                 "stream": [7, 7, np.nan], "start": [2, 3, 4], "end": [3, 4, 6],
                                 "uses_tc": [True, False, True]}),
        "memops": pd.DataFrame({"rank": [1, 1], "memop_id": [0, 1], "device": [0, 0], "start": [1, 2],
                                "end": [2, 3]}),
        "memory": pd.DataFrame({"rank": [0, 2, 0], "device": [0, 0, np.nan], "ts": [1, 2, 3],
                                "bytes_delta": [5, np.nan, -5], "total_allocated": [5, 1, 0],
                                "total_reserved": [8, np.nan, 8]}),
    }


def _rows_of(frame: pd.DataFrame, rank: int, cols) -> list[list[int]]:
    """The rank's rows, one by one, in the table's order: a missing value (or column) as its default (-1 where
    the timeline names none)."""
    out = []
    for _, row in frame.iterrows():
        if int(row["rank"]) != rank:
            continue
        cells = []
        for col, default in cols:
            value = row[col] if col in frame.columns else None
            missing = value is None or (isinstance(value, float) and math.isnan(value))
            cells.append((-1 if default is None else default) if missing else int(value))
        out.append(cells)
    return out


def test_each_ranks_matrices_hold_its_rows_in_order_with_the_timelines_defaults():
    tables = _job_tables()
    made = matrices_by_rank(tables, [0, 1, 2, 5])
    assert list(made) == [0, 1, 2, 5]
    for rank, (matrices, memory) in made.items():
        for kind, (_, cols) in COLUMNS.items():
            assert matrices[kind].dtype == np.int64 and matrices[kind].shape[1] == len(cols)
            assert matrices[kind].tolist() == _rows_of(tables[TABLE_OF[kind]], rank, cols), (rank, kind)
        memory_cols = [(c, -1 if c != "bytes_delta" else 0) for c in MEMORY_COLUMNS]
        assert memory.tolist() == _rows_of(tables["memory"], rank, memory_cols), rank
    assert made[0][0]["kernel"].tolist() == [[3, 0, 7, 2, 3, 1], [5, 0, -1, 4, 6, 1]]  # by hand
    assert made[1][0]["memop"].tolist() == [[0, 0, -1, 1, 2], [1, 0, -1, 2, 3]]  # no stream column: -1
    assert made[2][1].tolist() == [[0, 2, 0, 1, -1]]
    assert made[2][0]["kernel"].shape == (0, 6) and made[5][1].shape == (0, 5)


def test_a_jobs_stored_timeline_arrays_are_those_of_each_rank_made_alone(monkeypatch):
    """The 8-rank DLRM job: the arrays the import stores (every rank's matrices made at once) are byte for byte
    those made from each rank's own rows (the job's tables cut to that rank first)."""
    job = data_file("kineto", "param_dlrm_8rank_v100")
    an = build.analyse(build.load_profiles_parallel(expand_inputs([str(job)]), 1), None)
    stored = build.timeline_arrays(an)
    assert sorted(stored) == an.ranks and len(an.ranks) == 8
    tables = build._raw_tables(an)
    for rank in an.ranks:
        alone = {name: frame[frame["rank"] == rank] for name, frame in tables.items() if "rank" in frame}
        monkeypatch.setattr(build, "_raw_tables", lambda _an, alone=alone: alone)
        assert build.timeline_arrays(an, [rank]) == {rank: stored[rank]}, rank
