"""The Timeline API on a real imported trace: the events of a window, sent one by one or summed per pixel, are
every event of that window (counted independently in SQL and in the raw JSON), at any width; bad parameters
answer 400 naming the parameter; links resolve to the right window; event details carry the kernel's shape."""

from __future__ import annotations

import pytest
from conftest import data_file, sql
from raw_kineto import KERNEL_CATS, MEMOP_CATS, events
from starlette.testclient import TestClient
from test_viewer_fixtures import XSS_KERNEL, make_profile_db

from dlscope.viewer.app import create_app

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
BASE = "http://127.0.0.1:8000"
TRACE = ("kineto", "hta_a100_nccl_rank0of2_3steps.json.gz")


@pytest.fixture(scope="module")
def real(import_db):
    return import_db(data_file(*TRACE))


@pytest.fixture(scope="module")
def client(real):
    with TestClient(create_app([real]), base_url=BASE) as c:
        yield c


def shown(body: dict, kind: str) -> int:
    """Events of ``kind`` the response accounts for: sent one by one plus summed in the pixel buckets."""
    total = 0
    for lane in body["lanes"]:
        if lane["kind"] != kind:
            continue
        cell = body["data"].get(str(lane["id"]))
        if cell:
            total += len(cell["events"].get("id", [])) + sum((cell["buckets"] or {}).get("count", []))
    return total


def iteration_windows(db) -> list[tuple[int, int, int]]:
    return sql(db, 'SELECT iteration, start, "end" FROM agg_iterations WHERE agg_id = '
                   "(SELECT MAX(agg_id) FROM aggregations) ORDER BY iteration")


@pytest.mark.parametrize("width", [1, 300, 1500, 8192])
def test_kernels_of_an_iteration_window_are_all_there(client, real, width):
    raw = [e for e in events(data_file(*TRACE)) if e.cat in KERNEL_CATS]
    raw_mem = [e for e in events(data_file(*TRACE)) if e.cat in MEMOP_CATS]
    for iteration, start, end in iteration_windows(real):
        r = client.get("/api/timeline", params={"rank": 0, "start": start, "end": end, "width": width})
        assert r.status_code == 200, r.text
        body = r.json()
        in_sql = sql(real, 'SELECT COUNT(*) FROM kernels WHERE rank = 0 AND start < ? AND "end" > ?',
                     (end, start))[0][0]
        in_json = sum(1 for e in raw if e.start < end and e.end > start)
        assert shown(body, "kernel") == body["counts"]["kernel"] == in_sql == in_json > 0, iteration
        mem_json = sum(1 for e in raw_mem if e.start < end and e.end > start)
        assert shown(body, "memop") == body["counts"]["memop"] == mem_json, iteration
        # nothing is drawn outside the lanes' pixel columns
        for cell in body["data"].values():
            if cell["buckets"]:
                assert all(0 <= c < width for c in cell["buckets"]["col"])


def test_zooming_in_sends_events_instead_of_sums(client, real):
    _, start, end = iteration_windows(real)[0]
    wide = client.get("/api/timeline", params={"rank": 0, "start": start, "end": end, "width": 100}).json()
    k = sql(real, 'SELECT start, "end" FROM kernels WHERE rank = 0 AND start >= ? ORDER BY dur DESC LIMIT 1',
            (start,))[0]
    narrow = client.get("/api/timeline", params={"rank": 0, "start": k[0], "end": k[1], "width": 1000}).json()
    assert 1 <= narrow["shown"]["kernel"] and shown(narrow, "kernel") == narrow["counts"]["kernel"]
    assert wide["shown"]["kernel"] < wide["counts"]["kernel"]
    # times are relative to the rank's first event and exact
    first = int(narrow["origin"])
    starts = {first + s for i, c in narrow["data"].items() if narrow["lanes"][int(i)]["kind"] == "kernel"
              for s in c["events"].get("start", [])}
    assert k[0] in starts


def test_kernels_carry_their_launch(client, real):
    _, start, end = iteration_windows(real)[1]
    body = client.get("/api/timeline", params={"rank": 0, "start": start, "end": end, "width": 8192}).json()
    runtime = {lane["id"] for lane in body["lanes"] if lane["kind"] == "runtime"}
    linked = 0
    for i, cell in body["data"].items():
        if body["lanes"][int(i)]["kind"] == "kernel" and cell["events"].get("id"):
            e = cell["events"]
            for launch, lane, s in zip(e["launch"], e["launch_lane"], e["start"]):
                if launch is not None and lane is not None:
                    assert lane in runtime and launch <= s
                    linked += 1
    assert linked > 0


@pytest.mark.parametrize("params, name", [
    ({"start": "1"}, "end"),
    ({"end": "1"}, "start"),
    ({"start": "10", "end": "10"}, "end"),
    ({"start": "x", "end": "10"}, "start"),
    ({"start": "1", "end": "10", "width": "0"}, "width"),
    ({"start": "1", "end": "10", "width": "99999"}, "width"),
    ({"start": "1", "end": "10", "rank": "7"}, "rank"),
    ({"start": "1", "end": "99999999999999999999"}, "end"),
])
def test_bad_window_parameters_are_400(client, params, name):
    r = client.get("/api/timeline", params=params)
    assert r.status_code == 400
    assert r.json()["parameter"] == name


def test_event_details(client, real):
    kid = sql(real, "SELECT kernel_id FROM kernels WHERE uses_tc = 1 LIMIT 1")[0][0]
    d = client.get("/api/timeline/event", params={"kind": "kernel", "id": kid}).json()
    assert d["grid"].count("×") == 2 and d["block"].count("×") == 2
    assert d["tensor_core"] == "uses Tensor Cores"
    assert d["op_name"]
    op = sql(real, "SELECT op_id FROM op_instances WHERE input_shapes IS NOT NULL LIMIT 1")[0][0] \
        if sql(real, "SELECT 1 FROM pragma_table_info('op_instances') WHERE name = 'input_shapes'") else \
        sql(real, "SELECT op_id FROM op_instances LIMIT 1")[0][0]
    assert client.get("/api/timeline/event", params={"kind": "op", "id": op}).json()["name"]
    assert client.get("/api/timeline/event", params={"kind": "kernel", "id": 10**12}).status_code == 404
    assert client.get("/api/timeline/event", params={"kind": "nope", "id": 1}).json()["parameter"] == "kind"
    assert client.get("/api/timeline/event", params={"kind": "kernel", "id": "x"}).json()["parameter"] == "id"


def test_links_open_the_right_window(client, real):
    iteration, start, end = iteration_windows(real)[1]
    t = client.get("/timeline", params={"iteration": iteration, "_format": "json"}).json()["timeline"]
    assert (int(t["start"]), int(t["end"])) == (start, end)
    kid, ks, ke = sql(real, 'SELECT kernel_id, start, "end" FROM kernels ORDER BY kernel_id LIMIT 1')[0]
    t = client.get("/timeline", params={"kernel": kid, "_format": "json"}).json()["timeline"]
    assert int(t["start"]) < ks and int(t["end"]) > ke and t["focus"] == {"kind": "kernel", "id": kid}
    node, = sql(real, "SELECT node_id FROM agg_ops WHERE agg_id = (SELECT MAX(agg_id) FROM aggregations) "
                      "ORDER BY gpu_time_ns DESC LIMIT 1")[0]
    t = client.get("/timeline", params={"node": node, "_format": "json"}).json()["timeline"]
    op, os_, oe = sql(real, 'SELECT op_id, start, "end" FROM op_instances WHERE op_id = ?', (t["focus"]["id"],))[0]
    assert int(t["start"]) < os_ and int(t["end"]) > oe
    assert client.get("/timeline", params={"kernel": 10**12, "_format": "json"}).status_code == 400
    assert client.get("/timeline", params={"start": 5, "end": 1, "_format": "json"}).json()["parameter"] == "end"


def test_finding_time_ranges_are_links(client, real):
    findings = client.get("/dashboard", params={"_format": "json"}).json()["dashboard"]["findings"]
    ranged = [f for f in findings if f["links"].get("time_ranges")]
    assert ranged, "the real trace has findings with evidence time ranges"
    a, b = ranged[0]["links"]["time_ranges"][0]
    t = client.get("/timeline", params={"start": a, "end": b, "_format": "json"}).json()["timeline"]
    assert (t["start"], t["end"]) == (a, b)


def test_names_stay_data_on_a_tiny_profile(tmp_path):
    db = make_profile_db(tmp_path / "tiny.sqlite")
    with TestClient(create_app([db]), base_url=BASE) as c:
        lo, hi = sql(db, 'SELECT MIN(start), MAX("end") FROM kernels')[0]
        body = c.get("/api/timeline", params={"start": lo, "end": hi + 1, "width": 8192}).json()
        assert XSS_KERNEL in body["names"] or shown(body, "kernel") == body["counts"]["kernel"]
        assert shown(body, "kernel") == sql(db, "SELECT COUNT(*) FROM kernels WHERE rank = ?", (body["rank"],))[0][0]


def test_each_rank_of_a_job_has_its_timeline(import_db):
    job = import_db(data_file("kineto", "param_dlrm_8rank_v100"))
    with TestClient(create_app([job]), base_url=BASE) as c:
        for rank in (0, 3, 7):
            t = c.get("/timeline", params={"rank": rank, "_format": "json"}).json()["timeline"]
            agg = sql(job, "SELECT agg_id FROM aggregations WHERE rank = ? ORDER BY agg_id DESC LIMIT 1", (rank,))[0][0]
            first = sql(job, 'SELECT start, "end" FROM agg_iterations WHERE agg_id = ? AND rank = ? AND profiled = 1 '
                             "ORDER BY iteration LIMIT 1", (agg, rank))[0]
            assert t["rank"] == rank and (int(t["start"]), int(t["end"])) == first
            body = c.get("/api/timeline", params={"rank": rank, "start": t["start"], "end": t["end"]}).json()
            in_sql = sql(job, 'SELECT COUNT(*) FROM kernels WHERE rank = ? AND start < ? AND "end" > ?',
                         (rank, first[1], first[0]))[0][0]
            assert shown(body, "kernel") == body["counts"]["kernel"] == in_sql > 0


@pytest.mark.parametrize("start, end, status", [
    (-(2 ** 63), 0, 400),                        # longer than MAX_SPAN
    (-(2 ** 63), -(2 ** 63) + 10, 200),          # far before every event: an empty window
    (2 ** 63 - 10, 2 ** 63 - 1, 200),
    (0, 2 ** 62, 200),
])
def test_windows_at_the_edges_of_int64(client, start, end, status):
    r = client.get("/api/timeline", params={"start": start, "end": end, "width": 8192})
    assert r.status_code == status, r.text
    if status == 200:
        assert sum(r.json()["counts"].values()) >= 0
