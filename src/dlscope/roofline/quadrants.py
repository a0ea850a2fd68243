"""Run-level compute and memory-bandwidth utilization, the four quadrants of seed 002 and advice per quadrant.

Seed 002 calls work *math limited* when its compute utilization (achieved FLOP/s ÷ peak) is high while memory
utilization (achieved bytes/s ÷ peak bandwidth) is not, *memory limited* the other way round; high is ~0.7.
A run mixes precisions, so its compute utilization weighs each op by its own roof: Σ(FLOPs_i ÷ peak_i) ÷ Σ
time_i, the share of the time the math units of each op's precision would have needed at peak. Memory
utilization is Σ bytes_i ÷ Σ time_i ÷ DRAM bandwidth. Thresholds and advice are data
(``data/roofline_advice.json``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from functools import lru_cache
from importlib import resources

QUADRANTS = ("compute_bound", "memory_bound", "both_high", "both_low")


@lru_cache(maxsize=1)
def _advice() -> dict:
    return json.loads(resources.files("dlscope.data").joinpath("roofline_advice.json").read_text())


def high_utilization() -> float:
    return float(_advice()["high_utilization"])


def min_math_share() -> float:
    """Below this share of the placed ops' time in ops doing math, no precision dominates the run."""
    return float(_advice()["min_math_share"])


def min_modelled_share() -> float:
    """Below this share of the op GPU time, the modelled ops are too few to judge the run's quadrant."""
    return float(_advice()["min_modelled_share"])


def quadrant(compute: float | None, memory: float | None) -> str | None:
    """The seed 002 quadrant of a (compute, memory) utilization pair, each a fraction; None when unknown."""
    if compute is None or memory is None:
        return None
    high = high_utilization()
    if compute >= high:
        return "both_high" if memory >= high else "compute_bound"
    return "memory_bound" if memory >= high else "both_low"


def _cc_at_least(cc: str | None, minimum: str) -> bool:
    def key(text: str) -> tuple[int, ...]:
        return tuple(int(p) for p in text.split(".") if p.isdigit())

    return bool(cc) and key(str(cc)) >= key(minimum)


def advice(which: str | None, precision: str | None, tensor_cores: bool | None, family: str | None,
           cc: str | None, vendor: str | None = None, peaks: Iterable[str] = (), graphs: bool = False) -> list[str]:
    """The hints of a quadrant whose conditions hold for the run's dominant work. ``min_cc`` is an NVIDIA
    compute capability: it never holds on an AMD GPU, whose traces carry the GFX version in the same field;
    ``vendors`` needs the GPU's vendor known and listed; ``peaks`` needs those ceilings in the GPU's table."""
    if which is None:
        return []
    hints = []
    for hint in _advice()["quadrants"][which]["hints"]:
        when = hint.get("when") or {}
        if "precisions" in when and precision not in when["precisions"]:
            continue
        if "tensor_cores" in when and bool(tensor_cores) != when["tensor_cores"]:
            continue
        if "min_cc" in when and (vendor == "AMD" or not _cc_at_least(cc, when["min_cc"])):
            continue
        if "vendors" in when and vendor not in when["vendors"]:
            continue
        if "peaks" in when and not set(when["peaks"]) <= set(peaks):
            continue
        if "families" in when and family not in when["families"]:
            continue
        if "graphs" in when and graphs != when["graphs"]:
            continue
        hints.append(hint["text"])
    return hints


def point_utilization(flops: float | None, nbytes: float | None, time_ns: float | None, peak: float | None,
                      dram: float | None) -> tuple[float | None, float | None]:
    """(compute, memory) utilization of one op or kernel, as fractions; None where a figure is missing."""
    if not time_ns or time_ns <= 0:
        return None, None
    seconds = time_ns * 1e-9
    compute = 0.0 if flops == 0 else (flops / seconds / peak if flops is not None and peak else None)
    memory = nbytes / seconds / dram if nbytes is not None and dram else None
    return compute, memory


def run_utilization(points: list[dict], dram: float | None, cc: str | None, basis: str,
                    vendor: str | None = None, peaks: Iterable[str] = (), graphs: bool = False) -> dict | None:
    """Run-level utilization over points with keys time_ns, flops, bytes, peak, precision, tensor_cores,
    family (ops of an aggregation, or counter-profiled kernels); None without a point on a roof. ``graphs``:
    the run already replays CUDA/HIP graphs (hints with ``"graphs": false`` are left out)."""
    placed = [p for p in points if p.get("time_ns") and p["time_ns"] > 0 and p.get("flops") is not None
              and (p.get("peak") or p["flops"] == 0)]              # copies and fills: time and bytes, no math
    if not placed or not dram or not any(p.get("peak") for p in placed):
        return None
    seconds = sum(p["time_ns"] for p in placed) * 1e-9
    compute = sum(p["flops"] / p["peak"] for p in placed if p["flops"]) / seconds
    memory = sum(p.get("bytes") or 0.0 for p in placed) / seconds / dram
    by_time: dict[tuple, float] = {}
    for p in (p for p in placed if p["flops"]):
        key = (p.get("precision"), bool(p.get("tensor_cores")))
        by_time[key] = by_time.get(key, 0.0) + p["time_ns"]
    # Little or no math (a CUDA-graph run whose modelled ops are copies and fills, beside a scalar op or two):
    # no dominant precision, and no precision hint follows one
    math_share = sum(by_time.values()) / (seconds * 1e9)
    precision, tensor = (max(by_time, key=lambda k: (by_time[k], str(k))) if math_share >= min_math_share()
                         else (None, False))
    families: dict[str, float] = {}
    for p in placed:
        if p.get("family"):
            families[p["family"]] = families.get(p["family"], 0.0) + p["time_ns"]
    family = max(families, key=lambda f: (families[f], f)) if families else None
    which = quadrant(compute, memory)
    return {"basis": basis, "gpu_time_ns": int(round(seconds * 1e9)), "points": len(placed),
            "compute_utilization_pct": 100.0 * compute, "memory_utilization_pct": 100.0 * memory,
            "high_utilization_pct": 100.0 * high_utilization(), "quadrant": which,
            "quadrant_label": _advice()["quadrants"][which]["label"] if which else None,
            "math_time_pct": 100.0 * math_share,
            "dominant_precision": precision, "dominant_tensor_cores": tensor, "dominant_family": family,
            "advice": advice(which, precision, tensor, family, cc, vendor, peaks, graphs)}
