"""Viewer searches through the name index (issue 21): every search of a real imported trace whose kernel and op
names were made hostile (%, _, quotes, FTS5 syntax, every alphabet, markup) finds exactly the rows a brute-force
pass over the raw rows finds, in the same order, for long and short texts, with and without the index."""

from __future__ import annotations

import gzip
import json
import shutil
import sqlite3

import pytest
from conftest import data_file
from starlette.testclient import TestClient

from dlscope.viewer import query
from dlscope.viewer.app import create_app
from dlscope.viewer.tables import KERNELS

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

#: prefixes given to some kernel and op names of the real trace
HOSTILE = ["50%_off'\"", "Übergröße_Ω_", "İstanbul_", "under_score%", "<b>x</b>&amp;", "tab\tline\n",
           "🚀rocket_", "DROP TABLE kernels; --", '"phrase" NEAR(a b) OR x* ', "ΣΊΣΥΦΟΣ_"]
#: texts searched: wildcards, quotes, FTS5 syntax, other alphabets (upper and lower case), 1, 2 and 3+ characters
NEEDLES = ["%", "_", "'", '"', "50%_", "%_o", "übergröße", "ÜBERGRÖSSE", "ÜBERGRÖẞE", "i̇stanbul", "İSTANBUL", "σίσυφος",
           "🚀", "<b>", "&amp;", "b\tline", "drop table", '"phrase" near', "near(", "x*", "gemm", "GEMM", "sgemm_32",
           "aten::", "ADD", "k", "ke", "Nt", "e_", "zzz-no-such-name", "(", ")"]


def _hostile_trace(src, out):
    trace = json.loads(gzip.open(src).read())
    for i, event in enumerate(trace["traceEvents"]):
        name = event.get("name")
        if event.get("cat") in ("kernel", "cpu_op") and name and not name.startswith("ProfilerStep") and i % 3 == 0:
            event["name"] = HOSTILE[i % len(HOSTILE)] + name
    out.write_text(json.dumps(trace))
    return out


@pytest.fixture(scope="module")
def db_path(tmp_path_factory, import_db):
    folder = tmp_path_factory.mktemp("search")
    return import_db(_hostile_trace(data_file("kineto", "hta_alexnet_a100_critical_path.json.gz"),
                                    folder / "alexnet_hostile.json"))


@pytest.fixture(scope="module")
def old_db_path(db_path, tmp_path_factory):
    """The same database as an older dlscope wrote it: no name index (search_names), no name keys."""
    path = tmp_path_factory.mktemp("old") / "old.sqlite"
    shutil.copy(db_path, path)
    conn = sqlite3.connect(path)
    conn.executescript("DROP TABLE search_names_trigram; DROP TABLE search_names; DROP TABLE search_kernel_pairs;")
    for (index,) in conn.execute("SELECT name FROM sqlite_master WHERE name LIKE 'kernels_search_key%'").fetchall():
        conn.execute(f"DROP INDEX {index}")
    conn.execute("ALTER TABLE kernels DROP COLUMN search_key")
    conn.commit()
    conn.close()
    return path


@pytest.fixture(scope="module", params=["indexed", "indexed, searches by WHERE", "older database"])
def served(request, db_path, old_db_path):
    """The viewer on the indexed database, on it with every search left to the WHERE clause (as when it matches
    more pairs than one merge takes), and on the older database."""
    path = old_db_path if request.param == "older database" else db_path
    pairs = query.MERGE_PAIRS
    query.MERGE_PAIRS = -1 if request.param == "indexed, searches by WHERE" else pairs
    try:
        with TestClient(create_app([path]), base_url="http://127.0.0.1:8000") as client:
            yield request.param.split(",")[0], path, client
    finally:
        query.MERGE_PAIRS = pairs


def _rows(path, query, params=()):
    conn = sqlite3.connect(path)
    try:
        conn.row_factory = sqlite3.Row
        return [dict(r) for r in conn.execute(query, params)]
    finally:
        conn.close()


def _contains(needle: str, text) -> bool:
    """The viewer's name search, written plainly: case-insensitive in every alphabet."""
    return text is not None and needle.lower() in text.lower()


def _like(needle: str, text) -> bool:
    """SQL LIKE '%needle%' as SQLite does it: case-insensitive for ASCII letters only."""
    ascii_lower = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
    return text is not None and needle.translate(ascii_lower) in str(text).translate(ascii_lower)


def _raw_kernels(path):
    return _rows(path, "SELECT k.kernel_id, k.name, k.device, k.start, k.dur, k.rank, k.iteration, k.op_id, "
                       "n.name AS op_name FROM kernels k LEFT JOIN op_instances i ON i.op_id = k.root_op_id "
                       "LEFT JOIN op_nodes n ON n.node_id = i.node_id")


SORT_KEYS = {"kernel_name": ("name",), "device": ("device", "start"), "start": ("start",), "dur": ("dur",),
             "iteration": ("rank", "iteration", "start"), "op_id": ("op_id",), "kernel_id": ()}


def _sorted_ids(rows, sort: str, desc: bool) -> list[int]:
    """SQLite's order: NULL first ascending, last descending; ties by kernel id in the same direction."""
    def key(r):
        return tuple((r[c] is not None, r[c]) for c in SORT_KEYS[sort]) + ((True, r["kernel_id"]),)
    return [r["kernel_id"] for r in sorted(rows, key=key, reverse=desc)]


def _all_pages(client, params: dict) -> tuple[list[int], int]:
    ids, page = [], 1
    while True:
        body = client.get("/api/table/kernels", params={**params, "page": page, "size": 10}).json()
        ids += [r["kernel_id"] for r in body["rows"]]
        if not body["has_next"]:
            return ids, body["total"]
        page += 1


def test_the_hostile_names_are_in_the_database(db_path):
    names = {r["name"] for r in _raw_kernels(db_path)}
    names |= {r["name"] for r in _rows(db_path, "SELECT name FROM op_nodes")}
    assert sum(any(n.startswith(h) for n in names) for h in HOSTILE) >= 8


@pytest.mark.parametrize("needle", NEEDLES)
def test_kernel_searches_find_what_a_pass_over_the_raw_rows_finds(served, needle):
    """Kernel Name and Op Name filters and the global search, every page, in the order of every sort that
    covers all kernels (the index's merged name ranges, its name order, the walk of a sort index)."""
    _, path, client = served
    raw = _raw_kernels(path)
    wanted = {
        "f.kernel_name": [r for r in raw if _contains(needle, r["name"])],
        "f.op_name": [r for r in raw if _contains(needle, r["op_name"])],
        "q": [r for r in raw if _contains(needle, r["name"]) or _contains(needle, r["op_name"])],
    }
    for param, rows in wanted.items():
        for sort in [c.name for c in KERNELS.columns if c.sortable and c.big_sort]:
            for desc in (False, True):
                ids, total = _all_pages(client, {param: needle, "sort": sort, "order": "desc" if desc else "asc"})
                assert total == len(rows), (param, sort)
                assert ids == _sorted_ids(rows, sort, desc), (param, sort, desc)


def test_a_search_combined_with_a_scope_or_another_search(served):
    _, path, client = served
    raw = _raw_kernels(path)
    iteration = next(r["iteration"] for r in raw if r["iteration"] is not None and r["iteration"] >= 0)
    rows = [r for r in raw if r["iteration"] == iteration and _contains("e", r["name"])]
    ids, total = _all_pages(client, {"iteration": iteration, "f.kernel_name": "e", "sort": "dur"})
    assert total == len(rows) > 0 and ids == _sorted_ids(rows, "dur", True)
    rows = [r for r in raw if _contains("gemm", r["name"]) and (_contains("nt", r["name"])
                                                                 or _contains("nt", r["op_name"]))]
    ids, total = _all_pages(client, {"f.kernel_name": "gemm", "q": "nt", "sort": "start", "order": "asc"})
    assert total == len(rows) > 0 and ids == _sorted_ids(rows, "start", False)


@pytest.mark.parametrize("needle", NEEDLES)
def test_aggregated_table_searches_find_what_a_pass_over_their_rows_finds(served, needle):
    """Ops (name columns and, in the global search, every text column), op types and kernel summaries. Name
    columns ignore case in every alphabet through the index; other text columns (and every column of an
    older database) are matched by SQL LIKE, which ignores the case of ASCII letters only."""
    kind, path, client = served
    name_match = _contains if kind == "indexed" else _like
    agg = _rows(path, "SELECT MAX(agg_id) AS a FROM aggregations")[0]["a"]
    ops = _rows(path, "SELECT * FROM agg_ops WHERE agg_id = ?", (agg,))
    text = ("direction", "data_type", "input_shapes", "scope")
    cases = [
        ("ops", "f.op_name", "node_id", ops, lambda r: name_match(needle, r["op_name"])),
        ("ops", "f.op_type", "node_id", ops, lambda r: name_match(needle, r["op_type"])),
        ("ops", "q", "node_id", ops, lambda r: name_match(needle, r["op_name"]) or name_match(needle, r["op_type"])
         or any(_like(needle, r[c]) for c in text)),
        ("op_types", "f.op_type", "op_type", _rows(path, "SELECT * FROM agg_op_types WHERE agg_id = ?", (agg,)),
         lambda r: name_match(needle, r["op_type"])),
        ("kernel_summary", "f.kernel_name", "kernel_name",
         _rows(path, "SELECT * FROM agg_kernels WHERE agg_id = ?", (agg,)),
         lambda r: name_match(needle, r["kernel_name"])),
    ]
    for table, param, key, rows, match in cases:
        got, page = [], 1
        while True:
            body = client.get(f"/api/table/{table}", params={param: needle, "page": page, "size": 100}).json()
            got += [r[key] for r in body["rows"]]
            if not body["has_next"]:
                break
            page += 1
        expected = sorted(r[key] for r in rows if match(r))
        assert sorted(got) == expected and body["total"] == len(expected), (table, param)


def test_the_index_holds_every_distinct_name_once_with_its_kernels(db_path):
    """search_names: each kernel name once, lower-cased, with its kernels; search_kernel_pairs: each (kernel name,
    outermost op name) pair of the raw rows once with its kernels, under the one search_key its rows carry."""
    raw = _raw_kernels(db_path)
    stored = {r["name"]: r for r in _rows(db_path, "SELECT * FROM search_names WHERE source = 'kernels.name'")}
    counts: dict = {}
    for r in raw:
        counts[r["name"]] = counts.get(r["name"], 0) + 1
    assert {n: s["kernels"] for n, s in stored.items()} == counts
    assert all(s["folded"] == n.lower() for n, s in stored.items())
    pairs: dict = {}
    for r in raw:
        pairs[(r["name"], r["op_name"])] = pairs.get((r["name"], r["op_name"]), 0) + 1
    rows = _rows(db_path, "SELECT * FROM search_kernel_pairs")
    assert {(r["kernel_name"], r["op_name"]): r["kernels"] for r in rows} == pairs
    keys = {(a, b, c) for a, b, c in _rows_t(db_path, "SELECT k.name, n.name, k.search_key FROM kernels k LEFT JOIN "
                                                      "op_instances i ON i.op_id = k.root_op_id LEFT JOIN op_nodes n "
                                                      "ON n.node_id = i.node_id")}
    assert keys == {(r["kernel_name"], r["op_name"], r["search_key"]) for r in rows}


def _rows_t(path, query):
    conn = sqlite3.connect(path)
    try:
        return conn.execute(query).fetchall()
    finally:
        conn.close()
