"""One side of a comparison: an aggregation of a profile database, read once, with its run-level metrics.

Metrics come from ``data/check_metrics.json`` so ``diff`` and ``check`` agree on what each one means and
which direction is better. Extensive metrics are compared per iteration when both runs have iterations, so
a 6-step profile compares with a 10-step one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path

import pandas as pd

from ..analyze.throughput import throughput, throughput_facts
from ..errors import DlscopeError
from ..present.graph_replay import figure_notes
from ..store import reader


@lru_cache(maxsize=1)
def metric_table() -> dict:
    """The metric definitions (name -> label, source column, unit, better, per_iteration, share)."""
    return json.loads(resources.files("dlscope.data").joinpath("check_metrics.json").read_text())


def metric_names() -> list[str]:
    return list(metric_table()["metrics"])


@dataclass
class Run:
    """An aggregation of one database: its summary row and the per-aggregation tables the diff needs."""

    path: Path
    profile_name: str
    agg: dict
    ops: pd.DataFrame
    op_types: pd.DataFrame
    kernels: pd.DataFrame
    gpu_names: list[str] = field(default_factory=list)
    #: devices that ran kernels in the aggregation (all of the rank's GPUs when unknown)
    devices: list[int] = field(default_factory=list)
    #: the math precision: {"dominant", "share", "ns": {precision: kernel time}} (see :func:`run_precision`)
    precision: dict = field(default_factory=dict)
    #: why Tensor Core kernel efficiency / MFU are n/a (``present.graph_replay.figure_notes``, the summary's words)
    notes: dict = field(default_factory=dict)

    @property
    def iterations(self) -> int | None:
        """Iterations profiled, or None when no iterations were found (the whole profile is one window)."""
        if self.agg["iteration_method"] == "whole_profile" or not self.agg["iterations_profiled"]:
            return None
        return int(self.agg["iterations_profiled"])

    def describe(self) -> dict:
        a = self.agg
        return {"path": str(self.path), "profile_name": self.profile_name, "agg_id": a["agg_id"], "rank": a["rank"],
                "iter_start": a["iter_start"] if self.iterations else None,
                "iter_stop": a["iter_stop"] if self.iterations else None,
                "iterations_profiled": self.iterations, "iteration_method": a["iteration_method"],
                "gpus": self.gpu_names, "gpu_count": len(self.gpu_names), "precision": self.precision}


def load_run(db_path: str | Path, agg_id: int | None = None) -> Run:
    """Read one aggregation (default: the one the summary shows) of a dlscope database."""
    conn = reader.connect(db_path)
    try:
        meta = reader.meta(conn)
        agg_id = reader.resolve_agg_id(conn, agg_id)
        cur = conn.execute("SELECT * FROM aggregations WHERE agg_id = ?", (agg_id,))
        agg = dict(zip([d[0] for d in cur.description], cur.fetchone()))
        steps = None if agg["iteration_method"] == "whole_profile" else agg["iterations_profiled"]
        facts = throughput_facts(json.loads(meta.get("extra_json") or "{}"))
        agg["samples_per_s"] = throughput(agg, steps, facts)["samples_per_s"]

        def table(name: str) -> pd.DataFrame:
            return pd.read_sql_query(f"SELECT * FROM {name} WHERE agg_id = ?", conn, params=(agg_id,))

        gpus = dict(conn.execute("SELECT device, name FROM gpus WHERE rank = ? ORDER BY device", (agg["rank"],)))
        used = [int(r[0]) for r in conn.execute("SELECT device FROM agg_gpus WHERE agg_id = ? AND kernel_count > 0 "
                                                 "ORDER BY device", (agg_id,))]
        devices = used if used or not agg.get("kernel_count") else sorted(gpus)
        ops = table("agg_ops")
        notes = figure_notes(conn, agg)
        notes.pop("graph_replay")
        return Run(Path(db_path), meta.get("profile_name") or Path(db_path).stem, agg, ops,
                   table("agg_op_types"), table("agg_kernels"), [gpus.get(d) or "?" for d in devices], devices,
                   run_precision(table("agg_op_kernels"), ops, table("agg_kernels")), notes)
    finally:
        conn.close()


def run_precision(op_kernels: pd.DataFrame, ops: pd.DataFrame, kernels: pd.DataFrame) -> dict:
    """The precision the run's math kernels computed in, by kernel time: a kernel launched by a
    Tensor-Core-eligible op takes the op's dtype, any other kernel the precision its name tells
    (``experts.precision_names``); FP32 on Tensor Cores counts as TF32. Returns {"dominant": "" when no
    math kernel could be classified, "share": of the classified time, "ns": {precision: time}}."""
    from ..analyze.dtypes import precision
    from ..analyze.tensor_core import classify_names
    from ..experts.precision_names import dominant, kernel_precisions, math_mode

    elig = ops.loc[ops["tc_eligible"].fillna(0).astype(bool), ["node_id", "data_type"]]
    k = op_kernels.merge(elig, on="node_id", how="left") if len(op_kernels) else \
        pd.DataFrame(columns=["kernel_name", "gpu_time_ns", "uses_tc", "data_type"])
    by_op = classify_names(k["data_type"].fillna(""), precision, dtype=object)
    by_name = kernel_precisions(k["kernel_name"])
    prec = [math_mode(p, bool(tc)) for p, tc in zip(pd.Series(by_op).where(by_op != "", by_name), k["uses_tc"])]
    times = list(k["gpu_time_ns"].fillna(0))
    rest = kernels[~kernels["kernel_name"].isin(set(k["kernel_name"]))]   # kernels no op launched
    prec += [math_mode(p, bool(tc)) for p, tc in zip(kernel_precisions(rest["kernel_name"]), rest["uses_tc"])]
    times += list(rest["gpu_time_ns"].fillna(0))
    top, share = dominant(prec, times)
    ns = pd.Series(times, dtype=float).groupby(pd.Series(prec, dtype=object)).sum()
    return {"dominant": top, "share": round(share, 4),
            "ns": {str(p): int(v) for p, v in ns.items() if p != "" and v > 0}}


def per_iteration(base: Run, new: Run) -> bool:
    """True when extensive numbers are compared per iteration (both runs have iterations)."""
    return base.iterations is not None and new.iterations is not None


def scale(run: Run, per_iter: bool) -> float:
    if not per_iter:
        return 1.0
    assert run.iterations is not None  # per_iteration() is True only when both runs have iterations
    return 1.0 / run.iterations


def metric_value(run: Run, name: str, per_iter: bool) -> tuple[float | None, str | None]:
    """The value of a metric for a run, or (None, why it is not available)."""
    spec = metric_table()["metrics"].get(name)
    if spec is None:
        raise DlscopeError(f"unknown metric {name!r} (metrics: {', '.join(metric_names())})")
    a = run.agg
    if spec.get("needs_iterations") and run.iterations is None:
        return None, ("no iterations were found, the whole profile is one window "
                      "(mark steps with ProfilerStep/dlscope.step(), or import with --key-node)")
    raw = a.get(spec["source"])
    if raw is None:
        if run.notes.get(f"{name}_note"):
            return None, run.notes[f"{name}_note"]
        why = {"tc_kernel_efficiency": "no kernels of Tensor-Core-eligible ops",
               "gpu_utilization": "no GPU kernels",
               "throughput": "the batch size is unknown: import with --batch-size or --samples-per-step",
               "reader_cost": "the trace shows no data loading", "reader_cost_share": "the trace shows no data loading",
               "mfu": "no model FLOPs (no input shapes) or the GPU's dense peak is unknown",
               }.get(name, "not computed for this profile")
        return None, why
    if spec.get("share"):
        wall = a.get("wall_clock_ns")
        if not wall:
            return None, "the wall clock time is zero"
        return raw / wall, None
    if name == "gpu_utilization" and not a.get("kernel_count"):
        return None, "no GPU kernels"
    if spec.get("per_iteration"):
        return raw * scale(run, per_iter), None
    return float(raw), None
