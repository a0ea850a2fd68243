"""Compare two runs: run-level metrics, the resource breakdown, and op types, ops and kernels by impact.

``compare(base_db, new_db)`` returns one JSON-serializable dict (its shape is in the function's docstring);
the CLI, the file writers and the viewer's Compare view all read it.
Extensive numbers are per iteration when both runs have iterations ("values": "per_iteration"), else
totals of the aggregation window.
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import Any

import pandas as pd

from .matching import IDENTITY, match_ops
from .runs import Run, load_run, metric_table, metric_value, per_iteration, scale

#: how many key changes the terminal leads with
KEY_CHANGES = 3
#: a key change of a kind already listed counts this much less (so the top list is varied)
REPEAT_PENALTY = 0.5
#: a run-level batch-size change needs this many paired ops, and this share of those with tensor inputs
BATCH_MIN_OPS, BATCH_MIN_SHARE = 2, 0.25


def _num(v):
    """A JSON-safe number: NaN/inf become None, numpy scalars become Python numbers."""
    if v is None:
        return None
    v = float(v)
    if not math.isfinite(v):
        return None
    return int(v) if v.is_integer() else v


def _ratio(base, new):
    return _num(new / base) if base not in (None, 0) and new is not None else None


def _metrics(base: Run, new: Run, per_iter: bool) -> list[dict]:
    out = []
    for name, spec in metric_table()["metrics"].items():
        b, why_b = metric_value(base, name, per_iter)
        n, why_n = metric_value(new, name, per_iter)
        delta = None
        verdict = None
        if b is not None and n is not None:
            delta = n - b
            worse = delta > 0 if spec["better"] == "lower" else delta < 0
            verdict = "same" if abs(delta) <= 1e-12 * max(abs(b), abs(n), 1) else ("worse" if worse else "better")
        out.append({"metric": name, "label": spec["label"], "unit": spec["unit"], "better": spec["better"],
                    "category": bool(spec.get("category")), "share": bool(spec.get("share")),
                    "base": _num(b), "new": _num(n), "delta": _num(delta), "ratio": _ratio(b, n),
                    "change_pct": _num(100 * delta / abs(b)) if delta is not None and b else None,
                    "verdict": verdict, "unavailable": why_b and f"base: {why_b}" or why_n and f"new: {why_n}",
                    # a value that leaves work out and is shown "≥" (MFU beside matrix products it cannot count)
                    "lower_bound": {"base": bool(base.notes.get(f"{name}_lower_bound")),
                                    "new": bool(new.notes.get(f"{name}_lower_bound"))}})
    return out


def _records(frame: pd.DataFrame) -> list[dict]:
    """Rows as dicts with SQL NULLs as None (pandas reads them as NaN in numeric columns)."""
    return [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
            for r in frame.to_dict("records")]


def _side(rows: list[dict], pos: int | None, cols: tuple, k: float) -> dict:
    if pos is None:
        return dict.fromkeys(cols, 0.0)
    return {c: float(rows[pos][c] or 0) * k for c in cols}


def _changes(b: dict, n: dict, cols: tuple, time_cols: tuple) -> dict:
    out = {}
    for c in cols:
        out[f"base_{c}"], out[f"new_{c}"] = _num(b[c]), _num(n[c])
        out[f"delta_{c}"] = _num(n[c] - b[c])
    for c in time_cols:
        out[f"{c}_ratio"] = _ratio(b[c], n[c])
    out["impact_ns"] = _num(max(abs(n[c] - b[c]) for c in time_cols))
    return out


def _status(b, n) -> str:
    return "both" if b is not None and n is not None else ("new" if b is None else "vanished")


OP_NUMBERS = ("calls", "gpu_time_ns", "cpu_time_ns", "kernel_count", "tc_gpu_time_ns")
OP_TIMES = ("gpu_time_ns", "cpu_time_ns")


def _op_rows(base: Run, new: Run, kb: float, kn: float) -> list[dict]:
    rows, recs_b, recs_n = [], _records(base.ops), _records(new.ops)
    for p in match_ops(base.ops, new.ops):
        rb = recs_b[p.base] if p.base is not None else None
        rn = recs_n[p.new] if p.new is not None else None
        ref = rn if rn is not None else rb
        assert ref is not None  # a matched pair has an op on at least one side
        row = {"status": _status(p.base, p.new), "match": p.match,
               "op_name": ref["op_name"], "op_type": ref["op_type"], "direction": ref["direction"]}
        for col in ("op_name", "scope", "input_shapes", "data_type"):
            row[f"base_{col}"] = None if rb is None else rb[col]
            row[f"new_{col}"] = None if rn is None else rn[col]
        row["base_batch"], row["new_batch"] = p.batch if p.batch else (None, None)
        row.update(_changes(_side(recs_b, p.base, OP_NUMBERS, kb), _side(recs_n, p.new, OP_NUMBERS, kn),
                            OP_NUMBERS, OP_TIMES))
        rows.append(row)
    return sorted(rows, key=lambda r: (-(r["impact_ns"] or 0), r["op_name"] or ""))


def _keyed_rows(base: pd.DataFrame, new: pd.DataFrame, key: str, numbers: tuple, times: tuple,
                kb: float, kn: float, extra=()) -> list[dict]:
    """Rows matched by one name column (op types, kernels): deltas, new and vanished ones."""
    ib = {v: i for i, v in enumerate(base[key])}
    inn = {v: i for i, v in enumerate(new[key])}
    rows, recs_b, recs_n = [], _records(base), _records(new)
    for name in list(dict.fromkeys([*base[key], *new[key]])):
        pb, pn = ib.get(name), inn.get(name)
        row = {key: name, "status": _status(pb, pn)}
        for col in extra:
            row[f"base_{col}"] = None if pb is None else _num(recs_b[pb][col])
            row[f"new_{col}"] = None if pn is None else _num(recs_n[pn][col])
        row.update(_changes(_side(recs_b, pb, numbers, kb), _side(recs_n, pn, numbers, kn), numbers, times))
        rows.append(row)
    return sorted(rows, key=lambda r: (-(r["impact_ns"] or 0), r[key]))


def _op_names(base: Run, new: Run) -> dict:
    names_b, names_n = set(base.ops["op_name"]), set(new.ops["op_name"])
    return {"only_in_base": sorted(names_b - names_n), "only_in_new": sorted(names_n - names_b),
            "in_both": len(names_b & names_n)}


def _match_counts(ops: list[dict]) -> dict:
    counts: Counter[str] = Counter()
    for r in ops:
        counts[r["status"]] += 1
        for m in (r["match"] or "").split(","):
            if m:
                counts[m] += 1
    return dict(counts)


def _batch_size(ops: list[dict]) -> dict | None:
    """The run's batch-size change: the one most paired ops with tensor inputs agree on (a quarter at least,
    so a few ops whose first dimension is a world size or a token count do not make one)."""
    seen = Counter((r["base_batch"], r["new_batch"]) for r in ops if r["base_batch"] and r["new_batch"])
    with_tensors = sum(1 for r in ops
                       if r["status"] == "both" and any(ch.isdigit() for ch in r["new_input_shapes"] or ""))
    if not seen:
        return None
    (b, n), count = seen.most_common(1)[0]
    if count < max(BATCH_MIN_OPS, BATCH_MIN_SHARE * with_tensors):
        return None
    return {"base": b, "new": n, "ops": count}


def _key_changes(metrics: list[dict], op_types: list[dict], kernels: list[dict], fmt) -> list[dict]:
    """The changes that matter most: breakdown categories, op types and kernels by time impact."""
    cands = []
    for m in metrics:
        if m["category"] and m["delta"]:
            shares = {x["metric"]: x for x in metrics}.get(f"{m['metric']}_share", {})
            cands.append({"kind": "category", "subject": m["metric"], "impact_ns": abs(m["delta"]),
                          "text": f"{m['label']} time {fmt(m['base'])} → {fmt(m['new'])} ({_signed(m['delta'], fmt)}; "
                                  f"share {_pct(shares.get('base'))} → {_pct(shares.get('new'))})"})
    for r in op_types[:20]:
        if r["impact_ns"]:
            cands.append({"kind": "op_type", "subject": r["op_type"], "impact_ns": r["impact_ns"],
                          "text": _row_text(f"op type {r['op_type']}", r, fmt)})
    for r in kernels[:20]:
        if r["impact_ns"]:
            cands.append({"kind": "kernel", "subject": r["kernel_name"], "impact_ns": r["impact_ns"],
                          "text": _row_text(f"kernel {r['kernel_name']}", r, fmt)})
    chosen: list[dict] = []
    kinds: Counter[str] = Counter()
    while cands and len(chosen) < KEY_CHANGES:
        best = max(cands, key=lambda c: c["impact_ns"] * REPEAT_PENALTY ** kinds[c["kind"]])
        cands.remove(best)
        kinds[best["kind"]] += 1
        chosen.append(best)
    return chosen


def _row_text(subject: str, r: dict, fmt) -> str:
    which = "gpu_time_ns" if abs(r["delta_gpu_time_ns"] or 0) >= abs(r.get("delta_cpu_time_ns") or 0) else "cpu_time_ns"
    what = "GPU time" if which == "gpu_time_ns" else "CPU time"
    if r["status"] == "new":
        return f"new {subject}: {what} {fmt(r['new_' + which])}"
    if r["status"] == "vanished":
        return f"{subject} vanished: {what} was {fmt(r['base_' + which])}"
    return (f"{subject}: {what} {fmt(r['base_' + which])} → {fmt(r['new_' + which])} "
            f"({_signed(r['delta_' + which], fmt)})")


def _signed(v, fmt) -> str:
    return ("+" if v > 0 else "−") + fmt(abs(v))


def _pct(x) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _verdict(metrics: list[dict], fmt) -> str:
    m = {x["metric"]: x for x in metrics}
    for name in ("avg_iteration_time", "wall_clock"):
        x = m[name]
        if x["base"] is not None and x["new"] is not None and x["new"] > 0 and x["base"] > 0:
            speed = x["base"] / x["new"]
            how = ("no change" if x["verdict"] == "same" else
                   f"{abs(x['change_pct']):.1f}% {'faster' if speed > 1 else 'slower'} "
                   f"({speed:.2f}× {'speed-up' if speed > 1 else 'slow-down'})")
            return f"{x['label']} {fmt(x['base'])} → {fmt(x['new'])}: {how}"
    return "no time to compare (a run has no wall clock time)"


PRECISION_LABELS = {"fp32": "FP32 (CUDA cores)", "tf32": "TF32 (Tensor Cores)", "fp16": "FP16", "bf16": "BF16",
                    "fp8": "FP8", "fp4": "FP4", "int8": "INT8", "fp64": "FP64"}
#: a precision mix counts as changed when the dominant precision differs, or one run computes at least this
#: share of its math in a precision the other does not use at all
PRECISION_MIN_SHARE = 0.1


def _gpus_text(run: Run) -> str:
    names = Counter(run.gpu_names)
    return ", ".join(f"{n} ×{c}" if c > 1 else n for n, c in names.items()) or "no GPU"


def _precision_text(p: dict) -> str:
    if not p.get("dominant"):
        return "no classified math kernels"
    total = sum(p["ns"].values()) or 1
    return ", ".join(f"{PRECISION_LABELS.get(k, k)} {100 * v / total:.0f}%"
                     for k, v in sorted(p["ns"].items(), key=lambda kv: -kv[1]))


def _warnings(base: Run, new: Run) -> list[dict]:
    """What makes the two runs not like for like: different GPU models or GPU counts, different math
    precisions. Each {"kind", "text", "base", "new"}."""
    out: list[dict[str, Any]] = []
    if sorted(set(base.gpu_names)) != sorted(set(new.gpu_names)):
        out.append({"kind": "gpu", "base": base.gpu_names, "new": new.gpu_names,
                    "text": f"The runs are on different GPUs ({_gpus_text(base)} → {_gpus_text(new)}): every time "
                            "below includes the hardware change, not only the code change."})
    elif len(base.gpu_names) != len(new.gpu_names):
        out.append({"kind": "gpu_count", "base": len(base.gpu_names), "new": len(new.gpu_names),
                    "text": f"The runs use a different number of GPUs ({len(base.gpu_names)} → {len(new.gpu_names)}): "
                            "per-GPU and total times are not like for like."})
    pb, pn = base.precision, new.precision
    if pb.get("dominant") and pn.get("dominant"):
        tb, tn = sum(pb["ns"].values()) or 1, sum(pn["ns"].values()) or 1
        only = [p for p, v in pb["ns"].items() if v / tb >= PRECISION_MIN_SHARE and p not in pn["ns"]] + \
               [p for p, v in pn["ns"].items() if v / tn >= PRECISION_MIN_SHARE and p not in pb["ns"]]
        if pb["dominant"] != pn["dominant"] or only:
            out.append({"kind": "precision", "base": pb, "new": pn,
                        "text": f"The runs compute in different precisions (math kernel time: {_precision_text(pb)} "
                                f"→ {_precision_text(pn)}): Tensor Core and kernel times change with the precision, "
                                "not only with the code."})
    return out


def _regressions(metrics: list[dict]) -> list[dict]:
    """Losses of Tensor Core use, said as regressions: the Tensor Core share fell or vanished with the Tensor Core
    kernel time. A share that fell only because the iteration grew (the Tensor Core time held or rose: work was
    added elsewhere, none left the Tensor Cores) is the share metric's "worse", not a lost use."""
    m = {x["metric"]: x for x in metrics}
    share, time = m.get("tensor_core_share"), m.get("tensor_core")  # the share's own time: the union on Tensor Cores
    out = []
    held = time is not None and time["base"] is not None and time["new"] is not None and time["new"] >= time["base"]
    if share and share["verdict"] == "worse" and share["base"] and not held:
        lost = not share["new"]
        out.append({"metric": "tensor_core_share", "base": share["base"], "new": share["new"],
                    "text": f"Tensor Core share {'lost' if lost else 'fell'}: "
                            f"{_pct(share['base'])} → {_pct(share['new'])} of the iteration"
                            + (f" (time on Tensor Cores {_fmt_time(time['base'])} → {_fmt_time(time['new'])})"
                               if time and time["base"] is not None and time["new"] is not None else "")
                            + ": work left the Tensor Cores."})
    return out


def _fmt_time(v) -> str:
    from ..format import fmt_ns

    return fmt_ns(v)


def compare(base_db: str | Path, new_db: str | Path, *, base_agg_id: int | None = None,
            new_agg_id: int | None = None, limit: int | None = None) -> dict:
    """Compare two profile databases (base = before, new = after).

    Returns {"base", "new": run descriptions (GPUs, math precision); "values": "per_iteration" | "total";
    "verdict": one line; "warnings": what makes the runs not like for like (different GPUs, GPU counts or
    precisions), each {"kind", "text", "base", "new"}; "regressions": lost Tensor Core use, each {"metric",
    "text", "base", "new"};
    "key_changes": the 3 that matter most; "metrics": run-level metrics side by side; "breakdown": the
    seven categories; "batch_size": {"base", "new", "ops"} | None; "op_names": {"only_in_base",
    "only_in_new", "in_both"}; "counts"; "op_types", "ops", "kernels": rows sorted by impact, the first
    ``limit`` of each when given (counts always cover every row)}.
    """
    from ..format import fmt_ns

    base, new = load_run(base_db, base_agg_id), load_run(new_db, new_agg_id)
    per_iter = per_iteration(base, new)
    kb, kn = scale(base, per_iter), scale(new, per_iter)
    metrics = _metrics(base, new, per_iter)
    ops = _op_rows(base, new, kb, kn)
    op_types = _keyed_rows(base.op_types, new.op_types, "op_type",
                           ("calls", "gpu_time_total", "cpu_time_total", "kernel_count"),
                           ("gpu_time_total", "cpu_time_total"), kb, kn, extra=("ops",))
    for r in op_types:  # one vocabulary with the op rows
        for side in ("base", "new", "delta"):
            r[f"{side}_gpu_time_ns"] = r.pop(f"{side}_gpu_time_total")
            r[f"{side}_cpu_time_ns"] = r.pop(f"{side}_cpu_time_total")
        r["gpu_time_ns_ratio"] = r.pop("gpu_time_total_ratio")
        r["cpu_time_ns_ratio"] = r.pop("cpu_time_total_ratio")
    kernels = _keyed_rows(base.kernels, new.kernels, "kernel_name", ("calls", "gpu_time_ns"), ("gpu_time_ns",),
                          kb, kn, extra=("uses_tc", "avg_ns"))
    wall = {x["metric"]: x for x in metrics}
    breakdown = [{"category": m["metric"], "label": m["label"], "base_ns": m["base"], "new_ns": m["new"],
                  "delta_ns": m["delta"], "ratio": m["ratio"],
                  "base_share": wall[f"{m['metric']}_share"]["base"], "new_share": wall[f"{m['metric']}_share"]["new"]}
                 for m in metrics if m["category"]]
    return {
        "base": base.describe(), "new": new.describe(),
        "values": "per_iteration" if per_iter else "total",
        "verdict": _verdict(metrics, fmt_ns),
        "warnings": _warnings(base, new), "regressions": _regressions(metrics),
        "key_changes": _key_changes(metrics, op_types, kernels, fmt_ns),
        "metrics": metrics, "breakdown": breakdown,
        "batch_size": _batch_size(ops), "op_names": _op_names(base, new),
        "counts": {"ops": _match_counts(ops), "op_types": dict(Counter(r["status"] for r in op_types)),
                   "kernels": dict(Counter(r["status"] for r in kernels))},
        "op_types": op_types[:limit], "ops": ops[:limit], "kernels": kernels[:limit],
    }


__all__ = ["compare", "IDENTITY"]
