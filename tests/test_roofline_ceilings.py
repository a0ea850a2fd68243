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
    ("NVIDIA A100-PG509-200", "8.0", 108, "a100-pg509-200", "name"),  # the HTA A100 traces' GPU
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
    ("AMD Instinct MI100", "9.0", 120),             # an AMD GPU the table does not hold (CDNA 1)
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
    # no-FMA ceilings: half the FMA rate (an ADD or MUL does 1 FLOP where an FMA does 2)
    assert c.flops == {"fp64": 7.8e12, "fp32": 15.7e12, "fp16_tensor": 125e12}
    assert c.no_fma == {"fp32": 7.85e12, "fp64": 3.9e12}
    assert c.bandwidth == {"l1": 14.336e12, "l2": 2.99677e12, "dram": 900e9}
    assert c.sources["dram"] == "datasheet"
    assert c.sources["l1"].startswith("measured on a V100 SXM2") and "Empirical Roofline Toolkit" in c.sources["l2"]
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


def _specs() -> list[dict]:
    from importlib import resources

    return json.loads(resources.files("dlscope.data").joinpath("gpu_specs.json").read_text())["gpus"]


def test_a_sparse_figure_is_never_a_roof(tmp_path):
    """A datasheet's 2:4-sparse rate is twice the dense one: a spec giving only sparse tensor rates has no tensor
    roof at all, and with both the dense one is used."""
    spec = {"name": "sparse only", "fp32_flops": 19.5e12, "dram_bandwidth_bytes_per_s": 1.555e12,
            "fp16_tensor_flops_sparse": 624e12, "tf32_tensor_flops_sparse": 312e12}
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps(spec))
    c = load_spec_file(path)
    assert c.flops == {"fp32": 19.5e12}
    assert c.peak("fp16", True) is None and c.peak("fp32", True) is None
    path.write_text(json.dumps({**spec, "fp16_tensor_flops_dense": 312e12}))
    assert load_spec_file(path).peak("fp16", True) == ("fp16_tensor", 312e12)


def test_packaged_sparse_figures_are_twice_the_dense_and_never_returned():
    entries = [e for e in _specs() if any(e.get(k) for k in e if k.endswith("_sparse"))]
    assert {e["id"] for e in entries} >= {"a100-sxm4-40gb", "a100-pg509-200", "h100-sxm5", "h200-sxm", "b200"}
    for e in entries:
        c, _ = find_ceilings(e["name_strings"][0], e["compute_capability"], e["sm_count"])
        for precision in ("tf32", "fp16", "bf16", "fp8", "int8"):
            dense_field = f"{precision}_tensor_{'ops' if precision == 'int8' else 'flops'}_dense"
            sparse_field = dense_field.replace("_dense", "_sparse")
            if e.get(sparse_field) and e.get(dense_field):
                assert e[sparse_field] == pytest.approx(2 * e[dense_field], rel=0.02), e["id"]  # L40S: 362.05|733
            found = c.peak("fp32" if precision == "tf32" else precision, True)
            assert found is None or found[1] == e[dense_field] != e.get(sparse_field), e["id"]


def test_a100_pg509_200_has_the_a100_sxm4_40gb_dense_roofs():
    """The HTA traces' 'NVIDIA A100-PG509-200' (CC 8.0, 108 SMs, ~40 GB) gets the A100 SXM4 40 GB datasheet's dense
    peaks: TF32 156, FP16/BF16 312 TFLOP/s (624 'with sparsity'), FP32 19.5, 1,555 GB/s."""
    c, _ = find_ceilings("NVIDIA A100-PG509-200", "8.0", 108)
    assert c.peak("fp32", True) == ("tf32_tensor", 156e12)
    assert c.peak("fp16", True) == ("fp16_tensor", 312e12) and c.peak("bf16", True) == ("bf16_tensor", 312e12)
    assert c.peak("fp32", False) == ("fp32", 19.5e12) and c.bandwidth["dram"] == 1.555e12


def test_cuda_core_half_precision_uses_the_whitepaper_rate_where_known():
    """A100: 78 TFLOP/s FP16 and 39 BF16 (non-Tensor, Ampere whitepaper); H100 SXM5: twice its 67 FP32; a GPU
    without a published rate falls back to the FP32 pipe (V100 above)."""
    a100 = find_ceilings("NVIDIA A100-SXM4-80GB")[0]
    assert a100.peak("fp16", False) == ("fp16", 78e12) and a100.peak("bf16", False) == ("bf16", 39e12)
    assert "whitepaper" in a100.sources["fp16"]
    h100 = find_ceilings("NVIDIA H100 80GB HBM3")[0]
    assert h100.peak("fp16", False) == ("fp16", 134e12)
    assert find_ceilings("Tesla T4")[0].peak("fp16", False) == ("fp32", 8.1e12)


def test_every_added_field_says_where_it_comes_from():
    added = ("_sparse", "fp16_flops", "bf16_flops", "_no_fma_flops")
    for e in _specs():
        for k, v in e.items():
            if v and any(k.endswith(a) for a in added):
                assert e["field_sources"].get(k), (e["id"], k)
