"""The CI gate: did any chosen metric get worse than the baseline by more than the allowed regression?

A regression is the relative move in the metric's worse direction (``better`` in check_metrics.json, the
same table `dlscope diff` reads, so Tensor Core time or share lost is a regression in both):
(new − base) / base for lower-is-better metrics, (base − new) / base for higher-is-better ones. A metric
that cannot be computed in either run is an error, never a silent pass. Runs on different GPUs or in
different precisions still compare, with a warning.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from ..errors import DlscopeError
from .runs import load_run, metric_names, metric_table, metric_value, per_iteration

_THRESHOLD = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(%?)\s*$")


def parse_threshold(text: str) -> float:
    """'5%' or '5' -> 5.0 (percent); negative or non-numeric values are refused."""
    m = _THRESHOLD.match(str(text))
    if not m:
        raise DlscopeError(f"bad --max-regression {text!r}: give a percentage such as 5% or 2.5")
    return float(m.group(1))


def parse_metrics(values: tuple[str, ...] | list[str]) -> list[str]:
    """Metric names from repeated and/or comma-separated options; unknown ones are refused."""
    names = [v.strip() for value in values for v in value.split(",") if v.strip()]
    if not names:
        return list(metric_table()["default"])
    unknown = [n for n in names if n not in metric_table()["metrics"]]
    if unknown:
        raise DlscopeError(f"unknown metric {', '.join(map(repr, unknown))} (metrics: {', '.join(metric_names())})")
    return list(dict.fromkeys(names))


def regression_pct(base: float, new: float, better: str) -> float:
    """How much worse new is than base, in percent of base (negative: it improved)."""
    worse_by = new - base if better == "lower" else base - new
    if base == 0:
        return 0.0 if worse_by == 0 else math.copysign(math.inf, worse_by)
    return 100 * worse_by / abs(base)


def check(new_db: str | Path, base_db: str | Path, metrics: list[str] | None = None,
          max_regression_pct: float = 5.0, *, new_agg_id: int | None = None,
          base_agg_id: int | None = None) -> dict:
    """Evaluate the gate. Returns {"passed", "max_regression_pct", "values", "base", "new", "results": [...]};
    each result has metric, label, better, base, new, regression_pct, regressed, available, reason;
    "warnings" say when the runs are not like for like (different GPUs or precisions, see diff)."""
    metrics = metrics or list(metric_table()["default"])
    base, new = load_run(base_db, base_agg_id), load_run(new_db, new_agg_id)
    per_iter = per_iteration(base, new)
    results = []
    for name in metrics:
        spec = metric_table()["metrics"][name]
        b, why_b = metric_value(base, name, per_iter)
        n, why_n = metric_value(new, name, per_iter)
        res = {"metric": name, "label": spec["label"], "unit": spec["unit"], "better": spec["better"],
               "base": b, "new": n, "regression_pct": None, "regressed": None, "available": True}
        if b is None or n is None:
            res["available"] = False
            res["reason"] = (f"{spec['label']} cannot be compared: it is not available in the "
                             f"{'baseline' if b is None else 'new run'} ({why_b or why_n})")
        else:
            pct = regression_pct(b, n, spec["better"])
            res["regression_pct"] = pct if math.isfinite(pct) else None
            res["regressed"] = pct > max_regression_pct
            res["reason"] = _reason(spec, b, n, pct, max_regression_pct)
        results.append(res)
    from .diff import _warnings

    return {"passed": all(r["regressed"] is False for r in results),
            "max_regression_pct": max_regression_pct, "values": "per_iteration" if per_iter else "total",
            "base": base.describe(), "new": new.describe(), "warnings": _warnings(base, new), "results": results}


def _fmt(value: float, unit: str) -> str:
    from ..format import fmt_ns, fmt_pct

    return fmt_ns(value) if unit == "ns" else fmt_pct(value) if unit == "ratio" else f"{value:,.1f}"


def _reason(spec: dict, base: float, new: float, pct: float, limit: float) -> str:
    moved = (f"{_fmt(base, spec['unit'])} → {_fmt(new, spec['unit'])}; "
             f"{spec['better']} is better, at most {limit:g}% worse allowed")
    if pct > limit:
        worse = "from zero" if math.isinf(pct) else f"by {pct:.1f}%"
        return f"{spec['label']} regressed {worse} ({moved})"
    if pct > 0:
        return f"{spec['label']} is {pct:.1f}% worse, within the limit ({moved})"
    return f"{spec['label']} did not regress ({'unchanged' if pct == 0 else f'{-pct:.1f}% better'}; {moved})"
