"""The summary's collective calls, on hand-made rows whose figures are worked out here: per call the ranks,
first and last start, largest message (-1: unknown), shortest and longest kernel, largest arrival lag, and the
last rank to arrive (the shortest kernel; ties: the lower rank) with its bandwidths; rows outside a rank's
aggregation window do not count; NULLs are skipped by MIN/MAX and sort first; calls ordered by first start."""

from __future__ import annotations

import sqlite3

import pytest

from dlscope.distributed.job import CALLS_SQL, collective_calls

ROWS = [  # rank, source, collective, call_index, start, msg_bytes, dur_ns, arrival_lag_ns, algbw, busbw
    (0, "nccl", "allreduce", 0, 100, 4096, 50, 10, 1.5, 2.5),
    (1, "nccl", "allreduce", 0, 110, 8192, 40, 0, 3.0, 4.0),
    (2, "nccl", "allreduce", 0, 105, None, 40, None, 5.0, 6.0),  # ties rank 1 on duration: rank 1 is last
    (0, "nccl", "broadcast", 0, 50, -1, 30, 5, None, None),
    (1, "nccl", "broadcast", 0, 55, -1, None, 7, 9.0, 9.5),  # NULL duration sorts first: rank 1 is last
    (0, "nccl", "allreduce", 1, 900, 1, 1, 1, 1.0, 1.0),  # outside rank 0's window: not counted
    (1, "gloo", "allreduce", 0, 100, 16, 5, 0, None, 0.5),  # another source: another call, same start
]


@pytest.fixture
def job_db(tmp_path):
    path = tmp_path / "calls.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE aggregations (agg_id INTEGER PRIMARY KEY, rank INTEGER, window_start INTEGER, "
                 "window_end INTEGER)")
    conn.executemany("INSERT INTO aggregations VALUES (?, ?, ?, ?)", [(1, 0, 0, 500), (2, 1, 0, 1000),
                                                                       (3, 2, 0, 1000)])
    conn.execute('CREATE TABLE collectives (collective_id INTEGER PRIMARY KEY, rank INTEGER, source TEXT, '
                 'collective TEXT, call_index INTEGER, start INTEGER, msg_bytes INTEGER, dur_ns INTEGER, '
                 'arrival_lag_ns INTEGER, algbw_gbps REAL, busbw_gbps REAL)')
    conn.executemany("INSERT INTO collectives (rank, source, collective, call_index, start, msg_bytes, dur_ns, "
                     "arrival_lag_ns, algbw_gbps, busbw_gbps) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", ROWS)
    conn.commit()
    yield conn
    conn.close()


EXPECTED = [
    {"source": "nccl", "collective": "broadcast", "call_index": 0, "ranks": 2, "first_start": 50, "last_start": 55,
     "max_msg_bytes": None, "min_dur_ns": 30, "max_dur_ns": 30, "max_lag_ns": 7, "last_rank": 1, "algbw_gbps": 9.0,
     "busbw_gbps": 9.5},
    {"source": "gloo", "collective": "allreduce", "call_index": 0, "ranks": 1, "first_start": 100,
     "last_start": 100, "max_msg_bytes": 16, "min_dur_ns": 5, "max_dur_ns": 5, "max_lag_ns": 0, "last_rank": 1,
     "algbw_gbps": None, "busbw_gbps": 0.5},
    {"source": "nccl", "collective": "allreduce", "call_index": 0, "ranks": 3, "first_start": 100,
     "last_start": 110, "max_msg_bytes": 8192, "min_dur_ns": 40, "max_dur_ns": 50, "max_lag_ns": 10,
     "last_rank": 1, "algbw_gbps": 3.0, "busbw_gbps": 4.0},
]


def test_collective_calls_of_hand_made_rows(job_db):
    aggs = [{"agg_id": i} for i in (1, 2, 3)]
    assert collective_calls(job_db, aggs) == EXPECTED
    # the viewer's table (CALLS_SQL) says the same of every call
    cur = job_db.execute(CALLS_SQL.format(ids="1,2,3") + " ORDER BY first_start, collective, call_index")
    names = [d[0] for d in cur.description]
    viewer = [{k: v for k, v in zip(names, r) if k != "call_id"} for r in cur.fetchall()]
    assert viewer == EXPECTED


def test_no_collectives_in_the_windows_is_no_calls(job_db):
    job_db.execute("UPDATE aggregations SET window_start = 10000, window_end = 20000")
    job_db.commit()
    assert collective_calls(job_db, [{"agg_id": i} for i in (1, 2, 3)]) == []
