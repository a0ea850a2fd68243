"""The viewer as a server others can reach: the Host allow-list (DNS rebinding), same-origin JSON writes, hostile
URL parameters on every route (400, never 500), a search that cannot scan millions of rows, and a re-aggregation
worker that dies with the server."""

from __future__ import annotations

import json
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time

import pytest
from conftest import REPO, data_file
from starlette.routing import Route
from starlette.testclient import TestClient
from test_viewer_fixtures import make_profile_db

from dlscope.viewer.app import create_app
from dlscope.viewer.security import allowed_hosts
from dlscope.viewer.tables import TABLES
from dlscope.viewer.views import DERIVED, PAGE_PARAMS, VIEWS

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
BASE = "http://127.0.0.1:8000"


@pytest.fixture(scope="module")
def db_path(tmp_path_factory):
    return make_profile_db(tmp_path_factory.mktemp("security") / "tiny.sqlite")


@pytest.fixture(scope="module")
def client(db_path):
    calls: list = []

    def fake_aggregate(path, iter_start, iter_stop, key_node):
        calls.append((iter_start, iter_stop))
        return [1]

    app = create_app([db_path, db_path], aggregate=fake_aggregate)
    with TestClient(app, base_url=BASE, raise_server_exceptions=False) as c:
        c.calls = calls
        yield c


# -- Host allow-list -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("host, ok", [("127.0.0.1:8000", True), ("localhost:8000", True), ("[::1]:8000", True),
                                      ("localhost", True), ("attacker.example:8000", False),
                                      ("127.0.0.1.attacker.example", False), ("", False), ("[zz::1]", False)])
def test_every_request_names_an_allowed_host(client, host, ok):
    for path in ("/api/meta", "/dashboard", "/api/table/kernels", "/static/app.css"):
        r = client.get(path, headers={"Host": host})
        assert (r.status_code == 200) == ok, (path, host, r.status_code)
        if not ok:
            assert r.status_code == 400 and "tiny resnet" not in r.text


def test_the_allow_list_follows_the_bind_address():
    assert set(allowed_hosts("127.0.0.1")) == {"localhost", "127.0.0.1", "[::1]"}
    assert "10.1.2.3" in allowed_hosts("10.1.2.3") and "[fe80::1]" in allowed_hosts("fe80::1")
    assert "viewer.lab" in allowed_hosts("127.0.0.1", ["viewer.lab"])
    wide = allowed_hosts("0.0.0.0")
    assert socket.gethostname().lower() in wide and "localhost" in wide


# -- writes ----------------------------------------------------------------------------------------------------

def _aggregations(db_path) -> int:
    conn = sqlite3.connect(db_path)
    try:
        return conn.execute("SELECT COUNT(*) FROM aggregations").fetchone()[0]
    finally:
        conn.close()


@pytest.mark.parametrize("headers, status", [
    ({"Content-Type": "text/plain", "Origin": "http://attacker.example"}, 403),   # the classic cross-site POST
    ({"Content-Type": "application/json", "Origin": "http://attacker.example"}, 403),
    ({"Content-Type": "application/json", "Origin": "null"}, 403),
    ({"Content-Type": "application/json", "Origin": "http://127.0.0.1:9999"}, 403),  # another port, another origin
    ({"Content-Type": "application/json"}, 403),                                     # neither Origin nor Referer
    ({"Content-Type": "application/json", "Referer": "http://attacker.example/x"}, 403),
    ({"Content-Type": "text/plain", "Origin": BASE}, 415),
    ({"Origin": BASE}, 415),
    ({"Content-Type": "application/x-www-form-urlencoded", "Origin": BASE}, 415),
])
def test_aggregate_refuses_requests_not_from_the_viewers_page(client, db_path, headers, status):
    before = len(client.calls)
    r = client.post("/api/aggregate", content=json.dumps({"iter_start": 1}), headers=headers)
    assert r.status_code == status, r.text
    assert len(client.calls) == before


@pytest.mark.parametrize("headers", [{"Content-Type": "application/json", "Origin": BASE},
                                     {"Content-Type": "application/json; charset=utf-8",
                                      "Referer": BASE + "/iterations"}])
def test_aggregate_accepts_the_viewers_own_json_post(client, headers):
    before = len(client.calls)
    r = client.post("/api/aggregate?db=1", content=json.dumps({"iter_start": 1, "iter_stop": 2}), headers=headers)
    assert r.status_code == 202, r.text
    for _ in range(100):
        if len(client.calls) > before:
            break
        time.sleep(0.02)
    assert client.calls[-1] == (1, 2)


def test_a_rebound_host_cannot_write_either(client):
    r = client.post("/api/aggregate", content="{}", headers={"Host": "attacker.example:8000",
                                                             "Origin": "http://attacker.example:8000",
                                                             "Content-Type": "application/json"})
    assert r.status_code == 400


# -- hostile parameters ----------------------------------------------------------------------------------------

def hostile_values() -> list[str]:
    """Values that broke or could break parsing: 64-bit edges, numbers Python reads but SQLite cannot bind,
    non-ASCII digits, floats, JSON of every shape, control characters, SQL metacharacters, a huge string."""
    out = [str(v) for v in (2**63 - 1, 2**63, -(2**63) - 1, 10**20, -1)] + ["[9223372036854775808]"]
    out += ["1.5", "1e999", "nan", "1_000", "١٢", "１", "", "\x00", "\x00' OR 1=1 --", "%", "\\", "'", "[]",
            "{}", "[[1]]", "[true]", "null", "x" * 5_000, "é∂ß", "<script>", "..", ">1e400ms",
            "1..99999999999999999999", "99999999999999999999ms", "1,2,99999999999999999999"]
    return out


def _filters(spec, prefix: str = "") -> set[str]:
    """Column searches: one column per kind (a search is parsed by its column's kind: text, int, ns, ts, bool,
    pct, bytes, float), plus every column of the kernels table, the one with millions of rows."""
    if spec.name == "kernels":
        return {f"{prefix}f.{c.name}" for c in spec.columns}
    by_kind = {}
    for c in spec.columns:
        by_kind.setdefault(c.kind, c.name)
    return {f"{prefix}f.{name}" for name in by_kind.values()}


def route_parameters() -> dict[str, set[str]]:
    """Every route (concrete URL) with the parameters it reads, from the viewer's own declarations."""
    page = set(PAGE_PARAMS) - {"_format"}
    out: dict[str, set[str]] = {}
    for name, spec in {**TABLES, **{n: d[0] for n, d in DERIVED.items()}}.items():
        names = page | {"sort", "order", "page", "size", "q"} | {s.name for s in spec.scopes} | _filters(spec)
        if name.startswith("compare_"):
            names |= {"base", "new", "base_agg", "new_agg"}
        out[f"/api/table/{name}"] = names
        out[f"/api/table/{name}/export.csv"] = {"sort", "q", "page", "agg", "iteration", "node"}
    for slug, view in VIEWS.items():
        names = page | set(view.params)
        for vt in view.tables:
            spec = TABLES.get(vt.table) or DERIVED[vt.table][0]
            names |= ({f"{vt.prefix}.{k}" for k in ("sort", "order", "page", "size", "q")}
                      | _filters(spec, vt.prefix + "."))
        out[f"/api/view/{slug}"] = names
        out[f"/{slug}"] = page | set(view.params)   # the HTML page runs the same parsing as its JSON twin
    out["/api/meta"] = {"db"}
    out["/api/trace.json"] = {"db", "agg", "rank", "iterations"}
    out["/api/timeline"] = {"db", "rank", "start", "end", "width"}
    out["/api/timeline/event"] = {"db", "kind", "id"}
    out["/api/python/tree"] = {"db", "thread", "rank", "node"}
    out["/api/python/ops"] = {"db", "rank", "node"}
    return out


def test_route_list_covers_every_get_route(client):
    declared = {r.path for r in client.app.routes if isinstance(r, Route) and "GET" in (r.methods or ())}
    covered = {"/", "/api/meta", "/api/view/{view}", "/api/table/{table}", "/api/table/{table}/export.{fmt}",
               "/api/jobs/{job}", "/{view}", "/api/databases", "/api/trace.json", "/api/timeline",
               "/api/timeline/event", "/api/python/tree", "/api/python/ops"}
    assert declared <= covered, declared - covered


#: The values that reached SQLite unchecked (64-bit overflow) and the other classes most likely to: tried on every
#: parameter of every route; the whole hostile list goes over every parameter of one route of each kind.
EDGE_VALUES = [str(2**63), str(-(2**63) - 1), str(10**20), "١٢", "\x00' OR 1=1 --", "x" * 5_000,
               "[9223372036854775808]",
               "1..99999999999999999999"]
FULL_ROUTES = ("/api/table/kernels", "/api/table/ops", "/api/view/kernels-by-op", "/gpus", "/api/meta", "/api/timeline",
               "/api/timeline/event", "/timeline", "/api/python/tree", "/api/python/ops", "/python")


def _sweep(client, routes: dict[str, set[str]], values: list[str]) -> list:
    failures = []
    needed = {"/api/table/op_kernels": {"node": "1"}, "/api/table/iteration_ops": {"iteration": "1"}}
    for url, names in routes.items():
        for name in sorted(names):
            for value in values:
                params = {**needed.get(url.replace("/export.csv", ""), {}), name: value}
                r = client.get(url, params=params)
                if r.status_code >= 500:
                    failures.append((url, name, value[:40], r.status_code))
                elif r.status_code == 400 and url.startswith("/api/") and not url.endswith(".csv"):
                    assert r.json()["parameter"], (url, name)
    return failures


def test_hostile_values_on_every_parameter_of_every_route_answer_400_not_500(client):
    routes = route_parameters()
    failures = _sweep(client, routes, EDGE_VALUES)
    failures += _sweep(client, {u: routes[u] for u in FULL_ROUTES}, hostile_values())
    for path in ("/api/jobs/99999999999999999999", "/api/jobs/-9223372036854775809", "/api/jobs/%00", "/api/jobs/١"):
        r = client.get(path)
        if r.status_code >= 500:
            failures.append((path, "job", "", r.status_code))
    assert failures == []


def test_the_issues_examples_answer_400_naming_the_parameter(client):
    for url, param in (("/api/table/kernels?node=99999999999999999999", "node"),
                       ("/api/table/kernels?rank=9223372036854775808", "rank"),
                       ("/api/table/iterations?rank=-9223372036854775809", "rank"),
                       ("/ops-kernels?_format=json&node=99999999999999999999", "node"),
                       ("/api/table/ops?finding=9223372036854775808", "finding")):
        r = client.get(url)
        assert r.status_code == 400 and r.json()["parameter"] == param, url
    page = client.get("/ops-kernels?node=99999999999999999999")
    assert page.status_code == 400 and "Bad parameters found in URL" in page.text


# -- searches over millions of kernels ------------------------------------------------------------------------

def test_searches_over_raw_events_read_names_not_every_row(client, monkeypatch, db_path):
    """A huge table (here: made huge by lowering the threshold) is searched through its distinct names only: a
    search no name contains costs no scan at all, and computed text (grid, block) is not searched."""
    from dlscope.viewer import query

    monkeypatch.setattr(query, "BIG_TABLE_ROWS", 10)
    steps = []

    def counting(sql_params):
        db = client.app.state.viewer.dbs[0]
        conn = db.connection()
        n = [0]

        def tick():
            n[0] += 1
            return 0
        conn.set_progress_handler(tick, 1)
        try:
            conn.execute(*sql_params).fetchall()
        finally:
            conn.set_progress_handler(None, 1)
        steps.append(n[0])
        return n[0]

    from dlscope.viewer.params import parse_table_request
    db = client.app.state.viewer.dbs[0]
    none = parse_table_request(TABLES["kernels"], {"q": "no-kernel-is-called-this"})
    some = parse_table_request(TABLES["kernels"], {"q": "gemm"})
    assert counting(query.count_sql(none, db)) < 50          # WHERE 0: no row is read
    kernels = sqlite3.connect(db_path).execute("SELECT COUNT(*) FROM kernels").fetchone()[0]
    assert counting(query.count_sql(some, db)) > kernels // 10  # a real match does read its rows
    body = client.get("/api/table/kernels", params={"q": "no-kernel-is-called-this"}).json()
    assert body["total"] == 0 and body["rows"] == []
    grid = client.get("/api/table/kernels", params={"q": "(1, 1, 1)"}).json()   # grid text: not searched
    assert grid["total"] == 0
    r = client.get("/api/table/kernels", params={"f.grid": "(1, 1"})
    assert r.status_code == 400 and r.json()["parameter"] == "f.grid"
    inside = client.get("/api/table/kernels", params={"f.grid": "(1, 1", "iteration": "1"})
    assert inside.status_code == 200
    meta = client.get("/api/meta").json()["tables"]["kernels"]
    assert meta["searched"] == ["Op Name", "Kernel Name"]


# -- the re-aggregation worker dies with the server ------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_no_process_stays_behind_after_the_server_stops(import_db, tmp_path, sig):
    psutil = pytest.importorskip("psutil")
    import httpx

    db = tmp_path / "job.sqlite"
    shutil.copy(import_db(data_file("kineto", "param_dlrm_8rank_v100", "worker0.pt.trace.json.gz")), db)
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([sys.executable, "-m", "dlscope", "view", str(db), "-p", str(port)], cwd=REPO,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            try:
                httpx.get(base + "/api/meta", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        r = httpx.post(base + "/api/aggregate", content=json.dumps({"iter_start": 10}),
                       headers={"Content-Type": "application/json", "Origin": base})
        assert r.status_code == 202
        children = []
        for _ in range(100):  # the spawned worker (and multiprocessing's resource tracker)
            children = psutil.Process(server.pid).children(recursive=True)
            if children:
                break
            time.sleep(0.05)
        assert children, "the re-aggregation did not start a worker process"
        server.send_signal(sig)
        server.wait(30)
        deadline = time.time() + 10
        alive = children
        while alive and time.time() < deadline:
            alive = [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
            time.sleep(0.1)
        assert alive == [], [c.cmdline()[:4] for c in alive]
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
