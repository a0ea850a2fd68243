"""Roofline view over HTTP: JSON twin, numbers against a hand computation, derived tables, bad parameters, names
that stay text, and the unknown-GPU message."""

from __future__ import annotations

import json
import sqlite3

import pytest
from starlette.testclient import TestClient
from test_viewer_fixtures import make_profile_db

from dlscope.roofline import NCU_DDL
from dlscope.viewer.app import create_app

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
XSS = "<script>alert(1)</script>"
M = N = K = 1024
CALLS, GPU_NS = 10, 2_000_000
A100_FP32, A100_DRAM = 19.5e12, 2.039e12   # data/gpu_specs.json, A100 SXM4 80GB (checked in the test below)


def add_roofline_rows(path, gpu_name: str | None = "NVIDIA A100-SXM4-80GB"):
    """An fp32 matmul op (op type named like a script) and an ncu kernel named like a script."""
    conn = sqlite3.connect(path)
    conn.execute("INSERT INTO op_nodes (node_id, rank, name, op_type, direction, scope, input_shapes, input_dtypes, "
                 "concrete_inputs, data_type, tc_eligible) VALUES (6, 0, 'aten::mm', ?, 'fwd', 'model/head', ?, ?, ?, "
                 "'float32', 1)",
                 (XSS, json.dumps([[M, K], [K, N]]), json.dumps(["float", "float"]), json.dumps(["", ""])))
    conn.execute("INSERT INTO agg_ops (agg_id, node_id, rank, op_name, op_type, direction, scope, calls, kernel_count, "
                 "gpu_time_ns, cpu_time_ns, tc_eligible, using_tc) "
                 "VALUES (1, 6, 0, 'aten::mm', ?, 'fwd', 'model/head', "
                 "?, ?, ?, 50000, 1, 0)", (XSS, CALLS, CALLS, GPU_NS))
    conn.executescript(NCU_DDL)
    conn.execute("INSERT INTO ncu_kernels (kernel_id, kernel_name, device_name, cc, time_ns, flops_fp32, bytes_l1, "
                 "bytes_l2, bytes_dram) VALUES (1, ?, 'NVIDIA A100-SXM4-80GB', '8.0', 1e6, 4e9, 4e8, 2e8, 1e8)", (XSS,))
    if gpu_name is None:
        conn.execute("UPDATE gpus SET name = NULL, cc_major = -1, cc_minor = -1, sm_count = NULL")
        conn.execute("UPDATE ncu_kernels SET device_name = NULL, cc = NULL")
    conn.commit()
    conn.close()
    return path


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    db = add_roofline_rows(make_profile_db(tmp_path_factory.mktemp("roof") / "roof.sqlite"))
    with TestClient(create_app([db]), base_url="http://127.0.0.1:8000") as c:
        yield c


@pytest.fixture(scope="module")
def unknown_client(tmp_path_factory):
    db = add_roofline_rows(make_profile_db(tmp_path_factory.mktemp("roofu") / "unknown.sqlite"), gpu_name=None)
    with TestClient(create_app([db]), base_url="http://127.0.0.1:8000") as c:
        yield c


def test_json_twin_places_the_matmul_like_a_hand_computation(client):
    d = client.get("/roofline", params={"_format": "json"}).json()
    r = d["roofline"]
    assert r["ceilings"]["flops_per_s"]["fp32"] == A100_FP32 and r["ceilings"]["bytes_per_s"]["dram"] == A100_DRAM
    op = next(o for o in r["ops"] if o["node_id"] == 6)
    flops = 2 * M * N * K * CALLS
    nbytes = 4 * (M * K + K * N + M * N) * CALLS
    assert op["arithmetic_intensity"] == pytest.approx(flops / nbytes)
    assert op["achieved_flops_per_s"] == pytest.approx(flops / (GPU_NS * 1e-9))
    assert op["bound"] == "math"  # 170.7 FLOP/B is right of the fp32 ridge 19.5e12 / 2.039e12 = 9.6
    assert op["pct_of_ceiling"] == pytest.approx(100 * flops / (GPU_NS * 1e-9) / A100_FP32)
    row = next(x for x in d["tables"]["ops"]["rows"] if x["node_id"] == 6)
    assert row["achieved_tflops"] == pytest.approx(flops / (GPU_NS * 1e-9) / 1e12)
    assert row["pct_of_roof"] == pytest.approx(op["pct_of_ceiling"] / 100)
    assert r["summary"]["math_bound_gpu_time_ns"] >= GPU_NS
    k = r["kernels"][0]
    assert k["ai_dram"] == pytest.approx(4e9 / 1e8) and k["ai_l1"] == pytest.approx(4e9 / 4e8)
    assert d["tables"]["kernels"]["total"] == 1


def test_ops_table_sorts_filters_pages_and_exports(client):
    body = client.get("/api/table/roofline_ops", params={"sort": "arithmetic_intensity", "order": "asc"}).json()
    ais = [r["arithmetic_intensity"] for r in body["rows"]]
    assert ais == sorted(ais) and body["total"] >= 1
    math_rows = client.get("/api/table/roofline_ops", params={"f.bound": "math", "f.pct_of_roof": ">50"}).json()
    assert all(r["bound"] == "math" and r["pct_of_roof"] > 0.5 for r in math_rows["rows"])
    assert any(r["node_id"] == 6 for r in math_rows["rows"])
    csv_text = client.get("/api/table/roofline_ops/export.csv").text
    assert csv_text.splitlines()[0].startswith("GPU Time (ns),Op Name")
    twin = client.get("/roofline", params={"_format": "json", "ops.sort": "calls", "ops.order": "asc"}).json()
    assert twin["tables"]["ops"]["rows"] == client.get("/api/table/roofline_ops",
                                                       params={"sort": "calls", "order": "asc"}).json()["rows"]


@pytest.mark.parametrize("url, param", [
    ("/roofline?_format=json&ops.sort=nope", "ops.sort"),
    ("/roofline?_format=json&kernels.size=7", "kernels.size"),
    ("/roofline?_format=json&agg=42", "agg"),
    ("/roofline?_format=json&base=1", "base"),
    ("/api/table/roofline_ops?f.pct_of_roof=lots", "f.pct_of_roof"),
    ("/api/table/roofline_kernels?order=up", "order"),
])
def test_bad_parameters_answer_400(client, url, param):
    r = client.get(url)
    assert r.status_code == 400 and r.json()["parameter"] == param


def test_names_stay_text(client):
    page = client.get("/roofline").text
    assert XSS not in page and "\\u003cscript\\u003ealert(1)" in page
    kernels = client.get("/api/table/roofline_kernels", params={"f.kernel_name": "script"}).json()["rows"]
    assert kernels[0]["kernel_name"] == XSS
    assert client.get("/api/table/roofline_ops", params={"q": "<script>"}).json()["rows"][0]["op_type"] == XSS


def test_unknown_gpu_keeps_the_ops_and_says_how_to_pass_a_spec(unknown_client, tmp_path):
    r = unknown_client.get("/roofline", params={"_format": "json"}).json()["roofline"]
    assert r["ceilings"] is None and "--gpu-spec" in r["ceilings_error"] and "--gpu-spec" in r["ceilings_hint"]
    op = next(o for o in r["ops"] if o["node_id"] == 6)
    assert op["bound"] is None and op["achieved_flops_per_s"] == pytest.approx(2 * M * N * K * CALLS / 2e-3)
    assert "Roofline" in unknown_client.get("/roofline").text


def test_gpu_spec_file_gives_the_roofs(tmp_path):
    db = add_roofline_rows(make_profile_db(tmp_path / "spec.sqlite"), gpu_name=None)
    spec = tmp_path / "gpu.json"
    spec.write_text(json.dumps({"name": "Lab GPU", "fp32_flops": 10e12, "dram_bandwidth_bytes_per_s": 1e12}))
    with TestClient(create_app([db], gpu_spec=spec), base_url="http://127.0.0.1:8000") as c:
        r = c.get("/roofline", params={"_format": "json"}).json()["roofline"]
    assert r["ceilings"]["name"] == "Lab GPU" and r["ceilings_error"] is None
    assert next(o for o in r["ops"] if o["node_id"] == 6)["bound"] == "math"


def test_roofline_is_in_the_menu(client):
    views = {v["slug"]: v for v in client.get("/api/meta").json()["views"]}
    assert views["roofline"]["menu"] is True and views["compare"]["menu"] is True  # it offers the second run
