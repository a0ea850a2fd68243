"""Expert systems: rules that read one aggregation and say what is slow, why, what to change, and what the
change is worth. ``evaluate`` runs every registered rule; ``write_findings`` stores the result.

Each rule lives in its own module under ``experts/rules`` and registers itself (``registry.rule``); its
thresholds live in ``data/rules.json`` and can be overridden with ``--rules-config FILE``. Two things are
decided here, once, for every rule: GPU rules do not run on a profile without GPU kernels, and a finding
without a positive estimated saving is dropped unless it says why it has none (:func:`priced`), and the
finding of a rule another subsumes is dropped where that one fires (``registry.SUBSUMES``), and a finding that
names its cause's rule (``Finding.refers``) points to that rule's finding where it fired.
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from .config import load_config
from .context import Context, RuleFrames
from .finding import Finding
from .registry import GPU_RULES, as_list, load_rules, subsumed
from .report import write_expert_report

__all__ = ["evaluate", "write_findings", "write_expert_report", "Finding", "Context", "RuleFrames", "load_config"]

_SEVERITY_ORDER = {"high": 0, "medium": 1, "low": 2}


def evaluate(tables: Mapping, aggregation, rules_config: Path | str | None = None,
             frames: RuleFrames | None = None) -> list[dict]:
    """Run every enabled rule on one aggregation; findings sorted by severity, then saving.

    ``tables``: the rank's raw tables as the analysis made them (ops, kernels, memops, api_calls, ranges,
    gpus, memory); ``aggregation``: its :class:`~dlscope.analyze.aggregation.Aggregation`. The rules read frames
    only; the pipeline runs them during an import and a re-aggregation alike. ``frames``: the job's frames
    projected for all its ranks at once (:class:`RuleFrames`; by default made for this rank alone).
    """
    config = frames.rules_config(rules_config) if frames is not None else load_config(rules_config)
    ctx = Context(config, tables, aggregation, frames)
    kept: list[Finding] = []
    for rule_id, check in load_rules().items():
        cfg = config.get(rule_id, {})
        if not cfg.get("enabled", True) or (rule_id in GPU_RULES and not ctx.has_gpu):
            continue
        kept.extend(f for f in as_list(check(ctx, cfg)) if priced(f) or unpriced_risk(f))
    gone = subsumed({f.rule for f in kept})
    kept = [f for f in kept if f.rule not in gone]
    fired = {f.rule for f in kept}
    out = [referred(f, fired).to_dict(ctx.wall, config["severity"], int(config["evidence"]["max_items"]))
           for f in kept]
    out.sort(key=lambda f: (_SEVERITY_ORDER[f["severity"]], -(f["est_saving_ns"] or 0), f["rule"]))
    return out


def referred(finding: Finding, fired: set[str]) -> Finding:
    """``finding`` with the recommendation it gives where the first of its ``refers`` rules fired (that rule's
    finding says what to change and what it saves), named in the evidence's ``see_findings``; else as it is."""
    for cause, recommendation in finding.refers.items():
        if cause in fired and cause != finding.rule:
            return replace(finding, recommendation=recommendation,
                           evidence={**finding.evidence, "see_findings": [cause]})
    return finding


def priced(finding: Finding) -> bool:
    """A finding with no saving is not a finding: every rule's output passes here, and one whose estimated
    saving is missing, not a number, or under 1 ns is dropped (so no rule can report "0 ns" or "n/a")."""
    return finding.has_saving


def unpriced_risk(finding: Finding) -> bool:
    """A finding that saves no time but names a risk (``not_priced``: why no saving can be shown) is kept and
    shown as such; its saving is stored as NULL, never as 0."""
    return not priced(finding) and bool(finding.not_priced and str(finding.not_priced).strip())


def write_findings(conn: sqlite3.Connection, agg_id: int, findings: list[dict]) -> None:
    """Replace the stored findings of ``agg_id`` (evidence as JSON in ``evidence_json``), inside the caller's
    transaction: an aggregation and its findings are committed together."""
    conn.execute("DELETE FROM findings WHERE agg_id = ?", (agg_id,))
    conn.executemany(
            "INSERT INTO findings (agg_id, finding_id, rule, severity, problem, recommendation, est_saving_ns, "
        "est_saving_pct, evidence_json, simulated_saving_ns, not_priced) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [(agg_id, i, f["rule"], f["severity"], f["problem"], f["recommendation"], f["est_saving_ns"],
          f["est_saving_pct"], evidence_json(f["evidence"]), _plain_or_none(f.get("simulated_saving_ns")),
          f.get("not_priced")) for i, f in enumerate(findings)])


def evidence_json(evidence) -> str:
    """Evidence as strict JSON: a missing value (NaN from a pandas column, e.g. an op without a precision in
    the roofline's evidence) becomes null, since ``NaN`` is not JSON and a browser's or jq's parser rejects it."""
    try:
        return json.dumps(evidence, default=_plain, allow_nan=False)
    except ValueError:
        return json.dumps(_finite(evidence), default=_plain, allow_nan=False)


def _finite(value):
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if isinstance(value, float) or (hasattr(value, "dtype") and getattr(value, "ndim", 1) == 0):
        number = float(value) if isinstance(value, float) else value.item()
        return number if not isinstance(number, float) or math.isfinite(number) else None
    return value


def _plain_or_none(value):
    return None if value is None else int(value)


def _plain(value):
    """numpy scalars in evidence become plain JSON numbers."""
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"not JSON serializable: {type(value).__name__}")
