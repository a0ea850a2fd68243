"""Which indexes the raw tables carry, and why: each one serves a query that dlscope itself issues (the viewer's
tables, searches, timeline jumps, Python call tree and dashboard; the Chrome-trace export) better than any other
index would, as SQLite's own EXPLAIN QUERY PLAN of the statements recorded while they run says, with and without
it. Every index costs a full scan and sort of its table at each import (the benchmark trace's 22 raw-table
indexes: ~0.7 s of the writer's CPU, bench/README.md "h30write"), so an index no query needs should go, and
adding one needs a query that needs it here."""

from __future__ import annotations

import re
import sqlite3

import pytest
from conftest import data_file
from starlette.testclient import TestClient

from dlscope.viewer.app import create_app
from dlscope.viewer.tables import KERNELS

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

BERT = ("kineto", "tracelens_h100_bert_small_infer.json.gz")  # kernels, ops, API calls, a memcpy, Python frames

#: every raw-table index an import builds (store/schema.py INDEXES + SEARCH_INDEXES) and what it is there for
RAW_INDEXES = {
    "kernels_iteration": "Kernels sorted by iteration or scoped to one iteration (rank IN (...) AND iteration = ?)",
    "kernels_op": "Kernels sorted by op instance",
    "kernels_root_op": "Kernels of an op node (root_op_id IN its calls), an op's kernels on the timeline, the "
                       "Op Name search without the name keys",
    "kernels_dur": "Kernels sorted by GPU time (the table's default sort)",
    "kernels_name": "Kernels sorted by kernel name; the timeline's jump to a kernel name's first launch",
    "kernels_start": "Kernels sorted by GPU start",
    "kernels_device": "Kernels sorted by device (device, start)",
    "op_instances_iteration": "an iteration's ops (Ops in Selected Iteration); the export's ops of a rank",
    "op_instances_node": "the calls of an op node (Kernels scoped to a node, the timeline's jump to an op node)",
    "op_nodes_name": "the op nodes of an Op Name search (its names bound as a list)",
    "memops_iteration": "the dashboard's memory operations of the profiled iterations; the export's of a rank",
    "api_calls_iteration": "the export's runtime calls of a rank",
    "ranges_start": "the export's ranges of a rank",
    "python_frames_node": "the frames of a Python call-tree node (its ops)",
    "python_tree_parent": "a Python call-tree node's children (the tree view's recursive walk)",
    "op_instances_frame": "the ops a Python frame called",
    "kernels_search_key": "a kernel/op name search sorted by kernel id or by kernel name (each matching pair's "
                          "rows in kernel id order)",
    "kernels_search_key_dur": "a name search sorted by GPU time (each matching pair's range, merged)",
    "kernels_search_key_start": "a name search sorted by GPU start",
    "kernels_search_key_device": "a name search sorted by device",
    "kernels_search_key_iteration": "a name search sorted by iteration",
    "kernels_search_key_op": "a name search sorted by op instance",
}

#: tables whose indexes are not the raw tables' (aggregations, job tables, Nsight Compute counters)
NOT_RAW = re.compile(r"^(agg_|collectives|ncu_)")


@pytest.fixture(scope="module")
def db_path(import_db):
    return import_db(data_file(*BERT))


def raw_indexes(path) -> set[str]:
    conn = sqlite3.connect(path)
    try:
        return {name for name, table in conn.execute(
            "SELECT name, tbl_name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL")
            if not NOT_RAW.match(table)}
    finally:
        conn.close()


def test_an_import_builds_exactly_the_listed_raw_table_indexes(db_path):
    assert raw_indexes(db_path) == set(RAW_INDEXES)


def _first(path, query: str):
    conn = sqlite3.connect(path)
    try:
        return conn.execute(query).fetchone()
    finally:
        conn.close()


@pytest.fixture(scope="module")
def issued(db_path):
    """The SELECTs that dlscope's viewer and Chrome-trace export issue on the database while serving the
    requests below, as SQLite saw them (every connection's trace callback)."""
    statements: list[str] = []
    connect = sqlite3.connect

    def traced(*args, **kwargs):
        conn = connect(*args, **kwargs)
        conn.set_trace_callback(statements.append)
        return conn

    rank, iteration, node = _first(db_path, "SELECT rank, iteration, node_id FROM op_instances "
                                            "WHERE parent_id < 0 AND iteration >= 0 AND kernel_count > 0")
    kernel_name, = _first(db_path, "SELECT name FROM kernels")
    frame_rank, frame_node = _first(db_path, "SELECT f.rank, f.node_id FROM python_frames f "
                                             "JOIN op_instances o ON o.frame_id = f.frame_id")
    sorts = [c.name for c in KERNELS.columns if c.sortable and c.big_sort]
    sqlite3.connect = traced
    try:
        with TestClient(create_app([db_path]), base_url="http://127.0.0.1:8000") as client:
            def get(url, **params):
                response = client.get(url, params=params)
                assert response.status_code == 200, (url, params, response.text[:300])
                return response
            for sort in sorts:
                for order in ("asc", "desc"):
                    get("/api/table/kernels", sort=sort, order=order)
                    get("/api/table/kernels", sort=sort, order=order, **{"f.kernel_name": "gemm"})
            get("/api/table/kernels", iteration=iteration, sort="dur")
            get("/api/table/kernels", node=node, sort="dur")
            get("/api/table/kernels", iteration=iteration, **{"f.op_name": "aten::"})
            get("/api/table/iteration_ops", iteration=iteration, rank=rank)
            get("/api/view/timeline", node=node)
            get("/api/view/timeline", kernel_name=kernel_name)
            get("/api/python/tree", rank=frame_rank, node=frame_node)
            get("/api/python/ops", rank=frame_rank, node=frame_node)
            get("/api/view/dashboard")
            get("/api/trace.json", rank=rank).read()
    finally:
        sqlite3.connect = connect
    return [s for s in statements if s.lstrip().upper().startswith(("SELECT", "WITH"))]


def _plan(conn: sqlite3.Connection, statement: str) -> list[str]:
    return [row[-1] for row in conn.execute("EXPLAIN QUERY PLAN " + statement).fetchall()]


def _indexes(plan: list[str]) -> set[str]:
    return {m.group(1) for step in plan for m in [re.search(r"USING (?:COVERING )?INDEX (\w+)", step)] if m}


def _worse(without: list[str], with_: list[str]) -> bool:
    """A plan made without an index is worse when it sorts, or builds an automatic index, in more steps; walks
    more whole tables or indexes (SCAN); or narrows its searches by fewer key terms (each ``?``)."""
    def sorts(plan):
        return sum("TEMP B-TREE" in step or "AUTOMATIC" in step for step in plan)

    def scans(plan):
        return sum(bool(re.match(r"SCAN (?!sub\b|json_each\b)\w+", step)) for step in plan)

    def terms(plan):
        return sum(step.count("?") for step in plan if step.startswith("SEARCH"))
    return sorts(without) > sorts(with_) or scans(without) > scans(with_) or terms(without) < terms(with_)


def test_every_raw_table_index_serves_a_query_dlscope_issues_that_no_other_index_serves(db_path, issued):
    """For each index, some recorded query plans with it, and planned again without it (dropped from an
    in-memory copy) is worse (``_worse``): no other index serves that query as well."""
    conn = sqlite3.connect(db_path)
    try:
        users: dict[str, list[str]] = {}
        for statement in issued:
            for index in _indexes(_plan(conn, statement)):
                users.setdefault(index, []).append(statement)
        needed = {}
        for index in RAW_INDEXES:
            copy = sqlite3.connect(":memory:")
            try:
                conn.backup(copy)
                copy.execute(f"DROP INDEX {index}")
                worse = [s for s in users.get(index, []) if _worse(_plan(copy, s), _plan(conn, s))]
            finally:
                copy.close()
            needed[index] = worse[0] if worse else None
    finally:
        conn.close()
    assert len(issued) > 50
    unserved = {name: RAW_INDEXES[name] for name, statement in needed.items() if statement is None}
    assert not unserved, f"no recorded query needs {unserved}"
