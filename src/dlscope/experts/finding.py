"""What a rule returns: one problem with its numbers, the fix, the evidence and the estimated saving."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SEVERITIES = ("high", "medium", "low")
EVIDENCE_KEYS = ("node_ids", "kernels", "iterations", "time_ranges")


@dataclass
class Finding:
    """A rule's verdict with what the fix is worth. ``est_saving_ns`` must be a positive estimate:
    ``experts.evaluate`` drops a finding whose saving is None or 0 (a finding with no saving is not a
    finding). ``severity`` None lets the saving decide (see ``severity_for``)."""

    rule: str
    problem: str
    recommendation: str
    est_saving_ns: int | None
    evidence: dict = field(default_factory=dict)
    severity: str | None = None

    def to_dict(self, wall_ns: int | None, thresholds: dict, max_items: int) -> dict:
        pct = (100.0 * self.est_saving_ns / wall_ns if self.est_saving_ns is not None and wall_ns else None)
        evidence: dict[str, Any] = {key: [] for key in EVIDENCE_KEYS}
        evidence.update(self.evidence)
        for key in EVIDENCE_KEYS:
            evidence[key] = list(evidence[key])[:max_items]
        return {"rule": self.rule, "severity": self.severity or severity_for(pct, thresholds),
                "problem": self.problem, "recommendation": self.recommendation,
                "est_saving_ns": None if self.est_saving_ns is None else int(self.est_saving_ns),
                "est_saving_pct": None if pct is None else round(pct, 2), "evidence": evidence}


def severity_for(pct: float | None, thresholds: dict) -> str:
    """high/medium/low from the saving's share of the aggregation's wall clock (percent)."""
    if pct is None:
        return "low"
    if pct >= thresholds["high_pct"]:
        return "high"
    return "medium" if pct >= thresholds["medium_pct"] else "low"
