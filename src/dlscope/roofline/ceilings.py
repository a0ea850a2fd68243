"""GPU ceilings for the roofline: peak FLOP/s per precision and bandwidth per memory level.

Values come from ``data/gpu_specs.json`` (datasheet peaks, dense, with sources) or from a user file given
with ``--gpu-spec`` (the same JSON shape for one GPU). A trace names its GPU by ``cudaDeviceProp.name``,
compute capability and SM count; matching is exact on the name first (narrowed by compute capability and SM
count when entries share a name: ROCm calls both an MI250X and an MI250 GCD 'AMD Instinct MI250X / MI250'), then
by model token (``V100``, ``A100``, ``H100``, ``MI300X``...) narrowed the same way. A different product that
merely shares CC and SM count (an RTX 2070 SUPER and a T4 are both 7.5/40) is never matched: a wrong roof is
worse than none, so an unknown GPU gets a reason that says how to supply a spec. AMD Instinct entries carry
the GFX IP version HIP reports as "compute capability" (gfx942 -> 9.4) and the CU count as "SMs".
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path

from dlscope.analyze.tensor_core import gpu_vendor
from dlscope.errors import DlscopeError, InputError, read_json_file

#: Peak-FLOP/s keys: (precision, on Tensor Cores) -> field of a gpu_specs.json entry, best first.
PEAK_FIELDS: dict[tuple[str, bool], tuple[str, ...]] = {
    ("fp64", False): ("fp64_flops",),
    ("fp64", True): ("fp64_tensor_flops", "fp64_flops"),
    ("fp32", False): ("fp32_flops",),
    ("tf32", True): ("tf32_tensor_flops_dense",),
    # FP32 on matrix units: AMD's matrix cores run FP32 itself (MFMA F32); NVIDIA's Tensor Cores run it as TF32.
    ("fp32", True): ("fp32_tensor_flops", "tf32_tensor_flops_dense"),
    ("fp16", True): ("fp16_tensor_flops_dense",),
    ("bf16", True): ("bf16_tensor_flops_dense",),
    ("fp8", True): ("fp8_tensor_flops_dense",),
    ("fp4", True): ("fp4_tensor_flops_dense",),
    ("int8", True): ("int8_tensor_ops_dense",),
    # CUDA-core half precision: the whitepaper's non-Tensor rate where known, else the FP32 pipe rate.
    ("fp16", False): ("fp16_flops", "fp32_flops"),
    ("bf16", False): ("bf16_flops", "fp32_flops"),
}

#: Ceiling names as they appear in reports and charts, and the spec field each reads. Tensor Core roofs are
#: the dense ones only: a datasheet's 2:4-sparse figure (``*_sparse`` fields) is twice the dense rate and is
#: never a roof (it would halve every utilization and MFU).
FLOP_CEILINGS = {
    "fp64": "fp64_flops", "fp64_tensor": "fp64_tensor_flops", "fp32": "fp32_flops", "fp32_tensor": "fp32_tensor_flops",
    "fp16": "fp16_flops", "bf16": "bf16_flops",
    "tf32_tensor": "tf32_tensor_flops_dense", "fp16_tensor": "fp16_tensor_flops_dense",
    "bf16_tensor": "bf16_tensor_flops_dense", "fp8_tensor": "fp8_tensor_flops_dense",
    "fp4_tensor": "fp4_tensor_flops_dense", "int8_tensor": "int8_tensor_ops_dense",
}
LEVELS = ("l1", "l2", "dram")
#: ERT's no-FMA ceilings (CUDA-core precisions): the rate of a code with no FMA instruction, half the FMA peak.
NO_FMA_FIELDS = {"fp32": "fp32_no_fma_flops", "fp64": "fp64_no_fma_flops"}

_SPEC_HINT = ("pass --gpu-spec FILE with one GPU in the shape of an entry of dlscope/data/gpu_specs.json "
              "(at least \"name\", \"fp32_flops\" and \"dram_bandwidth_bytes_per_s\"; optional "
              "\"l1_bandwidth_bytes_per_s\", \"l2_bandwidth_bytes_per_s\" and the *_tensor_flops_dense fields)")
_NOISE = re.compile(r"\b(nvidia|tesla|geforce|quadro)\b")


@dataclass
class GpuCeilings:
    """The roofs of one GPU and where they came from."""

    gpu_id: str
    name: str
    flops: dict[str, float]                 # FLOP_CEILINGS names -> FLOP/s (only known ones)
    bandwidth: dict[str, float]             # "l1" / "l2" / "dram" -> bytes/s (only known ones)
    matched_by: str = "name"                # "name", "model" (approximate) or "spec file"
    note: str = ""
    sources: dict[str, str] = field(default_factory=dict)
    no_fma: dict[str, float] = field(default_factory=dict)  # "fp32" / "fp64" -> FLOP/s without FMA instructions
    vendor: str = ""                        # "NVIDIA", "AMD" or "" (a spec file that does not say)

    def peak(self, precision: str | None, tensor: bool) -> tuple[str, float] | None:
        """(ceiling name, FLOP/s) for an op of this precision, on Tensor Cores or not."""
        for spec_field in PEAK_FIELDS.get((precision or "fp32", tensor), ()):
            for name, field_name in FLOP_CEILINGS.items():
                if field_name == spec_field and name in self.flops:
                    return name, self.flops[name]
        return None

    def matrix_precision(self, precision: str | None) -> str | None:
        """What an op of this input precision runs as on the matrix units: FP32 is TF32 on NVIDIA Tensor Cores,
        but FP32 itself on a GPU with an FP32 matrix rate (AMD CDNA matrix cores, MFMA F32)."""
        if precision == "fp32":
            return "fp32" if "fp32_tensor" in self.flops else "tf32"
        return precision

    def to_dict(self) -> dict:
        return {"gpu_id": self.gpu_id, "name": self.name, "vendor": self.vendor, "matched_by": self.matched_by,
                "note": self.note,
                "flops_per_s": dict(self.flops), "bytes_per_s": dict(self.bandwidth),
                "no_fma_flops_per_s": dict(self.no_fma), "sources": dict(self.sources)}


@lru_cache(maxsize=1)
def _packaged_specs() -> tuple[dict, ...]:
    data = json.loads(resources.files("dlscope.data").joinpath("gpu_specs.json").read_text())
    return tuple(data["gpus"])


def _normalize(name: str) -> str:
    return re.sub(r"\s+", " ", name.strip().lower())


def _tokens(name: str) -> list[str]:
    """Model tokens of a device name: 'Tesla V100-SXM2-32GB' -> ['v100', 'sxm2', '32gb']."""
    return re.findall(r"[a-z]*\d+[a-z]*", _NOISE.sub(" ", _normalize(name)))


def _model_token(entry: dict) -> str | None:
    names = entry.get("name_strings") or [entry.get("name", "")]
    tokens = _tokens(names[0])
    return tokens[0] if tokens else None


def _cc(entry: dict) -> str:
    return str(entry.get("compute_capability") or "")


def ceilings_from_entry(entry: dict, matched_by: str = "name", note: str = "") -> GpuCeilings:
    """Turn one gpu_specs.json entry (or a user spec) into ceilings; empty fields are left out."""
    flops = {name: float(entry[f]) for name, f in FLOP_CEILINGS.items() if entry.get(f)}
    # Cache roofs are published measurements, never datasheet rows: each cites its source in field_sources.
    bandwidth = {level: float(entry[f"{level}_bandwidth_bytes_per_s"]) for level in LEVELS
                 if entry.get(f"{level}_bandwidth_bytes_per_s")}
    cited = entry.get("field_sources") or {}
    fields = {**FLOP_CEILINGS, **{level: f"{level}_bandwidth_bytes_per_s" for level in bandwidth}}
    sources = {name: "spec file" if matched_by == "spec file" else cited.get(fields[name], "datasheet")
               for name in [*bandwidth, *flops]}
    no_fma = {p: float(entry[f]) for p, f in NO_FMA_FIELDS.items() if entry.get(f)}
    return GpuCeilings(gpu_id=str(entry.get("id") or entry.get("name") or "custom"),
                       name=str(entry.get("name") or entry.get("id") or "custom GPU"),
                       flops=flops, bandwidth=bandwidth, matched_by=matched_by, note=note, sources=sources,
                       no_fma=no_fma, vendor=str(entry.get("vendor") or gpu_vendor(str(entry.get("name") or "")) or ""))


def load_spec_file(path: str | Path) -> GpuCeilings:
    """A user's ``--gpu-spec`` file: one GPU object, or a gpu_specs.json-shaped file with one GPU."""
    path = Path(path)
    data = read_json_file(path, "GPU spec")
    if isinstance(data, dict) and isinstance(data.get("gpus"), list):
        if len(data["gpus"]) != 1:
            raise InputError(path, f"expected one GPU in \"gpus\", found {len(data['gpus'])}")
        data = data["gpus"][0]
    if not isinstance(data, dict):
        raise InputError(path, "expected a JSON object describing one GPU")
    ceilings = ceilings_from_entry(data, matched_by="spec file", note=f"from {path}")
    if not ceilings.flops or "dram" not in ceilings.bandwidth:
        raise InputError(path, "needs at least one peak FLOP/s field (e.g. \"fp32_flops\") and "
                               "\"dram_bandwidth_bytes_per_s\"")
    return ceilings


def _same_ceilings(entries: list[dict]) -> bool:
    keys = list(FLOP_CEILINGS.values()) + ["dram_bandwidth_bytes_per_s"]
    return len({tuple(e.get(k) for k in keys) for e in entries}) == 1


def find_ceilings(name: str | None = None, cc: str | None = None, sm_count: int | None = None,
                  specs: list[dict] | tuple[dict, ...] | None = None) -> tuple[GpuCeilings | None, str]:
    """Match a GPU to the spec table. Returns (ceilings, "") or (None, reason)."""
    specs = list(specs if specs is not None else _packaged_specs())
    cc = str(cc) if cc else None
    sm_count = int(sm_count) if sm_count and int(sm_count) > 0 else None
    label = name or f"CC {cc or '?'} with {sm_count or '?'} SMs"
    norm = _normalize(name or "")

    def fits(entry: dict) -> bool:
        return (cc is None or _cc(entry) == cc) and (sm_count is None or entry.get("sm_count") == sm_count)

    exact = [e for e in specs if norm and norm in (_normalize(s) for s in e.get("name_strings", []))]
    if len(exact) > 1:  # a name two products share: their compute capability and SM (CU) count decide
        exact = [e for e in exact if fits(e)]
        if len(exact) != 1 and not (exact and _same_ceilings(exact)):
            options = ", ".join(e["name"] for e in exact) or "none of them with this CC and SM count"
            return None, f"'{label}' names several GPUs of the table ({options}); {_SPEC_HINT}"
    if exact:
        return ceilings_from_entry(exact[0], "name"), ""
    if norm:
        tokens = _tokens(norm)
        candidates = [e for e in specs if tokens and _model_token(e) == tokens[0] and fits(e)]
        if not candidates:
            vendor = gpu_vendor(name)
            known = sorted(e["name"] for e in specs if vendor and e.get("vendor") == vendor)
            table = f"; its {vendor} entries: {', '.join(known)}" if known else ""
            return None, f"no ceilings for '{label}' (not in dlscope's GPU table{table}); {_SPEC_HINT}"
        if not _same_ceilings(candidates):
            scored = sorted(candidates, key=lambda e: -len(set(tokens) & set(_tokens(e["name_strings"][0]))))
            best = len(set(tokens) & set(_tokens(scored[0]["name_strings"][0])))
            ties = [e for e in scored if len(set(tokens) & set(_tokens(e["name_strings"][0]))) == best]
            if len(ties) > 1 and not _same_ceilings(ties):
                options = ", ".join(e["name"] for e in ties)
                return None, f"'{label}' is ambiguous ({options}); {_SPEC_HINT}"
            candidates = ties
        entry = candidates[0]
        units, version = ("CUs", "GFX") if entry.get("vendor") == "AMD" else ("SMs", "CC")
        note = (f"approximate: no exact entry for '{name}'; using {entry['name']} (same model "
                f"{tokens[0].upper()}, {version} {_cc(entry)}, {entry.get('sm_count')} {units}); for exact roofs "
                f"{_SPEC_HINT}")
        return ceilings_from_entry(entry, "model", note), ""
    return None, (f"no ceilings for '{label}': the device name is unknown and compute capability with SM "
                  f"count alone does not identify a product (a T4 and an RTX 2070 SUPER are both 7.5/40); "
                  f"{_SPEC_HINT}")


def resolve_ceilings(name: str | None = None, cc: str | None = None, sm_count: int | None = None,
                     spec_path: str | Path | None = None) -> GpuCeilings:
    """Ceilings from ``--gpu-spec`` when given, else from the table; DlscopeError when unknown."""
    if spec_path:
        return load_spec_file(spec_path)
    ceilings, reason = find_ceilings(name, cc, sm_count)
    if ceilings is None:
        raise DlscopeError(reason)
    return ceilings
