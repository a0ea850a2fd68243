"""Throughput and reader cost (seed 003: ips, batch_cost, reader_cost) of an aggregation, once for the summary
JSON, the terminal and ``dlscope diff`` / ``check``."""

from __future__ import annotations

from fractions import Fraction

from ..nanoseconds import round_ns


def throughput_facts(extra: dict) -> dict:
    """What the throughput needs from the database's facts: the import's options, else the capture's."""
    given = extra.get("throughput") or {}
    capture = extra.get("capture") or {}
    return {"batch_size": given.get("batch_size") or capture.get("batch_size"),
            "samples_per_step": given.get("samples_per_step"), "unit": given.get("unit")}


def throughput(row: dict, iterations: int | None, facts: dict) -> dict:
    """Seed 003's ips and reader_cost: samples per second = samples per step × steps / wall clock (the batch
    size from ``--batch-size`` / ``--samples-per-step`` at import, else the first batch a capture saw),
    reader_cost = the mean time a step spent in data loading, and its share of the step time. None where the
    batch size, the steps or the data loading is unknown."""
    batch = facts.get("batch_size")
    per_step = facts.get("samples_per_step") or batch
    wall = row.get("wall_clock_ns") or 0
    reader = row.get("reader_cost_ns")
    return {"samples_per_s": per_step * iterations / (wall * 1e-9) if per_step and iterations and wall else None,
            "unit": facts.get("unit") or "samples", "batch_size": batch,
            "reader_cost_ns": round_ns(Fraction(reader, iterations)) if reader is not None and iterations else None,
            "reader_cost_ratio": reader / wall if reader is not None and wall else None}
