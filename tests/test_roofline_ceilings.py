"""GPU ceilings: matching the GPUs of the real traces to data/gpu_specs.json, and the --gpu-spec file."""

from __future__ import annotations

import json

import pytest

from dlscope.errors import DlscopeError, InputError
from dlscope.roofline.ceilings import find_ceilings, load_spec_file, resolve_ceilings


@pytest.mark.parametrize("name, cc, sms, gpu_id, matched_by", [
    ("Tesla V100-SXM2-32GB", "7.0", 80, "v100-sxm2", "name"),
    ("Tesla V100-SXM2-16GB", "7.0", 80, "v100-sxm2", "name"),
    ("Tesla V100-DGXS-32GB", "7.0", 80, "v100-sxm2", "model"),       # same GV100 board family, approximate
    ("NVIDIA A100-SXM4-80GB", "8.0", 108, "a100-sxm4-80gb", "name"),
    ("NVIDIA A100-SXM4-40GB", "8.0", 108, "a100-sxm4-40gb", "name"),
    ("NVIDIA H100 80GB HBM3", "9.0", 132, "h100-sxm5", "name"),
    ("NVIDIA H200", "9.0", 132, "h200-sxm", "name"),
    ("NVIDIA B200", "10.0", 148, "b200", "name"),
    ("NVIDIA H100", "9.0", 114, "h100-pcie", "model"),                # SM count tells PCIe from SXM
])
def test_gpus_of_the_real_traces_match(name, cc, sms, gpu_id, matched_by):
    ceilings, reason = find_ceilings(name, cc, sms)
    assert ceilings is not None, reason
    assert ceilings.gpu_id == gpu_id and ceilings.matched_by == matched_by
    assert ceilings.flops["fp32"] > 0 and ceilings.bandwidth["dram"] > 0
    if matched_by == "model":
        assert "approximate" in ceilings.note


@pytest.mark.parametrize("name, cc, sms", [
    ("NVIDIA GeForce RTX 2070 SUPER", "7.5", 40),    # same CC/SMs as a T4: must not borrow the T4's roofs
    ("AMD Instinct MI300X", "9.4", 304),
    ("NVIDIA A10G", "8.6", 80),
    ("NVIDIA H100", None, None),                     # SXM5 or PCIe? ambiguous without SM count
    (None, "7.5", 40),
])
def test_unknown_or_ambiguous_gpus_say_how_to_supply_a_spec(name, cc, sms):
    ceilings, reason = find_ceilings(name, cc, sms)
    assert ceilings is None
    assert "--gpu-spec" in reason
    with pytest.raises(DlscopeError, match="--gpu-spec"):
        resolve_ceilings(name, cc, sms)


def test_v100_ceilings_values_and_hierarchy():
    c, _ = find_ceilings("Tesla V100-SXM2-32GB")
    assert c.flops == {"fp64": 7.8e12, "fp32": 15.7e12, "fp16_tensor": 125e12}
    assert c.bandwidth == {"l1": 14.336e12, "l2": 2.99677e12, "dram": 900e9}
    assert c.sources["dram"] == "datasheet" and c.sources["l1"].startswith("empirical")
    assert c.peak("fp16", True) == ("fp16_tensor", 125e12)
    assert c.peak("fp32", True) is None                       # Volta has no TF32
    assert c.peak("bf16", False) == ("fp32", 15.7e12)          # CUDA-core half math: FP32 pipe roof
    h = find_ceilings("NVIDIA H100 80GB HBM3")[0]
    assert h.peak("fp32", True)[0] == "tf32_tensor" and h.peak("fp8", True)[0] == "fp8_tensor"


def test_gpu_spec_file_overrides(tmp_path):
    spec = {"name": "My RTX 2070 SUPER", "fp32_flops": 9.06e12, "fp16_tensor_flops_dense": 57.4e12,
            "dram_bandwidth_bytes_per_s": 448e9, "l2_bandwidth_bytes_per_s": 1.5e12}
    one = tmp_path / "gpu.json"
    one.write_text(json.dumps(spec))
    c = load_spec_file(one)
    assert c.matched_by == "spec file" and c.name == "My RTX 2070 SUPER"
    assert c.flops == {"fp32": 9.06e12, "fp16_tensor": 57.4e12}
    assert c.bandwidth == {"l2": 1.5e12, "dram": 448e9}
    wrapped = tmp_path / "gpus.json"
    wrapped.write_text(json.dumps({"gpus": [spec]}))
    assert resolve_ceilings("anything", spec_path=wrapped).flops == c.flops


@pytest.mark.parametrize("text, problem", [
    ("{not json", "not JSON"),
    ('{"gpus": []}', "expected one GPU"),
    ('{"name": "x", "fp32_flops": 1e12}', "dram_bandwidth_bytes_per_s"),
    ("[1, 2]", "JSON object"),
])
def test_bad_spec_files_are_one_line_errors(tmp_path, text, problem):
    path = tmp_path / "gpu.json"
    path.write_text(text)
    with pytest.raises(InputError, match=problem):
        load_spec_file(path)
