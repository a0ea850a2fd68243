"""System facts (DLProf's System Configuration): each checked against the input read independently (the
Kineto header with gzip+json, the nsys export with sqlite3, torch itself for a capture), through the database,
the summary JSON and the viewer's dashboard."""

from __future__ import annotations

import gzip
import json
import os
import platform
import socket
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import data_file, data_files

from dlscope.importers import load
from dlscope.present.summary import render_summary, summary_dict
from dlscope.system import FACTS, cuda_version, cudnn_version, driver_version, job_facts

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def header(path: Path) -> dict:
    with gzip.open(path, "rt") as fh:
        doc = json.load(fh)
    return {k: v for k, v in doc.items() if k != "traceEvents"}


def stored(db: Path) -> dict:
    with sqlite3.connect(db) as conn:
        return dict(conn.execute("SELECT key, value FROM dlscope_meta"))


def query(path: Path, sql: str) -> list[tuple]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    conn.text_factory = lambda b: b.decode("utf-8", "replace")  # nsys 2022's GpuInfo value is not UTF-8
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def encodes(shown: str, raw: int) -> bool:
    """Whether "12.4" is CUDA's integer ``raw`` (1000 * major + 10 * minor), read back the other way."""
    major, minor = shown.split(".")
    return int(major) * 1000 + int(minor) * 10 == raw


def dashboard_rows(db: Path) -> dict:
    from starlette.testclient import TestClient

    from dlscope.viewer.app import create_app

    with TestClient(create_app([db]), base_url="http://127.0.0.1:8000") as client:
        body = client.get("/dashboard", params={"_format": "json"}).json()
    return dict(body["dashboard"]["system"])


# -- version numbers ---------------------------------------------------------------------------------------------

def test_versions_read_as_the_tools_print_them():
    assert [cuda_version(v) for v in (12010, 12090, 13000, "11070", 0, None, "x")] == \
        ["12.1", "12.9", "13.0", "11.7", None, None, None]
    assert [cudnn_version(v) for v in (8902, 90100, 7605)] == ["8.9.2", "9.1.0", "7.6.5"]
    # nsys before 2023 drops the driver's dots; 515.43.04 and 525.105.17 are real Linux drivers
    assert [driver_version(v) for v in ("5154304", "52510517", "530.30.02", "")] == \
        ["515.43.04", "525.105.17", "530.30.02", None]


# -- Kineto ------------------------------------------------------------------------------------------------------

KINETO_WITH_VERSIONS = ["hta_triton_a100.json.gz", "tracelens_h100_bert_small_infer.json.gz",
                        "hta_v100_ns_resolution_5steps.pt.trace.json.gz", "hta_a100_nccl_rank0of2_3steps.json.gz"]


@pytest.mark.parametrize("name", KINETO_WITH_VERSIONS)
def test_kineto_facts_are_the_header_s(name):
    path = data_file("kineto", name)
    head = header(path)
    facts = load(path).meta["system"]
    info = head.get("distributedInfo") or {}
    for key, raw in (("cuda_runtime_version", head.get("cuda_runtime_version")),
                     ("cuda_driver_version", head.get("cuda_driver_version"))):
        assert (key in facts) == (raw is not None)
        if raw is not None:
            assert encodes(facts[key], raw)
    assert facts.get("hostname") == head.get("host_name")
    assert facts.get("nccl_version") == info.get("nccl_version")
    assert facts.get("distributed_backend") == info.get("backend")
    assert facts["framework"] == "PyTorch"
    assert not {"cpu_model", "os", "gpu_driver_version", "cudnn_version", "nsys_version"} & set(facts)  # not there
    assert load(path).meta.get("trace_versions", {}).get("cuda_runtime_version") == head.get("cuda_runtime_version")


def test_kineto_facts_reach_the_database_summary_and_dashboard(import_db):
    path = data_file("kineto", "tracelens_h100_bert_small_infer.json.gz")
    head = header(path)
    db = import_db(path)
    meta = stored(db)
    assert encodes(meta["cuda_runtime_version"], head["cuda_runtime_version"])
    assert encodes(meta["cuda_driver_version"], head["cuda_driver_version"])
    assert meta["framework"] == "PyTorch" and meta["world_size"] == "1"
    assert "hostname" not in meta and "cpu_model" not in meta  # the trace does not say: absent, not ""
    system = summary_dict(db)["system"]
    assert set(system) == set(FACTS)
    assert system["cuda_runtime_version"] == meta["cuda_runtime_version"] and system["cpu_model"] is None
    assert system["world_size"] == 1
    rows = dashboard_rows(db)
    assert rows["CUDA Version"] == meta["cuda_runtime_version"]
    assert rows["CUDA Driver Version"] == meta["cuda_driver_version"]
    assert rows["Framework"] == "PyTorch" and "CPU Model" not in rows
    assert f"CUDA {meta['cuda_runtime_version']}" in render_summary(summary_dict(db))


def test_kineto_without_facts_says_nothing_of_them(import_db):
    db = import_db(data_file("kineto", "hta_event_sync_a100.json.gz"))
    meta = stored(db)
    assert not {k for k in FACTS if k not in ("framework", "world_size")} & set(meta)


# -- a job of several ranks --------------------------------------------------------------------------------------

def _rank_copy(src: Path, dst: Path, **keys) -> Path:
    with gzip.open(src, "rt") as fh:
        doc = json.load(fh)
    doc.update(keys)
    with gzip.open(dst, "wt") as fh:
        json.dump(doc, fh)
    return dst


def test_job_facts_agreed_once_differing_listed_in_rank_order(tmp_path):
    from dlscope.pipeline import build_database

    r0, r1 = data_file("kineto", "hta_128rank_sampled", "rank-0.json.gz"), data_file(
        "kineto", "hta_128rank_sampled", "rank-1.json.gz")
    heads = [header(r0), header(r1)]
    a = _rank_copy(r0, tmp_path / "a.json.gz", host_name="node-b", cuda_runtime_version=12010)
    b = _rank_copy(r1, tmp_path / "b.json.gz", host_name="node-a", cuda_runtime_version=12010)
    db = tmp_path / "job.sqlite"
    build_database([b, a], db, progress=False)  # given rank 1 first: the values still list in rank order
    meta = stored(db)
    assert meta["hostname"] == "node-b, node-a"  # rank 0's host first
    assert meta["cuda_runtime_version"] == "12.1"  # the ranks agree: once
    assert meta["world_size"] == str(heads[0]["distributedInfo"]["world_size"]) == "128"
    backends = {h["distributedInfo"]["backend"] for h in heads}
    assert len(backends) == 1 and meta["distributed_backend"] == backends.pop()
    rows = dashboard_rows(db)
    assert rows["Hostname"] == "node-b, node-a" and rows["World Size"] == "128" and rows["Ranks"] == 2
    assert summary_dict(db)["system"]["world_size"] == 128


def test_job_facts_of_ranks_that_know_different_things():
    sources = [{"rank": 1, "hostname": "n1", "world_size": 2, "system": {"cudnn_version": "9.1.0"}},
               {"rank": 0, "hostname": "n0", "world_size": 2, "system": {"framework": "PyTorch"}}]
    assert job_facts(sources, {"framework_version": "2.13.0", "framework": "JAX"}) == {
        "hostname": "n0, n1", "cudnn_version": "9.1.0", "framework": "PyTorch", "framework_version": "2.13.0",
        "world_size": "2"}


# -- nsys --------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", data_files("nsys_sqlite", "*.sqlite"), ids=lambda p: p.name)
def test_nsys_facts_are_the_export_s(path):
    env = dict(query(path, "SELECT name, value FROM TARGET_INFO_SYSTEM_ENV"))
    export_table = "META_DATA_EXPORT" if query(path, "SELECT 1 FROM sqlite_master WHERE name = 'META_DATA_EXPORT'") \
        else "EXPORT_META_DATA"
    export = dict(query(path, f"SELECT name, value FROM {export_table}"))
    facts = load(path).meta["system"]
    assert facts["hostname"] == env["Hostname"]
    assert facts["cpu_model"] == env["CpuDescription"]
    assert facts["os"] == env["OsDescription"]
    assert facts["nsys_version"] == export["EXPORT_PRODUCT_VERSION"]
    assert facts["gpu_driver_version"].replace(".", "") == env["NvDriverVersion"].replace(".", "")
    assert len(facts["gpu_driver_version"].split(".")) == 3
    assert encodes(facts["cuda_driver_version"], int(env["CudaDriverVersion"]))


def test_nsys_versions_from_the_profiled_process_environment(import_db):
    path = data_file("nsys_sqlite", "nvfuser_h200_nvtx_nsys2025.1.sqlite")
    env = {}
    for (value,) in query(path, "SELECT value FROM META_DATA_CAPTURE WHERE name LIKE '%ENVIRONMENT_VARIABLE'"):
        name, _, text = value.partition("=")
        env.setdefault(name, text.strip('"'))
    db = import_db(path)
    meta = stored(db)
    assert meta["cudnn_version"] == env["CUDNN_VERSION"]
    assert meta["cuda_runtime_version"] == env["CUDA_VERSION"]
    assert meta["nccl_version"] == env["NCCL_VERSION"]
    rows = dashboard_rows(db)
    sys_env = dict(query(path, "SELECT name, value FROM TARGET_INFO_SYSTEM_ENV"))
    assert rows["CPU Model"] == sys_env["CpuDescription"] and rows["GPU Driver Version"] == sys_env["NvDriverVersion"]
    assert rows["cuDNN Version"] == env["CUDNN_VERSION"]
    assert rows["NSys Version"] == meta["nsys_version"] and rows["Trace Format"] == "nsys"
    from dlscope.present.html_report import render_html_report

    header_html = render_html_report(db).split("</header>")[0]
    assert sys_env["CpuDescription"] in header_html and f"cuDNN {env['CUDNN_VERSION']}" in header_html
    labels = list(rows)
    assert labels.index("CPU Model") < labels.index("GPU Driver Version") < labels.index("CUDA Version") < \
        labels.index("cuDNN Version") < labels.index("NSys Version")  # DLProf's order


def test_nsys_without_environment_versions_leaves_them_out():
    facts = load(data_file("nsys_sqlite", "dlprof_pytorch_emit_nvtx_rtx2070s_nsys2022.1.sqlite")).meta["system"]
    assert not {"cudnn_version", "cuda_runtime_version", "framework"} & set(facts)


# -- a capture ---------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_a_torch_capture_records_torch_and_the_machine(tmp_path):
    torch = pytest.importorskip("torch")
    script, db, traces = tmp_path / "run.py", tmp_path / "run.sqlite", tmp_path / "traces"
    script.write_text(textwrap.dedent(f"""
        import torch, dlscope.capture as dl
        model = torch.nn.Linear(8, 8)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        with dl.profile({str(db)!r}, steps=2, wait=0, warmup=1, trace_dir={str(traces)!r}, summary=False):
            for _ in range(4):
                model(torch.randn(4, 8)).sum().backward()
                opt.step()
    """))
    import dlscope

    env = {**os.environ, "PYTHONPATH": str(Path(dlscope.__file__).parents[1])}  # this dlscope, whatever the cwd
    res = subprocess.run([sys.executable, str(script)], check=False, capture_output=True, text=True, cwd=tmp_path,
                         timeout=240, env=env)
    assert res.returncode == 0, res.stderr
    trace, = traces.glob("*.pt.trace.json")
    written = json.loads(trace.read_text())["dlscope_system"]  # the facts travel with the trace file
    meta = stored(db)
    assert written["framework_version"] == meta["framework_version"] == torch.__version__
    assert meta["framework"] == "PyTorch"
    assert meta["python_version"] == platform.python_version()
    assert meta["hostname"] == socket.gethostname()
    lscpu = ""
    if Path("/usr/bin/lscpu").exists():  # util-linux's reading of the CPU, not dlscope's
        lscpu = subprocess.run(["lscpu"], check=False, capture_output=True, text=True).stdout
    model = next((line.split(":", 1)[1].strip() for line in lscpu.splitlines() if line.startswith("Model name")), None)
    if model:
        assert meta["cpu_model"] == model
    if torch.version.cuda:
        assert meta["cuda_runtime_version"] == torch.version.cuda
    else:
        assert "cuda_runtime_version" not in meta  # a CPU build: no CUDA to report
    rows = dashboard_rows(db)
    assert rows["Framework"] == f"PyTorch {torch.__version__}"
    system = summary_dict(db)["system"]
    assert system["framework_version"] == torch.__version__ and system["python_version"] == platform.python_version()
