"""Compare view over HTTP: two hand-made runs, JSON twin against the stored figures, derived tables, the cache,
bad parameters and names that stay text."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from starlette.testclient import TestClient
from test_viewer_fixtures import make_profile_db

from dlscope.viewer.app import create_app

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
XSS = "<script>alert(1)</script>"
NEW_DATALOADER_NS = 3 * 40_000    # 40 µs per iteration over the 3 profiled iterations


def make_pair(tmp):
    base = make_profile_db(tmp / "base.sqlite")
    new = make_profile_db(tmp / "new.sqlite")
    conn = sqlite3.connect(new)
    conn.execute("UPDATE dlscope_meta SET value = 'tiny resnet amp' WHERE key = 'profile_name'")
    # the sgemm kernel is replaced by one named like a script; the relu op is renamed like a script
    conn.execute("UPDATE agg_kernels SET kernel_name = ? WHERE kernel_name = 'ampere_sgemm_128x64_tn'", (XSS,))
    conn.execute("UPDATE agg_ops SET op_name = ?, op_type = ? WHERE op_name = 'aten::relu'", (XSS, XSS))
    conn.execute("UPDATE agg_op_types SET op_type = ? WHERE op_type = 'aten::relu'", (XSS,))
    conn.execute("UPDATE aggregations SET dataloader_ns = ?, avg_iteration_ns = avg_iteration_ns * 0.8, "
                 "wall_clock_ns = wall_clock_ns * 0.8", (NEW_DATALOADER_NS,))
    conn.commit()
    conn.close()
    return base, new


def stored(path, sql):
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql).fetchone()
    finally:
        conn.close()


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return make_pair(tmp_path_factory.mktemp("compare"))


@pytest.fixture(scope="module")
def client(pair):
    with TestClient(create_app(list(pair)), base_url="http://127.0.0.1:8000") as c:
        yield c


def test_json_twin_shows_the_stored_figures_side_by_side(client, pair):
    d = client.get("/compare", params={"_format": "json"}).json()
    c = d["compare"]
    base_avg, base_dl, iters = stored(pair[0],
                                      "SELECT avg_iteration_ns, dataloader_ns, iterations_profiled FROM aggregations")
    new_avg = stored(pair[1], "SELECT avg_iteration_ns FROM aggregations")[0]
    avg = next(m for m in c["metrics"] if m["metric"] == "avg_iteration_time")
    assert (avg["base"], avg["new"]) == (pytest.approx(base_avg), pytest.approx(new_avg))
    assert avg["verdict"] == "better" and avg["ratio"] == pytest.approx(0.8)
    assert "faster" in c["verdict"] and len(c["key_changes"]) == 3
    dl = next(b for b in c["breakdown"] if b["category"] == "dataloader")
    assert dl["base_ns"] == pytest.approx(base_dl / iters) and dl["new_ns"] == pytest.approx(NEW_DATALOADER_NS / iters)
    assert c["op_names"]["only_in_new"] == [XSS] and c["op_names"]["only_in_base"] == ["aten::relu"]
    assert c["base"]["key"] == "0" and c["new"]["key"] == "1"
    assert set(d["tables"]) == {"types", "ops", "kernels"}


def test_tables_mark_new_and_vanished_rows(client):
    kernels = client.get("/api/table/compare_kernels", params={"size": 100}).json()["rows"]
    status = {r["kernel_name"]: r["status"] for r in kernels}
    assert status[XSS] == "new" and status["ampere_sgemm_128x64_tn"] == "vanished"
    vanished = next(r for r in kernels if r["status"] == "vanished")
    assert vanished["delta_gpu_time_ns"] == -vanished["base_gpu_time_ns"] and vanished["new_gpu_time_ns"] == 0
    new_ops = client.get("/api/table/compare_ops", params={"f.status": "new"}).json()
    assert [r["op_name"] for r in new_ops["rows"]] == [XSS]
    impacts = [r["impact_ns"] for r in client.get("/api/table/compare_op_types", params={"size": 100}).json()["rows"]]
    assert impacts == sorted(impacts, reverse=True)
    by_delta = client.get("/api/table/compare_ops", params={"sort": "delta_gpu_time_ns", "order": "asc"}).json()["rows"]
    assert [r["delta_gpu_time_ns"] for r in by_delta] == sorted(r["delta_gpu_time_ns"] for r in by_delta)
    twin = client.get("/compare", params={"_format": "json", "kernels.sort": "delta_gpu_time_ns"}).json()
    assert twin["tables"]["kernels"]["rows"] == client.get(
        "/api/table/compare_kernels", params={"sort": "delta_gpu_time_ns"}).json()["rows"]


def test_swapping_sides_negates_the_deltas(client):
    fwd = client.get("/compare", params={"_format": "json"}).json()["compare"]
    back = client.get("/compare", params={"_format": "json", "base": 1, "new": 0}).json()["compare"]
    assert back["base"]["key"] == "1" and "slower" in back["verdict"]
    f = {m["metric"]: m for m in fwd["metrics"]}
    for m in back["metrics"]:
        if f[m["metric"]]["delta"] is not None:
            assert m["delta"] == pytest.approx(-f[m["metric"]]["delta"])
    rows = client.get("/api/table/compare_kernels",
                      params={"base": 1, "new": 0, "f.kernel_name": "script"}).json()["rows"]
    assert rows[0]["status"] == "vanished"


def test_comparison_is_computed_once(client, monkeypatch):
    import dlscope.viewer.compare_view as cv

    client.get("/compare", params={"_format": "json", "new_agg": 1})
    calls = []
    monkeypatch.setattr(cv, "compare", lambda *a, **k: calls.append(a) or pytest.fail("recomputed"))
    for _ in range(3):
        assert client.get("/compare", params={"_format": "json", "new_agg": 1}).status_code == 200
        assert client.get("/api/table/compare_ops", params={"new_agg": 1, "page": 2}).status_code == 200
    assert calls == []


def test_exports_of_a_derived_table(client):
    r = client.get("/api/table/compare_kernels/export.csv", params={"f.status": "new"})
    assert r.status_code == 200
    assert "tiny_resnet-vs-tiny_resnet_amp-compare_kernels.csv" in r.headers["content-disposition"]
    lines = r.text.splitlines()
    assert lines[0].startswith("Impact (ns),Change,Kernel Name") and len(lines) == 2 and XSS in lines[1]
    j = client.get("/api/table/compare_ops/export.json").json()
    assert len(j["rows"]) == client.get("/api/table/compare_ops").json()["total"]


@pytest.mark.parametrize("url, param", [
    ("/compare?_format=json&base=2", "base"),
    ("/compare?_format=json&new=x", "new"),
    ("/compare?_format=json&base_agg=5", "base_agg"),
    ("/compare?_format=json&new_agg=-1", "new_agg"),
    ("/compare?_format=json&ops.sort=nope", "ops.sort"),
    ("/compare?_format=json&types.f.status=", None),
    ("/compare?_format=json&bogus=1", "bogus"),
    ("/api/table/compare_ops?f.delta_gpu_time_ns=>1parsec", "f.delta_gpu_time_ns"),
    ("/api/table/compare_kernels?base_agg=7", "base_agg"),
])
def test_bad_parameters_answer_400(client, url, param):
    r = client.get(url)
    if param is None:
        assert r.status_code == 200  # an empty column search is no search
        return
    assert r.status_code == 400 and r.json()["parameter"] == param


def test_names_stay_text_and_menu(client):
    page = client.get("/compare").text
    assert XSS not in page and "\\u003cscript\\u003ealert(1)" in page
    views = {v["slug"]: v for v in client.get("/api/meta").json()["views"]}
    assert views["compare"]["menu"] is True


def test_one_database_offers_the_runs_next_to_it(pair, tmp_path):
    """With one database the Compare view lists the dlscope databases in its folder; only those can be opened."""
    import shutil

    base = shutil.copy(pair[0], tmp_path / "base.sqlite")
    other = shutil.copy(pair[1], tmp_path / "other.sqlite")
    (tmp_path / "junk.sqlite").write_text("not sqlite")
    own = {"Origin": "http://127.0.0.1:8000", "Content-Type": "application/json"}
    with TestClient(create_app([base]), base_url="http://127.0.0.1:8000") as c:
        r = c.get("/compare", params={"_format": "json"})
        assert r.status_code == 200 and r.json()["compare"] is None
        assert [Path(x["path"]).name for x in r.json()["choices"]] == ["other.sqlite"]
        assert c.get("/compare").status_code == 200
        assert next(v for v in c.get("/api/meta").json()["views"] if v["slug"] == "compare")["menu"]
        refused = c.post("/api/databases", content=json.dumps({"path": "/etc/passwd"}), headers=own)
        assert refused.status_code == 400 and refused.json()["parameter"] == "path"
        opened = c.post("/api/databases", content=json.dumps({"path": str(Path(other).resolve())}), headers=own)
        assert opened.status_code == 200 and opened.json()["key"] == "1"
        both = c.get("/compare", params={"_format": "json", "base": "0", "new": "1"}).json()
        assert both["compare"]["new"]["key"] == "1"
