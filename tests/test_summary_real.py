"""Every real profile in ../shared/data imports, and the summary matches counts made straight from the file."""

from __future__ import annotations

import gzip
import json
import re
import sqlite3

import pytest
from conftest import data_files

from dlscope.present.summary import summary_dict

KINETO = data_files("kineto", "**/*.json.gz")
NSYS = data_files("nsys_sqlite", "*.sqlite")
BREAKDOWN_SUM = ("tensor_core_ns + non_tensor_core_ns + memory_ns + dataloader_ns + io_ns + cpu_ns + other_ns")


def raw_kineto(path):
    """Independent counts from the raw JSON: kernels, their summed duration (ns), distinct ProfilerSteps."""
    with gzip.open(path, "rt") as f:
        doc = json.load(f)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    kernels = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "Kernel")]
    steps = {e["name"] for e in events if e.get("ph") == "X" and re.fullmatch(r"ProfilerStep#\d+", str(e.get("name")))}
    memcpy = sum(1 for e in events if e.get("ph") == "X" and e.get("cat") in ("gpu_memcpy", "Memcpy"))
    return len(kernels), sum(round(e["dur"] * 1000) for e in kernels), len(steps), memcpy


def raw_nsys(path):
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    count, total = conn.execute(
        "SELECT COUNT(*), COALESCE(SUM(end - start), 0) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
    return count, total


@pytest.mark.parametrize("path", KINETO, ids=lambda p: p.name)
def test_kineto_summary_matches_raw_counts(path, import_db):
    kernels, kernel_ns, steps, memcpy = raw_kineto(path)
    s = summary_dict(import_db(path))
    assert s["profile"]["kernel_count"] == kernels
    assert s["profile"]["kernel_time_ns"] == kernel_ns
    assert s["profile"]["memcpy_count"] == memcpy
    if steps:
        assert s["profile"]["iterations_total"] == steps
        assert s["profile"]["iteration_method"] == "profiler_step"


@pytest.mark.parametrize("path", NSYS, ids=lambda p: p.name)
def test_nsys_summary_matches_raw_counts(path, import_db):
    kernels, kernel_ns = raw_nsys(path)
    s = summary_dict(import_db(path))
    assert s["profile"]["kernel_count"] == kernels
    assert s["profile"]["kernel_time_ns"] == kernel_ns
    assert len(s["profile"]["gpus"]) >= 1


@pytest.mark.parametrize("path", KINETO + NSYS, ids=lambda p: p.name)
def test_database_is_intact_and_holds_every_op_of_the_model(path, import_db):
    conn = sqlite3.connect(import_db(path))
    assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    instances, joined = conn.execute(
        "SELECT (SELECT COUNT(*) FROM op_instances), (SELECT COUNT(*) FROM ops)").fetchone()
    assert instances == joined  # every call has its op node


@pytest.mark.parametrize("path", KINETO + NSYS, ids=lambda p: p.name)
def test_resource_breakdown_adds_up_to_wall_clock_per_aggregation_and_iteration(path, import_db):
    conn = sqlite3.connect(import_db(path))
    for wall, parts in conn.execute(f"SELECT wall_clock_ns, {BREAKDOWN_SUM} FROM aggregations"):
        assert parts == wall
    for duration, parts in conn.execute(f"SELECT duration_ns, {BREAKDOWN_SUM} FROM agg_iterations"):
        assert parts == duration


@pytest.mark.parametrize("path", KINETO + NSYS, ids=lambda p: p.name)
def test_kernels_are_attributed_to_their_launching_op(path, import_db):
    """≥99% of kernels whose launch call is in the trace get a launching op (files with ops and ≥20 launches)."""
    conn = sqlite3.connect(import_db(path))
    launched, attributed = conn.execute("SELECT SUM(api_id >= 0), SUM(op_id >= 0) FROM kernels").fetchone()
    ops = conn.execute("SELECT COUNT(*) FROM ops").fetchone()[0]
    if not launched or launched < 20 or not ops:
        pytest.skip(f"{launched or 0} launched kernels, {ops} ops: too few to measure coverage")
    assert attributed / launched >= 0.99


def test_gpu_utilization_is_null_without_gpu_and_a_fraction_with_one(import_db):
    from conftest import data_file

    cpu = summary_dict(import_db(data_file("kineto", "hta_cpu_only_no_gpu.pt.trace.json.gz")))
    assert cpu["profile"]["kernel_count"] == 0
    assert cpu["aggregation"]["gpu_utilization"] is None
    gpu = summary_dict(import_db(data_file("kineto", "tbplugin_resnet50_v100_workers0.pt.trace.json.gz")))
    assert 0 < gpu["aggregation"]["gpu_utilization"] <= 1


def test_dataloader_share_collapses_with_four_workers(import_db):
    """Seed 000's story on real ResNet-50 traces: 0 workers starve the GPU while the batch loads."""
    from conftest import data_file

    def share(name):
        a = summary_dict(import_db(data_file("kineto", name)))["aggregation"]
        return a["resource_breakdown_ns"]["dataloader"] / a["wall_clock_ns"]

    assert share("tbplugin_resnet50_v100_workers0.pt.trace.json.gz") > 0.2
    assert share("tbplugin_resnet50_v100_workers4.pt.trace.json.gz") < 0.05


def test_bf16_inference_uses_tensor_cores(import_db):
    from conftest import data_file

    a = summary_dict(import_db(data_file("kineto", "tracelens_h100_bert_small_infer.json.gz")))["aggregation"]
    assert a["tc_kernel_efficiency"] > 0.9


def test_summary_json_has_the_documented_contract(import_db):
    from conftest import data_file

    s = summary_dict(import_db(data_file("kineto", "hta_v100_rank1of2_5steps.json.gz")))
    assert set(s) >= {"schema_version", "profile_name", "profile", "aggregation", "findings"}
    assert set(s["profile"]) >= {"kernel_count", "kernel_time_ns", "memcpy_count", "memset_count", "op_count",
                                 "iterations_total", "iteration_method", "ranks", "gpus"}
    assert set(s["aggregation"]) >= {"iter_start", "iter_stop", "iterations_profiled", "key_node", "wall_clock_ns",
                                     "avg_iteration_ns", "gpu_utilization", "tc_kernel_efficiency",
                                     "resource_breakdown_ns", "top_gpu_ops"}
    assert set(s["aggregation"]["resource_breakdown_ns"]) == {"tensor_core", "non_tensor_core", "memory",
                                                              "dataloader", "io", "cpu", "other"}
    assert set(s["aggregation"]["top_gpu_ops"][0]) >= {"op_name", "op_type", "gpu_time_ns", "calls", "tc_eligible",
                                                       "using_tc"}
    assert {"device", "name", "sm_count"} <= set(s["profile"]["gpus"][0])
    json.dumps(s)
