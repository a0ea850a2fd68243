"""What a rule returns: one problem with its numbers, the fix, the evidence and the estimated saving."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

SEVERITIES = ("high", "medium", "low")
EVIDENCE_KEYS = ("node_ids", "kernels", "iterations", "time_ranges")


@dataclass
class Finding:
    """A rule's verdict with what the fix is worth. ``est_saving_ns`` must be a positive estimate, or the
    finding says why it has none in ``not_priced``: a risk rather than time lost (memory near capacity: the
    next larger input runs out of memory), shown as such, never as "0 ns". ``experts.evaluate`` drops a
    finding with neither. ``severity`` None lets the saving decide (see ``severity_for``)."""

    rule: str
    problem: str
    recommendation: str
    est_saving_ns: int | None
    evidence: dict = field(default_factory=dict)
    severity: str | None = None
    not_priced: str | None = None
    #: rule id -> the recommendation to give instead where that rule fired in the same aggregation, first match
    #: wins: a symptom (idle gaps, low utilization) whose cause has its own finding points to it rather than
    #: repeating its advice (``experts.evaluate`` picks; the evidence's ``see_findings`` names the rule)
    refers: dict[str, str] = field(default_factory=dict)

    @property
    def has_saving(self) -> bool:
        """Whether the estimated saving is a number of at least 1 ns (else it is missing, not a number or 0)."""
        try:
            return self.est_saving_ns is not None and math.isfinite(float(self.est_saving_ns)) \
                and int(self.est_saving_ns) > 0
        except (TypeError, ValueError):
            return False

    def to_dict(self, wall_ns: int | None, thresholds: dict, max_items: int) -> dict:
        saving = self.est_saving_ns if self.has_saving else None
        pct = (100.0 * saving / wall_ns if saving is not None and wall_ns else None)
        evidence: dict[str, Any] = {key: [] for key in EVIDENCE_KEYS}
        evidence.update(self.evidence)
        for key in EVIDENCE_KEYS:
            evidence[key] = list(evidence[key])[:max_items]
        return {"rule": self.rule, "severity": self.severity or severity_for(pct, thresholds),
                "problem": self.problem, "recommendation": self.recommendation,
                "est_saving_ns": None if saving is None else int(saving),
                "est_saving_pct": None if pct is None else round(pct, 2), "evidence": evidence,
                "not_priced": None if saving is not None else (self.not_priced or None)}


def severity_for(pct: float | None, thresholds: dict) -> str:
    """high/medium/low from the saving's share of the aggregation's wall clock (percent)."""
    if pct is None:
        return "low"
    if pct >= thresholds["high_pct"]:
        return "high"
    return "medium" if pct >= thresholds["medium_pct"] else "low"
