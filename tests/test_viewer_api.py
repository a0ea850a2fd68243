"""Viewer HTTP API: tables sort/filter/page in SQL, exports, bad parameters, troubleshooting cases, security."""

from __future__ import annotations

import csv
import io
import json
import math
import sqlite3
import threading
import zipfile

import pytest
from starlette.testclient import TestClient
from test_viewer_fixtures import XSS_KERNEL, make_profile_db

from dlscope.errors import InputError
from dlscope.store import reader
from dlscope.viewer.app import create_app
from dlscope.viewer.profile_db import ProfileDB, QueryTimeout, check_database

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
BASE = "http://127.0.0.1:8000"
#: what the viewer's own page sends with a write
OWN_PAGE = {"Origin": BASE, "Content-Type": "application/json"}


@pytest.fixture(scope="module")
def db_path(tmp_path_factory):
    return make_profile_db(tmp_path_factory.mktemp("viewer") / "tiny.sqlite")


@pytest.fixture(scope="module")
def client(db_path):
    with TestClient(create_app([db_path]), base_url=BASE) as c:
        yield c


def raw(db_path, sql, params=()):
    conn = sqlite3.connect(db_path)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


# -- tables --------------------------------------------------------------------------------------------------

def test_kernels_sorted_paged_like_an_independent_sort(client, db_path):
    expected = [r[0] for r in raw(db_path, "SELECT kernel_id FROM kernels ORDER BY dur DESC, kernel_id DESC")]
    got = []
    page = 1
    while True:
        body = client.get("/api/table/kernels",
                          params={"sort": "dur", "order": "desc", "page": page, "size": 25}).json()
        got += [r["kernel_id"] for r in body["rows"]]
        assert body["total"] == len(expected)
        if not body["has_next"]:
            break
        page += 1
        assert page < 100, "pagination never ended"
    assert got == expected
    assert body["last_page"] == -(-len(expected) // 25) == page


@pytest.mark.parametrize("column", ["kernel_name", "start", "dur", "device", "iteration", "kernel_id", "op_name",
                                    "stream", "grid", "uses_tc", "launch_ts"])
def test_every_kernel_column_sorts(client, column):
    body = client.get("/api/table/kernels", params={"sort": column, "order": "asc", "size": 100}).json()
    values = [r[column] for r in body["rows"]]
    if column == "grid":  # shown as "(x, y, z)" text, sorted by the grid's volume
        values = [math.prod(int(v) for v in text.strip("()").split(",")) for text in values]
    assert len(values) > 1 and values == sorted(values)


def test_column_filters_text_number_time_and_bool(client, db_path):
    body = client.get("/api/table/kernels", params={"f.kernel_name": "GEMM", "f.uses_tc": "1",
                                                    "f.dur": ">50us", "size": 100}).json()
    expected = raw(db_path, "SELECT COUNT(*) FROM kernels "
                            "WHERE name LIKE '%gemm%' AND uses_tc = 1 AND dur > 50000")[0][0]
    assert body["total"] == expected > 0
    assert all("gemm" in r["kernel_name"].lower() and r["uses_tc"] == 1 and r["dur"] > 50_000 for r in body["rows"])
    between = client.get("/api/table/kernels", params={"f.dur": "1us..3us", "size": 100}).json()
    assert between["total"] == raw(db_path, "SELECT COUNT(*) FROM kernels WHERE dur BETWEEN 1000 AND 3000")[0][0]


def test_like_wildcards_in_a_search_are_literal(client):
    assert client.get("/api/table/kernels", params={"f.kernel_name": "%"}).json()["total"] == 0
    assert client.get("/api/table/kernels", params={"q": "_"}).json()["total"] > 0  # names do contain '_'


def test_global_search_and_scopes(client, db_path):
    body = client.get("/api/table/kernels", params={"iteration": 2, "q": "sgemm", "size": 100}).json()
    expected = raw(db_path, "SELECT COUNT(*) FROM kernels WHERE iteration = 2 AND name LIKE '%sgemm%'")[0][0]
    assert body["total"] == expected == 12
    by_op = client.get("/api/table/kernels", params={"iteration": 2, "node": 1}).json()
    assert by_op["total"] == 24 and {r["op_name"] for r in by_op["rows"]} == {"aten::conv2d"}


def test_ops_and_op_kernels_match_raw_sums(client, db_path):
    ops = client.get("/api/table/ops", params={"sort": "gpu_time_ns"}).json()["rows"]
    assert ops[0]["op_name"] == "aten::conv2d"
    expected = raw(db_path, "SELECT SUM(k.dur) FROM kernels k JOIN ops o ON o.op_id = k.op_id "
                            "WHERE o.node_id = 1 AND k.iteration BETWEEN 1 AND 3")[0][0]
    assert ops[0]["gpu_time_ns"] == expected
    kernels = client.get("/api/table/op_kernels", params={"node": 1}).json()["rows"]
    assert sum(k["gpu_time_ns"] for k in kernels) == expected


def test_iteration_ops_group_by_node(client, db_path):
    body = client.get("/api/table/iteration_ops", params={"iteration": 1}).json()
    assert body["total"] == 5
    conv = next(r for r in body["rows"] if r["node_id"] == 1)
    assert conv["calls"] == 12 and conv["tc_kernel_count"] == 12 and conv["kernel_count"] == 24


def test_group_tree_expand_collapse_and_search(client):
    all_rows = client.get("/api/table/groups", params={"size": 100}).json()
    assert [r["name"] for r in all_rows["rows"][:3]] == ["/", "model/", "encoder/"]
    assert all_rows["total"] == 8
    collapsed = client.get("/api/table/groups", params={"open": "none"}).json()
    assert [r["name"] for r in collapsed["rows"]] == ["/"]
    one_closed = client.get("/api/table/groups", params={"closed": "3", "size": 100}).json()
    assert one_closed["total"] == 4  # /, model/, encoder/ (closed), Optimizer op
    found = client.get("/api/table/groups", params={"f.name": "relu", "size": 100}).json()
    assert [r["name"] for r in found["rows"]] == ["/", "model/", "encoder/", "aten::relu"]
    by_gpu = client.get("/api/table/groups", params={"sort": "gpu_time_ns", "order": "desc", "size": 100}).json()
    leaves = [r for r in by_gpu["rows"] if r["parent_group_id"] == 3]
    assert [r["gpu_time_ns"] for r in leaves] == sorted([r["gpu_time_ns"] for r in leaves], reverse=True)


def test_view_json_twin_matches_the_table_api(client):
    twin = client.get("/ops-kernels",
                      params={"_format": "json", "node": 1, "ops.sort": "calls", "ops.order": "asc"}).json()
    api = client.get("/api/table/ops", params={"sort": "calls", "order": "asc"}).json()
    assert twin["tables"]["ops"]["rows"] == api["rows"]
    assert twin["tables"]["kernels"]["rows"] == client.get("/api/table/op_kernels", params={"node": 1}).json()["rows"]


def test_dashboard_json_shows_stored_figures(client, db_path):
    d = client.get("/dashboard", params={"_format": "json"}).json()["dashboard"]
    stored = raw(db_path, "SELECT wall_clock_ns, gpu_utilization, tc_kernel_efficiency FROM aggregations")[0]
    a = d["aggregation"]
    assert (a["wall_clock_ns"], a["gpu_utilization"], a["tc_kernel_efficiency"]) == stored
    assert d["top_ops"][0]["op_name"] == "aten::conv2d" and len(d["top_ops"]) == 5
    assert d["findings"][0]["links"] == {"nodes": [2]}
    assert d["kernels"]["tc"][1] == 36 and d["kernels"]["memory"] == [9000, 3]


def test_finding_drill_down_scopes_its_tables(client):
    body = client.get("/finding", params={"finding": 2, "_format": "json"}).json()
    names = {r["kernel_name"] for r in body["tables"]["kernels"]["rows"]}
    assert names == {"sm80_xmma_fprop_implicit_gemm_f16f16", XSS_KERNEL}
    it = client.get("/finding", params={"finding": 3, "_format": "json"}).json()
    assert [r["iteration"] for r in it["tables"]["iters"]["rows"]] == [2]


# -- exports -------------------------------------------------------------------------------------------------

def test_csv_export_is_the_whole_filtered_sorted_result(client, db_path):
    r = client.get("/api/table/kernels/export.csv", params={"f.uses_tc": "0", "sort": "dur", "order": "asc"})
    assert r.status_code == 200 and "attachment" in r.headers["content-disposition"]
    rows = list(csv.reader(io.StringIO(r.text)))
    assert rows[0][1] == "Kernel Name"
    expected = raw(db_path, "SELECT dur FROM kernels WHERE uses_tc = 0 ORDER BY dur, kernel_id")
    assert [int(x[7]) for x in rows[1:]] == [e[0] for e in expected]


def test_json_and_xlsx_exports(client):
    j = client.get("/api/table/ops/export.json", params={"q": "aten"}).json()
    assert j["profile_name"] == "tiny resnet" and len(j["rows"]) == 3
    x = client.get("/api/table/kernels/export.xlsx", params={"iteration": 1})
    assert x.status_code == 200
    book = zipfile.ZipFile(io.BytesIO(x.content))
    text = "".join(book.read(n).decode() for n in book.namelist() if n.endswith(".xml"))
    assert "tiny resnet" in text and "&lt;script&gt;" in text  # names are cells, escaped in the XML
    tsv = client.get("/api/table/op_types/export.tsv").text
    assert tsv.splitlines()[0].startswith("Op Type\t# Ops")


# -- bad input -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("url, param", [
    ("/api/table/kernels?sort=dur;drop table kernels", "sort"),
    ("/api/table/kernels?size=1000", "size"),
    ("/api/table/kernels?page=0", "page"),
    ("/api/table/kernels?page=abc", "page"),
    ("/api/table/kernels?order=sideways", "order"),
    ("/api/table/kernels?f.nope=1", "f.nope"),
    ("/api/table/kernels?f.uses_tc=maybe", "f.uses_tc"),
    ("/api/table/kernels?f.dur=>5parsecs", "f.dur"),
    ("/api/table/ops?agg=99", "agg"),
    ("/api/table/op_kernels", "node"),
    ("/api/table/kernels?db=3", "db"),
    ("/ops-kernels?_format=json&bogus=1", "bogus"),
    ("/ops-kernels?_format=json&ops.sort=nope", "ops.sort"),
    ("/finding?_format=json&finding=42", "finding"),
    ("/api/table/kernels/export.docx", "format"),
])
def test_bad_url_parameters_answer_400_naming_the_parameter(client, url, param):
    r = client.get(url)
    assert r.status_code == 400
    assert r.json()["parameter"] == param


def test_bad_parameter_html_page(client):
    r = client.get("/ops-kernels?ops.size=7")
    assert r.status_code == 400 and "Bad parameters found in URL" in r.text and "ops.size" in r.text


def test_database_troubleshooting_cases(tmp_path, db_path):
    with pytest.raises(InputError, match="no such profile database"):
        check_database(tmp_path / "missing.sqlite")
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(InputError, match="not a readable SQLite database"):
        check_database(junk)
    other = tmp_path / "other.sqlite"
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.commit()
    with pytest.raises(InputError, match="not a dlscope profile database"):
        check_database(other)
    newer = make_profile_db(tmp_path / "newer.sqlite", schema_version=99)
    with pytest.raises(InputError, match="newer dlscope"):
        ProfileDB(newer)
    older = make_profile_db(tmp_path / "older.sqlite", schema_version=1)
    with pytest.raises(InputError, match="older schema 1: .*import the trace again"):
        ProfileDB(older)  # the same answer as the CLI's (one opener)
    with pytest.raises(InputError, match="older schema 1"):
        reader.connect(older)


def test_databases_are_opened_read_only(db_path):
    db = ProfileDB(db_path)
    with pytest.raises(sqlite3.OperationalError):
        db.connection().execute("DELETE FROM kernels")


def test_query_time_limit(db_path):
    db = ProfileDB(db_path)
    heavy = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT COUNT(*) FROM c"
    with pytest.raises(QueryTimeout):
        db.execute(heavy, limit_ms=50)
    assert db.execute_one("SELECT COUNT(*) FROM kernels")[0] == 288  # the connection still works


# -- security ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", ["/static/../app.py", "/static/%2e%2e/app.py", "/static/..%2fapp.py",
                                  "/static/js/../../profile_db.py", "/static/%2e%2e/%2e%2e/errors.py"])
def test_nothing_outside_static_is_served(client, path):
    r = client.get(path)
    assert r.status_code in (400, 404)
    assert "import" not in r.text


def test_trace_names_stay_data(client):
    page = client.get("/ops-kernels").text
    assert "<script>window" not in page and "<img src=x" not in page
    html = client.get("/dashboard").text
    assert "\\u003cimg" in html or "<img" not in html
    rows = client.get("/api/table/kernels", params={"f.kernel_name": "script"}).json()["rows"]
    assert rows and rows[0]["kernel_name"] == XSS_KERNEL


# -- re-aggregation ------------------------------------------------------------------------------------------

def test_reaggregation_runs_in_background_and_reloads(tmp_path):
    path = make_profile_db(tmp_path / "re.sqlite")
    calls = []
    answered = threading.Event()  # the job holds until its 202 was read: a loaded machine finished it first

    def fake_aggregate(db_path, iter_start, iter_stop, key_node):
        calls.append((db_path, iter_start, iter_stop, key_node))
        answered.wait(10)
        conn = sqlite3.connect(db_path)
        conn.execute("INSERT INTO aggregations (agg_id, rank, iter_start, iter_stop, key_node) VALUES (2, 0, ?, ?, ?)",
                     (iter_start, iter_stop, key_node))
        conn.commit()
        conn.close()
        return [2]

    with TestClient(create_app([path], aggregate=fake_aggregate), base_url=BASE) as c:
        bad = c.post("/api/aggregate", content=json.dumps({"iter_start": 3, "iter_stop": 1}), headers=OWN_PAGE)
        assert bad.status_code == 400 and bad.json()["parameter"] == "iter_stop"
        job = c.post("/api/aggregate", content=json.dumps({"iter_start": 2, "iter_stop": 3, "key_node": "aten::relu"}),
                     headers=OWN_PAGE)
        assert job.status_code == 202 and job.json()["state"] == "underway"
        answered.set()
        for _ in range(100):
            state = c.get(f"/api/jobs/{job.json()['id']}").json()
            if state["state"] != "underway":
                break
            import time
            time.sleep(0.05)
        assert state["state"] == "success"
        assert calls == [(str(path.resolve()), 2, 3, "aten::relu")]
        assert [a["agg_id"] for a in c.get("/api/meta").json()["aggregations"]] == [1, 2]


def test_cli_reports_port_in_use_and_missing_database(tmp_path, db_path):
    import socket

    from click.testing import CliRunner

    from dlscope.viewer.cli_view import view_command

    r = CliRunner().invoke(view_command, [str(tmp_path / "nope.sqlite")])
    assert r.exit_code == 2 and "no such profile database" in r.output
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = CliRunner().invoke(view_command, [str(db_path), "-p", str(port)])
    assert r.exit_code == 2 and f"port {port}" in r.output and "already in use" in r.output
