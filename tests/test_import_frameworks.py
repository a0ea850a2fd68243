"""TensorFlow / JAX / PaddlePaddle files import with the events the raw file holds, counted here independently.

The oracle for the TensorFlow run is its TensorBoard trace JSON read with the standard library (ts/dur as
exact decimals); the ``.xplane.pb`` of the same run must give the same kernels and copies, and its GPU
properties are checked against JAX's own XSpace decoder (C++, not the protobuf path) when JAX is installed.
"""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
from collections import Counter
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path

import pytest
from conftest import data_file

from dlscope.analyze.analysis import analyse
from dlscope.importers import load, sniff

TF = ("tf_trace", "tf2_keras_cnn_sm75.trace.json.gz")
XPLANE = ("tf_trace", "tf2_keras_cnn_sm75.xplane.pb")


def _ns(value) -> int:
    """µs as written to the nearest ns (TF prints doubles: 385129.98499999999 is 385129985 ns)."""
    return int((Decimal(str(value)) * 1000).to_integral_value(ROUND_HALF_EVEN))


def raw_tf_trace(path: Path) -> dict:
    """GPU activity and steps of a TensorBoard trace JSON, read straight from the file."""
    doc = json.loads(gzip.decompress(path.read_bytes()), parse_float=Decimal)
    procs, threads = {}, {}
    for ev in doc["traceEvents"]:
        if ev.get("ph") == "M" and ev.get("name") == "process_name":
            procs[ev["pid"]] = ev["args"]["name"]
        if ev.get("ph") == "M" and ev.get("name") == "thread_name":
            threads[(ev["pid"], ev["tid"])] = ev["args"]["name"]
    out: dict = {"kernels": [], "memcpy": [], "steps": 0, "annotations": {}}
    for ev in doc["traceEvents"]:
        if ev.get("ph") != "X" or not procs.get(ev["pid"], "").startswith("/device:GPU"):
            continue
        row = threads.get((ev["pid"], ev["tid"]), "")
        if row == "Steps":
            out["steps"] += 1
        if not row.startswith("Stream #"):
            continue
        span = (_ns(ev["ts"]), _ns(ev["ts"]) + _ns(ev["dur"]))
        out["memcpy" if ev["name"].startswith("Memcpy") else "kernels"].append(span)
        if not ev["name"].startswith("Memcpy"):
            out["annotations"][int(ev["args"]["correlation_id"])] = ev["args"].get("annotation", "")
    return out


def test_tf_trace_json_is_sniffed_and_imports_every_kernel_and_copy():
    path = data_file(*TF)
    raw = raw_tf_trace(path)
    assert sniff(path) == "tf_trace"
    profile = load(path)
    assert len(profile.kernels) == len(raw["kernels"]) > 0
    assert Counter(zip(profile.kernels["start"], profile.kernels["end"])) == Counter(raw["kernels"])
    assert int((profile.kernels["end"] - profile.kernels["start"]).sum()) == sum(e - s for s, e in raw["kernels"])
    assert Counter(zip(profile.memops["start"], profile.memops["end"])) == Counter(raw["memcpy"])
    steps = profile.ranges[profile.ranges["domain"] == "step"]
    assert len(steps) == raw["steps"] == 1


def test_tf_ops_own_the_kernels_their_annotation_names():
    """op→kernel link: after attribution each kernel's op is the TF node its annotation names."""
    path = data_file(*TF)
    raw = raw_tf_trace(path)
    an = analyse(load(path))
    kernels, ops = an.profile.kernels, an.profile.ops
    linked = kernels[kernels["op_id"] >= 0]
    assert len(linked) >= 0.95 * len(kernels)
    names = ops.set_index("op_id")["name"]
    for corr, op_id in zip(linked["correlation"], linked["op_id"]):
        annotation = raw["annotations"][int(corr)]
        assert names[op_id] == annotation.split("::")[-1].split(":")[0], annotation
    scoped = ops[ops["name"].str.startswith("model/conv1_1/")]
    assert len(scoped) and (scoped["scope"] == "model/conv1_1").all()
    assert (ops.loc[ops["name"].str.startswith("gradient_tape/"), "direction"] == "bwd").all()


def test_xplane_of_the_same_run_gives_the_same_gpu_activity():
    pytest.importorskip("google.protobuf", reason='reading .xplane.pb needs pip install "dlscope[xplane]"')
    raw = raw_tf_trace(data_file(*TF))
    path = data_file(*XPLANE)
    assert sniff(path) == "xspace"
    profile = load(path)
    assert Counter(zip(profile.kernels["start"], profile.kernels["end"])) == Counter(raw["kernels"])
    assert Counter(zip(profile.memops["start"], profile.memops["end"])) == Counter(raw["memcpy"])
    from_json = load(data_file(*TF))
    assert sorted(profile.ops["name"]) == sorted(from_json.ops["name"])
    assert (profile.kernels["grid_x"] > 0).all()  # kernel_details are in the protobuf only


def test_xplane_gpu_properties_match_jax_decoder():
    pytest.importorskip("google.protobuf", reason='reading .xplane.pb needs pip install "dlscope[xplane]"')
    profiler = pytest.importorskip("jax.profiler", reason="JAX's XSpace decoder is the oracle (dlscope[jax])")
    path = data_file(*XPLANE)
    data = profiler.ProfileData.from_file(str(path))
    plane = next(p for p in data.planes if p.name.startswith("/device:GPU"))
    stats = dict(plane.stats)
    gpu = load(path).gpus.iloc[0]
    assert (gpu["sm_count"], gpu["memory_bytes"], gpu["cc_major"], gpu["cc_minor"]) == (
        stats["core_count"], stats["memory_size"], stats["compute_cap_major"], stats["compute_cap_minor"])
    kernels = [e for line in plane.lines if line.name.startswith("Stream #") for e in line.events
               if not e.name.startswith("Memcpy")]
    assert len(load(path).kernels) == len(kernels)


def test_the_compiled_descriptor_is_the_shipped_proto():
    """data/xplane_descriptor.json was compiled from data/xplane.proto: same messages, fields, numbers."""
    root = Path(__file__).resolve().parents[1] / "src" / "dlscope" / "data"
    proto = (root / "xplane.proto").read_text()
    proto = re.sub(r"//.*", "", re.sub(r"/\*.*?\*/", "", proto, flags=re.DOTALL))
    declared = set()
    for message, body in re.findall(r"message (\w+) \{(.*?)\n\}", proto, flags=re.DOTALL):
        for field, number in re.findall(r"(\w+) = (\d+);", body):
            declared.add((message, field, int(number)))
    descriptor = json.loads((root / "xplane_descriptor.json").read_text())
    compiled = {(m["name"], f["name"], f["number"]) for m in descriptor["messageType"] for f in m["field"]}
    assert declared == compiled and len(compiled) > 20


def _cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "dlscope", *map(str, args)], check=False, capture_output=True,
                          text=True,
                          cwd=cwd, timeout=300)


@pytest.mark.parametrize("name, content", [
    ("kineto_meta_only.json", {"traceEvents": [{"ph": "M", "pid": 1, "name": "process_name",
                                                "args": {"name": "python"}}], "schemaVersion": 1}),
    ("tf_rows_only.trace.json", {"traceEvents": [{"ph": "M", "pid": 1, "name": "process_name",
                                                  "args": {"name": "/host:CPU"}}]}),
    ("paddle_meta_only.paddle_trace.json", {"span_index": "0", "traceEvents": [
        {"ph": "M", "pid": 7, "tid": "7(Python)", "name": "thread_name", "args": {"name": "MainThread"}}]}),
])
def test_a_file_without_modelled_events_is_an_error_not_an_empty_profile(tmp_path, name, content):
    trace = tmp_path / name
    trace.write_text(json.dumps(content))
    result = _cli("import", trace, "-o", tmp_path / "out.sqlite")
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and name in lines[0] and "no ops" in lines[0], result.stderr
    assert not (tmp_path / "out.sqlite").exists()


def test_tf_trace_imports_end_to_end_with_report(tmp_path):
    path = data_file(*TF)
    raw = raw_tf_trace(path)
    db = tmp_path / "tf.sqlite"
    assert _cli("import", path, "-o", db).returncode == 0
    summary = json.loads(_cli("summary", db, "--json").stdout)
    assert summary["profile"]["kernel_count"] == len(raw["kernels"])
    assert summary["profile"]["kernel_time_ns"] == sum(e - s for s, e in raw["kernels"])
    assert summary["aggregation"]["iterations_profiled"] == raw["steps"]
    parts = summary["aggregation"]["resource_breakdown_ns"]
    assert sum(parts.values()) == summary["aggregation"]["wall_clock_ns"]
    report = _cli("report", db, "-o", tmp_path / "reports", "--formats", "csv,md")
    assert report.returncode == 0, report.stderr
    assert any((tmp_path / "reports").iterdir())


def test_tf_profile_gets_tensorflow_advice_not_pytorch(tmp_path):
    """The TF run's FP32 convolutions (cuDNN winograd, sgemm: no Tensor Core kernel) get TF's AMP API."""
    db = tmp_path / "tf.sqlite"
    assert _cli("import", data_file(*TF), "-o", db).returncode == 0
    findings = {f["rule"]: f for f in json.loads(_cli("summary", db, "--json").stdout)["findings"]}
    amp = findings["amp_not_enabled"]
    assert amp["est_saving_ns"] > 0
    assert "tf.keras.mixed_precision" in amp["recommendation"] and "torch" not in amp["recommendation"]


def test_framework_detection_reads_what_the_importers_wrote():
    import pandas as pd

    from dlscope.experts.frameworks import advice, detect

    none = pd.DataFrame({"name": pd.Series([], dtype=object)})
    ops = pd.DataFrame({"op_type": ["PjitFunction", "dot"]})
    ranges = pd.DataFrame({"domain": ["step"]})
    assert detect(ops, ranges, none) == "jax"
    assert detect(pd.DataFrame({"op_type": ["matmul"]}), pd.DataFrame({"domain": ["paddle_phase"]}), none) == "paddle"
    assert detect(pd.DataFrame({"op_type": ["aten::mm"]}), ranges, none) == "torch"
    assert "jax.jit" in advice("launch_bound", "jax", "training", "torch words")
    assert advice("launch_bound", "torch", "training", "torch words") == "torch words"
